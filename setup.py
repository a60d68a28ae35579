"""Build hooks; all metadata lives in pyproject.toml.

* the cffi extension of the binary bridge (``ffi/build.py``), always;
* the compiled engine: the engine's own ``.py`` modules compiled by Cython 3 in pure-Python
  mode, the ``.pxd`` files beside them declaring the hot classes as extension types. Optional:
  without Cython, or when compiling fails, or with ``FUTOIN_ANYIO_NO_EXTENSIONS=1`` (the
  aio-libs convention), the wheel holds the pure-Python engine, and the build says so.
  ``futoin_anyio.COMPILED`` tells at run time which one is installed.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules of the compiled build: each has its ``.pxd`` beside it (tests/test_pxd_sync.py).
COMPILED_MODULES = ("_state", "_alarm", "_frame", "_loops", "_flow", "_parallel", "_driver",
                    "_tool", "_steps", "_hooks", "_mutex", "_throttle", "_limiter")


def _say(message: str) -> None:
    # setuptools hides stdout of a quiet pip; a warning on stderr shows in pip's output.
    print(f"futoin_anyio: {message}", file=sys.stderr)


def _engine_extensions() -> list[Extension]:
    if os.environ.get("FUTOIN_ANYIO_NO_EXTENSIONS", "") not in ("", "0"):
        _say("FUTOIN_ANYIO_NO_EXTENSIONS is set: building the pure-Python engine")
        return []
    if sys.implementation.name != "cpython":
        _say(f"{sys.implementation.name} is not CPython: building the pure-Python engine")
        return []
    try:
        from Cython.Build import cythonize
        from Cython.Compiler import Options
    except ImportError:
        _say("Cython is not available: building the pure-Python engine")
        return []
    # No debug information: it would make the wheel seven times larger and the build slower.
    # No PLT: a call into libpython goes through the GOT directly instead of a stub, which
    # spares an instruction cache line per called function (-0.5 % of trio's ok gateway request
    # in cachegrind's cycle estimate, docs/performance.rst).
    extensions = [Extension(f"futoin_anyio.{name}", [f"futoin_anyio/{name}.py"],
                            extra_compile_args=["-g0", "-fno-plt"], extra_link_args=["-s"])
                  for name in COMPILED_MODULES]
    # The closures of the compiled coroutines (promise(), the driver's loops, a branch task's
    # body) come from free lists of 128, not Cython's default 8 (docs/internals.rst, "Free
    # lists"). A module-level option: parallel workers see it only when forked.
    Options.closure_freelist_size = 128
    forked = multiprocessing.get_context().get_start_method() == "fork"
    try:
        return list(cythonize(
            extensions,
            build_dir="build/cython",  # the generated C stays out of the package folder
            nthreads=(os.cpu_count() or 1) if forked else 0,
            language_level=3,
            quiet=True,
            compiler_directives={
                # The types come from the .pxd files only: an annotation such as ``args: tuple``
                # must not become a type check (values from C are not tuples), nor ``float`` a
                # C double that refuses None.
                "annotation_typing": False,
            },
        ))
    except Exception as exc:  # a .pxd out of step with its .py: the pure build still works
        _say(f"Cython failed ({exc}): building the pure-Python engine")
        return []


class _OptionalBuildExt(build_ext):
    """Builds the cffi extension as usual; an engine module that fails to compile makes the
    whole engine pure Python (a half-compiled engine would mix two layouts of one class).
    The modules compile in parallel, one per core (pip runs no ``-j`` of its own)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if not any(_is_engine(e) for e in self.extensions):
            # A pure build: an engine compiled by an earlier build of the same tree (in its
            # build folder, or in place) would be packaged, or imported, instead of the .py.
            _remove_engine_outputs(self)
        try:
            super().run()
        except _EngineBuildFailed as failed:
            _say(f"compiling the engine failed ({failed}): building the pure-Python engine")
            self.extensions = [e for e in self.extensions if not _is_engine(e)]
            for ext in self.extensions:  # what was built so far is reused
                self.build_extension(ext)
            _remove_engine_outputs(self)

    def build_extension(self, ext: Extension) -> None:
        if not _is_engine(ext):
            super().build_extension(ext)
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # no compiler, a compiler error: never fatal for the engine
            raise _EngineBuildFailed(f"{ext.name}: {exc}") from exc


class _EngineBuildFailed(Exception):
    pass


def _is_engine(ext: Extension) -> bool:
    return ext.name.rsplit(".", 1)[-1] in COMPILED_MODULES and ext.name.startswith("futoin_anyio.")


def _remove_engine_outputs(cmd: build_ext) -> None:
    for name in COMPILED_MODULES:
        path = cmd.get_ext_fullpath(f"futoin_anyio.{name}")
        if os.path.exists(path):
            os.remove(path)


setup(
    cffi_modules=["ffi/build.py:ffi"],
    ext_modules=_engine_extensions(),
    cmdclass={"build_ext": _OptionalBuildExt},
)
