"""What ``import cython`` gives the engine's modules where Cython is not installed: the pure
build's stand-ins for the decorators they use (no-ops, as in Cython's own pure-Python shadow)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_C = TypeVar("_C", bound=type)
_F = TypeVar("_F", bound=Callable[..., Any])

#: The compiled build makes this a constant True.
compiled = False


def cclass(cls: _C) -> _C:
    """An extension type in the compiled build; a plain class here."""
    return cls


def freelist(size: int) -> Callable[[_C], _C]:
    """A free list of ``size`` objects in the compiled build; nothing here."""
    del size
    return cclass


def locals(**types: object) -> Callable[[_F], _F]:
    """C types of a function's locals in the compiled build; nothing here."""
    del types
    return _same


def _same(func: _F) -> _F:
    return func
