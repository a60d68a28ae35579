"""FTN12 section 1.2 "Error handling": execute/onerror instead of try/except.

An error handler may replace the error (``asi.error()``), recover with
``asi.success()`` (execution goes on after the failed step), or return (the
error goes on to the handler one level down).  Expected output::

    Level 0 func
    Level 1 func
    Level 1 onerror: myerror
    Level 0 onerror: newerror
    Level 0 func2: Prm

Run with ``python examples/spec_1_2_error_handling.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps


def level0_func(asi: AsyncSteps) -> None:
    print("Level 0 func")

    def level1_func(asi: AsyncSteps) -> None:
        print("Level 1 func")
        asi.error("myerror")

    def level1_onerror(asi: AsyncSteps, error: str) -> None:
        print(f"Level 1 onerror: {error}")
        asi.error("newerror")

    asi.add(level1_func, level1_onerror)


def level0_onerror(asi: AsyncSteps, error: str) -> None:
    print(f"Level 0 onerror: {error}")
    asi.success("Prm")


def level0_func2(asi: AsyncSteps, param: str) -> None:
    print(f"Level 0 func2: {param}")
    asi.success()


async def main() -> None:
    asi = AsyncSteps()
    asi.add(level0_func, level0_onerror)
    asi.add(level0_func2)
    await asi.promise()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
