"""The real-I/O service benchmark (``benchmarks.service``) runs and verifies every reply.

A front process per implementation and backend, loaded for a fraction of a second by the
harness's own clients: this checks that the harness works and that it checked what it
measured (every request answered, with the backend's answer or ``busy``, every admission place
given back), never how fast anything is.
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import service
from benchmarks._common import VerificationError, check

SMOKE = service.Mode(clients=16, warmup=0.02, duration=0.15, rounds=1)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("impl", ["plain", "futoin"])
def test_front_serves_and_every_reply_is_checked(impl: str, backend: str) -> None:
    result = asyncio.run(service.run_front(impl, backend, SMOKE))
    ok, reject = result["ok"], result["reject"]
    assert ok["requests"] >= ok["counted"] > 0
    assert ok["held_after"] == 0  # every admission place came back
    assert reject["counted"] > 0 and reject["held_after"] == service_limit()
    assert ok["cpu_per_request"] > 0 and reject["cpu_per_request"] > 0


def service_limit() -> int:
    from benchmarks._service_front import LIMIT

    return LIMIT


def test_a_wrong_or_missing_reply_fails_the_run() -> None:
    async def main() -> service._Load:
        load = service._Load(expect_busy=False)
        client = service._Client(load, total=1)
        client.outstanding = b"5"
        client.load.running = False
        client.data_received(b"5:99\n")  # the backend would say 5:36
        client.data_received(b"busy\n")  # no request outstanding
        return load

    load = asyncio.run(main())
    assert load.wrong == [b"5:99\n", b"unexpected busy\n"]
    with pytest.raises(VerificationError):
        check(not load.wrong, "wrong replies")


def test_table_and_targets() -> None:
    def row(ratio_ok: float, ratio_reject: float) -> dict[str, object]:
        cell = {"per_s": 1000.0, "cpu_ok": 1e-4, "cpu_reject": 3e-5, "cpu_share": 0.9}
        return {"backend": "trio", "plain": cell, "futoin": cell, "ratio_ok": ratio_ok,
                "ratio_cpu": 1.0, "ratio_reject": ratio_reject}

    assert service.targets_hold([row(0.95, 1.1)])
    assert not service.targets_hold([row(0.95, 1.1), row(0.89, 1.0)])
    assert not service.targets_hold([row(1.0, 1.21)])
    table = service.render([row(0.95, 1.3)])
    assert "| 0.95 PASS |" in table and "| 1.30 FAIL |" in table
