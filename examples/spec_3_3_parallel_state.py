"""FTN12 section 3.3 "parallel() steps and state()".

Two parallel branches write their results into the shared state; the step
after the parallel step reads both.  A second run makes branch 2 fail: its own
error handler recovers (``parallel_2 = 0``), so the flow still succeeds.
Expected output::

    externalSuccess: 1 2
    externalSuccess: 1 0

Run with ``python examples/spec_3_3_parallel_state.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, Errors


def make_flow(fail_branch_2: bool) -> AsyncSteps:
    def outer(inner_as: AsyncSteps) -> None:
        def branch1(inner2_as: AsyncSteps) -> None:
            inner2_as.state.parallel_1 = 1

        def branch1_error(inner2_as: AsyncSteps, error: str) -> None:
            print(f"Spotted error {error}")
            # return: continue with the outer error handlers

        def branch2(inner2_as: AsyncSteps) -> None:
            if fail_branch_2:
                inner2_as.error(Errors.CommError)
            inner2_as.state.parallel_2 = 2

        def branch2_error(inner2_as: AsyncSteps, error: str) -> None:
            inner2_as.state.parallel_2 = 0
            inner2_as.success()  # ignore the error

        inner_as.parallel().add(branch1, branch1_error).add(branch2, branch2_error)

    def on_error(inner_as: AsyncSteps, error: str) -> None:
        print(f"externalError: {error}")

    def last(inner_as: AsyncSteps) -> None:
        state = inner_as.state
        print(f"externalSuccess: {state.parallel_1} {state.parallel_2}")

    return AsyncSteps().add(outer, on_error).add(last)


async def main() -> None:
    await make_flow(fail_branch_2=False).promise()
    await make_flow(fail_branch_2=True).promise()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
