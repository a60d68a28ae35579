"""FTN12 section 3.1 "Single-level steps".

The first step succeeds with two values, or fails with ``NotImplemented``;
the second step receives the values as its arguments.  The flow runs twice,
once each way.  An error handler that just returns passes the error on, so
the failing run ends with ``promise()`` raising it.  Expected output::

    externalSuccess: 1 2
    externalError: NotImplemented
    promise() raised: NotImplemented

Run with ``python examples/spec_3_1_single_level.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, Errors, FutoInError


def external_success(res1: int, res2: int) -> None:
    print(f"externalSuccess: {res1} {res2}")


def external_error(error: str) -> None:
    print(f"externalError: {error}")


def make_flow(something: bool) -> AsyncSteps:
    def first(inner_as: AsyncSteps) -> None:
        if something:
            inner_as.success(1, 2)
        else:
            inner_as.error(Errors.NotImplemented)

    def on_error(inner_as: AsyncSteps, error: str) -> None:
        external_error(error)

    def second(inner_as: AsyncSteps, res1: int, res2: int) -> None:
        external_success(res1, res2)

    return AsyncSteps().add(first, on_error).add(second)


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
