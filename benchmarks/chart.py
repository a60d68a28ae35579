"""Draw an SVG bar chart from ``results.json`` (hand-written SVG, no plotting library).

From the repository root::

    python -m benchmarks.chart                       # benchmarks/results/chart.svg
    python -m benchmarks.chart --json DIR/results.json --out DIR/chart.svg
    python -m benchmarks.chart --docs                # also copy results.md, results.json
                                                     # and chart.svg into docs/_static/bench/

One group of bars per scenario, one bar per implementation. Figures span several
orders of magnitude across scenarios, so each group is scaled to its own largest
figure; the number at the end of each bar is the measured figure. When the results
hold the AnyIO-native tier (``benchmarks.native``), a second part shows its rows: ours
and plain AnyIO per backend, with ours/plain (or the bytes over plain) after our bars; when
they hold the gateway tier (``benchmarks.gateway``), a third part shows the front's CPU per
request in each phase.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

if __package__ in (None, ""):  # ``python benchmarks/chart.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import fmt_value

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO / "benchmarks" / "results"
DOCS_DIR = REPO / "docs" / "_static" / "bench"
COLOURS = {
    "futoin_asyncio": "#2b6cb0",
    "futoin_trio": "#63a4e8",
    "js": "#d69e2e",
    "plain_asyncio": "#4a5568",
    "plain_trio": "#a0aec0",
}
#: The AnyIO-native tier's bars: (side, backend) -> colour, in drawing order.
NATIVE_BARS = {
    ("ours", "asyncio"): "#2b6cb0",
    ("plain", "asyncio"): "#4a5568",
    ("plain_cp", "asyncio"): "#718096",
    ("plain_scope", "asyncio"): "#718096",
    ("ours", "trio"): "#63a4e8",
    ("plain", "trio"): "#a0aec0",
    ("plain_cp", "trio"): "#cbd5e0",
    ("plain_scope", "trio"): "#cbd5e0",
}
NATIVE_TITLES = {
    "ours": "futoin_anyio",
    "plain": "plain AnyIO",
    "plain_cp": "plain + checkpoint (c)",
    "plain_scope": "plain + cancel scope (b, d)",
}
WIDTH = 860
LABEL_W = 170
BAR_H = 13
BAR_GAP = 3
GROUP_GAP = 16
VALUE_W = 190  # room right of the longest bar for its figure


def _legend(parts: list[str], y: int, items: list[tuple[str, str]]) -> int:
    """Draw (title, colour) legend items from *y*, wrapping; return the y below them."""
    x = LABEL_W
    for title, colour in items:
        item_w = 16 + 7 * len(title) + 18
        if x + item_w > WIDTH:  # wrap the legend
            x = LABEL_W
            y += 18
        parts.append(
            f'<rect x="{x}" y="{y - 11}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 16}" y="{y}" class="legend">{escape(title)}</text>'
        )
        x += item_w
    return y + 20


def _group(
    parts: list[str],
    y: int,
    label: str,
    unit: str,
    lower_is_better: bool,
    bars: list[tuple[str, str, dict[str, Any], str]],
) -> int:
    """Draw one group of bars (title, colour, cell, note after the figure); return next y."""
    bar_area = WIDTH - LABEL_W - VALUE_W - 20
    ok = [cell["value"] for _, _, cell, _ in bars if cell["status"] == "ok"]
    top = max(ok) if ok else 1.0
    group_h = len(bars) * (BAR_H + BAR_GAP)
    better = "lower is better" if lower_is_better else "higher is better"
    parts.append(
        f'<text x="{LABEL_W - 10}" y="{y + group_h / 2 - 4}" class="label">'
        f"{escape(label)}</text>"
        f'<text x="{LABEL_W - 10}" y="{y + group_h / 2 + 10}" class="unit">'
        f"{escape(unit)}, {better}</text>"
    )
    for i, (title, colour, cell, note) in enumerate(bars):
        by = y + i * (BAR_H + BAR_GAP)
        if cell["status"] == "ok":
            w = max(1.0, bar_area * cell["value"] / top)
            parts.append(
                f'<rect x="{LABEL_W}" y="{by}" width="{w:.1f}" height="{BAR_H}" '
                f'fill="{colour}"><title>{escape(title)}: '
                f"{cell['value']:.6g} {escape(unit)}</title></rect>"
                f'<text x="{LABEL_W + w + 5:.1f}" y="{by + BAR_H - 2}" class="value">'
                f"{escape(fmt_value(cell['value'], unit) + note)}</text>"
            )
        else:
            word = "failed" if cell["status"] == "failed" else "n/a"
            parts.append(
                f'<text x="{LABEL_W + 5}" y="{by + BAR_H - 2}" class="na">'
                f"{escape(title)}: {word}</text>"
            )
    return y + group_h + GROUP_GAP


def _native_part(parts: list[str], y: int, tier: dict[str, Any]) -> int:
    """The AnyIO-native tier: one group per row, ours and plain AnyIO per backend."""
    parts.append(
        f'<text x="10" y="{y + 4}" class="title">AnyIO-native path: a task per request'
        f" awaiting promise(), against plain AnyIO ({escape(tier['mode'])} mode)</text>"
    )
    y += 28
    legend: dict[str, list[str]] = {}  # colour -> titles: the variant sides share one
    for (side, backend), colour in NATIVE_BARS.items():
        legend.setdefault(colour, []).append(f"{NATIVE_TITLES[side]} {backend}")
    y = _legend(parts, y, [(" or ".join(titles), c) for c, titles in legend.items()])
    by_id: dict[str, list[dict[str, Any]]] = {}
    for row in tier["rows"]:
        by_id.setdefault(row["id"], []).append(row)
    for rows in by_id.values():
        bars = []
        for (side, backend), colour in NATIVE_BARS.items():
            for row in rows:
                if row["backend"] != backend or side not in row["cells"]:
                    continue
                note = ""
                if side == "ours" and row["lower_is_better"] and row["delta"] is not None:
                    note = f"  ({row['delta']:+,.0f} B vs plain: {row['status']})"
                elif side == "ours" and row["ratio"] is not None:
                    note = f"  ({row['ratio']:.2f}x plain: {row['status']})"
                title = f"{NATIVE_TITLES[side]} {backend}"
                bars.append((title, colour, row["cells"][side], note))
        first = rows[0]
        label = first["title"].split(" ", 1)[0] + f" {first['id']}"
        y = _group(parts, y, label, first["unit"], first["lower_is_better"], bars)
    return y


#: The gateway tier's bars: (side, backend) -> colour, in drawing order.
GATEWAY_BARS = {
    ("futoin", "asyncio"): "#2b6cb0",
    ("plain", "asyncio"): "#4a5568",
    ("futoin", "trio"): "#63a4e8",
    ("plain", "trio"): "#a0aec0",
}
GATEWAY_TITLES = {"futoin": "futoin_anyio", "plain": "plain Trio/AnyIO"}


def _gateway_part(parts: list[str], y: int, tier: dict[str, Any]) -> int:
    """The gateway tier: one group per phase, the front's CPU per request of each side."""
    parts.append(
        f'<text x="10" y="{y + 4}" class="title">Gateway: CPU of the front per request,'
        f" futoin_anyio against plain Trio/AnyIO ({escape(tier['mode'])} mode)</text>"
    )
    y += 28
    y = _legend(parts, y, [(f"{GATEWAY_TITLES[side]} {backend}", colour)
                           for (side, backend), colour in GATEWAY_BARS.items()])
    by_backend = {row["backend"]: row for row in tier["rows"]}
    for phase in ("ok", "mixed", "reject"):
        bars = []
        for (side, backend), colour in GATEWAY_BARS.items():
            row = by_backend.get(backend)
            if row is None:
                continue
            cell = row["cells"][phase]
            note = f"  ({cell['ratio']:.2f}x plain: {cell['status']})" if side == "futoin" else ""
            bars.append((f"{GATEWAY_TITLES[side]} {backend}", colour,
                         {"status": "ok", "value": cell[side] * 1e6}, note))
        y = _group(parts, y, phase, "µs CPU/request", True, bars)
    return y


def render_svg(result: dict[str, Any]) -> str:
    columns: list[str] = result["columns"]
    titles: dict[str, str] = result["titles"]
    meta = result["meta"]
    parts: list[str] = []
    y = _legend(parts, 58, [(titles[c], COLOURS.get(c, "#888")) for c in columns])
    for row in result["rows"]:
        bars = [
            (titles[c], COLOURS.get(c, "#888"), row["cells"][c], "") for c in columns
        ]
        y = _group(parts, y, row["id"], row["unit"], row["lower_is_better"], bars)
    if result.get("native"):
        y = _native_part(parts, y + 10, result["native"])
    if result.get("gateway", {}).get("rows"):
        y = _gateway_part(parts, y + 10, result["gateway"])
    height = y + 10
    subtitle = (
        f"{meta['mode']} mode · {meta['date']} · {meta['cpu']} · Python {meta['python']}"
        f" · node {meta['node'] or 'n/a'} · commit {meta['commit']}"
    )
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
            "<style>"
            ".title{font-size:16px;font-weight:bold}.sub{font-size:11px;fill:#555}"
            ".legend{font-size:12px}.label{font-size:13px;text-anchor:end;font-weight:bold}"
            ".unit{font-size:10px;text-anchor:end;fill:#555}.value{font-size:11px}"
            ".na{font-size:11px;fill:#999;font-style:italic}"
            "</style>",
            f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
            '<text x="10" y="22" class="title">futoin_anyio benchmarks</text>',
            f'<text x="10" y="38" class="sub">{escape(subtitle)}</text>',
            *parts,
            "</svg>",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.chart",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json",
        default=str(DEFAULT_DIR / "results.json"),
        help="results.json from benchmarks.run (default: %(default)s)",
    )
    parser.add_argument("--out", help="SVG to write (default: chart.svg next to the JSON)")
    parser.add_argument(
        "--docs",
        action="store_true",
        help=f"copy results.md, results.json and chart.svg into {DOCS_DIR}",
    )
    args = parser.parse_args(argv)

    source = Path(args.json)
    result = json.loads(source.read_text())
    out = Path(args.out) if args.out else source.with_name("chart.svg")
    out.write_text(render_svg(result))
    print(f"written: {out}")
    if args.docs:
        DOCS_DIR.mkdir(parents=True, exist_ok=True)
        markdown = source.with_name("results.md")
        for src, name in ((markdown, "results.md"), (source, "results.json"), (out, "chart.svg")):
            if not src.exists():
                print(f"missing: {src}", file=sys.stderr)
                return 1
            shutil.copyfile(src, DOCS_DIR / name)
        print(f"copied results.md, results.json, chart.svg into {DOCS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
