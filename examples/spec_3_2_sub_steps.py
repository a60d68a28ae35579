"""FTN12 section 3.2 "Sub-steps".

The outer step adds two sub-steps: the first produces one value (or fails),
the second turns it into two.  The error is logged by the inner handler and
then reaches the outer one.  The flow runs twice, once each way.  Expected
output::

    externalSuccess: 1 2
    Spotted error NotImplemented
    externalError: NotImplemented
    promise() raised: NotImplemented

Run with ``python examples/spec_3_2_sub_steps.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, Errors, FutoInError


def make_flow(something: bool) -> AsyncSteps:
    def outer(inner_as: AsyncSteps) -> None:
        def produce(inner2_as: AsyncSteps) -> None:
            if something:
                inner2_as.success(1)
            else:
                inner2_as.error(Errors.NotImplemented)

        def log_error(inner2_as: AsyncSteps, error: str) -> None:
            print(f"Spotted error {error}")
            # return: continue with the outer error handlers

        def extend(inner2_as: AsyncSteps, res1: int) -> None:
            inner2_as.success(res1, 2)

        inner_as.add(produce, log_error)
        inner_as.add(extend)

    def on_error(inner_as: AsyncSteps, error: str) -> None:
        print(f"externalError: {error}")

    def last(inner_as: AsyncSteps, res1: int, res2: int) -> None:
        print(f"externalSuccess: {res1} {res2}")

    return AsyncSteps().add(outer, on_error).add(last)


async def main() -> None:
    for something in (True, False):
        try:
            await make_flow(something).promise()
        except FutoInError as e:
            print(f"promise() raised: {e.code}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
