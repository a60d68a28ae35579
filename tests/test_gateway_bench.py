"""The gateway tier (``benchmarks.gateway``): both fronts give the same outcomes, on both backends.

Each case runs the real processes (front, backends, clients) on loopback for a second or two:
a warm-up, a seeded mixed load (ok, retried, failed, timed out, hung up), a rate limit of 5
entries per hour (the rest rejected at once), then every place held (every request rejected by
the concurrency limit). Every reply is checked against its request's kind and the front's
counts against the clients' inside the harness; here, the outcome counts of both fronts, and of
the reject phase's floor front, must be the same and what the seed asks for. A request that
misses the 200 ms deadline on a stalled machine (or a slow one whose answer wins the race with
it) is counted as late by the harness; a run with one is run again (at most three times), since
its counts then say what the machine did, not what the front does.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from benchmarks import gateway, service
from benchmarks._gateway_front import FLOOR, Admission
from benchmarks._gateway_load import OUTCOMES

CLIENTS = 8
PHASES = [
    gateway.Phase("warmup", 2),
    gateway.Phase("mixed", 25, mixed=True),
    gateway.Phase("rate", 5, allow_rejected=True, before=(b"!admit 64 5 3600000\n",)),
    gateway.Phase("pinned", 3, allow_rejected=True, before=(b"!admit 2 1000 1000\n", b"!pin\n"),
                  held_after=2),
]


def _run(impl: str, backend: str) -> dict[str, Any]:
    for _ in range(3):
        result = asyncio.run(gateway.run_front(impl, backend, CLIENTS, PHASES, seed=7))
        if not any(phase["late"] for phase in result.values()):
            return result
    pytest.fail(f"{impl} on {backend}: a request missed the deadline in three runs")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_both_fronts_give_the_same_outcomes(backend: str) -> None:
    plain, futoin = _run("plain", backend), _run("futoin", backend)
    floor = _run(FLOOR, backend)  # the reject phase's floor: admits and refuses as plain does
    for name in ("mixed", "rate", "pinned"):
        assert plain[name]["counts"] == futoin[name]["counts"] == floor[name]["counts"], name
    mixed = plain["mixed"]["counts"]
    assert mixed == plain["mixed"]["expected"]  # what the seed asks for, rejections aside
    assert all(mixed[k] > 0 for k in OUTCOMES if k != "rejected"), mixed
    assert mixed["rejected"] == 0
    total = CLIENTS * 5
    assert plain["rate"]["counts"] == {**dict.fromkeys(OUTCOMES, 0), "ok": 5,
                                       "rejected": total - 5}
    assert plain["pinned"]["counts"]["rejected"] == CLIENTS * 3
    for result in (plain, futoin, floor):
        assert all(phase["cpu_per_request"] > 0 for phase in result.values())
        for phase in result.values():  # the front's collector, read through ``gc.callbacks``
            collector = phase["collector"]
            assert set(collector) == {"per_1000", "seconds_per_request"}
            assert collector["per_1000"] >= 0 and collector["seconds_per_request"] >= 0
            assert (collector["per_1000"] == 0) == (collector["seconds_per_request"] == 0)
        if sys.platform == "linux":  # the peers' wake-ups, read from /proc
            for phase in result.values():
                assert set(phase["wakeups"]) == set(gateway.PEERS)
                assert all(w >= 0 for w in phase["wakeups"].values())
            # The clients sleep between replies: at least one wake-up in the mixed phase.
            assert result["mixed"]["wakeups"]["clients"] > 0


def test_plain_admission_limits_places_and_rate() -> None:
    now = [0.0]
    adm = Admission(concurrent=2, rate=3, period_s=1.0, clock=lambda: now[0])
    assert adm.enter() and adm.enter()
    assert not adm.enter()  # both places held
    adm.leave()
    assert adm.enter()  # the third entry of the period
    adm.leave()
    assert not adm.enter()  # a place, but no entry left in this period
    now[0] = 1.0
    assert adm.enter()  # a new period starts with this entry
    assert adm.in_flight == 2


def test_table_and_targets() -> None:
    def cell(ratio: float, target: float) -> dict[str, Any]:
        return {"plain": 1e-4, "futoin": ratio * 1e-4, "ratio": ratio, "target": target,
                "status": "PASS" if ratio <= target else "FAIL", "runs": {},
                "rejected_share": {"plain": 0.97, "futoin": 0.96}}

    row: dict[str, Any] = {
        "backend": "trio", "late": {"plain": 0, "futoin": 1},
        "mixed_counts": dict.fromkeys(OUTCOMES, 1),
        "cells": {"ok": cell(1.1, 1.15), "mixed": cell(1.2, 1.15), "reject": cell(1.2, 1.25)}}
    table = gateway.render([row])
    assert "Peers woken" not in table  # no wake-ups measured (not Linux): no such table
    row["cells"]["ok"]["wakeups"] = {"plain": {"backends": 0.06, "clients": 0.1},
                                     "futoin": {"backends": 0.4, "clients": 0.125}}
    table = gateway.render([row])
    assert "| trio | ok | 0.06 | 0.40 | 0.10 | 0.12 |" in table
    assert "| trio | mixed |" not in table.split("Peers woken")[1]
    assert "| trio | ok | 100 µs | 110 µs | 1.10 | <= 1.15 | PASS |" in table
    assert "| trio | mixed | 100 µs | 120 µs | 1.20 | <= 1.15 | FAIL |" in table
    assert "futoin 96.0%" in table and "futoin 1." in table
    assert "cyclic collector" not in table  # none reported: no such table
    row["cells"]["reject"]["collector"] = {
        "plain": {"per_1000": 0.5, "seconds_per_request": 2e-7},
        "futoin": {"per_1000": 6.3, "seconds_per_request": 2.5e-6}}
    table = gateway.render([row])
    assert "| trio | reject | 0.5 | 6.3 | 0.2 µs | 2.5 µs |" in table
    assert "| trio | ok |" not in table.split("cyclic collector")[1]
    assert [t["status"] for t in gateway.targets([row])] == ["PASS", "FAIL", "PASS"]
    assert "reject phase's floor" not in table  # none measured: no such table
    row["cells"]["reject"]["floor"] = 1.1e-4
    table = gateway.render([row])
    assert "| trio | 100 µs | 110 µs | 1.10 | 1.09 |" in table.split("reject phase's floor")[1]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_service_plain_scope_front_serves(backend: str) -> None:
    smoke = service.Mode(clients=16, warmup=0.02, duration=0.15, rounds=1)
    result = asyncio.run(service.run_front("plain_scope", backend, smoke))
    assert result["ok"]["counted"] > 0 and result["ok"]["held_after"] == 0
    assert result["reject"]["counted"] > 0


def test_service_table_reports_plain_scope() -> None:
    cell = {"per_s": 1000.0, "cpu_ok": 1e-4, "cpu_reject": 3e-5, "cpu_share": 0.9}
    row = {"backend": "trio", "plain": cell, "plain_scope": {**cell, "cpu_ok": 1.2e-4},
           "futoin": {**cell, "cpu_ok": 1.5e-4}, "ratio_ok": 1.0, "ratio_cpu": 1.5,
           "ratio_cpu_scope": 1.25, "ratio_reject": 1.0}
    table = service.render([row])
    assert "| trio | 100 µs | 120 µs | 150 µs | 1.25 FAIL |" in table
    assert not service.targets_hold([row])
