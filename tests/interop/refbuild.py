"""Build the FutoIn C++ reference implementation and our interop cases into one shared library.

The reference sources come from the folder named by ``FUTOIN_CPP_REFERENCE`` (the layout of
``../shared/third_party``: ``futoin-core-cpp-api/``, ``futoin-core-cpp-ri-asyncsteps/`` and
``noexcept_function_shim.hpp``). Nothing of it is copied into this tree: it is compiled from
there into a cache folder keyed by the sources and flags, so the suite, the second Python and
the valgrind run of CI share one build.

``python tests/interop/refbuild.py`` builds (or finds) the library and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = "FUTOIN_CPP_REFERENCE"
HERE = Path(__file__).resolve().parent
CASES = HERE / "ref_cases.cpp"
FLAGS = ["-std=c++17", "-O1", "-g", "-fPIC", "-w"]


class Missing(Exception):
    """What is needed to build the reference and is not there (message says what)."""


def reference_dir() -> Path | None:
    """The reference folder named by the environment, or ``None`` when unset."""
    value = os.environ.get(ENV)
    return Path(value).resolve() if value else None


def _sources(ref: Path) -> list[Path]:
    api = ref / "futoin-core-cpp-api"
    ri = ref / "futoin-core-cpp-ri-asyncsteps"
    shim = ref / "noexcept_function_shim.hpp"
    for need in (api / "include", ri / "include", ri / "src", shim):
        if not need.exists():
            raise Missing(f"{ENV}={ref}: {need} does not exist (see its README.md)")
    return [*sorted((ri / "src").glob("*.cpp")), api / "src" / "all.cpp", CASES]


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise Missing("no C++17 compiler (g++) on PATH: apt-get install g++")
    return cxx


def _check_boost(cxx: str, flags: list[str]) -> None:
    probe = subprocess.run(
        [cxx, *flags, "-x", "c++", "-fsyntax-only", "-"],
        input="#include <boost/version.hpp>\n",
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        raise Missing(
            "the reference needs Boost headers: apt-get install libboost-dev "
            f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else 'not found'})"
        )


def build(ref: Path) -> Path:
    """Compile (once per distinct sources and flags) and return the shared library's path."""
    sources = _sources(ref)
    cxx = _compiler()
    include = [
        "-include",
        str(ref / "noexcept_function_shim.hpp"),
        "-I",
        str(ref / "futoin-core-cpp-api" / "include"),
        "-I",
        str(ref / "futoin-core-cpp-ri-asyncsteps" / "include"),
    ]
    digest = hashlib.sha256(" ".join([cxx, *FLAGS, *include]).encode())
    for src in sources:
        digest.update(src.read_bytes())
    for header in sorted(ref.rglob("*.h*")):
        digest.update(header.read_bytes())
    out_dir = Path(tempfile.gettempdir()) / f"futoin_anyio_ref-{digest.hexdigest()[:16]}"
    lib = out_dir / "libftnref.so"
    if lib.exists():
        return lib
    _check_boost(cxx, include)
    work = Path(tempfile.mkdtemp(prefix="futoin_anyio_ref-build-"))
    try:
        procs = []
        objects = []
        for i, src in enumerate(sources):
            obj = work / f"{i}_{src.stem}.o"
            objects.append(obj)
            procs.append(
                subprocess.Popen(
                    [cxx, *FLAGS, *include, "-c", str(src), "-o", str(obj)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
            if len([p for p in procs if p.poll() is None]) >= (os.cpu_count() or 2):
                procs[-1].wait()
        errors = []
        for src, proc in zip(sources, procs, strict=True):
            output, _ = proc.communicate()
            if proc.returncode != 0:
                errors.append(f"{src}:\n{output}")
        if errors:
            raise RuntimeError("building the C++ reference failed:\n" + "\n".join(errors))
        linked = work / "libftnref.so"
        subprocess.run(
            [cxx, "-shared", "-o", str(linked), *map(str, objects), "-lpthread"], check=True
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        # rename within one file system is atomic: a parallel build never sees half a file
        tmp = out_dir / f".libftnref.{os.getpid()}.so"
        shutil.copyfile(linked, tmp)
        tmp.replace(lib)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib


if __name__ == "__main__":
    where = reference_dir()
    if where is None:
        sys.exit(f"set {ENV} to the folder holding the C++ reference sources")
    print(build(where))
