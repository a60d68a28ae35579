"""Quickstart: AsyncSteps inside an AnyIO program.

* ``await asi.promise()`` runs a flow in the calling task.
* An ``async def`` step may await anything; its return value is the step's
  result.
* ``set_timeout()`` turns a slow step into a ``Timeout`` error that the
  flow's error handlers see.
* An outer AnyIO cancel scope cancels the flow: the waiting step's cancel
  handler runs, then AnyIO's cancellation propagates as usual.

Expected output::

    fetched: 42
    recovered from Timeout
    cancel handler: connection released
    cancelled by the outer scope: True

Run with ``python examples/quickstart.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, Errors


async def fetch(asi: AsyncSteps) -> int:
    await anyio.sleep(0.001)
    return 42


async def main() -> None:
    # 1. A coroutine step's return value goes to the next step.
    asi = AsyncSteps()
    asi.add(fetch)
    asi.add(lambda asi, value: print(f"fetched: {value}"))
    await asi.promise()

    # 2. A timeout is an ordinary FutoIn error.
    def slow(asi: AsyncSteps) -> None:
        asi.set_timeout(10)  # ms; nobody ever calls success()

    def on_error(asi: AsyncSteps, code: str) -> None:
        if code == Errors.Timeout:
            asi.success("recovered from Timeout")

    asi = AsyncSteps()
    asi.add(slow, on_error)
    asi.add(lambda asi, msg: print(msg))
    await asi.promise()

    # 3. Structured cancellation from outside.
    def wait_for_peer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: print("cancel handler: connection released"))

    asi = AsyncSteps().add(wait_for_peer)
    with anyio.move_on_after(0.01) as scope:
        await asi.promise()
    print(f"cancelled by the outer scope: {scope.cancelled_caught}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
