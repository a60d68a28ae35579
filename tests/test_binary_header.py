"""The shipped ``futoin.h``: valid C11 and C++11, and the spec's binary layout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import futoin_anyio.binary

INCLUDE = futoin_anyio.binary.get_include()

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("g++") is None, reason="needs gcc and g++"
)

API_FIELDS = (
    "add",
    "parallel",
    "stateVariable",
    "stack",
    "success",
    "handle_error",
    "setTimeout",
    "setCancel",
    "waitExternal",
    "loop",
    "repeat",
    "breakLoop",
    "continueLoop",
    "execute",
    "cancel",
    "addSync",
    "rootId",
    "isValid",
    "newInstance",
    "free",
    "sched_immediate",
    "sched_deferred",
    "sched_cancel",
    "sched_is_valid",
    "is_same_thread",
)

TU = r"""
#include "futoin.h"
#include <string.h>

static int cleaned = 0;
static void count_cleanup(FutoInBinaryValue* v) { (void)v; ++cleaned; }

int use_header(void);
int use_header(void)
{
    FutoInBinaryValue v;
    memset(&v, 0, sizeof(v));
    futoin_reset_binval(&v); /* no type: a no-op */
    {
        static const FutoInType tp = { FTN_TYPE_STRING, count_cleanup };
        v.type = &tp;
        v.cstr = "x";
        v.length = 1;
        futoin_reset_binval(&v);
    }
    return cleaned == 1 && v.type == 0 && v.length == 0 && v.u64 == 0 ? 0 : 1;
}
"""


def _compile(tmp_path: Path, compiler: str, std: str, suffix: str, source: str) -> None:
    src = tmp_path / f"tu{suffix}"
    src.write_text(source)
    proc = subprocess.run(
        [
            compiler,
            f"-std={std}",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            INCLUDE,
            "-c",
            str(src),
            "-o",
            str(tmp_path / f"tu{suffix}.o"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_get_include_points_at_header() -> None:
    assert os.path.isfile(os.path.join(INCLUDE, "futoin.h"))


def test_compiles_as_c11(tmp_path: Path) -> None:
    _compile(tmp_path, "gcc", "c11", ".c", TU)


def test_compiles_as_cxx11(tmp_path: Path) -> None:
    # In C++ the spec gives FutoInAsyncSteps_/FutoInSync_ constructors: use them.
    cxx = (
        TU
        + r"""
static const FutoInAsyncStepsAPI api = {};
int use_cxx();
int use_cxx() {
    FutoInAsyncSteps bsi(&api);
    FutoInSync sync;
    return bsi.api == &api && sync.api == nullptr ? use_header() : 1;
}
"""
    )
    _compile(tmp_path, "g++", "c++11", ".cpp", cxx)


def _layout_program() -> str:
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        '#include "futoin.h"',
        "int main(void) {",
        'printf("ptr %zu\\n", sizeof(void*));',
        'printf("u64align %zu\\n", (size_t)_Alignof(uint64_t));',
        'printf("dblalign %zu\\n", (size_t)_Alignof(double));',
        'printf("api_size %zu\\n", sizeof(FutoInAsyncStepsAPI));',
        'printf("sync_api_size %zu\\n", sizeof(FutoInSyncAPI));',
        'printf("value_size %zu\\n", sizeof(FutoInBinaryValue));',
        'printf("args_size %zu\\n", sizeof(FutoInArgs));',
        'printf("handle_size %zu\\n", sizeof(FutoInHandle));',
    ]
    for name in API_FIELDS:
        lines.append(f'printf("api.{name} %zu\\n", offsetof(FutoInAsyncStepsAPI, {name}));')
    for name in ("lock", "unlock"):
        lines.append(f'printf("sync.{name} %zu\\n", offsetof(FutoInSyncAPI, {name}));')
    for name in ("type", "p", "u64", "d", "custom_data", "length"):
        lines.append(f'printf("value.{name} %zu\\n", offsetof(FutoInBinaryValue, {name}));')
    for name in ("arg0", "arg1", "arg2", "arg3"):
        lines.append(f'printf("args.{name} %zu\\n", offsetof(FutoInArgs, {name}));')
    for name in ("data1", "data2", "data3"):
        lines.append(f'printf("handle.{name} %zu\\n", offsetof(FutoInHandle, {name}));')
    lines.append('printf("asi.api %zu\\n", offsetof(FutoInAsyncSteps, api));')
    lines.append('printf("sync.api %zu\\n", offsetof(FutoInSync, api));')
    lines.append("return 0; }")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    tmp = tmp_path_factory.mktemp("layout")
    src = tmp / "layout.c"
    src.write_text(_layout_program())
    exe = tmp / "layout"
    subprocess.run(
        ["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", INCLUDE, str(src), "-o", str(exe)],
        check=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def _round_up(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def test_api_table_layout(layout: dict[str, int]) -> None:
    ptr = layout["ptr"]
    for index, name in enumerate(API_FIELDS):
        assert layout[f"api.{name}"] == index * ptr, name
    assert layout["api_size"] == 25 * ptr
    assert layout["sync.lock"] == 0
    assert layout["sync.unlock"] == ptr
    assert layout["sync_api_size"] == 2 * ptr
    assert layout["asi.api"] == 0
    assert layout["sync.api"] == 0


def test_value_layout(layout: dict[str, int]) -> None:
    ptr = layout["ptr"]
    # type pointer, then an 8-byte union of scalars/pointers, custom_data, uint32 length.
    union_align = max(layout["u64align"], layout["dblalign"], ptr)
    union_off = _round_up(ptr, union_align)
    assert layout["value.type"] == 0
    assert layout["value.p"] == layout["value.u64"] == layout["value.d"] == union_off
    custom = _round_up(union_off + max(8, ptr), ptr)
    assert layout["value.custom_data"] == custom
    assert layout["value.length"] == custom + ptr
    struct_align = max(union_align, ptr)
    assert layout["value_size"] == _round_up(custom + ptr + 4, struct_align)
    size = layout["value_size"]
    assert [layout[f"args.arg{i}"] for i in range(4)] == [0, size, 2 * size, 3 * size]
    assert layout["args_size"] == 4 * size
    assert (layout["handle.data1"], layout["handle.data2"], layout["handle.data3"]) == (
        0,
        ptr,
        2 * ptr,
    )


def test_cffi_agrees_with_c(layout: dict[str, int]) -> None:
    from futoin_anyio.binary._ffi import ffi

    assert ffi.sizeof("FutoInBinaryValue") == layout["value_size"]
    assert ffi.sizeof("FutoInArgs") == layout["args_size"]
    assert ffi.sizeof("FutoInAsyncStepsAPI") == layout["api_size"]
    for name in API_FIELDS:
        assert ffi.offsetof("FutoInAsyncStepsAPI", name) == layout[f"api.{name}"]
    assert ffi.offsetof("FutoInBinaryValue", "length") == layout["value.length"]


@pytest.mark.parametrize("source", ["foreign.c", "csteps.c"])
def test_native_sources_are_clean(tmp_path: Path, source: str) -> None:
    # The test C sources use the shipped header only, warning-free even with -pedantic.
    native = Path(__file__).parent / "native" / source
    _compile(tmp_path, "gcc", "c11", ".c", f'#include "{native}"\n')


def test_compiling_c_steps_without_setuptools_names_the_extra() -> None:
    """In an environment without setuptools (a Python >= 3.12 venv without the ``c`` extra),
    compiling a C step fails with an error that says what to install."""
    code = (
        "import sys\n"
        "sys.modules['setuptools'] = None  # what a venv without setuptools looks like\n"
        "import futoin_anyio.binary as b\n"
        "try:\n"
        "    b.require_build_tools()\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert "pip install 'futoin_anyio[c]'" in result.stdout, result.stderr
