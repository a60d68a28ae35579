"""The 25-entry function table is declared once (ffi/table.py); everything else must agree.

Adding a table function: the public header (futoin.h, and its cffi copy ffi/futoin_cdef.h),
ffi/table.py, and the Python methods (the trampoline in _ours.py, the ForeignAsyncSteps
method); ffi/build.py generates the C. These checks name whichever of them was missed.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from futoin_anyio.binary._ffi import ffi, lib

import futoin_anyio.binary
from futoin_anyio.binary import _bridge

sys.path.insert(0, str(Path(__file__).resolve().parent / "interop"))
import refbuild

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
    api_init = api_init[: api_init.index("\n\n")]
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


# --- the C++ IAsyncTool behind our scheduler handles (issue 28) -------------------------------


@pytest.fixture(scope="module")
def reference() -> Path:
    where = refbuild.reference_dir()
    if where is None:
        pytest.skip(
            f"{refbuild.ENV} is not set: point it at the C++ reference sources "
            "(scripts/test.sh does when ../shared/third_party exists)"
        )
    return where


def _iasynctool_header(ref: Path) -> Path:
    header = ref / "futoin-core-cpp-api" / "include" / "futoin" / "iasynctool.hpp"
    if not header.exists():
        pytest.fail(f"{refbuild.ENV}={ref}: {header} does not exist")
    return header


def header_virtuals(text: str) -> list[str]:
    """Names of the virtual member functions of ``class IAsyncTool``, in declaration order."""
    body = text[text.index("class IAsyncTool\n") :]
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", body, flags=re.S)
    return re.findall(r"\bvirtual\b[^;{(]*?(~?\b\w+)\s*\(", body)


def test_handle_tool_vtable_follows_the_reference_header(reference: Path) -> None:
    # Itanium: the virtual destructor takes two slots (complete, deleting), then the virtual
    # functions in declaration order. A virtual added to the header fails here.
    declared = header_virtuals(_iasynctool_header(reference).read_text())
    assert declared[0] == "~IAsyncTool", declared
    assert [declared[0], declared[0] + " (deleting)", *declared[1:]] == list(
        table.IASYNCTOOL_VTABLE
    )


PROBE = r"""
#include <futoin/iasynctool.hpp>

#include <cstddef>
#include <cstdio>
#include <cstring>

#ifndef __GXX_ABI_VERSION
#error "this probe reads pointers to member functions as the Itanium C++ ABI lays them out"
#endif

namespace {
    struct Ptmf { std::ptrdiff_t ptr; std::ptrdiff_t adj; };

    // The vtable slot of a virtual member function, from its pointer-to-member representation:
    // generic Itanium: ptr = 1 + byte offset in the vtable; ARM/AArch64: ptr = offset and
    // adj = 2 * this-adjustment + 1.
    template <typename P>
    long slot(P pm)
    {
        static_assert(sizeof(P) == sizeof(Ptmf), "not an Itanium pointer to member function");
        Ptmf r;
        std::memcpy(&r, &pm, sizeof r);
    #if defined(__arm__) || defined(__aarch64__)
        if ((r.adj & 1) == 0) return -1;
        return long(r.ptr / std::ptrdiff_t(sizeof(void*)));
    #else
        if ((r.ptr & 1) == 0) return -1;
        return long((r.ptr - 1) / std::ptrdiff_t(sizeof(void*)));
    #endif
    }

    // cancel() and is_valid() are protected: a derived class may name them
    struct Probe : futoin::IAsyncTool
    {
        static void print()
        {
@SLOTS@
        }
    };
} // namespace

int main()
{
    Probe::print();
    // an object of a class derived from IAsyncTool without data members is its vtable pointer
    std::printf("object_size %zu\n", sizeof(Probe));
    // Handle is FutoInHandle field by field (data1 = internal_, data2 = async_tool_,
    // data3 = cookie_): our cancel slot empties data1 as Handle::reset() does
    FutoInHandle fh{reinterpret_cast<void*>(16), reinterpret_cast<void*>(32), 3};
    futoin::IAsyncTool::Handle h(fh);
    bool same = sizeof(h) == sizeof(fh) && std::memcmp(&h, &fh, sizeof fh) == 0;
    h.reset();
    FutoInHandle back = h.binary();
    same = same && back.data1 == nullptr && back.data2 == fh.data2 && back.data3 == 3;
    std::printf("handle_layout %d\n", same ? 1 : 0);
    return 0;
}
"""


def test_handle_tool_vtable_matches_a_compiled_probe(reference: Path, tmp_path: Path) -> None:
    _iasynctool_header(reference)
    names = [n for n in table.IASYNCTOOL_VTABLE if n.isidentifier()]
    slots = "\n".join(
        f'            std::printf("{n} %ld\\n", slot(&Probe::{n}));' for n in names
    )
    src = tmp_path / "probe.cpp"
    src.write_text(PROBE.replace("@SLOTS@", slots))
    try:
        cxx = refbuild._compiler()
    except refbuild.Missing as exc:
        pytest.fail(str(exc))
    exe = tmp_path / "probe"
    api = reference / "futoin-core-cpp-api" / "include"
    shim = reference / "noexcept_function_shim.hpp"
    build = subprocess.run(
        [cxx, "-std=c++17", "-include", str(shim), "-I", str(api), str(src), "-o", str(exe)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    got = dict(line.split() for line in out.splitlines())
    # the compiler's slots are the table's, and those the extension was built with
    for n in names:
        assert int(got[n]) == table.IASYNCTOOL_VTABLE.index(n), (n, out)
        assert getattr(lib, f"FTNPY_HTOOL_SLOT_{n.upper()}") == int(got[n]), n
    assert len(table.IASYNCTOOL_VTABLE) == lib.FTNPY_HTOOL_NSLOTS
    assert int(got["object_size"]) == ffi.sizeof("void *")
    assert got["handle_layout"] == "1", out
    assert lib.FTNPY_HTOOL_ITANIUM == 1  # built for Linux/macOS: no ABI warning


def test_our_handles_point_at_the_handle_tool() -> None:
    # without the reference: what C sees in data1/data2 is the extension's static object,
    # whose first word points at the vtable's first slot
    obj = lib.ftnpy_htool_ptr()
    vptr = ffi.cast("void ***", obj)[0]
    assert vptr != ffi.NULL
    # offset-to-top (0) and the RTTI pointer (NULL) stand before the address point
    assert ffi.cast("intptr_t *", vptr)[-2] == 0
    assert ffi.cast("void **", vptr)[-1] == ffi.NULL
