"""The compiled build's ``.pxd`` files agree with the ``.py`` modules they augment.

The ``.py`` files are the source of both builds; each ``.pxd`` beside one declares some of its
classes as extension types (every slot, typed or ``public object``) and some of its functions
and methods as ``cpdef``. A slot added to a class and not to its ``.pxd`` fails the compiled
build at run time (an extension type has no ``__dict__``), a stale one wastes memory, and a
``cpdef`` of a method that is gone fails the build: this test says which, in the pure build
too, so the engine can change without anyone building it compiled.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import futoin_anyio
from futoin_anyio._frame import COMPILED

PACKAGE = Path(futoin_anyio.__file__).resolve().parent
ROOT = PACKAGE.parent
PXDS = sorted(PACKAGE.glob("_*.pxd"))

_CLASS = re.compile(r"^cdef class (\w+)(?:\((\w+)\))?:", re.M)
_FIELD = re.compile(r"^    cdef (?:public |readonly )?(\w+) (.+)$")
_CPDEF = re.compile(r"^( *)cpdef (?:[\w.]+ )?(\w+)\(", re.M)


def _pxd_classes(text: str) -> dict[str, tuple[str | None, set[str]]]:
    """``{class: (base, fields)}`` of the ``cdef class`` blocks of a .pxd."""
    classes: dict[str, tuple[str | None, set[str]]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        found = _CLASS.match(line)
        if found:
            current = set()
            classes[found.group(1)] = (found.group(2), current)
            continue
        if line and not line.startswith((" ", "#")):
            current = None  # the class block ended
        field = _FIELD.match(line)
        if field and current is not None:
            current.update(name.strip() for name in field.group(2).split(","))
    return classes


def _py_classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _slots(cls: ast.ClassDef) -> set[str] | None:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
            value = ast.literal_eval(node.value)
            return {value} if isinstance(value, str) else set(value)
    return None


def _compiled_modules() -> tuple[str, ...]:
    """``COMPILED_MODULES`` of setup.py (read, not imported: importing it would build)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no COMPILED_MODULES")


@pytest.mark.skipif(not (ROOT / "setup.py").exists(), reason="not a source checkout")
def test_every_pxd_module_is_compiled() -> None:
    assert sorted(_compiled_modules()) == sorted(p.stem for p in PXDS)


@pytest.mark.parametrize("pxd", PXDS, ids=[p.name for p in PXDS])
def test_pxd_declares_every_slot_and_no_stale_one(pxd: Path) -> None:
    source = pxd.with_suffix(".py")
    assert source.exists(), f"{pxd.name} augments no .py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    classes = _py_classes(tree)
    declared = _pxd_classes(pxd.read_text(encoding="utf-8"))
    # A module of functions only (_hooks) declares no class; one with classes declares them.
    assert declared or not any(_slots(c) for c in classes.values()), (
        f"{pxd.name} declares no class")
    for name, (base, fields) in declared.items():
        cls = classes.get(name)
        assert cls is not None, f"{pxd.name}: class {name} is not in {source.name}"
        # A subscripted base (``dict[str, Any]``) is the class it subscripts.
        bases = [b.id for b in (c.value if isinstance(c, ast.Subscript) else c for c in cls.bases)
                 if isinstance(b, ast.Name)]
        assert bases == ([base] if base else []), (
            f"{pxd.name}: {name}({base or ''}) but {source.name} has {name}({', '.join(bases)})")
        slots = _slots(cls)
        assert slots is not None, f"{source.name}: {name} has no __slots__"
        if base is not None:
            assert slots == set(), f"{source.name}: {name} adds slots; declare them on {base}"
        missing = slots - fields
        stale = fields - slots
        assert not missing, f"{pxd.name}: {name} lacks {sorted(missing)} (slots of {source.name})"
        assert not stale, f"{pxd.name}: {name} declares {sorted(stale)}, not slots any more"


@pytest.mark.parametrize("pxd", PXDS, ids=[p.name for p in PXDS])
def test_pxd_cpdefs_exist(pxd: Path) -> None:
    """Each ``cpdef`` names a function of the module, or a method of the class it is in."""
    tree = ast.parse(pxd.with_suffix(".py").read_text(encoding="utf-8"))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = _py_classes(tree)
    owner: str | None = None
    for line in pxd.read_text(encoding="utf-8").splitlines():
        found = _CLASS.match(line)
        if found:
            owner = found.group(1)
        elif line and not line.startswith((" ", "#", "@")):
            owner = None
        cpdef = _CPDEF.match(line)
        if cpdef is None:
            continue
        name = cpdef.group(2)
        if cpdef.group(1):
            assert owner is not None
            methods = {n.name for n in classes[owner].body if isinstance(n, ast.FunctionDef)}
            assert name in methods, f"{pxd.name}: {owner}.{name} is not in the .py"
        else:
            assert name in functions, f"{pxd.name}: {name}() is not in the .py"


@pytest.mark.skipif(not COMPILED, reason="the pure build")
def test_compiled_modules_are_loaded_and_up_to_date() -> None:
    """In the compiled build every module of a .pxd is an extension module, built after the
    last change of its sources (an in-place build runs the old code until it is rebuilt)."""
    for pxd in PXDS:
        module = sys.modules.get(f"futoin_anyio.{pxd.stem}")
        assert module is not None and module.__file__ is not None
        built = Path(module.__file__)
        assert built.suffix in (".so", ".pyd"), f"{pxd.stem} is not compiled: {built}"
        if built.parent == pxd.parent:  # an in-place build: sources beside it
            newest = max(pxd.stat().st_mtime, pxd.with_suffix(".py").stat().st_mtime)
            assert built.stat().st_mtime >= newest, (
                f"{built.name} is older than its sources: reinstall (pip install -e .)")


_GLOBAL = re.compile(r"^cdef (?:object|bint|int|Py_ssize_t) (.+)$", re.M)
_SOURCES = [p for d in ("futoin_anyio", "tests", "benchmarks", "examples")
            for p in sorted((ROOT / d).rglob("*.py")) if (ROOT / d).exists()]


@functools.cache
def _sources() -> list[tuple[str, list[ast.ImportFrom]]]:
    """Each source's text and its ``from ... import`` statements (parsed once)."""
    out = []
    for path in _SOURCES:
        text = path.read_text(encoding="utf-8")
        imports = [node for node in ast.walk(ast.parse(text))
                   if isinstance(node, ast.ImportFrom) and node.module]
        out.append((text, imports))
    return out


def _names_taken_from(module: str) -> set[str]:
    """Names any source of the project imports from ``futoin_anyio.<module>``, reads or
    patches as its attribute (``_steps.x``, ``setattr(_steps, "x", ...)``)."""
    taken: set[str] = set()
    attr = re.compile(rf"\b{module}\.(\w+)")
    patched = re.compile(rf"setattr\([\w.]*{module}\s*,\s*[\"'](\w+)[\"']")
    for text, imports in _sources():
        for node in imports:
            if node.module.split(".")[-1] == module:  # type: ignore[union-attr]
                taken.update(alias.name for alias in node.names)
        taken.update(attr.findall(text))
        taken.update(patched.findall(text))
    return taken


@pytest.mark.parametrize("pxd", PXDS, ids=[p.name for p in PXDS])
def test_module_globals_in_c_are_nobody_elses(pxd: Path) -> None:
    """A module global a ``.pxd`` holds in a C variable (``cdef object``, or a C type for the
    module's own state) is no attribute of the compiled module: nothing may import it from
    there, read it or patch it on the module; and it is a name the module binds at its top level
    (an import or an assignment). The module's own functions may rebind it (``global``): they
    read and write the C variable."""
    names = {n.strip() for line in _GLOBAL.findall(pxd.read_text(encoding="utf-8"))
             for n in line.split(",")}
    if not names:
        return
    tree = ast.parse(pxd.with_suffix(".py").read_text(encoding="utf-8"))
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
        elif isinstance(node, ast.Try):  # an import with a fallback
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    bound.update((a.asname or a.name).split(".")[0] for a in inner.names)
                elif isinstance(inner, ast.Assign):
                    bound.update(t.id for t in inner.targets if isinstance(t, ast.Name))
    assert not names - bound, f"{pxd.name}: {sorted(names - bound)} are not bound by the module"
    taken = names & _names_taken_from(pxd.stem)
    assert not taken, f"{pxd.name}: {sorted(taken)} are taken from the module elsewhere"


def test_step_objects_carry_no_vtable() -> None:
    """``AsyncSteps`` adds nothing to its base's layout: a ``cpdef`` method on it would give
    every step object a vtable pointer (16 more bytes each in pymalloc); the hot helpers that
    need typed locals are module functions instead (``_steps._set_timeout``...)."""
    from futoin_anyio import AsyncSteps
    from futoin_anyio._frame import _Frame

    assert AsyncSteps.__basicsize__ == _Frame.__basicsize__


#: The engine's classes with a free list, and how many freed objects it keeps (the objects a
#: request makes, times the requests in flight whose objects are freed and made again at once).
FREE_LISTS = {
    "_frame._Frame": 512, "_steps.AsyncSteps": 512, "_frame._Ext": 512, "_flow._Flow": 256,
    "_driver.Handle": 128, "_driver._RawTask": 128, "_tool.AsyncTool": 128,  # (_Driver's)
    "_mutex._Entry": 128, "_throttle._Section": 128, "_limiter._Section": 128,
    "_parallel.ParallelSteps": 128, "_parallel._ParallelRun": 128, "_alarm.Alarm": 128,
}


def _blocks_for_new(make: Callable[[], object], count: int) -> int:
    """Blocks of the object allocator taken by ``count`` new objects of ``make`` made right
    after as many were freed."""
    import gc

    objects: list[object] = [None] * count
    gc.disable()
    try:
        for i in range(count):
            objects[i] = make()
        for i in range(count):
            objects[i] = None  # freed: into the free list, if there is one
        before = sys.getallocatedblocks()
        for i in range(count):
            objects[i] = make()
        return sys.getallocatedblocks() - before
    finally:
        objects.clear()
        gc.enable()


@pytest.mark.parametrize("name", sorted(FREE_LISTS))
def test_free_lists_serve_new_objects(name: str) -> None:
    """The compiled build takes the objects a request makes from free lists, as many as
    :data:`FREE_LISTS` says: new ones then cost no block of the object allocator and do not
    count towards the cyclic collector's next run. Cython makes the list only for a class the
    ``.py`` marks ``@cython.cclass`` (it ignores one only a ``.pxd`` declares). Control: the
    pure build allocates a block for each."""
    import importlib

    module, cls_name = name.split(".")
    cls = getattr(importlib.import_module(f"futoin_anyio.{module}"), cls_name)
    count = FREE_LISTS[name]
    allocated = _blocks_for_new(lambda: cls.__new__(cls), count)
    # The measuring itself may count one block (the int ``before``).
    if COMPILED:
        assert allocated <= 1, allocated
    else:
        assert allocated >= count, allocated


@pytest.mark.skipif(not COMPILED, reason="the pure build: a Python coroutine has no closure")
def test_coroutine_closures_come_from_free_lists() -> None:
    """The closure of a compiled coroutine (here ``promise()``'s) comes from a free list of
    128 (``setup.py`` sets Cython's ``closure_freelist_size``): 128 new coroutines take one block
    each, their own, not two (Cython's default list of 8 would serve 8 of them)."""
    from futoin_anyio import AsyncSteps

    count = 128
    roots = [AsyncSteps() for _ in range(count)]
    made = iter(range(2 * count))

    def coroutine() -> object:
        coro = roots[next(made) % count].promise()
        coro.close()  # never started: no warning, nothing run
        return coro

    allocated = _blocks_for_new(coroutine, count)
    assert allocated <= count + 1, allocated


def test_nocython_stands_in_for_the_decorators() -> None:
    """Where Cython is not installed, the modules that import ``cython`` (``_frame``, ``_flow``,
    ``_steps``, ``_driver``, ``_parallel``, ``_mutex``, ``_throttle``, ``_limiter``, ``_alarm``)
    take ``_nocython``: its decorators leave a class or a function as it is, and it says the
    build is not compiled."""
    from futoin_anyio import _nocython

    class Probe:
        pass

    def probe() -> None:
        pass

    assert _nocython.compiled is False
    assert _nocython.cclass(Probe) is Probe
    assert _nocython.freelist(8)(Probe) is Probe
    assert _nocython.locals(x=int, y=Probe)(probe) is probe


def test_the_pure_build_imports_without_cython(tmp_path: Path) -> None:
    """The pure build's modules import with no ``cython`` module at all (a fresh machine
    without Cython): a copy of the package's sources, ``import cython`` made to fail."""
    import shutil
    import subprocess

    copy = tmp_path / "futoin_anyio"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    code = ("import sys; sys.modules['cython'] = None; import futoin_anyio, anyio; "
            "from futoin_anyio import AsyncSteps; "
            "assert not futoin_anyio.COMPILED and 'futoin_anyio._nocython' in sys.modules; "
            "seen = []; root = AsyncSteps(); "
            "root.add(lambda asi: asi.repeat(3, lambda asi, i: seen.append(i))); "
            "root.add(lambda asi: asi.success(7)); root.add(lambda asi, v: seen.append(v)); "
            "anyio.run(root.promise); assert seen == [0, 1, 2, 7], seen; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
