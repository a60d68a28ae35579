"""FTN12 section 1.1 "Levels": the order in which nested steps run.

Steps added while a step executes form the next level; a level finishes before
the next step of the level below it runs.  Expected output::

    Level 0 add #1
    Level 1 add #1
    Level 2 add #1
    Level 2 parallel #2
    Level 2 add #3
    Level 1 parallel #2
    Level 1 add #3
    Level 0 parallel #2
    Level 0 add #3

Run with ``python examples/spec_1_1_levels.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps


def level0_add1(asi: AsyncSteps) -> None:
    print("Level 0 add #1")

    def level1_add1(asi: AsyncSteps) -> None:
        print("Level 1 add #1")
        asi.add(lambda asi: print("Level 2 add #1"))
        asi.parallel().add(lambda asi: print("Level 2 parallel #2"))
        asi.add(lambda asi: print("Level 2 add #3"))

    asi.add(level1_add1)
    asi.parallel().add(lambda asi: print("Level 1 parallel #2"))
    asi.add(lambda asi: print("Level 1 add #3"))


async def main() -> None:
    asi = AsyncSteps()
    asi.add(level0_add1)
    asi.parallel().add(lambda asi: print("Level 0 parallel #2"))
    asi.add(lambda asi: print("Level 0 add #3"))
    await asi.promise()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
