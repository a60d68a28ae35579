"""The 25-entry function table is declared once (ffi/table.py); everything else must agree.

Adding a table function: the public header (futoin.h, and its cffi copy ffi/futoin_cdef.h),
ffi/table.py, and the Python methods (the trampoline in _ours.py, the ForeignAsyncSteps
method); ffi/build.py generates the C. These checks name whichever of them was missed.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import futoin_anyio.binary
from futoin_anyio.binary import _bridge

FFI = Path(__file__).resolve().parent.parent / "ffi"


def _load_table() -> Any:
    spec = importlib.util.spec_from_file_location("_ffi_table", FFI / "table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


table = _load_table()

SCHED = {"sched_immediate", "sched_deferred"}  # one trampoline, ftnpy_py_sched


def api_fields(header: str) -> list[str]:
    """Member names of ``struct FutoInAsyncStepsAPI_`` in a header, in order."""
    body = header[header.index("struct FutoInAsyncStepsAPI_\n") :]
    body = body[body.index("struct\n") : body.index("void* funcs[25]")]
    # one member per statement; callback parameters come after the member's own name
    names = [re.search(r"\(\*(\w+)\)", stmt) for stmt in body.split(";")]
    return [m.group(1) for m in names if m]


def test_table_is_the_headers_order() -> None:
    fields = [e.field for e in table.TABLE]
    assert [e.pos for e in table.TABLE] == list(range(25))
    shipped = Path(futoin_anyio.binary.get_include(), "futoin.h").read_text()
    assert api_fields(shipped) == fields
    assert api_fields((FFI / "futoin_cdef.h").read_text()) == fields


def test_our_c_table_follows_it() -> None:
    source = (FFI / "ftnpy.c").read_text()
    init = source[source.index("static const FutoInAsyncStepsAPI ftnpy_api") :]
    assert "FTNPY_API_INIT" in init[: init.index("} } };")]
    generated = table.ours_csource()
    api_init = generated[generated.index("#define FTNPY_API_INIT") :]
    assert re.findall(r"\b(ftnpy_\w+),", api_init) == [f"ftnpy_{e.name}" for e in table.TABLE]
    cdef = (FFI / "ftnpy_cdef.h").read_text() + table.ours_cdef()
    for e in table.TABLE:
        definition = rf"\bftnpy_{e.name}\(FutoInAsyncSteps\* bsi"
        # each table function is written once: by hand (CUSTOM) or generated
        in_c, in_generated = re.search(definition, source), re.search(definition, generated)
        assert bool(in_c) == (e.name in table.CUSTOM) != bool(in_generated), e.name
        trampoline = "ftnpy_py_sched" if e.name in SCHED else f"ftnpy_py_{e.name}"
        assert f"{trampoline}(" in cdef, e.name


def test_python_side_covers_every_entry() -> None:
    bridge = "".join(p.read_text() for p in Path(_bridge.__file__).parent.glob("*.py"))
    for e in table.TABLE:
        # the foreign direction: ForeignAsyncSteps calls the generated ftnpy_f_<name>
        assert re.search(rf"lib\.ftnpy_f_{e.name}\b", bridge), e.name
        # our direction: the trampoline is defined in Python
        trampoline = "ftnpy_py_sched" if e.name in SCHED else f"ftnpy_py_{e.name}"
        assert f'"{trampoline}"' in bridge, e.name
