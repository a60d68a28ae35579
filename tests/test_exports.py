"""The public surface: every name exported once, from the package, with a public __module__."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from types import FunctionType

import pytest

import futoin_anyio
from futoin_anyio import AsyncSteps
from futoin_anyio._frame import COMPILED

#: The public classes that are extension types in the compiled build.
_EXTENSION_TYPES = ("AsyncSteps", "AsyncTool", "Handle", "Limiter", "Mutex", "ParallelSteps",
                    "State", "Throttle")


def test_all_names_are_exported_and_public() -> None:
    assert len(set(futoin_anyio.__all__)) == len(futoin_anyio.__all__)
    for name in futoin_anyio.__all__:
        obj = getattr(futoin_anyio, name)
        if COMPILED and name in _EXTENSION_TYPES:
            # An extension type's __module__ is fixed when it is compiled (see internals.rst).
            assert obj.__module__.startswith("futoin_anyio._"), name
        else:
            assert obj.__module__ == "futoin_anyio", name


def test_one_version_source() -> None:
    """The installed metadata and ``__version__`` agree; pyproject.toml states no version."""
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)*", futoin_anyio.__version__)
    assert importlib.metadata.version("futoin_anyio") == futoin_anyio.__version__
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.exists():  # a source checkout
        text = pyproject.read_text(encoding="utf-8")
        assert re.search(r'^dynamic = \[.*"version".*\]$', text, re.M)
        assert not re.search(r"^version = [\"']", text, re.M)
        assert 'version = { attr = "futoin_anyio.__version__" }' in text


def test_binary_names_are_exported_and_public() -> None:
    import futoin_anyio.binary as binary

    assert len(set(binary.__all__)) == len(binary.__all__)
    not_exported = ("os", "annotations", "importlib")
    assert sorted(binary.__all__) == sorted(
        name for name in vars(binary) if not name.startswith("_") and name not in not_exported
    )
    for name in binary.__all__:
        obj = getattr(binary, name)
        if isinstance(obj, (type, FunctionType)):
            assert obj.__module__ == "futoin_anyio.binary", name
    # every public method of ForeignAsyncSteps is documented (the API page lists them)
    for name, member in vars(binary.ForeignAsyncSteps).items():
        if not name.startswith("_") and callable(getattr(member, "fget", member)):
            assert getattr(member, "__doc__", None), name


def test_contract_imports() -> None:
    from futoin_anyio import (  # noqa: F401
        AsyncSteps,
        AsyncTool,
        Errors,
        FutoInError,
        Handle,
        ISync,
        Limiter,
        Mutex,
        State,
        Throttle,
    )


def test_spec_aliases_are_the_primary_methods() -> None:
    aliases = {
        "forEach": "for_each", "loopForEach": "for_each", "breakLoop": "break_loop",
        "continueLoop": "continue_loop", "successStep": "success_step",
        "setTimeout": "set_timeout", "setCancel": "set_cancel",
        "waitExternal": "wait_external", "copyFrom": "copy_from", "newInstance": "new_instance",
    }
    for alias, primary in aliases.items():
        assert getattr(AsyncSteps, alias) is getattr(AsyncSteps, primary), alias
    for name in ("add", "parallel", "sync", "loop", "repeat", "success", "error", "cancel",
                 "execute", "promise", "stack", "binary", "wrap", "await_", "clone"):
        assert callable(getattr(AsyncSteps, name)), name


def test_error_codes() -> None:
    from futoin_anyio import Errors, FutoInError

    for code in ("ConnectError", "CommError", "UnknownInterface", "NotSupportedVersion",
                 "NotImplemented", "Unauthorized", "InternalError", "InvokerError",
                 "InvalidRequest", "DefenseRejected", "PleaseReauth", "SecurityError",
                 "Timeout", "LoopBreak", "LoopCont", "Cancelled"):
        assert getattr(Errors, code) == code
    err = FutoInError("Code", "info")
    assert (err.code, err.info, str(err)) == ("Code", "info", "Code: info")
    assert str(FutoInError("Code")) == "Code"


@pytest.mark.parametrize(
    "name", ["AsyncTool", "Handle", "Limiter", "Mutex", "ParallelSteps", "Throttle"])
def test_final_classes_refuse_subclasses(name: str) -> None:
    # Final in both builds: an extension type declared final (compiled), a class that refuses
    # subclasses the same way (pure; _final.refuse_subclasses).
    with pytest.raises(TypeError, match=rf"{name}' is not an acceptable base type"):
        type("Mine", (getattr(futoin_anyio, name),), {})
