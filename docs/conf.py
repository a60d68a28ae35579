"""Sphinx configuration for futoin_anyio.

The build must work offline and with ``-W -n``: no intersphinx (it downloads
inventories), so types from other projects are listed in ``nitpick_ignore``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

project = "futoin_anyio"
author = "futoin_anyio developers"
copyright = "2026, futoin_anyio developers"

extensions = ["sphinx.ext.autodoc"]
exclude_patterns = ["_build", "_static/bench/*.md"]
templates_path: list[str] = []
html_static_path = ["_static"]
html_theme = "alabaster"
html_theme_options = {
    "description": "FutoIn AsyncSteps on AnyIO and Trio",
    "fixed_sidebar": True,
}

default_role = "py:obj"
nitpicky = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}

# Types from the standard library and other projects: without intersphinx
# there is nothing to link them to.
nitpick_ignore = [
    ("py:class", name)
    for name in (
        "Exception",
        "BaseException",
        "dict",
        "object",
        "collections.abc.Awaitable",
        "collections.abc.Callable",
        "collections.abc.Coroutine",
        "collections.abc.Iterable",
        "collections.abc.Iterator",
        "collections.abc.Mapping",
        "collections.abc.Sequence",
        "anyio.abc.TaskGroup",
        "anyio.CancelScope",
        "cffi.FFI.CData",
        "_cffi_backend._CDataBase",
        "CData",
        "TypeAliasForwardRef",
        # The callback type aliases of futoin_anyio._types (private, shown by name) and
        # futoin_anyio.testing's AsyncTestFunc.
        "StepFunc",
        # OpenTelemetry (no inventory: the docs build offline).
        "opentelemetry.trace.TracerProvider",
        "Span",
        "LoopFunc",
        "RepeatFunc",
        "ForEachFunc",
        "T",
        "ErrorHandler",
        "CancelHandler",
        "AsyncTestFunc",
        # Unqualified names in futoin_anyio.binary docstrings.
        "State",
    )
] + [
    ("py:exc", "TimeoutError"),
    ("py:func", "numpy.get_include"),
    ("py:meth", "AsyncSteps.wrap"),
    ("py:meth", "new_instance"),
    ("py:exc", "KeyboardInterrupt"),
    ("py:exc", "SystemExit"),
]
nitpick_ignore_regex = [
    # Private engine types that appear in public signatures.
    ("py:class", r"futoin_anyio(\.\w+)*\._\w+(\.\w+)*"),
    ("py:.*", r"(typing|typing_extensions|types|collections\.abc)\.\w+"),
    ("py:.*", r"(anyio|trio|cffi|_cffi_backend)(\.\w+)+"),
]


def _markdown_to_rst(text: str) -> str:
    """Render the benchmark engineer's ``results.md`` as reST.

    Only what that file uses: ``#`` headings (shifted below this page's own
    title), pipe tables, ``code``, **bold** and plain paragraphs; anything
    else passes through as text.
    """
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    marks = {1: "-", 2: "~", 3: "^", 4: '"', 5: "'", 6: "`"}

    def inline(s: str) -> str:
        s = re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", s)
        return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"`\1 <\2>`__", s)

    def cell(s: str) -> str:
        # A cell that starts like a list item ("(a) text", "1. text", "- text") would become
        # one in reST: escape its first character.
        s = inline(s)
        return "\\" + s if re.match(r"^(\(?[A-Za-z0-9]{1,3}[.)]|[-+*])\s", s) else s

    while i < len(lines):
        line = lines[i]
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        if heading:
            title = inline(heading.group(2).strip())
            out += ["", title, marks[len(heading.group(1))] * max(len(title), 3), ""]
            i += 1
        elif line.lstrip().startswith("|"):
            rows: list[list[str]] = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
                    rows.append([cell(c) or " " for c in cells])
                i += 1
            width = max(len(r) for r in rows)
            out += ["", ".. list-table::", "   :header-rows: 1", ""]
            for row in rows:
                row = row + [" "] * (width - len(row))
                out.append(f"   * - {row[0]}")
                out += [f"     - {c}" for c in row[1:]]
            out.append("")
        elif line.startswith("```"):
            i += 1
            out += ["", "::", ""]
            while i < len(lines) and not lines[i].startswith("```"):
                out.append("   " + lines[i])
                i += 1
            out.append("")
            i += 1
        else:
            out.append(inline(line))
            i += 1
    return "\n".join(out) + "\n"


def _write_bench_page() -> None:
    """Turn the generated benchmark results into an includable reST file."""
    bench = DOCS / "_static" / "bench"
    results = bench / "results.md"
    chart = bench / "chart.svg"
    parts: list[str] = []
    if chart.exists():
        parts += [".. image:: /_static/bench/chart.svg", "   :alt: benchmark chart", ""]
    if results.exists():
        parts.append(_markdown_to_rst(results.read_text(encoding="utf-8")))
    if not parts:
        parts.append(
            "No benchmark results in this build: run the benchmarks "
            "(``benchmarks/``) to generate ``docs/_static/bench/results.md`` "
            "and ``chart.svg``, then rebuild."
        )
    target = DOCS / "_generated" / "bench.rst.inc"
    target.parent.mkdir(exist_ok=True)
    text = "\n".join(parts) + "\n"
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


_write_bench_page()


def _write_api_extra() -> None:
    """Document every public name that api.rst does not list by hand.

    Keeps the reference complete as the package grows: a name in
    ``futoin_anyio.__all__`` is either written in api.rst or added here.
    """
    import futoin_anyio

    written = (DOCS / "api.rst").read_text(encoding="utf-8")
    lines: list[str] = []
    for name in getattr(futoin_anyio, "__all__", ()):
        if f"futoin_anyio.{name}\n" in written:
            continue
        obj = getattr(futoin_anyio, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            directive = "autoexception"
        elif isinstance(obj, type):
            directive = "autoclass"
        elif callable(obj):
            directive = "autofunction"
        else:
            directive = "autodata"
        lines += [f".. {directive}:: futoin_anyio.{name}", ""]
    text = ("Other public names\n------------------\n\n" + "\n".join(lines)) if lines else ""
    target = DOCS / "_generated" / "api_extra.rst.inc"
    target.parent.mkdir(exist_ok=True)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


_write_api_extra()
