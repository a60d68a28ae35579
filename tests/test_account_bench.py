"""The per-request account (``benchmarks.account``) runs on both backends and counts what it says.

A few requests per count: this checks that every counter sees what the ok path must make (a
cancel scope, the two backend calls' tasks, Python calls, objects), never how many.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from benchmarks import account, instructions


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_account_counts_each_side(backend: str) -> None:
    rows = [account.account(impl, backend, 20) for impl in ("plain", "futoin")]
    assert {row["path"] for row in rows} == {"ok"}
    for row in rows:
        assert row["scopes"] >= 1, row  # the deadline's scope, at least
        assert row["tasks"] >= 1, row  # the parallel backend calls
        assert row["calls"] > 10, row
        assert row["cyclic"] >= 0, row
        if row["objects"] is None:
            assert sys.version_info < (3, 13) or row["objects_na"], row
        else:
            assert row["objects"] > 10, row
    table = account.render(rows)
    for count in account.COUNTS:
        assert f"| {backend} | ok | {count} |" in table


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_account_of_rejected_requests(backend: str) -> None:
    # Every counted request is refused (the account checks each outcome): no deadline scope
    # and no backend task on either side (futoin's promise() makes a schedule point every
    # 16th instant call, which on asyncio enters a scope); calls are still made.
    rows = [account.account(impl, backend, 32, "rejected") for impl in ("plain", "futoin")]
    for row in rows:
        assert row["path"] == "rejected"
        assert row["scopes"] < 0.1 and row["tasks"] == 0, row
        assert row["calls"] >= 1, row
    plain = rows[0]
    assert plain["cyclic"] == 0, plain  # a refusal is a return: nothing for the collector
    table = account.render(rows)
    assert f"| {backend} | rejected | cyclic |" in table


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_account_of_retried_requests(backend: str) -> None:
    # Backend b answers the retry code to every first call: each counted request must come out
    # "retried" with the second attempt's value (the account checks each outcome), and costs
    # each side more calls than an ok one (the second call of b, and on futoin the retry step).
    rows = []
    for impl in ("plain", "futoin"):
        ok, retried = (account.account(impl, backend, 20, path) for path in ("ok", "retried"))
        assert retried["path"] == "retried"
        assert retried["calls"] > ok["calls"], (ok, retried)
        assert retried["scopes"] >= ok["scopes"], (ok, retried)
        rows.append(retried)
    table = account.render(rows)
    assert f"| {backend} | retried | calls |" in table


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_account_times_each_side(backend: str) -> None:
    # The timing's figures are benchmarks: checked only for being there and in the table.
    row = account.timing(backend, 10, 2, "rejected")
    assert (row["backend"], row["path"], row["n"], row["rounds"]) == (backend, "rejected", 10, 2)
    assert row["plain"] > 0 and row["futoin"] > 0, row
    table = account.render_times([row])
    assert table.splitlines()[2].startswith(f"| {backend} | rejected | ")
    assert table.splitlines()[2].endswith(f" | {row['futoin'] / row['plain']:.2f} |")


def test_account_time_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "account.json"
    assert account.main(["-n", "8", "--backends", "asyncio", "--paths", "rejected", "--time",
                         "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "CPU per request" in printed and "| asyncio | rejected | " in printed
    saved = json.loads(out.read_text())
    assert [r["impl"] for r in saved["counts"]] == ["plain", "futoin"]
    assert [(t["backend"], t["rounds"]) for t in saved["times"]] == [("asyncio", 1)]
    with pytest.raises(SystemExit):
        account.main(["--time", "-1"])
    assert "--time must be >= 0 rounds, got -1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        account.timing("asyncio", 1, 0)


def test_account_path_is_checked() -> None:
    with pytest.raises(ValueError, match="path must be one of"):
        account.account("plain", "asyncio", 1, "mixed")


def test_the_object_counter_counts_objects_created() -> None:
    lib, why = account.object_counter()
    if lib is None:
        pytest.skip(f"no object counter here: {why}")
    lib.tracer_start()
    made = [object() for _ in itertools.repeat(None, 1000)]  # range() would make ints
    created = lib.tracer_stop()
    assert len(made) == 1000
    assert 1000 <= created < 1100


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("path", ["ok", "rejected"])
def test_run_requests_checks_each_outcome(backend: str, path: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # What benchmarks.instructions' gateway scenarios run: both sides, each outcome checked.
    for impl in ("plain", "futoin"):
        anyio.run(account.run_requests, impl, backend, 5, path, backend=backend)
    if path == "ok":  # a reply that is not the expected one stops the run
        monkeypatch.setattr(account, "expected_value", lambda rid, kind: -1)
        with pytest.raises(AssertionError, match="request 1: ok"):
            anyio.run(account.run_requests, "futoin", backend, 5, path, backend=backend)


def test_gateway_instructions_refuse_a_side_they_do_not_have(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        instructions.main(["--only", "gateway_ok", "--side", "plain_scope"])
    assert "--side plain_scope: the gateway scenarios have the sides ours, plain" \
        in capsys.readouterr().err


_CACHEGRIND_OUT = """\
desc: I1 cache:         32768 B, 64 B, 8-way associative
cmd: python -c ...
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw Bc Bcm Bi Bim
fl=x.c
fn=f
1 1000 10 1 300 20 2 100 5 3 50 6 7 8
summary: 1000 10 1 300 20 2 100 5 3 50 6 7 8
"""


def test_cost_of_reads_cachegrind_totals_and_estimates_cycles() -> None:
    cost = instructions.cost_of(_CACHEGRIND_OUT)
    assert cost == instructions.Cost(instructions=1000, i1_misses=10, d1_misses=25,
                                     ll_misses=6, mispredicted=14)
    # KCachegrind's estimate: Ir + 10 Bm + 10 L1m + 100 LLm.
    assert cost.cycles == 1000 + 10 * 14 + 10 * (10 + 25) + 100 * 6
    per = (cost - instructions.Cost(500, 4, 5, 2, 4)) / 10
    assert per == instructions.Cost(50, 0.6, 2, 0.4, 1)


def test_cost_of_refuses_a_run_without_the_simulations() -> None:
    no_branches = _CACHEGRIND_OUT.replace(" Bc Bcm Bi Bim", "").replace(" 50 6 7 8", "")
    with pytest.raises(ValueError, match="--branch-sim=yes"):
        instructions.cost_of(no_branches)
    with pytest.raises(ValueError, match="not the output of cachegrind"):
        instructions.cost_of("events: Ir\n")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_simulate_runs_a_scenario_under_cachegrind(backend: str) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (scripts/test.sh installs it where it can)")
    cost = instructions.simulate("seq", "ours", backend, 10)
    assert cost.instructions > 1_000_000  # a whole interpreter's run
    assert 0 < cost.i1_misses < cost.instructions
    assert 0 < cost.mispredicted < cost.instructions
    assert cost.cycles > cost.instructions
