"""The ``c_steps`` scenario: trivial C steps driven through ``asi.binary()`` (FTN12 §2.7).

A tiny C module is compiled with cffi against the header that ships in
``futoin_anyio.binary`` (compile time is not measured). Its ``bench_start()``
receives the binary ``FutoInAsyncSteps *`` of a Python step and calls
``api->repeat()`` with a C loop body: each iteration is a step whose callback is
C code. Every missing piece (header, compiler, ``binary()``) makes the scenario
report ``n/a`` with the reason instead of a figure.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from typing import Any

from ._common import Measurement, NotAvailable, check, now, rate

_C_SOURCE = r"""
#include "futoin.h"

typedef struct { size_t count; } bench_data;

static void bench_body(FutoInAsyncSteps* bsi, void* data, size_t i)
{
    (void)bsi;
    (void)i;
    ((bench_data*)data)->count += 1;
}

static void bench_start(void* bsi, void* data, size_t n)
{
    FutoInAsyncSteps* b = (FutoInAsyncSteps*)bsi;
    b->api->repeat(b, data, n, &bench_body, NULL);
}
"""

_CDEF = """
typedef struct { size_t count; } bench_data;
static void bench_start(void* bsi, void* data, size_t n);
"""

_module: Any = None


def _build() -> Any:
    """Compile (once per process) and import the C side; NotAvailable on any missing piece."""
    global _module
    if _module is not None:
        return _module
    try:
        from cffi import FFI

        from futoin_anyio.binary import get_include, require_build_tools

        require_build_tools()
    except (ImportError, RuntimeError) as e:
        raise NotAvailable(f"binary bridge: {e}") from e
    include = get_include()
    if not os.path.exists(os.path.join(include, "futoin.h")):
        raise NotAvailable(f"binary bridge: no futoin.h in {include}")
    ffi = FFI()
    ffi.cdef(_CDEF)
    name = "_futoin_bench_csteps"
    ffi.set_source(name, _C_SOURCE, include_dirs=[include])
    tmpdir = tempfile.mkdtemp(prefix="futoin-bench-c-")
    try:
        path = ffi.compile(tmpdir=tmpdir)
    except Exception as e:  # no compiler, header does not compile, ...
        raise NotAvailable(f"cannot compile the C steps: {type(e).__name__}: {e}") from e
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _module = module
    return module


async def _probe_binary() -> None:
    from futoin_anyio import AsyncSteps

    if not hasattr(AsyncSteps, "binary"):
        raise NotAvailable("binary bridge: AsyncSteps.binary() is missing")
    got: list[Any] = []
    root = AsyncSteps()
    root.add(lambda asi: got.append(asi.binary()))
    try:
        await root.promise()
    except Exception as e:
        raise NotAvailable(f"binary bridge: asi.binary() failed: {e}") from e
    if not got or got[0] is None:
        raise NotAvailable("binary bridge: asi.binary() returned nothing")


async def c_steps(n: int) -> Measurement:
    from futoin_anyio import AsyncSteps

    module = _build()
    await _probe_binary()
    ffi, lib = module.ffi, module.lib
    data = ffi.new("bench_data *")

    def start(asi: Any) -> None:
        lib.bench_start(asi.binary(), data, n)

    t0 = now()
    root = AsyncSteps()
    root.add(start)
    await root.promise()
    dt = now() - t0
    check(data.count == n, f"c_steps: {data.count} != {n}")
    return rate(n, dt)
