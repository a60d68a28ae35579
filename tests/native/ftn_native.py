"""Compile the C sources of this folder during the test session (cffi API mode, temp dir).

The C files include only the shipped ``futoin.h`` (``futoin_anyio.binary.get_include()``);
the cffi module declares the header's types itself, so its pointers are distinct cffi types:
cast at the boundary (``ffi.cast("FutoInAsyncSteps *", p)`` on either side).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from cffi import FFI

import futoin_anyio.binary

HERE = Path(__file__).resolve().parent
# the spec's declarations in cffi's dialect, as the extension's build uses them
CDEF_SPEC = (HERE.parent.parent / "ffi" / "futoin_cdef.h").read_text(encoding="utf-8")


def have_compiler() -> bool:
    return shutil.which("cc") is not None or shutil.which("gcc") is not None


def build(name: str, source: str, cdef: str, tmpdir: Path) -> ModuleType:
    """Compile ``tests/native/<source>`` as the cffi module ``name`` and import it."""
    futoin_anyio.binary.require_build_tools()
    ffi = FFI()
    ffi.cdef(CDEF_SPEC + cdef)
    ffi.set_source(
        name,
        f'#include "{source}"\n',
        include_dirs=[futoin_anyio.binary.get_include(), str(HERE)],
        extra_compile_args=["-std=c11"],  # -Werror: see test_native_sources_are_clean
    )
    so = ffi.compile(tmpdir=str(tmpdir))
    spec = importlib.util.spec_from_file_location(name, so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FOREIGN_CDEF = """
typedef struct {
    int steps_run;
    int lock_calls;
    int unlock_calls;
    int locked;
    int values_reset;
    int freed;
} FStats;
FutoInAsyncSteps* f_new_root(void);
void f_free_root(FutoInAsyncSteps* bsi);
const char* f_error_info(FutoInAsyncSteps* bsi);
const char* f_last_code(FutoInAsyncSteps* bsi);
int f_timeouts_set(FutoInAsyncSteps* bsi);
void f_c_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
FutoInSync* f_new_sync(int max, int null_api);
int f_sync_holders(FutoInSync* sync);
void f_free_sync(FutoInSync* sync);
FStats* f_get_stats(void);
void f_reset_stats(void);
"""

CSTEPS_CDEF = """
typedef struct {
    int allocs;
    int state_cleanups;
    int stack_cleanups;
    int value_cleanups;
    int cancels;
    int unhandled;
    int sched_fired;
    int branches;
    int repeat_mask;
    int loop_count;
    int valid_checks;
    int same_thread;
    ptrdiff_t root_ids[4];
    int args_seen;
    int stack_zeroed;
    int shared_counter_seen;
    char log[512];
    int bench_steps;
} CStats;
void c_reset(void);
CStats* c_get_stats(void);
void c_emit(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_echo(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_emit_bad(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_record_args(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_full(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_wait(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_sched_far(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_timeout(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_spawn(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_spawn_waiting(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_cancel_spawned(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_use_freed(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_bad_call(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_add_sync(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
FutoInSync* c_new_sync(void);
int c_sync_counts(FutoInSync* sync, int which);
void c_free_sync(FutoInSync* sync);
void c_bench(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
"""
