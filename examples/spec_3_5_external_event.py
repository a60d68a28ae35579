"""FTN12 section 3.5 "External event wait": ``wait_external()``.

A step that waits for something outside AsyncSteps calls ``wait_external()``
(no implicit success), then completes from the outside world's callback.  Here
the "outside world" is a blocking library running in its own thread: our
semantics (docs/semantics.rst, "AsyncTool") allow ``success()``/``error()`` of a
waiting step from another thread, the work then happens on the event loop's
thread.  ``error()`` raises, so the callback suppresses the exception, as the
spec's ``try``/``catch`` does.  Expected output::

    flow 1: waiting
    flow 1: external call succeeded
    flow 2: waiting
    flow 2: promise() raised CommError (connection reset)

Run with ``python examples/spec_3_5_external_event.py [--backend trio]``.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from collections.abc import Callable

import anyio

from futoin_anyio import AsyncSteps, Errors, FutoInError


def call_some_external(fail: bool, callback: Callable[[str | None], None]) -> threading.Thread:
    """A stand-in for a blocking client library that reports from its own thread."""

    def work() -> None:
        time.sleep(0.01)  # the blocking I/O
        callback(Errors.CommError if fail else None)

    thread = threading.Thread(target=work)
    thread.start()
    return thread


async def run_flow(n: int, fail: bool) -> None:
    threads: list[threading.Thread] = []

    def step(asi: AsyncSteps) -> None:
        print(f"flow {n}: waiting")
        asi.wait_external()

        def on_done(err: str | None) -> None:
            if err:
                # error() raises at once; the flow has been told, ignore it.
                with contextlib.suppress(FutoInError):
                    asi.error(err, "connection reset")
            else:
                asi.success()

        threads.append(call_some_external(fail, on_done))

    asi = AsyncSteps().add(step)
    asi.add(lambda asi: print(f"flow {n}: external call succeeded"))
    try:
        await asi.promise()
    except FutoInError as e:
        print(f"flow {n}: promise() raised {e.code} ({e.info})")
    for thread in threads:
        await anyio.to_thread.run_sync(thread.join)


async def main() -> None:
    await run_flow(1, fail=False)
    await run_flow(2, fail=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
