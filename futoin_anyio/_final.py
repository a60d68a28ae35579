"""Final classes in both builds.

A class the compiled build declares ``@cython.final`` in its ``.pxd`` is an extension type that
refuses subclasses, and cannot take ``typing.final``; :func:`refuse_subclasses` makes the pure
build's class refuse them the same way, with the same error.
"""

from __future__ import annotations

from typing import Any

__all__ = ("refuse_subclasses",)


def _no_subclass(cls: type, /, **kwargs: Any) -> None:
    raise TypeError(f"type {cls.__mro__[1].__qualname__!r} is not an acceptable base type")


def refuse_subclasses(cls: type) -> None:
    """Make ``cls`` refuse subclasses (a no-op for an extension type that already does)."""
    if cls.__flags__ & (1 << 10):  # Py_TPFLAGS_BASETYPE: the pure build
        setattr(cls, "__init_subclass__", classmethod(_no_subclass))  # noqa: B010
