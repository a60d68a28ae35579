"""Run every benchmark scenario on every implementation, check targets, write the results.

From the repository root::

    python -m benchmarks.run --quick          # small N, well under a minute
    python -m benchmarks.run --out results/   # full run (a few minutes)

Two tiers. ``ftn12``: the FTN12 scenarios below. ``native``: the AnyIO-native path of
``benchmarks.native`` (a task per request awaiting ``promise()``, against the same work
hand-written in AnyIO, per backend; see that module). ``--tiers native`` measures that tier
only and keeps the FTN12 figures of an existing ``<out>/results.json``.

Implementations (columns): futoin_anyio on asyncio and on trio, the JS reference
``futoin-asyncsteps`` (npm-installed into a temporary folder, run with node), and
the same work hand-written in plain AnyIO on both backends. Each implementation/backend
runs in its own subprocess. In full mode every scenario runs in rounds, one process per
column per round, columns interleaved, and each cell keeps its best round: the machine's
slow spells then hit every column alike. Writes ``<out>/results.md`` and
``<out>/results.json``.

Exit status: 1 if any scenario computed a wrong result (its figure is not posted);
in full mode, 2 if a target fails. Quick mode reports targets without failing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/run.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import gateway, native
from benchmarks._common import SCENARIOS, SIZES, UNITS, fmt_value, lower_is_better
from benchmarks._native import ROWS as NATIVE_ROWS

REPO = Path(__file__).resolve().parent.parent
JS_DIR = Path(__file__).resolve().parent / "js"
PY_COLUMNS = ("futoin_asyncio", "futoin_trio", "plain_asyncio", "plain_trio")
TIERS = ("ftn12", "native", "gateway")
#: The tiers run by default; ``gateway`` (a few minutes in full mode) on request.
DEFAULT_TIERS = ("ftn12", "native")
COLUMNS = ("futoin_asyncio", "futoin_trio", "js", "plain_asyncio", "plain_trio")
FUTOIN = ("futoin_asyncio", "futoin_trio")
PLAIN = ("plain_asyncio", "plain_trio")
TITLES = {
    "futoin_asyncio": "futoin_anyio asyncio",
    "futoin_trio": "futoin_anyio trio",
    "js": "JS futoin-asyncsteps",
    "plain_asyncio": "plain AnyIO asyncio",
    "plain_trio": "plain AnyIO trio",
}
#: Minimum throughput of the best futoin backend relative to the JS reference.
JS_TARGET = {"seq": 0.3}
JS_TARGET_DEFAULT = 0.5
CHAIN_FLAT_TARGET = 0.8
MEM_TARGET = 2048.0
PLAIN_TARGETS = ("instances", "parallel", "mutex")
SUBPROCESS_TIMEOUT = 900.0
#: Runs per process in a full-mode round (the best counts). V8 needs two runs to compile the
#: reference's hot paths: its mutex figure doubles from the first run to the third.
WARM_RUNS = 3


# --------------------------------------------------------------------------- running


def _run_lines(cmd: list[str], env: dict[str, str] | None, cwd: Path) -> tuple[list[Any], str]:
    """Run *cmd*, return its JSON stdout lines and a failure message ("" when it exited 0)."""
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return [], f"timed out after {SUBPROCESS_TIMEOUT:.0f} s"
    records = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    if proc.stderr.strip():
        sys.stderr.write(proc.stderr)
    failure = ""
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        failure = tail[0]
    return records, failure


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_python(
    column: str, plan: dict[str, list[int]], repeat: int, budget: float, isolate: bool
) -> list[dict[str, Any]]:
    """Run *plan* for one Python column in subprocesses (one per scenario if *isolate*)."""
    impl, backend = column.split("_", 1)
    groups = [{s: sizes} for s, sizes in plan.items()] if isolate else [plan]
    out: list[dict[str, Any]] = []
    for group in groups:
        config = {
            "impl": impl,
            "backend": backend,
            "scenarios": group,
            "repeat": repeat,
            "budget": budget,
        }
        print(f"  {column}: {', '.join(group)}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "benchmarks._worker", json.dumps(config)]
        records, failure = _run_lines(cmd, _python_env(), REPO)
        got = {(r["scenario"], r["n"]) for r in records}
        for scenario, sizes in group.items():
            for n in sizes:
                if (scenario, n) not in got:  # the worker died before reporting it
                    records.append(
                        {"scenario": scenario, "n": n, "error": failure or "no result reported"}
                    )
        out.extend(records)
    return out


def install_js(js_dir: str | None) -> tuple[Path | None, str, str]:
    """Return (node_modules folder, futoin-asyncsteps version, n/a reason)."""
    node = shutil.which("node")
    if node is None:
        return None, "", "node not found"
    if js_dir:
        modules = Path(js_dir).resolve()
        if modules.name != "node_modules":
            modules = modules / "node_modules"
    else:
        npm = shutil.which("npm")
        if npm is None:
            return None, "", "npm not found"
        tmp = Path(tempfile.mkdtemp(prefix="futoin-bench-js-"))
        shutil.copy(JS_DIR / "package.json", tmp / "package.json")
        print(f"  npm install futoin-asyncsteps into {tmp}", file=sys.stderr, flush=True)
        try:
            proc = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--no-package-lock", "--silent"],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            return None, "", "npm install timed out"
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines() or ["?"]
            return None, "", f"npm install failed: {lines[-1]}"
        modules = tmp / "node_modules"
    package = modules / "futoin-asyncsteps" / "package.json"
    if not package.exists():
        return None, "", f"futoin-asyncsteps not installed in {modules}"
    version = json.loads(package.read_text())["version"]
    return modules, version, ""


def run_js(
    modules: Path,
    plan: dict[str, list[int]],
    repeat: int,
    budget: float,
    isolate: bool,
    production: bool,
) -> list[dict[str, Any]]:
    node = shutil.which("node")
    assert node is not None
    env = dict(os.environ)
    env["NODE_PATH"] = str(modules)
    env.pop("NODE_ENV", None)
    if production:
        env["NODE_ENV"] = "production"
    groups = [{s: sizes} for s, sizes in plan.items()] if isolate else [plan]
    out: list[dict[str, Any]] = []
    for group in groups:
        print(f"  js: {', '.join(group)}", file=sys.stderr, flush=True)
        config = {
            "scenarios": {s: {"sizes": sizes} for s, sizes in group.items()},
            "repeat": repeat,
            "budget": budget,
        }
        cmd = [node, "--expose-gc", str(JS_DIR / "bench.js"), json.dumps(config)]
        records, failure = _run_lines(cmd, env, JS_DIR)
        got = {(r["scenario"], r["n"]) for r in records}
        for scenario, sizes in group.items():
            for n in sizes:
                if (scenario, n) not in got:
                    records.append(
                        {"scenario": scenario, "n": n, "error": failure or "no result reported"}
                    )
        out.extend(records)
    return out


# --------------------------------------------------------------------------- analysis


def _cell(record: dict[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {"status": "n/a", "reason": "not run (not selected with --columns)"}
    if "error" in record:
        return {"status": "failed", "reason": record["error"]}
    if "na" in record:
        return {"status": "n/a", "reason": record["na"]}
    return {"status": "ok", "value": record["value"], "seconds": record.get("seconds", 0.0)}


def _best(row: dict[str, Any], columns: tuple[str, ...]) -> tuple[str, float] | None:
    values = [(c, row["cells"][c]["value"]) for c in columns if row["cells"][c]["status"] == "ok"]
    if not values:
        return None
    pick = min if lower_is_better(row["scenario"]) else max
    return pick(values, key=lambda cv: cv[1])


def _pick(records: list[dict[str, Any]], scenario: str) -> dict[str, Any] | None:
    """The record of a cell measured in several rounds: a failure wins, then the best figure."""
    if not records:
        return None
    for record in records:
        if "error" in record:
            return record
    measured = [r for r in records if "value" in r]
    if not measured:
        return records[-1]
    pick = min if lower_is_better(scenario) else max
    return pick(measured, key=lambda r: r["value"])


def build_rows(records: dict[str, list[dict[str, Any]]], plan: dict[str, list[int]]) -> list[Any]:
    rows = []
    for scenario in SCENARIOS:
        for n in plan.get(scenario, []):
            cells = {}
            for column in COLUMNS:
                match = [
                    r for r in records.get(column, []) if (r["scenario"], r["n"]) == (scenario, n)
                ]
                cells[column] = _cell(_pick(match, scenario))
            row: dict[str, Any] = {
                "id": scenario if len(plan[scenario]) == 1 else f"{scenario}-{n}",
                "scenario": scenario,
                "n": n,
                "unit": UNITS[scenario],
                "lower_is_better": lower_is_better(scenario),
                "cells": cells,
            }
            best = _best(row, FUTOIN)
            row["best_futoin"] = best[0] if best else None
            for name, columns in (("js", ("js",)), ("plain", PLAIN)):
                other = _best(row, columns)
                row[f"ratio_{name}"] = best[1] / other[1] if best and other and other[1] else None
            rows.append(row)
    return rows


def _chain_flatness(rows: list[Any], column: str) -> float | None:
    chain = [r for r in rows if r["scenario"] == "chain"]
    if len(chain) < 2:
        return None
    small, large = chain[0]["cells"][column], chain[-1]["cells"][column]
    if small["status"] != "ok" or large["status"] != "ok" or not small["value"]:
        return None
    return float(large["value"] / small["value"])


def check_targets(rows: list[Any]) -> list[dict[str, Any]]:
    """Evaluate the issue's targets (best futoin backend) as PASS / FAIL / n/a."""
    targets: list[dict[str, Any]] = []

    def add(name: str, got: float | None, want: float, ge: bool, reason: str = "") -> None:
        if got is None:
            status = "n/a"
        else:
            status = "PASS" if (got >= want if ge else got <= want) else "FAIL"
        targets.append(
            {
                "target": name,
                "value": got,
                "bound": want,
                "op": ">=" if ge else "<=",
                "status": status,
                "reason": reason,
            }
        )

    for row in rows:
        scenario = row["scenario"]
        if scenario == "c_steps":
            continue
        label = row["id"]
        if row["lower_is_better"]:
            add(f"{label}: futoin/JS bytes per root", row["ratio_js"], 2.0, False)
        else:
            add(
                f"{label}: futoin/JS throughput",
                row["ratio_js"],
                JS_TARGET.get(scenario, JS_TARGET_DEFAULT),
                True,
            )
        if scenario in PLAIN_TARGETS:
            add(f"{label}: futoin/plain-AnyIO throughput", row["ratio_plain"], 1.0, True)
        if scenario == "waiting_mem":
            best = _best(row, FUTOIN)
            add(f"{label}: bytes per waiting root", best[1] if best else None, MEM_TARGET, False)
    chain = [r for r in rows if r["scenario"] == "chain"]
    if len(chain) >= 2:
        # Flatness is a ratio of one backend's two figures (the best backend's): the best
        # figures of the two sizes may come from different backends, whose speeds differ.
        per_backend = [f for f in (_chain_flatness(rows, c) for c in FUTOIN) if f is not None]
        flat = max(per_backend) if per_backend else None
        add(
            f"chain {chain[-1]['n']} / chain {chain[0]['n']} steps/s", flat, CHAIN_FLAT_TARGET, True
        )
    return targets


# --------------------------------------------------------------------------- output


#: A reason longer than this is cut in the table; :func:`reasons` gives it in full.
CELL_REASON = 60


def _one_line(reason: Any) -> str:
    return " ".join(str(reason).replace("|", "/").split())


def fmt_cell(cell: dict[str, Any], unit: str) -> str:
    if cell["status"] == "ok":
        return fmt_value(cell["value"], unit)
    reason = _one_line(cell["reason"])
    if len(reason) > CELL_REASON:
        reason = reason[: CELL_REASON - 15] + "... (see below)"
    return f"{'FAILED' if cell['status'] == 'failed' else 'n/a'}: {reason}"


def reasons(rows: list[Any], status: str) -> list[str]:
    """Every reason, in full, of the cells of *rows* with *status* (``"n/a"``, ``"failed"``).

    One line per reason and set of rows, naming the rows and the columns it covers
    (``every scenario`` for a whole column), in the table's order, e.g.::

        c_steps on futoin_anyio asyncio, futoin_anyio trio: binary bridge: ... needs
        setuptools, ...: pip install 'futoin_anyio[c]'
    """
    by_reason: dict[str, dict[str, list[str]]] = {}  # reason -> column -> row ids
    for row in rows:
        for column in COLUMNS:
            cell = row["cells"][column]
            if cell["status"] == status:
                reason = _one_line(cell["reason"])
                by_reason.setdefault(reason, {}).setdefault(column, []).append(row["id"])
    all_ids = [row["id"] for row in rows]
    lines = []
    for reason, columns in by_reason.items():
        by_ids: dict[tuple[str, ...], list[str]] = {}  # row ids -> columns
        for column, ids in columns.items():
            by_ids.setdefault(tuple(ids), []).append(TITLES[column])
        for cells, titles in by_ids.items():
            every = len(all_ids) > 1 and list(cells) == all_ids
            what = "every scenario" if every else ", ".join(cells)
            lines.append(f"{what} on {', '.join(titles)}: {reason}")
    return lines


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def render_markdown(result: dict[str, Any]) -> str:
    rows, meta = result["rows"], result["meta"]
    head = ["scenario", "N", "unit", *(TITLES[c] for c in COLUMNS), "futoin/JS", "futoin/plain"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [fmt_cell(row["cells"][c], row["unit"]) for c in COLUMNS]
        lines.append(
            "| "
            + " | ".join(
                [
                    row["id"],
                    f"{row['n']:,}",
                    row["unit"],
                    *cells,
                    fmt_ratio(row["ratio_js"]),
                    fmt_ratio(row["ratio_plain"]),
                ]
            )
            + " |"
        )
    flat = result["chain_flatness"]
    if any(v is not None for v in flat.values()):
        cells = [fmt_ratio(flat[c]) for c in COLUMNS]
        lines.append("| chain flatness (large/small) | | ratio | " + " | ".join(cells) + " | | |")
    for title, status, intro in (
        ("Skipped", "n/a", "Cells shown as n/a, with the reason in full:"),
        ("Failed", "failed", "Cells that failed to verify (their figures are not posted):"),
    ):
        listed = reasons(rows, status)
        if listed:
            lines += ["", f"## {title}", "", intro, "", *(f"- {line}" for line in listed)]
    out = [
        f"# futoin_anyio benchmarks ({meta['mode']} mode)",
        "",
        f"{meta['date']} · {meta['cpu']} · Python {meta['python']}"
        f" · {meta.get('engine', 'pure')} engine · anyio {meta['anyio']}"
        f" · trio {meta['trio']} · node {meta['node'] or 'n/a'}"
        f" · futoin-asyncsteps {meta['futoin_asyncsteps'] or 'n/a'} · commit {meta['commit']}",
        "",
        "Throughput (higher is better) except `waiting_mem` (bytes per waiting root, lower is"
        " better). Best of up to"
        f" {meta['repeat']} runs (in full mode: rounds with the columns interleaved)."
        " Ratios use the best futoin_anyio backend against the JS"
        " reference and against the best plain-AnyIO backend; for `waiting_mem` they are"
        " ratios of bytes.",
        "",
        *lines,
        "",
        "## Targets",
        "",
        "| target | value | bound | status |",
        "|---|---|---|---|",
    ]
    for t in result["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.3g}"
        out.append(f"| {t['target']} | {value} | {t['op']} {t['bound']:g} | {t['status']} |")
    tier = result.get("native")
    if tier:
        out += ["", *render_native(tier).splitlines()]
    tier = result.get("gateway")
    if tier:
        out += ["", *render_gateway(tier).splitlines()]
    return "\n".join(out) + "\n"


def render_gateway(tier: dict[str, Any]) -> str:
    """The gateway tier's section of ``results.md``."""
    lines = [
        f"## Gateway ({tier['mode']} mode)",
        "",
        f"{tier.get('date', '?')} · commit {tier.get('commit', '?')} · {tier['clients']}"
        f" closed-loop clients, {tier['requests']:,} requests per phase, median of"
        f" {tier['rounds']} round(s), the sides' order rotating. CPU of the front process"
        " (`time.process_time()`) per request of a JSON-lines gateway on loopback: admission,"
        " a 200 ms deadline, two backends in parallel, one retry, cancellation at hang-up;"
        " plain Trio/AnyIO against futoin_anyio (`benchmarks/gateway.py`).",
        "",
    ]
    if tier["rows"]:
        lines.append(gateway.render(tier["rows"]))
    for failure in tier["failed"]:
        lines += ["", f"FAILED: {failure}"]
    return "\n".join(lines)


def render_native(tier: dict[str, Any]) -> str:
    """The AnyIO-native tier's section of ``results.md``."""
    return "\n".join(
        [
            f"## AnyIO-native path ({tier['mode']} mode)",
            "",
            f"{tier.get('date', '?')} · commit {tier.get('commit', '?')} · best of"
            f" {tier['rounds']} round(s), each side of a row in a fresh process per round, the"
            " sides' order rotating. A task per request awaiting `promise()` (ours) against"
            " the same work hand-written in AnyIO (plain), on the same backend; the status is"
            " each backend's against the target (`benchmarks/native.py`).",
            "",
            native.render_markdown(tier["rows"]),
        ]
    )


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "?"


def _engine() -> str:
    """The futoin_anyio build the columns run: ``compiled`` or ``pure`` (``COMPILED``)."""
    import futoin_anyio

    return "compiled" if futoin_anyio.COMPILED else "pure"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} x{os.cpu_count()}"


def _commit() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "futoin_anyio"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return (rev or "?") + ("+dirty" if dirty else "")
    except OSError:
        return "?"


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small N, one run each")
    parser.add_argument(
        "--out",
        default=str(REPO / "benchmarks" / "results"),
        help="folder for results.md and results.json (default: %(default)s)",
    )
    parser.add_argument("--only", help="comma-separated scenarios to run (default: all)")
    parser.add_argument(
        "--columns",
        default=",".join(COLUMNS),
        help="comma-separated implementations (default: %(default)s)",
    )
    parser.add_argument(
        "--repeat", type=int, help="full mode: R rounds (default 3); quick: best of R runs (1)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=5.0,
        help="stop repeating a scenario after this many seconds (default: 5)",
    )
    parser.add_argument("--js-dir", help="use this node_modules folder instead of npm install")
    parser.add_argument(
        "--js-production",
        action="store_true",
        help="run the JS reference with NODE_ENV=production (no sanity checks)",
    )
    parser.add_argument(
        "--tiers",
        default=",".join(DEFAULT_TIERS),
        help=f"comma-separated tiers among {', '.join(TIERS)} (default: %(default)s); the"
        " figures of a tier not run are kept from <out>/results.json",
    )
    args = parser.parse_args(argv)

    mode = "quick" if args.quick else "full"
    repeat = args.repeat or (1 if args.quick else 3)
    only = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    columns = args.columns.split(",")
    plan = {s: SIZES[mode][s] for s in SCENARIOS if s in only}
    tiers = args.tiers.split(",")
    if set(tiers) - set(TIERS) or not tiers:
        parser.error(f"--tiers: choose among {', '.join(TIERS)}")
    out = Path(args.out)
    previous = out / "results.json"
    if "ftn12" not in tiers and not previous.exists():
        parser.error(f"--tiers without ftn12 keeps the FTN12 figures of {previous}: not found")

    if "ftn12" in tiers:
        result = measure_ftn12(args, mode, repeat, plan, columns)
    else:
        result = json.loads(previous.read_text())
        for tier_name in ("native", "gateway"):
            if tier_name in tiers:
                result.pop(tier_name, None)
    # The native tier runs on the backends of the selected Python columns (none: not run).
    backends = [b for b in native.BACKENDS if any(c.endswith(f"_{b}") for c in columns)]
    if not backends:
        tiers = [t for t in tiers if t != "native"]
    if "native" in tiers:
        tier = native.run_tier(mode, backends, list(NATIVE_ROWS), repeat)
        tier["date"] = _now()
        tier["commit"] = _commit()
        result["native"] = tier

    if "gateway" in tiers:
        gateway_backends = [b for b in gateway.BACKENDS if any(c.endswith(f"_{b}")
                                                               for c in columns)]
        tier = gateway.run_tier(mode, gateway_backends, args.repeat)
        tier["date"] = _now()
        tier["commit"] = _commit()
        result["gateway"] = tier
    elif "ftn12" in tiers and previous.exists():
        kept = json.loads(previous.read_text()).get("gateway")
        if kept:
            result["gateway"] = kept

    out.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(result)
    (out / "results.md").write_text(markdown)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print(markdown)
    print(f"written: {out / 'results.md'}, {out / 'results.json'}")

    failed = [
        f"{row['id']} / {c}: {row['cells'][c]['reason']}"
        for row in (result["rows"] if "ftn12" in tiers else [])
        for c in COLUMNS
        if row["cells"][c]["status"] == "failed"
    ]
    targets = list(result["targets"]) if "ftn12" in tiers else []
    if "native" in tiers:
        failed += native.failures(result["native"])
        targets += result["native"]["targets"]
    if "gateway" in tiers:
        failed += result["gateway"]["failed"]
        targets += result["gateway"]["targets"]
    if failed:
        print("\nVERIFICATION FAILED (figures not posted):", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return 1
    if mode == "full" and any(t["status"] == "FAIL" for t in targets):
        print("\nsome targets FAIL (see the tables above)", file=sys.stderr)
        return 2
    return 0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def measure_ftn12(
    args: argparse.Namespace, mode: str, repeat: int, plan: dict[str, list[int]],
    columns: list[str],
) -> dict[str, Any]:
    """Run the FTN12 tier: every scenario of *plan* on every selected column."""
    isolate = mode == "full"
    js_version = ""
    node_version = ""
    modules: Path | None = None
    records: dict[str, list[dict[str, Any]]] = {c: [] for c in COLUMNS if c in columns}
    if "js" in columns:
        modules, js_version, reason = install_js(args.js_dir)
        node = shutil.which("node")
        if node:
            node_version = subprocess.run(
                [node, "--version"], capture_output=True, text=True
            ).stdout.strip()
        if modules is None:
            records["js"] = [
                {"scenario": s, "n": n, "na": reason} for s, sizes in plan.items() for n in sizes
            ]

    def run_column(column: str, group: dict[str, list[int]], times: int) -> None:
        if column == "js":
            if modules is not None:
                records[column] += run_js(modules, group, times, args.budget, isolate,
                                          args.js_production)
        else:
            records[column] += run_python(column, group, times, args.budget, isolate)

    selected = [c for c in COLUMNS if c in columns]
    if isolate:
        # Full mode: each scenario runs in rounds, every column once per round (in a rotating
        # order), so that a slow spell of a shared machine hits all columns alike rather than
        # one. Each process runs the scenario WARM_RUNS times, as a long-lived process would
        # have warmed up; each cell keeps its best run.
        for scenario, sizes in plan.items():
            for round_ in range(repeat):
                k = round_ % len(selected)
                for column in selected[k:] + selected[:k]:
                    run_column(column, {scenario: sizes}, WARM_RUNS)
    else:
        for column in selected:
            run_column(column, plan, repeat)

    rows = build_rows(records, plan)
    result: dict[str, Any] = {
        "meta": {
            "mode": mode,
            "date": _now(),
            "python": platform.python_version(),
            "engine": _engine(),
            "anyio": _version("anyio"),
            "trio": _version("trio"),
            "node": node_version,
            "futoin_asyncsteps": js_version,
            "js_mode": "production" if args.js_production else "default",
            "cpu": _cpu(),
            "platform": platform.platform(),
            "commit": _commit(),
            "repeat": repeat,
            "sizes": plan,
        },
        "columns": list(COLUMNS),
        "titles": TITLES,
        "rows": rows,
        "chain_flatness": {c: _chain_flatness(rows, c) for c in COLUMNS},
    }
    result["targets"] = check_targets(rows)
    return result

if __name__ == "__main__":
    sys.exit(main())
