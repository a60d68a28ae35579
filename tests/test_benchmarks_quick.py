"""The benchmark harness still runs and every scenario still verifies its own result.

Tiny N, in-process, futoin_anyio and plain AnyIO on both backends: this checks that
the figures the harness would post come from verified runs, never how fast they are.
The JS column needs node and is exercised by ``python -m benchmarks.run --quick``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

from benchmarks import _worker, chart, run  # noqa: E402
from benchmarks._common import SCENARIOS, SIZES, Measurement, check  # noqa: E402

TINY = SIZES["tiny"]
CASES = [
    (impl, backend, scenario, n)
    for impl in ("futoin", "plain")
    for backend in ("asyncio", "trio")
    for scenario in SCENARIOS
    for n in TINY[scenario]
]
#: Scenarios an implementation has no equivalent for, by design.
NO_EQUIVALENT = {("plain", "c_steps"): "no C steps in plain AnyIO"}


@pytest.mark.parametrize(("impl", "backend", "scenario", "n"), CASES)
def test_scenario_verifies(impl: str, backend: str, scenario: str, n: int) -> None:
    record = _worker.run_one(impl, backend, scenario, n)
    assert "error" not in record, record.get("traceback", record)
    expected_na = NO_EQUIVALENT.get((impl, scenario))
    if expected_na is not None:
        assert record == {**record, "na": expected_na}
        return
    if "na" in record and str(record["na"]).startswith("cannot compile"):
        pytest.skip(f"{scenario}: {record['na']}")  # no C compiler: visible, not silent
    assert "na" not in record, record["na"]
    assert record["value"] > 0
    if scenario == "waiting_mem":
        assert record["value"] < 100_000  # bytes per root: a sanity bound, not a target
    else:
        assert record["seconds"] > 0


def test_wrong_result_is_an_error_not_a_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(n: int) -> Measurement:
        check(n == -1, f"broken: {n} != -1")
        return Measurement(1.0, 1.0)

    monkeypatch.setitem(_worker.scenarios_of("plain"), "seq", broken)
    record = _worker.run_one("plain", "asyncio", "seq", 10)
    assert "value" not in record
    assert record["error"] == "VerificationError: broken: 10 != -1"


def test_worker_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    config = {"impl": "plain", "backend": "trio", "scenarios": {"chain": [10, 20]}}
    assert _worker.main([json.dumps(config)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["scenario"], r["n"]) for r in lines] == [("chain", 10), ("chain", 20)]


def _fake_records() -> dict[str, list[dict[str, Any]]]:
    values = {
        "futoin_asyncio": 2.0,
        "futoin_trio": 1.0,
        "js": 4.0,
        "plain_asyncio": 1.5,
        "plain_trio": 0.5,
    }
    records: dict[str, list[dict[str, Any]]] = {}
    for column, v in values.items():
        records[column] = [
            {
                "scenario": s,
                "n": n,
                "value": v * (1000 if s != "waiting_mem" else 1),
                "seconds": 0.1,
            }
            for s in SCENARIOS
            for n in TINY[s]
        ]
    records["js"][0] = {"scenario": "seq", "n": TINY["seq"][0], "na": "node not found"}
    return records


def test_table_ratios_targets_and_chart(tmp_path: Path) -> None:
    rows = run.build_rows(_fake_records(), dict(TINY))
    by_id = {row["id"]: row for row in rows}
    assert by_id["seq"]["ratio_js"] is None  # JS n/a: no ratio, not a zero
    assert by_id["instances"]["best_futoin"] == "futoin_asyncio"
    assert by_id["instances"]["ratio_js"] == pytest.approx(0.5)
    assert by_id["instances"]["ratio_plain"] == pytest.approx(2.0 / 1.5)
    assert by_id["waiting_mem"]["best_futoin"] == "futoin_trio"  # lower is better
    targets = {t["target"]: t["status"] for t in run.check_targets(rows)}
    assert targets["seq: futoin/JS throughput"] == "n/a"
    assert targets["instances: futoin/JS throughput"] == "PASS"
    assert targets["instances: futoin/plain-AnyIO throughput"] == "PASS"
    assert targets["waiting_mem: bytes per waiting root"] == "PASS"
    assert targets["chain 500 / chain 50 steps/s"] == "PASS"
    result = {
        "meta": {
            "mode": "tiny",
            "date": "d",
            "cpu": "c",
            "python": "p",
            "anyio": "a",
            "trio": "t",
            "node": "",
            "futoin_asyncsteps": "",
            "commit": "x",
            "repeat": 1,
        },
        "columns": list(run.COLUMNS),
        "titles": run.TITLES,
        "rows": rows,
        "chain_flatness": {c: run._chain_flatness(rows, c) for c in run.COLUMNS},
        "targets": run.check_targets(rows),
    }
    markdown = run.render_markdown(result)
    assert "| seq | 500 | steps/s | 2.0 k | 1.0 k | n/a: node not found |" in markdown
    source = tmp_path / "results.json"
    source.write_text(json.dumps(result))
    assert chart.main(["--json", str(source)]) == 0
    svg = (tmp_path / "chart.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") > len(rows)


def _result(rows: list[Any]) -> dict[str, Any]:
    return {
        "meta": {"mode": "tiny", "date": "d", "cpu": "c", "python": "p", "anyio": "a",
                 "trio": "t", "node": "", "futoin_asyncsteps": "", "commit": "x", "repeat": 1},
        "rows": rows,
        "chain_flatness": {c: run._chain_flatness(rows, c) for c in run.COLUMNS},
        "targets": run.check_targets(rows),
    }


def test_every_skip_reason_is_shown_in_full() -> None:
    # The figures of a run without setuptools (Python >= 3.12 venvs), node or a failure.
    no_setuptools = (
        "binary bridge: compiling C steps at run time (cffi's ffi.compile()) needs setuptools,"
        " which this Python environment lacks: pip install 'futoin_anyio[c]'"
    )
    records = _fake_records()
    records["js"] = [
        {"scenario": s, "n": n, "na": "node not found"} for s in SCENARIOS for n in TINY[s]
    ]
    for column, reason in (("futoin_asyncio", no_setuptools), ("futoin_trio", no_setuptools),
                           ("plain_asyncio", NO_EQUIVALENT["plain", "c_steps"]),
                           ("plain_trio", NO_EQUIVALENT["plain", "c_steps"])):
        for record in records[column]:
            if record["scenario"] == "c_steps":
                record.pop("value")
                record["na"] = reason
    broken = "VerificationError: " + "x" * 100
    records["plain_trio"][0] = {"scenario": "seq", "n": TINY["seq"][0], "error": broken}
    rows = run.build_rows(records, dict(TINY))

    assert run.reasons(rows, "n/a") == [
        "every scenario on JS futoin-asyncsteps: node not found",
        f"c_steps on futoin_anyio asyncio, futoin_anyio trio: {no_setuptools}",
        "c_steps on plain AnyIO asyncio, plain AnyIO trio: no C steps in plain AnyIO",
    ]
    assert run.reasons(rows, "failed") == [f"seq on plain AnyIO trio: {broken}"]

    markdown = run.render_markdown(_result(rows))
    table, skipped = markdown.split("\n## Skipped\n")
    # The table cuts a long reason and points below; the section gives it whole, as listed.
    assert "| c_steps |" in table and "pip install" not in table
    assert "n/a: binary bridge: compiling C steps at run time ... (see below)" in table
    assert "| n/a: node not found |" in table
    section = skipped.split("\n## ")[0]
    assert f"- c_steps on futoin_anyio asyncio, futoin_anyio trio: {no_setuptools}\n" in section
    assert "- every scenario on JS futoin-asyncsteps: node not found\n" in section
    assert "no C steps in plain AnyIO" in section
    assert f"## Failed\n\nCells that failed to verify (their figures are not posted):\n\n" \
           f"- seq on plain AnyIO trio: {broken}\n" in markdown
    assert markdown.index("## Skipped") < markdown.index("## Failed") < markdown.index("## Targets")


def test_no_skipped_section_when_nothing_is_skipped() -> None:
    records = _fake_records()
    records["js"][0] = {"scenario": "seq", "n": TINY["seq"][0], "value": 1.0, "seconds": 0.1}
    rows = run.build_rows(records, dict(TINY))
    assert run.reasons(rows, "n/a") == []
    markdown = run.render_markdown(_result(rows))
    assert "## Skipped" not in markdown and "## Failed" not in markdown


def test_rounds_keep_the_best_figure_and_any_failure() -> None:
    # Full mode measures each cell in rounds: the best round counts, a failed round is shown.
    records = _fake_records()
    plan = {"instances": TINY["instances"], "waiting_mem": TINY["waiting_mem"]}
    for scenario in plan:
        n = TINY[scenario][0]
        records["futoin_asyncio"] += [
            {"scenario": scenario, "n": n, "value": 9000.0, "seconds": 0.1},
            {"scenario": scenario, "n": n, "value": 1.0, "seconds": 0.1},
        ]
    records["plain_trio"].append(
        {"scenario": "instances", "n": TINY["instances"][0], "error": "VerificationError: x"})
    by_id = {row["id"]: row for row in run.build_rows(records, plan)}
    assert by_id["instances"]["cells"]["futoin_asyncio"]["value"] == 9000.0
    assert by_id["waiting_mem"]["cells"]["futoin_asyncio"]["value"] == 1.0  # fewer bytes win
    assert by_id["instances"]["cells"]["plain_trio"]["status"] == "failed"


def test_chain_flatness_compares_one_backend_with_itself() -> None:
    records = _fake_records()
    small, large = TINY["chain"][0], TINY["chain"][-1]
    speeds = {"futoin_asyncio": (1000.0, 950.0), "futoin_trio": (3000.0, 1000.0)}
    for column, (at_small, at_large) in speeds.items():
        for record in records[column]:
            if record["scenario"] == "chain":
                record["value"] = at_small if record["n"] == small else at_large
    targets = {t["target"]: t for t in run.check_targets(run.build_rows(records, dict(TINY)))}
    flat = targets[f"chain {large} / chain {small} steps/s"]
    # asyncio is flat (0.95), trio is not (0.33): the target holds for the best backend.
    assert flat["value"] == pytest.approx(0.95)
    assert flat["status"] == "PASS"


# --------------------------------------------------------------------------- native tier

from benchmarks import _native, native  # noqa: E402

NATIVE_CASES = [
    (row, side, backend)
    for row in _native.ROWS
    for side in _native.SIDES[row]
    for backend in ("asyncio", "trio")
]


@pytest.mark.parametrize(("row", "side", "backend"), NATIVE_CASES)
def test_native_scenario_verifies(row: str, side: str, backend: str) -> None:
    record = native.measure(row, side, backend, _native.SIZES["tiny"][row])
    assert "error" not in record, record.get("traceback", record)
    assert record["value"] > 0
    if native.is_memory(row):
        assert record["value"] < 100_000  # bytes per task: a sanity bound, not a target
    else:
        assert record["seconds"] > 0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_native_scope_side_uses_the_engines_scope_class(backend: str) -> None:
    """The ``plain_scope`` sides bound what the contract's scope allows: they must pay for
    the same scope class the engine enters around an inline ``async def`` step, no dearer."""
    import anyio

    from futoin_anyio._flow import scope_class

    async def both() -> tuple[object, object]:
        return _native._step_scope_type(), scope_class(backend)

    ours, engines = anyio.run(both, backend=backend)
    assert ours is engines


@pytest.mark.parametrize("gc_off", [False, True])
def test_native_gc_off_measures_with_the_collector_disabled(gc_off: bool) -> None:
    """``--gc-off`` (what the collector's passes cost each side) reaches the worker process:
    its records say whether the collector was on."""
    (record,) = native.spawn("ours", "trio", {"tasks": _native.SIZES["tiny"]["tasks"]}, gc_off)
    assert "error" not in record, record
    assert record["value"] > 0
    assert record["collector"] is (not gc_off)


def test_native_wrong_result_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(n: int) -> Measurement:
        check(n == -1, f"broken: {n} != -1")
        return Measurement(1.0, 1.0)

    monkeypatch.setitem(_native.SIDES["tasks"], "ours", broken)
    record = native.measure("tasks", "ours", "trio", 10)
    assert "value" not in record
    assert record["error"] == "VerificationError: broken: 10 != -1"
    rows = native.build_rows([record], ["trio"], ["tasks"])
    assert rows[0]["status"] == "FAILED"
    assert native.failures({"rows": rows}) == [
        "native tasks trio ours: VerificationError: broken: 10 != -1"
    ]


def test_native_worker_reports_each_row(capsys: pytest.CaptureFixture[str]) -> None:
    config = {"side": "plain", "backend": "asyncio", "rows": {"async_loop": 30, "tasks": 40}}
    assert native.main(["--worker", json.dumps(config)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["row"], r["n"]) for r in lines] == [("async_loop", 30), ("tasks", 40)]
    assert all(r["value"] > 0 for r in lines)


def _native_records() -> list[dict[str, Any]]:
    figures = {
        # row: {side: (asyncio, trio)}
        "async_loop": {"ours": (60.0, 40.0), "plain": (100.0, 100.0)},
        "tasks": {"ours": (90.0, 70.0), "plain": (100.0, 100.0), "plain_cp": (80.0, 70.0)},
        "mutex_tasks": {"ours": (50.0, 85.0), "plain": (100.0, 100.0),
                        "plain_scope": (95.0, 88.0)},
        "blocked_mem": {"ours": (5000.0, 6000.0), "plain": (4500.0, 4000.0)},
    }
    records = []
    for row, sides in figures.items():
        for side, values in sides.items():
            for backend, value in zip(("asyncio", "trio"), values, strict=True):
                for scale in (1.0, 0.5):  # two rounds: the better one counts
                    v = value * scale if not native.is_memory(row) else value / scale
                    records.append(
                        {"row": row, "side": side, "backend": backend, "n": 10, "value": v,
                         "seconds": 0.1}
                    )
    return records


def test_native_ratios_targets_table_and_chart(tmp_path: Path) -> None:
    rows = native.build_rows(
        _native_records(), ["asyncio", "trio"],
        ["async_loop", "tasks", "mutex_tasks", "blocked_mem"],
    )
    by = {(r["id"], r["backend"]): r for r in rows}
    assert by["async_loop", "asyncio"]["ratio"] == pytest.approx(0.6)
    assert by["async_loop", "asyncio"]["status"] == "PASS"  # >= 0.5x
    assert by["async_loop", "trio"]["status"] == "FAIL"
    assert by["tasks", "asyncio"]["variants"]["plain_cp"]["ratio"] == pytest.approx(90 / 80)
    assert by["tasks", "asyncio"]["variants"]["plain_cp"]["of_plain"] == pytest.approx(0.8)
    assert by["tasks", "trio"]["status"] == "FAIL"  # 0.7x < 0.8x, whatever plain_cp says
    scope = by["mutex_tasks", "trio"]["variants"]["plain_scope"]
    assert scope["ratio"] == pytest.approx(85 / 88)
    assert scope["of_plain"] == pytest.approx(0.88)
    assert by["mutex_tasks", "trio"]["status"] == "PASS"  # 0.85x >= 0.8x
    assert by["mutex_tasks", "asyncio"]["status"] == "FAIL"
    assert "variants" not in by["async_loop", "asyncio"]
    assert by["blocked_mem", "asyncio"]["cells"]["ours"]["value"] == 5000.0  # fewest bytes
    assert by["blocked_mem", "asyncio"]["delta"] == pytest.approx(500.0)
    assert by["blocked_mem", "asyncio"]["status"] == "PASS"  # <= plain + 1 KiB
    assert by["blocked_mem", "trio"]["status"] == "FAIL"  # +2000 B
    statuses = {t["target"]: t["status"] for t in native.targets(rows)}
    assert statuses["native blocked_mem trio: ours - plain bytes per root"] == "FAIL"
    assert statuses["native async_loop asyncio: ours/plain throughput"] == "PASS"

    markdown = native.render_markdown(rows)
    assert "| 10 | trio | 6,000 B | 4,000 B | +2,000 B | <= plain + 1,024 B | FAIL |" in markdown
    assert "| 10 | asyncio | 90/s | plain AnyIO + a checkpoint | 80/s | 1.12x | 0.80x |" in markdown
    assert ("| 10 | trio | 85/s | plain AnyIO + the step's cancel scope | 88/s | 0.97x | 0.88x |"
            in markdown)

    tier = {"mode": "tiny", "rounds": 2, "rows": rows, "targets": native.targets(rows)}
    result = json.loads(json.dumps({
        "meta": {"mode": "tiny", "date": "d", "cpu": "c", "python": "p", "anyio": "a",
                 "trio": "t", "node": "", "futoin_asyncsteps": "", "commit": "x", "repeat": 1},
        "columns": list(run.COLUMNS), "titles": run.TITLES, "rows": [],
        "chain_flatness": {}, "targets": [], "native": tier,
    }))
    full = run.render_markdown(result)
    assert "## AnyIO-native path (tiny mode)" in full and markdown in full
    source = tmp_path / "results.json"
    source.write_text(json.dumps(result))
    assert chart.main(["--json", str(source)]) == 0
    svg = (tmp_path / "chart.svg").read_text()
    assert "AnyIO-native path" in svg and "(0.60x plain: PASS)" in svg


def test_native_tier_alone_needs_the_ftn12_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        run.main(["--quick", "--tiers", "native", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert f"{tmp_path / 'results.json'}: not found" in capsys.readouterr().err


def test_seq_ceiling_prints_the_bare_call_and_both_backends(
        capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import seq_ceiling

    assert seq_ceiling.bare_call(2_000) > 0
    assert seq_ceiling.main(["--no-js", "--rounds", "1", "-n", "2000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line[:26].strip(): line[26:].split() for line in lines[2:5]}
    assert set(rows) == {"bare call (no engine)", "futoin_anyio asyncio", "futoin_anyio trio"}
    for rate, ns, ratio in rows.values():
        assert float(rate) > 0 and int(ns) > 0
        assert ratio == "n/a"  # no JS side asked for
    # The event loop's turn, alone, per backend (no JS side: no node turn either), its share
    # of an iteration, and ours without it.
    turns = {line[:26].strip(): line[26:].split() for line in lines[8:10]}
    assert set(turns) == {"asyncio", "trio"}
    for per_turn, per_step in turns.values():
        assert float(per_turn) > 0
        assert float(per_step) == pytest.approx(float(per_turn) / 100, abs=0.1)
    less = {line[:26].strip(): line[26:].split() for line in lines[11:]}
    assert set(less) == {"asyncio less its turns", "trio less its turns"}
    for backend in ("asyncio", "trio"):
        rate, ns, ratio = less[f"{backend} less its turns"]
        assert int(ns) <= int(rows[f"futoin_anyio {backend}"][1]) and ratio == "n/a"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_seq_ceiling_times_a_turn_of_the_event_loop(backend: str) -> None:
    from benchmarks import seq_ceiling

    assert 0 < seq_ceiling.loop_turn(backend, 200) < 0.01  # seconds per turn
