# cython: auto_pickle=False
"""The state object shared by a root and all its steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsIndex

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # the pure build
        from . import _nocython as cython

__all__ = ("State",)


class State(dict[str, Any]):
    """A ``dict`` with attribute access, shared by a root, its steps and parallel branches.

    ``state.x is state["x"]``; calling the state returns it, so the spec's ``asi.state()`` works.
    A name the ``dict`` itself uses (``items``, ``keys``, ``values``, ``get``, ``pop``,
    ``update``, ``copy``…) reads back as the method: assigning or deleting it as an attribute
    raises :class:`AttributeError`; use ``state["items"]`` for such a variable.
    A variable that is not set raises one error for both spellings, a ``KeyError`` that is
    also an ``AttributeError`` (``hasattr()`` and ``getattr()`` with a default work).
    Pre-defined keys: ``error_info``, ``last_exception`` and ``async_stack`` (the callables of the
    active steps when the last error was raised, outermost first; empty before any error).
    """

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for key, value in _PREDEFINED.items():
            self.setdefault(key, value)

    def __getattribute__(self, name: str) -> Any:
        # The compiled build's attribute read: a variable straight from the dict, a dict
        # attribute (a reserved name) or a subclass's own one as usual. (The pure build reads
        # through ``dict.__getitem__`` instead: see below.) A missing one raises from
        # ``__missing__``.
        if name in _RESERVED or type(self) is not State:
            try:
                return PyObject_GenericGetAttr(self, name)
            except AttributeError:
                if name in _RESERVED:
                    raise
        return self[name]

    def __missing__(self, name: str) -> Any:
        raise MissingVariable(name)

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        # Every protocol pickles it as protocol 2 pickles a dict subclass (the class, then its
        # items): protocols 0 and 1 refuse an extension type (the compiled build's State).
        return object.__reduce_ex__(self, max(int(protocol), 2))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _RESERVED:
            _reserved(name)
        self[name] = value

    def __delattr__(self, name: str) -> None:
        if name in _RESERVED:
            _reserved(name)
        try:
            del self[name]
        except KeyError:
            raise MissingVariable(name) from None

    def __call__(self) -> State:
        return self

    def __repr__(self) -> str:
        return f"State({dict.__repr__(self)})"


class MissingVariable(KeyError, AttributeError):
    """A state variable that is not set: a ``KeyError`` for ``state["x"]`` and an
    ``AttributeError`` for ``state.x`` (so ``hasattr()`` and ``getattr(state, "x", default)``
    work), from the one lookup both go through."""

    def __str__(self) -> str:
        return f"state has no variable {self.args[0]!r}"


#: Names that attribute access reads from the class (dict methods...), never from the variables.
_RESERVED = frozenset(dir(State))

if not cython.compiled:
    # The pure build: a variable is read in C, by dict's own ``__getitem__`` called once the
    # class has no such attribute (half the time of a ``__getattribute__`` in Python).
    PyObject_GenericGetAttr = object.__getattribute__
    del State.__getattribute__
    setattr(State, "__getattr__", dict.__getitem__)  # noqa: B010 (a method, not an attribute)


def _reserved(name: str) -> None:
    raise AttributeError(
        f"state.{name} is the dict attribute State.{name}, not a state variable: "
        f"use state[{name!r}] for a variable of that name")


#: The pre-defined keys of every State (``async_stack``: a list of step callables after an error).
_PREDEFINED: dict[str, Any] = {"error_info": None, "last_exception": None, "async_stack": ()}
