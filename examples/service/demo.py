"""Run the demo server and the load client together, then print the summary.

``python -m examples.service.demo --duration 10 [--backend trio] [--json]``
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
from anyio.abc import SocketAttribute

from .client import render, run_load
from .server import Server


async def demo(duration: float, connections: int, seed: int | None) -> dict[str, Any]:
    server = Server(seed=seed)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        result = await run_load(
            "127.0.0.1", port, duration=duration, connections=connections, seed=seed
        )
        tg.cancel_scope.cancel()
    return result.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    print(
        f"demo service on {args.backend}: {args.connections} connections for {args.duration} s",
        flush=True,
    )
    summary = anyio.run(demo, args.duration, args.connections, args.seed, backend=args.backend)
    print(json.dumps(summary) if args.json else render(summary))


if __name__ == "__main__":
    main()
