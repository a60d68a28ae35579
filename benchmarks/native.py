"""The AnyIO-native tier (issue 11): ``await asi.promise()`` in a task against plain AnyIO.

From the repository root::

    python -m benchmarks.native                    # full sizes, both backends, 3 rounds
    python -m benchmarks.native --quick            # small N, one round (a few seconds)
    python -m benchmarks.native --backend trio --rounds 5 --only tasks,async_tasks
    python -m benchmarks.native --gc-off          # the same with the cyclic collector off

Rows (``_native.py``): (a) ``async_loop``, (b) ``async_tasks``, (c) ``tasks``,
(d) ``mutex_tasks``, (e) ``blocked_mem``. Each measurement runs in a fresh subprocess;
a round measures every side of a row once, in an order that rotates from round to round,
and each cell keeps its best round, so that a slow spell of a shared machine hits both
sides alike. Prints a Markdown table (row x backend: ours, plain, ratio, target, PASS/FAIL).

Exit status 1 when a side computed a wrong result (its figure is not posted), else 0:
targets are reported, not enforced here (``benchmarks.run`` enforces them in full mode).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/native.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from benchmarks._common import Measurement, fmt_value
from benchmarks._native import ROWS, SIDES, SIZES, TARGETS, TITLES, UNITS, VARIANTS

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ("asyncio", "trio")
SUBPROCESS_TIMEOUT = 600.0


def is_memory(row: str) -> bool:
    """Whether *row* measures bytes (lower is better; target is a difference, not a ratio)."""
    return UNITS[row] == "B/root"


# --------------------------------------------------------------------------- measuring


def measure(row: str, side: str, backend: str, n: int) -> dict[str, Any]:
    """Run one side of one row in this process; return a record (``value`` or ``error``)."""
    record: dict[str, Any] = {"row": row, "side": side, "backend": backend, "n": n}
    try:
        m: Measurement = anyio.run(SIDES[row][side], n, backend=backend)
    except Exception as e:
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc()
        return record
    record["value"] = m.value
    record["seconds"] = m.seconds
    return record


def _worker(config: dict[str, Any]) -> int:
    """Subprocess entry: measure ``config["rows"]`` ({row: n}) of one side on one backend.

    Each row first runs once at its tiny size, unmeasured, so that one-time costs (lazy
    imports, first-use caches) are not counted against either side.
    """
    status = 0
    if config.get("gc_off"):
        gc.disable()  # --gc-off: what the rows cost without the cyclic collector's passes
    for row, n in config["rows"].items():
        warm = measure(row, config["side"], config["backend"], SIZES["tiny"][row])
        record = warm if "error" in warm else measure(row, config["side"], config["backend"], n)
        record["n"] = n
        record["collector"] = gc.isenabled()
        if "error" in record:
            status = 1
            print(record.pop("traceback"), file=sys.stderr)
        print(json.dumps(record), flush=True)
    return status


def _python_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def spawn(side: str, backend: str, rows: dict[str, int],
          gc_off: bool = False) -> list[dict[str, Any]]:
    """Measure *rows* of *side* on *backend* in a fresh subprocess; one record per row
    (``gc_off``: with the cyclic collector disabled there)."""
    config = {"side": side, "backend": backend, "rows": rows, "gc_off": gc_off}
    cmd = [sys.executable, "-m", "benchmarks.native", "--worker", json.dumps(config)]
    failure = ""
    records: list[dict[str, Any]] = []
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO,
            env=_python_env(),
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        failure = f"timed out after {SUBPROCESS_TIMEOUT:.0f} s"
    else:
        records = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        if proc.stderr.strip():
            sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            failure = tail[0]
    got = {r["row"] for r in records}
    for row, n in rows.items():
        if row not in got:  # the worker died before reporting it
            records.append(
                {"row": row, "side": side, "backend": backend, "n": n,
                 "error": failure or "no result reported"}
            )
    return records


def collect(
    mode: str, backends: list[str], rows: list[str], rounds: int, isolate: bool,
    gc_off: bool = False,
) -> list[dict[str, Any]]:
    """Measure every side of *rows* on *backends*: ``rounds`` rounds, sides rotating.

    With *isolate* each measurement has its own process; without (quick mode) one process
    per side and backend measures all the rows of a round. ``gc_off``: the cyclic collector
    disabled in each.
    """
    records: list[dict[str, Any]] = []
    sizes = SIZES[mode]
    for round_ in range(max(rounds, 1)):
        for backend in backends:
            if isolate:
                for row in rows:
                    sides = list(SIDES[row])
                    k = round_ % len(sides)
                    for side in sides[k:] + sides[:k]:
                        print(f"  native {row} {backend} {side}", file=sys.stderr, flush=True)
                        records += spawn(side, backend, {row: sizes[row]}, gc_off)
            else:
                sides = list(dict.fromkeys(s for row in rows for s in SIDES[row]))
                k = round_ % len(sides)
                for side in sides[k:] + sides[:k]:
                    group = {row: sizes[row] for row in rows if side in SIDES[row]}
                    print(f"  native {backend} {side}", file=sys.stderr, flush=True)
                    records += spawn(side, backend, group, gc_off)
    return records


# --------------------------------------------------------------------------- analysis


def _best(records: list[dict[str, Any]], row: str) -> dict[str, Any]:
    """A cell from its rounds: a failure wins, then the best figure."""
    if not records:
        return {"status": "n/a", "reason": "not run"}
    for r in records:
        if "error" in r:
            return {"status": "failed", "reason": r["error"]}
    pick = min if is_memory(row) else max
    best = pick(records, key=lambda r: r["value"])
    return {"status": "ok", "value": best["value"], "seconds": best.get("seconds", 0.0)}


def _compare(row: str, ours: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Ratio (throughput) or difference (memory) of *ours* to *other*, with the target."""
    result: dict[str, Any] = {"ratio": None, "delta": None, "status": "n/a"}
    if ours["status"] == "failed" or other["status"] == "failed":
        result["status"] = "FAILED"
        return result
    if ours["status"] != "ok" or other["status"] != "ok" or not other["value"]:
        return result
    result["ratio"] = ours["value"] / other["value"]
    if is_memory(row):
        result["delta"] = ours["value"] - other["value"]
        passed = result["delta"] <= TARGETS[row]
    else:
        passed = result["ratio"] >= TARGETS[row]
    result["status"] = "PASS" if passed else "FAIL"
    return result


def build_rows(
    records: list[dict[str, Any]], backends: list[str], rows: list[str]
) -> list[dict[str, Any]]:
    """One table row per (row, backend); a row with a side of :data:`VARIANTS` also gets,
    under ``variants``, ours against that side (``ratio``) and that side against plain
    (``of_plain``)."""
    table = []
    for row in rows:
        for backend in backends:
            cells = {
                side: _best(
                    [r for r in records if (r["row"], r["side"], r["backend"]) == (row, side,
                                                                                    backend)],
                    row,
                )
                for side in SIDES[row]
            }
            n = next((r["n"] for r in records if r["row"] == row), SIZES["full"][row])
            entry: dict[str, Any] = {
                "id": row,
                "title": TITLES[row],
                "backend": backend,
                "n": n,
                "unit": UNITS[row],
                "lower_is_better": is_memory(row),
                "target": TARGETS[row],
                "cells": cells,
                **_compare(row, cells["ours"], cells["plain"]),
            }
            variants = {}
            for side in VARIANTS:
                if side in cells:
                    variants[side] = {
                        "ratio": _compare(row, cells["ours"], cells[side])["ratio"],
                        "of_plain": _compare(row, cells[side], cells["plain"])["ratio"],
                    }
            if variants:
                entry["variants"] = variants
            table.append(entry)
    return table


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The native targets as records for ``benchmarks.run``'s target list."""
    out = []
    for r in rows:
        memory = r["lower_is_better"]
        out.append(
            {
                "target": f"native {r['id']} {r['backend']}: "
                + ("ours - plain bytes per root" if memory else "ours/plain throughput"),
                "value": r["delta"] if memory else r["ratio"],
                "bound": r["target"],
                "op": "<=" if memory else ">=",
                "status": r["status"] if r["status"] in ("PASS", "FAIL") else "n/a",
                "reason": "",
            }
        )
    return out


# --------------------------------------------------------------------------- output


def _fmt(value: float, unit: str) -> str:
    return fmt_value(value, unit) + (" B" if unit == "B/root" else "/s")


def _fmt_cell(cell: dict[str, Any], unit: str) -> str:
    if cell["status"] == "ok":
        return _fmt(cell["value"], unit)
    reason = str(cell["reason"]).replace("|", "/").replace("\n", " ")
    reason = reason if len(reason) <= 60 else reason[:57] + "..."
    return f"{'FAILED' if cell['status'] == 'failed' else 'n/a'}: {reason}"


def render_markdown(rows: list[dict[str, Any]]) -> str:
    """The tier's table: one line per row and backend, then the variant sides."""
    lines = [
        "| row | N | backend | ours | plain AnyIO | ours vs plain | target | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours, plain = r["cells"]["ours"], r["cells"]["plain"]
        if r["lower_is_better"]:
            versus = "n/a" if r["delta"] is None else f"{r['delta']:+,.0f} B"
            target = f"<= plain + {r['target']:,.0f} B"
        else:
            versus = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}x"
            target = f">= {r['target']:g}x"
        lines.append(
            f"| {r['title']} | {r['n']:,} | {r['backend']} | {_fmt_cell(ours, r['unit'])}"
            f" | {_fmt_cell(plain, r['unit'])} | {versus} | {target} | {r['status']} |"
        )
    variants = [r for r in rows if r.get("variants")]
    if variants:
        lines += [
            "",
            "For information (the targets are against the plain tasks above): (c) against plain"
            " tasks that also checkpoint once each; (b) and (d) against plain tasks whose"
            " `async def` part runs in a cancel scope, the one the contract puts around an"
            " `async def` step (its own ratio to plain is the most any implementation"
            " honouring that scope could reach):",
            "",
            "| row | N | backend | ours | other side | its figure | ours vs it | it vs plain |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in variants:
            for side, figures in r["variants"].items():
                lines.append(
                    f"| {r['title']} | {r['n']:,} | {r['backend']}"
                    f" | {_fmt_cell(r['cells']['ours'], r['unit'])} | {VARIANTS[side]}"
                    f" | {_fmt_cell(r['cells'][side], r['unit'])} | {_ratio(figures['ratio'])}"
                    f" | {_ratio(figures['of_plain'])} |"
                )
    return "\n".join(lines) + "\n"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def run_tier(
    mode: str, backends: list[str], rows: list[str], rounds: int, gc_off: bool = False
) -> dict[str, Any]:
    """Measure and analyse the tier; the JSON-ready result (``rows``, ``targets``, sizes).
    ``gc_off``: every side with the cyclic collector disabled (a diagnostic: the targets are
    for the collector on)."""
    records = collect(mode, backends, rows, rounds, isolate=(mode == "full"), gc_off=gc_off)
    table = build_rows(records, backends, rows)
    return {
        "mode": mode,
        "rounds": rounds,
        "sizes": {row: SIZES[mode][row] for row in rows},
        "rows": table,
        "targets": targets(table),
    }


def failures(tier: dict[str, Any]) -> list[str]:
    """``row backend side: reason`` for every cell that failed to verify."""
    return [
        f"native {r['id']} {r['backend']} {side}: {cell['reason']}"
        for r in tier["rows"]
        for side, cell in r["cells"].items()
        if cell["status"] == "failed"
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return _worker(json.loads(argv[1]))
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.native",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small N (a few seconds)")
    parser.add_argument("--backend", choices=BACKENDS, help="one backend (default: both)")
    parser.add_argument("--rounds", type=int, help="rounds, best kept (default 3; quick: 1)")
    parser.add_argument("--only", help=f"comma-separated rows (default: {','.join(ROWS)})")
    parser.add_argument("--json", help="also write the result as JSON to this file")
    parser.add_argument("--gc-off", action="store_true",
                        help="disable the cyclic collector in every side's process (what its "
                             "passes cost each side: a diagnostic, the targets are for it on)")
    args = parser.parse_args(argv)

    rows = args.only.split(",") if args.only else list(ROWS)
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))} (rows: {', '.join(ROWS)})")
    backends = [args.backend] if args.backend else list(BACKENDS)
    mode = "quick" if args.quick else "full"
    rounds = args.rounds or (1 if args.quick else 3)
    tier = run_tier(mode, backends, rows, rounds, gc_off=args.gc_off)
    import futoin_anyio

    engine = "compiled" if futoin_anyio.COMPILED else "pure"
    collector = ", cyclic collector off" if args.gc_off else ""
    print(f"## AnyIO-native path ({mode} mode, best of {rounds} round(s), {engine} engine"
          f"{collector})\n")
    print(render_markdown(tier["rows"]))
    if args.json:
        Path(args.json).write_text(json.dumps(tier, indent=1) + "\n")
    failed = failures(tier)
    if failed:
        print("VERIFICATION FAILED (figures not posted):", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
