"""Python values <-> ``FutoInBinaryValue`` (FTN12 §2.7.1).

Ownership follows the C++ reference implementation (the spec leaves it open):

- ``FutoInArgs *`` given to ``success()`` and the ``FutoInArgs *`` handed to an
  execute callback are both *moved*: the receiver owns every value and calls its
  ``type->cleanup`` exactly once, or moves it on (taking it and setting the slot's
  ``type`` to NULL). Values still in their slots when an execute callback we called
  returns are cleaned up by us, so a callee that only reads them leaks nothing.

Values we send use types whose cleanup releases the memory Python keeps for them (a
registry entry keyed by the data pointer, so the receiver may copy the value struct
around). Received integers, floats and strings keep their binary type: sent on
unchanged, an ``INT32`` stays an ``INT32`` (see :class:`BinaryInt`).
"""

from __future__ import annotations

import inspect
import sys
import weakref
from typing import Any, Final, final

from ._ffi import ffi, lib

__all__ = (
    "FTN_BASE_TYPE_MASK",
    "FTN_COMPLEX_TYPE_MASK",
    "FTN_TYPE_ARRAY",
    "FTN_TYPE_BOOL",
    "FTN_TYPE_CUSTOM_OBJECT",
    "FTN_TYPE_DOUBLE",
    "FTN_TYPE_FLOAT",
    "FTN_TYPE_INT8",
    "FTN_TYPE_INT16",
    "FTN_TYPE_INT32",
    "FTN_TYPE_INT64",
    "FTN_TYPE_STRING",
    "FTN_TYPE_STRING16",
    "FTN_TYPE_STRING32",
    "FTN_TYPE_UINT8",
    "FTN_TYPE_UINT16",
    "FTN_TYPE_UINT32",
    "FTN_TYPE_UINT64",
    "MAX_ARGS",
    "BinaryFloat",
    "BinaryInt",
    "BinaryStr",
    "ForeignObject",
    "Typed",
)

FTN_TYPE_CUSTOM_OBJECT: Final = 0x01
FTN_TYPE_STRING: Final = 0x02
FTN_TYPE_STRING16: Final = 0x03
FTN_TYPE_STRING32: Final = 0x04
FTN_TYPE_BOOL: Final = 0x05
FTN_TYPE_INT8: Final = 0x06
FTN_TYPE_INT16: Final = 0x07
FTN_TYPE_INT32: Final = 0x08
FTN_TYPE_INT64: Final = 0x09
FTN_TYPE_UINT8: Final = 0x0A
FTN_TYPE_UINT16: Final = 0x0B
FTN_TYPE_UINT32: Final = 0x0C
FTN_TYPE_UINT64: Final = 0x0D
FTN_TYPE_FLOAT: Final = 0x0E
FTN_TYPE_DOUBLE: Final = 0x0F
FTN_BASE_TYPE_MASK: Final = 0x0F
FTN_TYPE_ARRAY: Final = 0x10
FTN_COMPLEX_TYPE_MASK: Final = 0xF0

#: ``FutoInArgs`` holds four values (§2.7.2).
MAX_ARGS: Final = 4

# base type -> (union field, C element type)
_SCALARS: Final[dict[int, tuple[str, str]]] = {
    FTN_TYPE_BOOL: ("b", "bool"),
    FTN_TYPE_INT8: ("i8", "int8_t"),
    FTN_TYPE_INT16: ("i16", "int16_t"),
    FTN_TYPE_INT32: ("i32", "int32_t"),
    FTN_TYPE_INT64: ("i64", "int64_t"),
    FTN_TYPE_UINT8: ("u8", "uint8_t"),
    FTN_TYPE_UINT16: ("u16", "uint16_t"),
    FTN_TYPE_UINT32: ("u32", "uint32_t"),
    FTN_TYPE_UINT64: ("u64", "uint64_t"),
    FTN_TYPE_FLOAT: ("f", "float"),
    FTN_TYPE_DOUBLE: ("d", "double"),
}
_ENDIAN = "le" if sys.byteorder == "little" else "be"
# string base type -> (union field, C unit type, unit size, codec)
_STRINGS: Final[dict[int, tuple[str, str, int, str]]] = {
    FTN_TYPE_STRING: ("cstr", "char", 1, "utf-8"),
    FTN_TYPE_STRING16: ("cstr16", "char16_t", 2, f"utf-16-{_ENDIAN}"),
    FTN_TYPE_STRING32: ("cstr32", "char32_t", 4, f"utf-32-{_ENDIAN}"),
}
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1

_PLAIN = [lib.ftnpy_type(i, 0) for i in range(32)]
_OWNED = [lib.ftnpy_type(i, 1) for i in range(32)]
_PYOBJ_PLAIN = _PLAIN[FTN_TYPE_CUSTOM_OBJECT]
_PYOBJ_OWNED = _OWNED[FTN_TYPE_CUSTOM_OBJECT]

# Memory of values moved to a foreign receiver, until it calls type->cleanup.
_moved: dict[int, Any] = {}


@final
class Typed:
    """A value with an explicit binary type, e.g. ``Typed(FTN_TYPE_INT8, 5)``.

    Without it, ``bool`` is sent as ``FTN_TYPE_BOOL``, ``int`` as ``INT64`` (``UINT64`` above
    the signed range), ``float`` as ``DOUBLE``, ``str`` as UTF-8 ``STRING``, ``bytes`` as an
    ``ARRAY | UINT8``, a list of numbers as an array of ``INT64``/``DOUBLE``/``BOOL``. Use it
    for other widths, UTF-16/32 strings or arrays of another element type.
    """

    __slots__ = ("flags", "value")

    def __init__(self, flags: int, value: Any) -> None:
        base, cx = flags & FTN_BASE_TYPE_MASK, flags & FTN_COMPLEX_TYPE_MASK
        if base == 0 or cx not in (0, FTN_TYPE_ARRAY):
            raise ValueError(f"unknown binary type flags 0x{flags:02X}")
        if cx and base not in _SCALARS:
            raise ValueError(f"arrays of type 0x{base:02X} are not supported")
        self.flags = flags
        self.value = value

    def __repr__(self) -> str:
        return f"Typed(0x{self.flags:02X}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Typed):
            return NotImplemented
        return self.flags == other.flags and self.value == other.value

    __hash__ = None  # type: ignore[assignment]


class BinaryInt(int):
    """An integer received from C with a width other than ``INT64``: sent on, it keeps it.

    ``repr()`` shows the width (``Int32(42)``); ``str()`` and ``format()`` give the number, as
    for ``int`` (``f"{x}"`` is ``42``, ``f"{x:>5}"`` is ``   42``).

    Arithmetic gives plain ``int`` (sent as ``INT64``): wrap the result in :class:`Typed` to
    send another width.
    """

    __slots__ = ()
    flags: int = FTN_TYPE_INT64

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int.__repr__(self)})"

    # int has no __str__ of its own (object.__str__ calls repr()), and format() with an empty
    # spec calls str(): without this, f"{x}" would show the width too.
    def __str__(self) -> str:
        return int.__repr__(self)


class BinaryFloat(float):
    """A ``FTN_TYPE_FLOAT`` received from C: sent on, it stays a 32-bit float.

    ``repr()`` shows the width (``BinaryFloat(1.5)``); ``str()`` and ``format()`` give the value.
    """

    __slots__ = ()
    flags: int = FTN_TYPE_FLOAT

    def __repr__(self) -> str:
        return f"{type(self).__name__}({float.__repr__(self)})"

    def __str__(self) -> str:  # as for BinaryInt: float's str() is its repr()
        return float.__repr__(self)


class BinaryStr(str):
    """A UTF-16 or UTF-32 string received from C: sent on, it keeps its encoding.

    ``repr()`` shows the width (``Str16('x')``); ``str()`` and ``format()`` give the text.
    """

    __slots__ = ()
    flags: int = FTN_TYPE_STRING

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str.__repr__(self)})"


def _width_class(base: type, flags: int) -> type:
    name = {
        FTN_TYPE_INT8: "Int8", FTN_TYPE_INT16: "Int16", FTN_TYPE_INT32: "Int32",
        FTN_TYPE_UINT8: "UInt8", FTN_TYPE_UINT16: "UInt16", FTN_TYPE_UINT32: "UInt32",
        FTN_TYPE_UINT64: "UInt64", FTN_TYPE_STRING16: "Str16", FTN_TYPE_STRING32: "Str32",
    }[flags]
    return type(name, (base,), {"__slots__": (), "flags": flags, "__module__": __name__})


# received base type -> the class that keeps it (INT64, DOUBLE, UTF-8 STRING stay plain)
_KEEP: Final[dict[int, type]] = {
    **{f: _width_class(BinaryInt, f) for f in (
        FTN_TYPE_INT8, FTN_TYPE_INT16, FTN_TYPE_INT32,
        FTN_TYPE_UINT8, FTN_TYPE_UINT16, FTN_TYPE_UINT32, FTN_TYPE_UINT64)},
    FTN_TYPE_FLOAT: BinaryFloat,
    FTN_TYPE_STRING16: _width_class(BinaryStr, FTN_TYPE_STRING16),
    FTN_TYPE_STRING32: _width_class(BinaryStr, FTN_TYPE_STRING32),
}
_KEPT_TYPES: Final = frozenset(_KEEP.values())


@final
class ForeignObject:
    """A custom object (``FTN_TYPE_CUSTOM_OBJECT``) from another technology.

    ``p``, ``custom_data`` and ``length`` are the raw fields. We own it: its ``type->cleanup``
    runs exactly once, when this object is garbage collected, unless it was sent on to C
    (moved: the receiver owns it then, and this object can no longer be sent).
    """

    __slots__ = ("__weakref__", "_finalizer", "_value")

    _value: Any
    _finalizer: weakref.finalize[Any, Any] | None

    def __init__(self) -> None:
        raise TypeError("ForeignObject is created by the binary bridge only")

    @classmethod
    def _create(cls, slot: Any, owned: bool) -> ForeignObject:
        self = object.__new__(cls)
        value = ffi.new("FutoInBinaryValue *")
        ffi.memmove(value, slot, ffi.sizeof("FutoInBinaryValue"))
        self._value = value
        self._finalizer = weakref.finalize(self, lib.ftnpy_reset, value) if owned else None
        return self

    @property
    def p(self) -> Any:
        """The value's ``p`` field (``const void *``)."""
        return self._value.p

    @property
    def custom_data(self) -> Any:
        """The value's ``custom_data`` field (``void *``)."""
        return self._value.custom_data

    @property
    def length(self) -> int:
        """The value's ``length`` field."""
        return int(self._value.length)

    @property
    def owned(self) -> bool:
        """Whether this object will call the foreign cleanup (it is not merely borrowed)."""
        return self._finalizer is not None and self._finalizer.alive

    def _move_out(self) -> Any:
        """Give up ownership (the value is being moved to another receiver)."""
        fin = self._finalizer
        if fin is not None:
            if not fin.alive:
                raise ValueError("this ForeignObject was already sent to C (values are moved)")
            fin.detach()
        return self._value

    def __repr__(self) -> str:
        return f"<ForeignObject p={self.p} length={self.length} owned={self.owned}>"


def release(v: Any) -> None:
    """``type->cleanup`` of a value we moved out: drop the memory we kept for it."""
    flags = v.type.flags
    key = v.custom_data if flags == FTN_TYPE_CUSTOM_OBJECT else v.p
    _moved.pop(int(ffi.cast("uintptr_t", key)), None)


def _infer(value: Any) -> int:
    if value is True or value is False:
        return FTN_TYPE_BOOL
    tp = type(value)
    if tp is int:
        return FTN_TYPE_INT64 if value <= _INT64_MAX else FTN_TYPE_UINT64
    if tp in _KEPT_TYPES:
        return int(tp.flags)
    if tp is float:
        return FTN_TYPE_DOUBLE
    if tp is str:
        return FTN_TYPE_STRING
    if isinstance(value, (bytes, bytearray, memoryview)):
        return FTN_TYPE_ARRAY | FTN_TYPE_UINT8
    if tp is list or tp is tuple:
        return _infer_array(value)
    return FTN_TYPE_CUSTOM_OBJECT


def _infer_array(items: list[Any] | tuple[Any, ...]) -> int:
    kinds: set[type] = set()
    for item in items:
        if item is True or item is False:
            kinds.add(bool)
        elif isinstance(item, (int, float)):
            kinds.add(float if isinstance(item, float) else int)
        else:
            return FTN_TYPE_CUSTOM_OBJECT
    if kinds == {bool}:
        return FTN_TYPE_ARRAY | FTN_TYPE_BOOL
    if float in kinds:
        if bool in kinds:
            return FTN_TYPE_CUSTOM_OBJECT
        return FTN_TYPE_ARRAY | FTN_TYPE_DOUBLE
    if bool in kinds:
        return FTN_TYPE_CUSTOM_OBJECT
    return FTN_TYPE_ARRAY | FTN_TYPE_INT64


def emit(slot: Any, value: Any, owned: bool, keep: list[Any]) -> None:
    """Fill ``slot`` (a ``FutoInBinaryValue *``) from a Python value.

    ``keep`` collects what must stay alive for a borrowed call. With ``owned`` the memory is
    registered until the receiver calls ``type->cleanup``.
    """
    if type(value) is Typed:
        flags: int = value.flags
        value = value.value
    elif type(value) is ForeignObject:
        raw = value._move_out() if owned else value._value
        ffi.memmove(slot, raw, ffi.sizeof("FutoInBinaryValue"))
        return
    else:
        flags = _infer(value)
    base = flags & FTN_BASE_TYPE_MASK
    mem: Any = None
    if flags & FTN_TYPE_ARRAY:
        ctype = _SCALARS[base][1]
        if base == FTN_TYPE_UINT8 and isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            mem = ffi.new("uint8_t[]", max(len(data), 1))
            ffi.memmove(mem, data, len(data))
            count = len(data)
        else:
            items = list(value)
            count = len(items)
            try:
                mem = ffi.new(f"{ctype}[]", items or 1)
            except OverflowError as exc:
                raise ValueError(f"array item out of range for {ctype}: {exc}") from None
        slot.p = mem
        slot.length = count
    elif base in _SCALARS:
        field, ctype = _SCALARS[base]
        if base <= FTN_TYPE_UINT64 and base != FTN_TYPE_BOOL:
            value = _check_int(value, ctype)
        elif base == FTN_TYPE_BOOL:
            value = bool(value)
        try:
            setattr(slot, field, value)
        except OverflowError:
            raise ValueError(f"{value!r} does not fit in {ctype}") from None
        slot.type = _PLAIN[flags]  # nothing to clean up
        return
    elif base in _STRINGS:
        if not isinstance(value, str):
            raise TypeError(f"a string type needs a str, got {type(value).__name__}")
        field, unit, size, codec = _STRINGS[base]
        data = value.encode(codec)  # UnicodeEncodeError (a ValueError) on lone surrogates
        count = len(data) // size
        mem = ffi.new(f"{unit}[]", count + 1)
        ffi.memmove(mem, data, len(data))
        setattr(slot, field, mem)
        slot.length = count
    else:  # custom object: any Python object, passed by handle
        mem = ffi.new_handle(value)
        slot.custom_data = mem
        slot.p = ffi.NULL
        if owned:
            _moved[int(ffi.cast("uintptr_t", mem))] = mem
            slot.type = _PYOBJ_OWNED
        else:
            keep.append(mem)
            slot.type = _PYOBJ_PLAIN
        return
    if owned:
        _moved[int(ffi.cast("uintptr_t", mem))] = mem
        slot.type = _OWNED[flags]
    else:
        keep.append(mem)
        slot.type = _PLAIN[flags]


def _check_int(value: Any, ctype: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{ctype} needs an int, got {type(value).__name__}")
    return value


def emit_args(args: tuple[Any, ...], owned: bool, keep: list[Any]) -> Any:
    """A new ``FutoInArgs *`` holding ``args`` (at most :data:`MAX_ARGS`)."""
    if len(args) > MAX_ARGS:
        raise TypeError(
            f"the binary interface passes at most {MAX_ARGS} arguments, got {len(args)}"
        )
    cargs = ffi.new("FutoInArgs *")
    slots = cargs.args
    try:
        for i, value in enumerate(args):
            emit(slots + i, value, owned, keep)
    except BaseException:
        lib.ftnpy_reset_args(cargs)
        raise
    return cargs


def receive(slot: Any, owned: bool) -> Any:
    """The Python value of ``slot`` (whose type is not NULL).

    With ``owned`` the slot is consumed: its cleanup runs (or, for a foreign custom object,
    moves into the returned :class:`ForeignObject`) and the slot is reset.
    """
    tp = slot.type
    try:
        value = _convert(slot, tp, owned)
    except BaseException:
        if owned:
            lib.ftnpy_reset(slot)
        raise
    if owned:
        if type(value) is ForeignObject:
            # moved into the wrapper: clear without cleanup
            slot.type = ffi.NULL
            slot.u64 = 0
            slot.custom_data = ffi.NULL
            slot.length = 0
        else:
            lib.ftnpy_reset(slot)
    return value


def _convert(slot: Any, tp: Any, owned: bool) -> Any:
    flags = tp.flags
    base, cx = flags & FTN_BASE_TYPE_MASK, flags & FTN_COMPLEX_TYPE_MASK
    if cx == 0:
        scalar = _SCALARS.get(base)
        if scalar is not None:
            value = getattr(slot, scalar[0])
            keep = _KEEP.get(base)
            return value if keep is None else keep(value)
        string = _STRINGS.get(base)
        if string is not None:
            text = _string(slot, base, string)
            keep = _KEEP.get(base)
            return text if keep is None else keep(text)
        if base == FTN_TYPE_CUSTOM_OBJECT:
            if tp in (_PYOBJ_PLAIN, _PYOBJ_OWNED):
                return ffi.from_handle(slot.custom_data)
            return ForeignObject._create(slot, owned)
    elif cx == FTN_TYPE_ARRAY and base in _SCALARS:
        count = int(slot.length)
        if count == 0:
            return b"" if base == FTN_TYPE_UINT8 else []
        if slot.p == ffi.NULL:
            raise ValueError(f"array value of {count} items with a NULL pointer")
        if base == FTN_TYPE_UINT8:
            return ffi.buffer(slot.p, count)[:]
        return ffi.unpack(ffi.cast(_SCALARS[base][1] + " *", slot.p), count)
    elif cx == FTN_TYPE_ARRAY and base != 0:
        raise ValueError(f"arrays of type 0x{base:02X} are not supported (flags 0x{flags:02X})")
    raise ValueError(f"unknown binary type flags 0x{flags:02X}")


def _string(slot: Any, base: int, spec: tuple[str, str, int, str]) -> str:
    field, _unit, size, codec = spec
    ptr = getattr(slot, field)
    if ptr == ffi.NULL:
        raise ValueError("string value with a NULL pointer")
    count = int(slot.length)
    if count == 0:
        if base == FTN_TYPE_STRING:
            count = len(ffi.string(ptr))
        elif base == FTN_TYPE_STRING16:
            count = lib.ftnpy_strlen16(ptr)
        else:
            count = lib.ftnpy_strlen32(ptr)
    raw = ffi.buffer(ptr, count * size)[:]
    try:
        text: str = raw.decode(codec)
        return text
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid {codec.upper()[:6]} string: {exc.reason}") from None


def receive_args(cargs: Any, owned: bool) -> tuple[Any, ...]:
    """Python values of a ``FutoInArgs *``: the leading slots whose type is not NULL.

    With ``owned`` every non-empty slot is consumed (each cleanup runs once), also on error.
    """
    slots = cargs.args
    out: list[Any] = []
    error: BaseException | None = None
    gap = False
    for i in range(MAX_ARGS):
        slot = slots + i
        if slot.type == ffi.NULL:
            gap = True
            continue
        if gap and error is None:
            error = ValueError(f"FutoInArgs: argument {i} follows an empty slot")
        if error is not None:
            if owned:
                lib.ftnpy_reset(slot)
            continue
        try:
            out.append(receive(slot, owned))
        except (ValueError, TypeError) as exc:
            error = exc
    if error is not None:
        raise error
    return tuple(out)


def _positional(func: Any) -> int | None:
    """How many values ``func(asi, ...)`` takes after ``asi``; ``None``: any number."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    n = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind is p.POSITIONAL_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD:
            n += 1
    return max(n - 1, 0)


def fit_args(func: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` cut to the values ``func`` declares (values from C may carry padding)."""
    if not args:
        return args
    n = _positional(func)
    return args if n is None or n >= len(args) else args[:n]


class FromC(tuple[Any, ...]):
    """Step arguments that came from C: the engine calls :meth:`fit` before passing them on.

    The reference implementation pads every call to four values with placeholder objects and
    leaves old values in unused slots; a Python step gets the values it declares.
    """

    __slots__ = ()

    def fit(self, func: Any) -> tuple[Any, ...]:
        return fit_args(func, tuple(self))
