"""FTN12 section 1.2.1 "Steps in error handler".

Adding steps inside an error handler is an implicit ``success()``: the added
steps run at the failed step's level, and the handler itself is gone, so
"Level 1 onerror" does not run a second time.  The final error is handled by
no one, so ``promise()`` raises it; the script catches it and prints it last.
Expected output (the spec's, plus that last line)::

    Level 0 func
    Level 1 func
    Level 1 onerror: first
    Level 2 func
    Level 2 onerror: second
    Level 0 onerror: second
    unhandled: second

Run with ``python examples/spec_1_2_1_steps_in_error_handler.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, FutoInError


def level0_func(asi: AsyncSteps) -> None:
    print("Level 0 func")

    def level1_func(asi: AsyncSteps) -> None:
        print("Level 1 func")
        asi.error("first")

    def level1_onerror(asi: AsyncSteps, error: str) -> None:
        print(f"Level 1 onerror: {error}")

        def level2_func(asi: AsyncSteps) -> None:
            print("Level 2 func")
            asi.error("second")

        def level2_onerror(asi: AsyncSteps, error: str) -> None:
            print(f"Level 2 onerror: {error}")

        asi.add(level2_func, level2_onerror)

    asi.add(level1_func, level1_onerror)


def level0_onerror(asi: AsyncSteps, error: str) -> None:
    print(f"Level 0 onerror: {error}")


async def main() -> None:
    asi = AsyncSteps()
    asi.add(level0_func, level0_onerror)
    try:
        await asi.promise()
    except FutoInError as e:
        print(f"unhandled: {e.code}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
