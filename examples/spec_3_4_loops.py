"""FTN12 section 3.4 "loops": ``repeat()`` and ``for_each()``.

``for_each()`` walks a list as ``(index, value)`` and a mapping as
``(key, value)``; the state is a mapping too.  Expected output::

    0
    1
    2
    0=1
    1=3
    2=3
    fruit=apple
    count=3

Run with ``python examples/spec_3_4_loops.py [--backend trio]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from futoin_anyio import AsyncSteps


def body(asi: AsyncSteps) -> None:
    asi.repeat(3, lambda asi, i: print(i))
    asi.for_each([1, 3, 3], lambda asi, k, v: print(f"{k}={v}"))

    def print_user_key(asi: AsyncSteps, k: str, v: Any) -> None:
        # The state also holds the pre-defined keys error_info,
        # last_exception and async_stack (FTN12 section 1.7).
        if k not in ("error_info", "last_exception", "async_stack"):
            print(f"{k}={v}")

    asi.for_each(asi.state, print_user_key)


async def main() -> None:
    asi = AsyncSteps()
    asi.state.fruit = "apple"
    asi.state.count = 3
    asi.add(body)
    await asi.promise()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
