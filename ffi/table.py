"""The 25 functions of ``FutoInAsyncStepsAPI`` (FTN12 2.7.3), in the spec's order: declared once.

``build.py`` generates from it, for our side, each table function ``ftnpy_<name>`` (check the
pointer, call the ``extern "Python"`` trampoline ``ftnpy_py_<name>`` with the Python handle),
the trampolines' declarations and the table's initialiser (except the few in :data:`CUSTOM`,
written in ``ftnpy.c``); for the foreign side, the ``ftnpy_f_<name>`` functions through which
Python calls a foreign table (each checks the pointer and the function for NULL).
``tests/test_binary_table.py`` checks it against ``futoin.h`` and the Python side.

Adding a table function: ``futoin.h`` (and its cffi copy ``futoin_cdef.h``), an entry here, the
trampoline in ``_ours.py`` and the method of ``ForeignAsyncSteps``.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    pos: int  #: index in FutoInAsyncStepsAPI.funcs
    field: str  #: the FutoInAsyncStepsAPI member
    name: str  #: our C / Python suffix: ftnpy_f_<name>, ftnpy_py_<name>
    params: str  #: parameters after ``FutoInAsyncSteps* bsi``
    args: str  #: call arguments after ``bsi``
    ret: str | None  #: return type (passed back through an ``out`` pointer), None for void


TABLE: tuple[Entry, ...] = (
    Entry(
        0,
        "add",
        "add",
        "void* data, FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh",
        "data, f, eh",
        None,
    ),
    Entry(
        1,
        "parallel",
        "parallel",
        "void* data, FutoInAsyncSteps_error_callback eh",
        "data, eh",
        "FutoInAsyncSteps*",
    ),
    Entry(
        2,
        "stateVariable",
        "state_variable",
        "void* data, const char* name, ftnpy_alloc_f allocate, ftnpy_state_cleanup_f cleanup",
        "data, name, allocate, cleanup",
        "void*",
    ),
    Entry(
        3, "stack", "stack", "size_t size, ftnpy_stack_cleanup_f cleanup", "size, cleanup", "void*"
    ),
    Entry(4, "success", "success", "FutoInArgs* args", "args", None),
    Entry(
        5, "handle_error", "handle_error", "const char* code, const char* info", "code, info", None
    ),
    Entry(6, "setTimeout", "set_timeout", "uint32_t ms", "ms", None),
    Entry(
        7,
        "setCancel",
        "set_cancel",
        "void* data, FutoInAsyncSteps_cancel_callback ch",
        "data, ch",
        None,
    ),
    Entry(8, "waitExternal", "wait_external", "", "", None),
    Entry(
        9, "loop", "loop", "void* data, ftnpy_loop_f f, const char* label", "data, f, label", None
    ),
    Entry(
        10,
        "repeat",
        "repeat",
        "void* data, size_t count, ftnpy_repeat_f f, const char* label",
        "data, count, f, label",
        None,
    ),
    Entry(11, "breakLoop", "break_loop", "const char* label", "label", None),
    Entry(12, "continueLoop", "continue_loop", "const char* label", "label", None),
    Entry(
        13, "execute", "execute", "void* data, FutoInAsyncSteps_error_callback eh", "data, eh", None
    ),
    Entry(14, "cancel", "cancel", "", "", None),
    Entry(
        15,
        "addSync",
        "add_sync",
        "FutoInSync* sync, void* data, FutoInAsyncSteps_execute_callback f, "
        "FutoInAsyncSteps_error_callback eh",
        "sync, data, f, eh",
        None,
    ),
    Entry(16, "rootId", "root_id", "", "", "ptrdiff_t"),
    Entry(17, "isValid", "is_valid", "", "", "int"),
    Entry(18, "newInstance", "new_instance", "", "", "FutoInAsyncSteps*"),
    Entry(19, "free", "free", "", "", None),
    Entry(
        20,
        "sched_immediate",
        "sched_immediate",
        "void* data, ftnpy_sched_f cb",
        "data, cb",
        "FutoInHandle",
    ),
    Entry(
        21,
        "sched_deferred",
        "sched_deferred",
        "uint32_t ms, void* data, ftnpy_sched_f cb",
        "ms, data, cb",
        "FutoInHandle",
    ),
    Entry(22, "sched_cancel", "sched_cancel", "FutoInHandle* handle", "handle", None),
    Entry(23, "sched_is_valid", "sched_is_valid", "FutoInHandle* handle", "handle", "int"),
    Entry(24, "is_same_thread", "is_same_thread", "", "", "int"),
)


# --- scheduler handles as a C++ IAsyncTool ----------------------------------------------------
#
# sched_immediate()/sched_deferred() return a FutoInHandle that C++ code written against the
# reference (core-cpp-api 0.3.4, futoin/iasynctool.hpp) turns into an IAsyncTool::Handle:
# ``internal_ = data1``, ``async_tool_ = data2``, ``cookie_ = data3``. Its cancel() and
# ``operator bool`` are C++ virtual calls through data2: ``async_tool_->cancel(*this)``,
# ``async_tool_->is_valid(*this)``. So data1 and data2 point at one static C object of ftnpy.c
# (``ftnpy_htool``) laid out as a C++ object of a class derived from IAsyncTool under the
# Itanium C++ ABI (GCC and Clang on Linux, macOS, the BSDs; also the ARM variant):
#
#   ftnpy_htool:           { vptr }          one pointer, at offset 0 (no data members)
#   vptr -> vtable slots:  IASYNCTOOL_VTABLE, one function pointer each, in this order;
#                          before them, as in any Itanium vtable, offset-to-top (0) and the
#                          RTTI pointer (NULL: nothing may use typeid/dynamic_cast on it)
#
# A virtual member function is called as a C function with ``this`` first (x86-64 SysV,
# i386 cdecl, AArch64, ARM AAPCS), and ``Handle&`` is passed as a pointer to three
# pointer-sized fields in FutoInHandle's order, so
#   cancel:    void ftnpy_htool_cancel(const FtnPyHandleTool* self, FutoInHandle* h)
#   is_valid:  bool ftnpy_htool_is_valid(const FtnPyHandleTool* self, FutoInHandle* h)
# call back into our scheduler (as sched_cancel / sched_is_valid of our table do) with
# data3, the id of the timer; cancel then empties the handle (data1 = NULL), as the
# reference's own tool does with Handle::reset(). The other slots are never reached through a
# Handle (its only virtual calls are these two); they report a misuse and return.
#
# The order is the header's: the virtual destructor (two slots under Itanium: complete and
# deleting destructor), then the virtual functions in declaration order. tests/test_binary_table
# checks it against the header's text and, with a C++ compiler, against a compiled probe that
# reads each slot from the pointer-to-member-function representation (the ABI's own answer).
#
# The MSVC ABI (Windows) lays vtables out differently (one destructor slot) and calls member
# functions with ``thiscall`` on x86: there a C++ Handle cannot dispatch to this object.
# build.py warns when building for Windows; ftnpy.c says so with #pragma message.

IASYNCTOOL_VTABLE: tuple[str, ...] = (
    "~IAsyncTool",  # complete object destructor (D1)
    "~IAsyncTool (deleting)",  # deleting destructor (D0)
    "immediate",
    "deferred",
    "is_same_thread",
    "iterate",
    "mem_pool",
    "release_memory",
    "cancel",
    "is_valid",
)

#: slots of IASYNCTOOL_VTABLE that do something: the C function each one holds
HTOOL_IMPL: dict[str, str] = {"cancel": "ftnpy_htool_cancel", "is_valid": "ftnpy_htool_is_valid"}


def htool_csource() -> str:
    """Slot indices (FTNPY_HTOOL_SLOT_*) and the initialiser of the handle tool's vtable."""
    out = []
    for i, name in enumerate(IASYNCTOOL_VTABLE):
        if name.isidentifier():
            out.append(f"#define FTNPY_HTOOL_SLOT_{name.upper()} {i}")
    out.append(f"#define FTNPY_HTOOL_NSLOTS {len(IASYNCTOOL_VTABLE)}")
    init = " \\\n".join(
        f"    (ftnpy_htool_slot_f){HTOOL_IMPL.get(name, 'ftnpy_htool_unsupported')}, /* {name} */"
        for name in IASYNCTOOL_VTABLE
    )
    out.append(f"#define FTNPY_HTOOL_VTABLE_INIT \\\n{init}")
    return "\n".join(out) + "\n"


def htool_cdef() -> str:
    """The slot indices, as integer constants of the extension (``lib.FTNPY_HTOOL_SLOT_*``)."""
    names = [n for n in IASYNCTOOL_VTABLE if n.isidentifier()]
    consts = "".join(f"#define FTNPY_HTOOL_SLOT_{n.upper()} ...\n" for n in names)
    return consts + "#define FTNPY_HTOOL_NSLOTS ...\n"


#: entries whose table function is written by hand in ftnpy.c: success() resets the values it
#: owns on misuse, isValid() answers on a freed pointer, the scheduler returns a FutoInHandle
CUSTOM = frozenset({"success", "is_valid", "sched_immediate", "sched_deferred"})


def _params(e: Entry, first: str) -> str:
    return first + (", " + e.params if e.params else "")


def _default(e: Entry) -> str:
    return "NULL" if e.ret is not None and e.ret.endswith("*") else "0"


def trampoline_decl(e: Entry) -> str:
    """The ``extern "Python"`` declaration of our trampoline for a generic entry."""
    return f"{e.ret or 'void'} ftnpy_py_{e.name}({_params(e, 'void* h')})"


def ours_csource() -> str:
    """Generic table functions of our side, forward declarations, FTNPY_API_INIT."""
    out = ["/* generated from ffi/table.py by ffi/build.py */"]
    generic = [e for e in TABLE if e.name not in CUSTOM]
    out.append("\n".join(f"static {trampoline_decl(e)};" for e in generic))
    for e in generic:
        call = f"ftnpy_py_{e.name}(s->handle{', ' + e.args if e.args else ''})"
        head = f"static {e.ret or 'void'} ftnpy_{e.name}({_params(e, 'FutoInAsyncSteps* bsi')})"
        body = f"    if (s) {call};" if e.ret is None else f"    return s ? {call} : {_default(e)};"
        out.append(f'{head}\n{{\n    FTNPY_SELF("{e.field}");\n{body}\n}}')
    init = " \\\n".join(f"    ftnpy_{e.name}," for e in TABLE)
    out.append(f"#define FTNPY_API_INIT \\\n{init}")
    out.append(htool_csource())
    return "\n\n".join(out) + "\n"


def ours_cdef() -> str:
    generic = [e for e in TABLE if e.name not in CUSTOM]
    return 'extern "Python" {\n' + "".join(f"    {trampoline_decl(e)};\n" for e in generic) + "}\n"


def foreign_call_decl(e: Entry) -> str:
    """The C declaration of ``ftnpy_f_<name>``: 0, or -1 for a NULL pointer or function."""
    decl = "FutoInAsyncSteps* bsi" + (", " + e.params if e.params else "")
    if e.ret is not None:
        decl += f", {e.ret}* out"
    return f"int ftnpy_f_{e.name}({decl})"


def foreign_call_def(e: Entry) -> str:
    call_args = "bsi" + (", " + e.args if e.args else "")
    call = f"bsi->api->{e.field}({call_args})"
    body = f"*out = {call};" if e.ret is not None else f"{call};"
    return (
        f"{foreign_call_decl(e)}\n{{\n"
        f"    if (ftnpy_f_check(bsi, {e.pos}) < 0) return -1;\n"
        f"    {body}\n    return 0;\n}}\n"
    )


def cdef() -> str:
    return "\n".join(foreign_call_decl(e) + ";" for e in TABLE) + "\n"


def csource() -> str:
    return "\n".join(foreign_call_def(e) for e in TABLE)
