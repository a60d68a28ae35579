"""The demo service (examples/service): a short run on each backend, and the
client-disconnect path step by step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute

ROOT = Path(__file__).resolve().parent.parent
# The demo lives in examples/, outside the package: import it from the checkout.

from examples.service.protocol import LineStream  # noqa: E402
from examples.service.server import Server  # noqa: E402


def run_demo(backend: str, duration: float = 2.0, *extra: str) -> dict[str, Any]:
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.service.demo",
            "--backend",
            backend,
            "--duration",
            str(duration),
            "--seed",
            "1",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    summary: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return summary


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_summary(backend: str) -> None:
    s = run_demo(backend)
    # Every request ended exactly one way.
    assert s["other_errors"] == {}
    assert s["sent"] == s["ok"] + s["DefenseRejected"] + s["Timeout"] + s["hung_up"]
    # Each kind of outcome happened (the load is sized for it).
    assert s["ok"] > 100
    assert s["DefenseRejected"] > 0
    assert s["Timeout"] > 0
    assert 0 < s["cancelled_on_disconnect"] <= s["hung_up"]
    assert 0 < s["p50_ms"] <= s["p99_ms"]
    # Nothing is left behind on the server: no place held, no connection open.
    limiter = s["server_limiter"]
    assert (limiter["held"], limiter["waiting"], limiter["rate_waiting"]) == (0, 0, 0)
    assert limiter["rejected"] >= s["DefenseRejected"]
    assert s["server_active_flows"] == 0
    for backend_stats in s["server_backends"].values():
        assert backend_stats["open_connections"] == 0
        assert backend_stats["released_on_cancel"] > 0


def test_demo_processes_share_one_limiter() -> None:
    """``--processes 2``: two server processes (asyncio and trio) behind one port share one
    RedisLimiter on a throwaway redis-server; every request still ends exactly one way."""
    s = run_demo("asyncio", 2.0, "--processes", "2")
    assert s["other_errors"] == {}
    assert s["sent"] == s["ok"] + s["DefenseRejected"] + s["Timeout"] + s["hung_up"]
    assert s["ok"] > 0
    limiter = s["server_limiter"]
    assert "shared_held" in limiter  # the statistics of a RedisLimiter
    assert (limiter["held"], limiter["waiting"], limiter["rate_waiting"]) == (0, 0, 0)
    assert s["server_active_flows"] == 0


async def wait_until(predicate: Any, limit: float = 5.0) -> None:
    # The server reacts to real socket events (data, EOF) that no task-level
    # synchronisation can observe, so poll, with a deadline.
    with anyio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.005)


@pytest.mark.anyio
async def test_disconnect_cancels_the_flow() -> None:
    # Back-ends that never answer in time: the request can only end by disconnect.
    server = Server(deadline_ms=60_000, users_ms=30_000, orders_ms=30_000, slow_ratio=0)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        stream = await anyio.connect_tcp("127.0.0.1", port)
        await LineStream(stream).send({"op": "work", "id": 1})
        await wait_until(
            lambda: server.users.open_connections == 1 and server.orders.open_connections == 1
        )
        assert server.active_flows == 1
        assert server.limiter.statistics().held == 1

        await stream.aclose()  # hang up mid-request
        await wait_until(lambda: server.active_flows == 0)
        tg.cancel_scope.cancel()

    assert server.outcomes == {"cancelled_on_disconnect": 1}
    assert server.users.statistics() == {"open_connections": 0, "calls": 1, "released_on_cancel": 1}
    assert server.orders.statistics() == {
        "open_connections": 0,
        "calls": 1,
        "released_on_cancel": 1,
    }
    stats = server.limiter.statistics()
    assert (stats.held, stats.waiting, stats.rate_waiting) == (0, 0, 0)


@pytest.mark.anyio
async def test_request_answer_and_stats_over_the_wire() -> None:
    server = Server(users_ms=1, orders_ms=1, slow_ratio=0, seed=3)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            lines = LineStream(stream)
            await lines.send({"op": "work", "id": 5})
            answer = await lines.receive()
            await lines.send({"op": "stats"})
            stats = await lines.receive()
        tg.cancel_scope.cancel()

    assert answer is not None
    assert answer["id"] == 5
    assert answer["ok"] is True
    assert set(answer["result"]) == {"users", "orders"}
    assert stats is not None
    assert stats["outcomes"] == {"ok": 1}
    assert stats["limiter"]["held"] == 0
