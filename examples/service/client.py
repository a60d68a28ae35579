"""The load client: many connections, some of which hang up mid-request.

Each worker keeps one connection and sends requests one after another.  Now
and then it sends a request and hangs up before the answer (the server must
cancel that flow); after ``DefenseRejected`` it backs off a little, as a
well-behaved client does.  Progress goes to stderr; the summary to stdout.

Run it against a running server with
``python -m examples.service.client --port 8765 --duration 10``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any

import anyio

from .protocol import DISCONNECTED, LineStream


@dataclass
class LoadResult:
    """What the client saw, plus the server's statistics at the end."""

    duration_s: float = 0.0
    sent: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    hung_up: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        """The numbers the demo prints (and its test checks), JSON-ready."""
        limiter = self.server.get("limiter", {})
        return {
            "duration_s": round(self.duration_s, 2),
            "sent": self.sent,
            "ok": self.ok,
            "DefenseRejected": self.errors.get("DefenseRejected", 0),
            "Timeout": self.errors.get("Timeout", 0),
            "other_errors": {
                k: v for k, v in self.errors.items() if k not in ("DefenseRejected", "Timeout")
            },
            "hung_up": self.hung_up,
            "cancelled_on_disconnect": self.server.get("outcomes", {}).get(
                "cancelled_on_disconnect", 0
            ),
            "p50_ms": round(self.percentile(50), 1),
            "p99_ms": round(self.percentile(99), 1),
            "server_limiter": limiter,
            "server_backends": self.server.get("backends", {}),
            "server_active_flows": self.server.get("active_flows"),
        }


def render(summary: dict[str, Any]) -> str:
    limiter = summary["server_limiter"]
    backends = summary["server_backends"]
    lines = [
        f"requests sent              {summary['sent']:>7} in {summary['duration_s']} s",
        f"  ok                       {summary['ok']:>7}",
        f"  DefenseRejected          {summary['DefenseRejected']:>7}   (Limiter queue full)",
        f"  Timeout                  {summary['Timeout']:>7}   (per-request set_timeout)",
        f"  hung up by the client    {summary['hung_up']:>7}",
        f"    cancelled on disconnect{summary['cancelled_on_disconnect']:>7}"
        "   (server side; the others were answered or rejected first)",
    ]
    if summary["other_errors"]:
        lines.append(f"  other errors             {summary['other_errors']}")
    lines += [
        f"latency of ok requests     p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms",
        "server Limiter.statistics()  " + ", ".join(f"{k}={v}" for k, v in limiter.items()),
        "server back-end connections  "
        + ", ".join(
            f"{name}: {b['open_connections']} open, {b['released_on_cancel']} released on cancel"
            for name, b in backends.items()
        ),
        f"server active flows          {summary['server_active_flows']}",
    ]
    return "\n".join(lines)


async def run_load(
    host: str,
    port: int,
    *,
    duration: float = 10.0,
    connections: int = 64,
    hangup_ratio: float = 0.05,
    seed: int | None = None,
    progress: bool = True,
) -> LoadResult:
    """Load the server for ``duration`` seconds, then fetch its statistics."""
    rng = random.Random(seed)
    result = LoadResult()
    errors: dict[str, int] = result.errors
    ids = itertools.count()
    start = anyio.current_time()
    stop_at = start + duration

    async def worker() -> None:
        while anyio.current_time() < stop_at:
            try:
                stream = await anyio.connect_tcp(host, port)
            except OSError:
                errors["connect"] = errors.get("connect", 0) + 1
                await anyio.sleep(0.05)
                continue
            async with stream:
                lines = LineStream(stream)
                while anyio.current_time() < stop_at:
                    sent_at = anyio.current_time()
                    try:
                        await lines.send({"op": "work", "id": next(ids)})
                    except DISCONNECTED:
                        break
                    result.sent += 1
                    if rng.random() < hangup_ratio:
                        # Give up before the answer: the server must cancel the flow.
                        await anyio.sleep(rng.uniform(0.001, 0.03))
                        result.hung_up += 1
                        break
                    try:
                        answer = await lines.receive()
                    except DISCONNECTED:
                        answer = None
                    if answer is None:
                        errors["disconnected"] = errors.get("disconnected", 0) + 1
                        break
                    if answer.get("ok"):
                        result.ok += 1
                        result.latencies_ms.append((anyio.current_time() - sent_at) * 1000)
                    else:
                        code = str(answer.get("error"))
                        errors[code] = errors.get(code, 0) + 1
                        if code == "DefenseRejected":
                            await anyio.sleep(rng.uniform(0.02, 0.1))  # back off

    async def report_progress() -> None:
        tty = sys.stderr.isatty()
        while True:
            await anyio.sleep(0.25 if tty else 1.0)
            elapsed = anyio.current_time() - start
            line = (
                f"[{elapsed:5.1f}s] sent {result.sent}  ok {result.ok}  "
                f"rejected {errors.get('DefenseRejected', 0)}  "
                f"timeout {errors.get('Timeout', 0)}  hung up {result.hung_up}"
            )
            print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr)

    async with anyio.create_task_group() as tg:
        if progress:
            tg.start_soon(report_progress)
        async with anyio.create_task_group() as workers:
            for _ in range(connections):
                workers.start_soon(worker)
        tg.cancel_scope.cancel()
    if progress and sys.stderr.isatty():
        print(file=sys.stderr)
    result.duration_s = anyio.current_time() - start
    result.server = await fetch_server_statistics(host, port)
    return result


async def fetch_server_statistics(host: str, port: int, settle_s: float = 3.0) -> dict[str, Any]:
    """The server's statistics, once its flows have settled (or after ``settle_s``).

    Hung-up requests are cancelled when the server notices the closed
    connection, which may be a moment after the client closed it.
    """
    async with await anyio.connect_tcp(host, port) as stream:
        lines = LineStream(stream)
        with anyio.move_on_after(settle_s):
            while True:
                await lines.send({"op": "stats"})
                stats = await lines.receive()
                assert stats is not None
                limiter = stats["limiter"]
                if stats["active_flows"] == 0 and not (
                    limiter["held"] or limiter["waiting"] or limiter["rate_waiting"]
                ):
                    return stats
                await anyio.sleep(0.05)
        await lines.send({"op": "stats"})
        stats = await lines.receive()
        assert stats is not None
        return stats


def main() -> None:
    parser = argparse.ArgumentParser(description="AsyncSteps demo load client")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    result = anyio.run(
        lambda: run_load(
            args.host, args.port, duration=args.duration, connections=args.connections
        ),
        backend=args.backend,
    )
    summary = result.summary()
    print(json.dumps(summary) if args.json else render(summary))


if __name__ == "__main__":
    main()
