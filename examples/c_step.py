"""Steps written in C, in a Python flow, through the FTN12 binary interface.

``c/c_steps.c`` includes only ``futoin.h`` (from
``futoin_anyio.binary.get_include()``) and drives AsyncSteps through the
``FutoInAsyncSteps`` table: ``success()`` with typed values, ``handle_error()``,
``stack()`` memory, a timer with ``sched_deferred()`` and a cancel handler.
This script compiles it with cffi (a C compiler is needed) and runs the C
functions as steps with ``futoin_anyio.binary.c_step()``.  Expected output::

    C: 7 squared is 49 (49)
    Python handled InvalidRequest: c_square: expected an integer
    C: woken by a C timer

Run with ``python examples/c_step.py [--backend trio]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

import anyio
from cffi import FFI

from futoin_anyio import AsyncSteps
from futoin_anyio.binary import c_step, get_include, require_build_tools

HERE = Path(__file__).resolve().parent

CDEF = """
typedef struct FutoInAsyncSteps_ FutoInAsyncSteps;
typedef struct FutoInArgs_ FutoInArgs;
void c_square(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
void c_wait(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
"""


def build(tmp: str) -> ModuleType:
    """Compile c/c_steps.c into an extension module in ``tmp`` and import it."""
    require_build_tools()  # setuptools: pip install 'futoin_anyio[c]'
    ffi = FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        "_c_steps_example",
        '#include "c_steps.c"',
        include_dirs=[get_include(), str(HERE / "c")],
    )
    path = ffi.compile(tmpdir=tmp, verbose=False)
    spec = importlib.util.spec_from_file_location("_c_steps_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        module = build(tmp)
        ffi, lib = module.ffi, module.lib
        square = c_step(ffi.addressof(lib, "c_square"))
        wait = c_step(ffi.addressof(lib, "c_wait"))

        asi = AsyncSteps()
        asi.success_step(7)
        asi.add(square)
        asi.add(lambda asi, value, text: print(f"C: {text} ({value})"))

        def on_error(asi: AsyncSteps, code: str) -> None:
            print(f"Python handled {code}: {asi.state.error_info}")
            asi.success()

        # A string is not what c_square expects: it fails with handle_error().
        asi.add(lambda asi: asi.success_step("seven").add(square), on_error)
        asi.add(wait)
        asi.add(lambda asi, text: print(f"C: {text}"))
        await asi.promise()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args()
    anyio.run(main, backend=args.backend)
