"""cffi builder of ``futoin_anyio.binary._ffi`` (out-of-line, API mode). Not shipped.

Used by ``setup.py`` (``cffi_modules``); ``python ffi/build.py`` builds the extension in place
for development. Inputs, all in this folder: ``futoin_cdef.h`` (the spec's declarations in
cffi's dialect), ``ftnpy_cdef.h`` (our side), ``ftnpy.c`` (the C implementation, compiled as
itself so compiler errors point into it) and ``table.py`` (the 25 table functions, from
which ``ftnpy_table.h`` — our generic table functions, and the vtable of the C++ ``IAsyncTool``
behind our scheduler handles — and the calls into foreign tables are generated, with their cffi
declarations).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INCLUDE_DIR = os.path.join(ROOT, "futoin_anyio", "binary", "include")

sys.path.insert(0, HERE)
import table  # noqa: E402


def _read(name: str) -> str:
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


# Our scheduler handles are dispatchable by the C++ reference's IAsyncTool::Handle under the
# Itanium C++ ABI only (see IASYNCTOOL_VTABLE in table.py): say so when building for Windows,
# whose C++ compilers (MSVC, clang-cl) use the MSVC ABI.
if sys.platform == "win32" or os.name == "nt":
    import warnings

    warnings.warn(
        "futoin_anyio: building for Windows, where C++ uses the MSVC ABI: a C++ "
        "IAsyncTool::Handle made from our scheduler handles cannot cancel or test them "
        "(Itanium C++ ABI layout, see ffi/table.py); C and C++ code must use the table's "
        "sched_cancel / sched_is_valid there",
        stacklevel=1,
    )

# generated header, in a folder of this build only (never in the source tree)
GENERATED = tempfile.mkdtemp(prefix="futoin_anyio_ffi-")
atexit.register(shutil.rmtree, GENERATED, True)
with open(os.path.join(GENERATED, "ftnpy_table.h"), "w", encoding="utf-8") as _f:
    _f.write(table.ours_csource())

ffi = FFI()
ffi.cdef(
    _read("futoin_cdef.h")
    + _read("ftnpy_cdef.h")
    + table.ours_cdef()
    + table.cdef()
    + table.htool_cdef()
)
ffi.set_source(
    "futoin_anyio.binary._ffi",
    '#include "ftnpy.c"\n\n/* calls into foreign tables, generated from ffi/table.py */\n'
    + table.csource(),
    include_dirs=[INCLUDE_DIR, HERE, GENERATED],
    extra_compile_args=["-std=c11"] if os.name != "nt" else [],
)

if __name__ == "__main__":
    ffi.compile(tmpdir=ROOT, verbose=True)
