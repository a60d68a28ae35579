"""A small service whose flows can be dumped from another shell (see docs/seeing_inside.rst).

    python -m examples.service.dump_demo --backend trio &
    python -m futoin_anyio.dump $!

One request holds the Limiter's only place (its back end never answers); the next one waits
behind it; the dump shows both, and who the second one waits behind.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, AsyncTool, Limiter, dump


def query(asi: AsyncSteps) -> None:
    asi.wait_external()  # a back end that never answers


def handle_request(asi: AsyncSteps) -> None:
    asi.set_timeout(30_000)
    asi.sync(LIMITER, query)


LIMITER = Limiter(concurrent=1, max_queue=10, name="db")


async def serve() -> None:
    dump.install_signal_handler()  # the one line: kill -USR1 <pid> writes the dump
    async with AsyncTool() as tool:
        for _ in range(2):
            root = AsyncSteps(tool=tool)
            root.add(handle_request)
            root.execute()
        await anyio.sleep(0.05)
        print("ready", flush=True)
        await anyio.sleep_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    anyio.run(serve, backend=parser.parse_args().backend)


if __name__ == "__main__":
    main()
