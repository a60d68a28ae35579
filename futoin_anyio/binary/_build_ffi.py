"""cffi builder for :mod:`futoin_anyio.binary._ffi` (out-of-line, API mode).

Used at install time through ``cffi_modules`` in ``setup.py``; never imported at
run time. ``python futoin_anyio/binary/_build_ffi.py`` builds the extension in
place for development.

The C side implements our ``FutoInAsyncSteps`` / ``FutoInSync`` objects: each
of the 25 (resp. 2) table functions is a C function that validates its
``bsi`` pointer and calls an ``extern "Python"`` trampoline defined in
:mod:`futoin_anyio.binary._bridge`. Small ``ftnpy_call_*`` / ``ftnpy_f_*``
helpers let Python call C callbacks and foreign tables in API mode (a direct C
call, no libffi).
"""

from __future__ import annotations

import os

from cffi import FFI

_HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE_DIR = os.path.join(_HERE, "include")

# The spec's declarations, as cffi's parser accepts them (no preprocessor, no
# inline bodies). cffi checks at build time that they match futoin.h exactly.
CDEF_SPEC = r"""
typedef struct FutoInBinaryValue_ FutoInBinaryValue;
typedef struct FutoInType_ FutoInType;
typedef uint8_t FutoInTypeFlags;

enum
{
    FTN_TYPE_CUSTOM_OBJECT = 0x01,
    FTN_TYPE_STRING = 0x02,
    FTN_TYPE_STRING16 = 0x03,
    FTN_TYPE_STRING32 = 0x04,
    FTN_TYPE_BOOL = 0x05,
    FTN_TYPE_INT8 = 0x06,
    FTN_TYPE_INT16 = 0x07,
    FTN_TYPE_INT32 = 0x08,
    FTN_TYPE_INT64 = 0x09,
    FTN_TYPE_UINT8 = 0x0A,
    FTN_TYPE_UINT16 = 0x0B,
    FTN_TYPE_UINT32 = 0x0C,
    FTN_TYPE_UINT64 = 0x0D,
    FTN_TYPE_FLOAT = 0x0E,
    FTN_TYPE_DOUBLE = 0x0F,
    FTN_BASE_TYPE_MASK = 0x0F,
    FTN_TYPE_ARRAY = 0x10,
    FTN_COMPLEX_TYPE_MASK = 0xF0
};

struct FutoInType_
{
    const FutoInTypeFlags flags;
    void (*const cleanup)(FutoInBinaryValue* v);
};

struct FutoInBinaryValue_
{
    const FutoInType* type;
    union
    {
        const void* p;
        const char* cstr;
        const char16_t* cstr16;
        const char32_t* cstr32;
        bool b;
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
        float f;
        double d;
    };
    void* custom_data;
    uint32_t length;
};

typedef struct FutoInAsyncStepsAPI_ FutoInAsyncStepsAPI;
typedef struct FutoInAsyncSteps_ FutoInAsyncSteps;
typedef struct FutoInSyncAPI_ FutoInSyncAPI;
typedef struct FutoInSync_ FutoInSync;
typedef struct FutoInArgs_ FutoInArgs;
typedef struct FutoInHandle_ FutoInHandle;

struct FutoInArgs_
{
    union
    {
        struct
        {
            FutoInBinaryValue arg0;
            FutoInBinaryValue arg1;
            FutoInBinaryValue arg2;
            FutoInBinaryValue arg3;
        };
        FutoInBinaryValue args[4];
    };
};

struct FutoInHandle_
{
    void* data1;
    void* data2;
    ptrdiff_t data3;
};

typedef void (*FutoInAsyncSteps_execute_callback)(
        FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
typedef void (*FutoInAsyncSteps_error_callback)(
        FutoInAsyncSteps* bsi, void* data, const char* code);
typedef void (*FutoInAsyncSteps_cancel_callback)(
        FutoInAsyncSteps* bsi, void* data);

struct FutoInAsyncStepsAPI_
{
    union
    {
        struct
        {
            void (*add)(FutoInAsyncSteps* bsi, void* data,
                    FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh);
            FutoInAsyncSteps* (*parallel)(FutoInAsyncSteps* bsi, void* data,
                    FutoInAsyncSteps_error_callback eh);
            void* (*stateVariable)(FutoInAsyncSteps* bsi, void* data, const char* name,
                    void* (*allocate)(void* data), void (*cleanup)(void* data, void* value));
            void* (*stack)(FutoInAsyncSteps* bsi, size_t data_size, void (*cleanup)(void* value));
            void (*success)(FutoInAsyncSteps* bsi, FutoInArgs* args);
            void (*handle_error)(FutoInAsyncSteps* bsi, const char* code, const char* info);
            void (*setTimeout)(FutoInAsyncSteps* bsi, uint32_t timeout_ms);
            void (*setCancel)(FutoInAsyncSteps* bsi, void* data,
                    FutoInAsyncSteps_cancel_callback ch);
            void (*waitExternal)(FutoInAsyncSteps* bsi);
            void (*loop)(FutoInAsyncSteps* bsi, void* data,
                    void (*f)(FutoInAsyncSteps* bsi, void* data), const char* label);
            void (*repeat)(FutoInAsyncSteps* bsi, void* data, size_t count,
                    void (*f)(FutoInAsyncSteps* bsi, void* data, size_t i), const char* label);
            void (*breakLoop)(FutoInAsyncSteps* bsi, const char* label);
            void (*continueLoop)(FutoInAsyncSteps* bsi, const char* label);
            void (*execute)(FutoInAsyncSteps* bsi, void* data,
                    FutoInAsyncSteps_error_callback unhandled_error);
            void (*cancel)(FutoInAsyncSteps* bsi);
            void (*addSync)(FutoInAsyncSteps* bsi, FutoInSync* sync, void* data,
                    FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh);
            ptrdiff_t (*rootId)(FutoInAsyncSteps* bsi);
            int (*isValid)(FutoInAsyncSteps* bsi);
            FutoInAsyncSteps* (*newInstance)(FutoInAsyncSteps* bsi);
            void (*free)(FutoInAsyncSteps* bsi);
            FutoInHandle (*sched_immediate)(FutoInAsyncSteps* bsi, void* data,
                    void (*cb)(void* data));
            FutoInHandle (*sched_deferred)(FutoInAsyncSteps* bsi, uint32_t delay_ms,
                    void* data, void (*cb)(void* data));
            void (*sched_cancel)(FutoInAsyncSteps* bsi, FutoInHandle* handle);
            int (*sched_is_valid)(FutoInAsyncSteps* bsi, FutoInHandle* handle);
            int (*is_same_thread)(FutoInAsyncSteps* bsi);
        };
        void* funcs[25];
    };
};

struct FutoInAsyncSteps_
{
    const FutoInAsyncStepsAPI* const api;
};

struct FutoInSyncAPI_
{
    union
    {
        struct
        {
            void (*lock)(FutoInAsyncSteps* bsi, FutoInSync* sync);
            void (*unlock)(FutoInAsyncSteps* bsi, FutoInSync* sync);
        };
        void* funcs[2];
    };
};

struct FutoInSync_
{
    const FutoInSyncAPI* const api;
};
"""

CDEF_IMPL = r"""
typedef void (*ftnpy_loop_f)(FutoInAsyncSteps* bsi, void* data);
typedef void (*ftnpy_repeat_f)(FutoInAsyncSteps* bsi, void* data, size_t i);
typedef void (*ftnpy_sched_f)(void* data);
typedef void* (*ftnpy_alloc_f)(void* data);
typedef void (*ftnpy_state_cleanup_f)(void* data, void* value);
typedef void (*ftnpy_stack_cleanup_f)(void* value);

typedef struct {
    FutoInAsyncSteps base;
    uint32_t magic;
    void* handle;
} FtnPyAsyncSteps;

typedef struct {
    FutoInSync base;
    uint32_t magic;
    void* handle;
} FtnPySync;

/* our objects */
FutoInAsyncSteps* ftnpy_asi_init(FtnPyAsyncSteps* s, void* handle);
void ftnpy_asi_kill(FtnPyAsyncSteps* s);
FutoInSync* ftnpy_sync_init(FtnPySync* s, void* handle);
void ftnpy_sync_kill(FtnPySync* s);
void* ftnpy_asi_handle(FutoInAsyncSteps* bsi);
void* ftnpy_sync_handle(FutoInSync* sync);
const FutoInType* ftnpy_type(int flags, int owned);
size_t ftnpy_strlen16(const char16_t* s);
size_t ftnpy_strlen32(const char32_t* s);
void ftnpy_reset(FutoInBinaryValue* v);
void ftnpy_reset_args(FutoInArgs* args);
int ftnpy_flags(const FutoInBinaryValue* v);

/* C callbacks, called from Python */
void ftnpy_call_exec(FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps* bsi, void* data,
        const FutoInArgs* args);
void ftnpy_call_error(FutoInAsyncSteps_error_callback f, FutoInAsyncSteps* bsi, void* data,
        const char* code);
void ftnpy_call_cancel(FutoInAsyncSteps_cancel_callback f, FutoInAsyncSteps* bsi, void* data);
void ftnpy_call_loop(ftnpy_loop_f f, FutoInAsyncSteps* bsi, void* data);
void ftnpy_call_repeat(ftnpy_repeat_f f, FutoInAsyncSteps* bsi, void* data, size_t i);
void ftnpy_call_sched(ftnpy_sched_f f, void* data);
void* ftnpy_call_alloc(ftnpy_alloc_f f, void* data);
void ftnpy_call_state_cleanup(ftnpy_state_cleanup_f f, void* data, void* value);
void ftnpy_call_stack_cleanup(ftnpy_stack_cleanup_f f, void* value);

/* foreign tables, called from Python; return -1 for a NULL pointer/function */
int ftnpy_f_check(FutoInAsyncSteps* bsi, int index);
int ftnpy_f_add(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_execute_callback f,
        FutoInAsyncSteps_error_callback eh);
int ftnpy_f_parallel(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_error_callback eh,
        FutoInAsyncSteps** out);
int ftnpy_f_state_variable(FutoInAsyncSteps* bsi, void* data, const char* name,
        ftnpy_alloc_f allocate, ftnpy_state_cleanup_f cleanup, void** out);
int ftnpy_f_stack(FutoInAsyncSteps* bsi, size_t size, ftnpy_stack_cleanup_f cleanup, void** out);
int ftnpy_f_success(FutoInAsyncSteps* bsi, FutoInArgs* args);
int ftnpy_f_handle_error(FutoInAsyncSteps* bsi, const char* code, const char* info);
int ftnpy_f_set_timeout(FutoInAsyncSteps* bsi, uint32_t ms);
int ftnpy_f_set_cancel(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_cancel_callback ch);
int ftnpy_f_wait_external(FutoInAsyncSteps* bsi);
int ftnpy_f_loop(FutoInAsyncSteps* bsi, void* data, ftnpy_loop_f f, const char* label);
int ftnpy_f_repeat(FutoInAsyncSteps* bsi, void* data, size_t count, ftnpy_repeat_f f,
        const char* label);
int ftnpy_f_break_loop(FutoInAsyncSteps* bsi, const char* label);
int ftnpy_f_continue_loop(FutoInAsyncSteps* bsi, const char* label);
int ftnpy_f_execute(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_error_callback eh);
int ftnpy_f_cancel(FutoInAsyncSteps* bsi);
int ftnpy_f_add_sync(FutoInAsyncSteps* bsi, FutoInSync* sync, void* data,
        FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh);
int ftnpy_f_root_id(FutoInAsyncSteps* bsi, ptrdiff_t* out);
int ftnpy_f_is_valid(FutoInAsyncSteps* bsi, int* out);
int ftnpy_f_new_instance(FutoInAsyncSteps* bsi, FutoInAsyncSteps** out);
int ftnpy_f_free(FutoInAsyncSteps* bsi);
int ftnpy_f_sched_immediate(FutoInAsyncSteps* bsi, void* data, ftnpy_sched_f cb,
        FutoInHandle* out);
int ftnpy_f_sched_deferred(FutoInAsyncSteps* bsi, uint32_t ms, void* data, ftnpy_sched_f cb,
        FutoInHandle* out);
int ftnpy_f_sched_cancel(FutoInAsyncSteps* bsi, FutoInHandle* handle);
int ftnpy_f_sched_is_valid(FutoInAsyncSteps* bsi, FutoInHandle* handle, int* out);
int ftnpy_f_is_same_thread(FutoInAsyncSteps* bsi, int* out);
int ftnpy_f_lock(FutoInSync* sync, FutoInAsyncSteps* bsi);
int ftnpy_f_unlock(FutoInSync* sync, FutoInAsyncSteps* bsi);


extern "Python" {
    /* our AsyncSteps table; h is the handle of the Python binding */
    void ftnpy_py_add(void* h, void* data, FutoInAsyncSteps_execute_callback f,
            FutoInAsyncSteps_error_callback eh);
    FutoInAsyncSteps* ftnpy_py_parallel(void* h, void* data, FutoInAsyncSteps_error_callback eh);
    void* ftnpy_py_state_variable(void* h, void* data, const char* name,
            ftnpy_alloc_f allocate, ftnpy_state_cleanup_f cleanup);
    void* ftnpy_py_stack(void* h, size_t size, ftnpy_stack_cleanup_f cleanup);
    void ftnpy_py_success(void* h, FutoInArgs* args);
    void ftnpy_py_handle_error(void* h, const char* code, const char* info);
    void ftnpy_py_set_timeout(void* h, uint32_t ms);
    void ftnpy_py_set_cancel(void* h, void* data, FutoInAsyncSteps_cancel_callback ch);
    void ftnpy_py_wait_external(void* h);
    void ftnpy_py_loop(void* h, void* data, ftnpy_loop_f f, const char* label);
    void ftnpy_py_repeat(void* h, void* data, size_t count, ftnpy_repeat_f f, const char* label);
    void ftnpy_py_break_loop(void* h, const char* label);
    void ftnpy_py_continue_loop(void* h, const char* label);
    void ftnpy_py_execute(void* h, void* data, FutoInAsyncSteps_error_callback eh);
    void ftnpy_py_cancel(void* h);
    void ftnpy_py_add_sync(void* h, FutoInSync* sync, void* data,
            FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh);
    ptrdiff_t ftnpy_py_root_id(void* h);
    int ftnpy_py_is_valid(void* h);
    FutoInAsyncSteps* ftnpy_py_new_instance(void* h);
    void ftnpy_py_free(void* h);
    void ftnpy_py_sched(void* h, int deferred, uint32_t ms, void* data, ftnpy_sched_f cb,
            FutoInHandle* out);
    void ftnpy_py_sched_cancel(void* h, FutoInHandle* handle);
    int ftnpy_py_sched_is_valid(void* h, FutoInHandle* handle);
    int ftnpy_py_is_same_thread(void* h);
    void ftnpy_py_misuse(const char* func, const char* what);
    void ftnpy_py_release(FutoInBinaryValue* v);
    /* our FutoInSync table */
    void ftnpy_py_lock(void* h, FutoInAsyncSteps* bsi);
    void ftnpy_py_unlock(void* h, FutoInAsyncSteps* bsi);
    /* callbacks handed to foreign implementations; data is a Python handle */
    void ftnpy_py_exec_cb(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args);
    void ftnpy_py_error_cb(FutoInAsyncSteps* bsi, void* data, const char* code);
    void ftnpy_py_cancel_cb(FutoInAsyncSteps* bsi, void* data);
    void ftnpy_py_loop_cb(FutoInAsyncSteps* bsi, void* data);
    void ftnpy_py_repeat_cb(FutoInAsyncSteps* bsi, void* data, size_t i);
    void ftnpy_py_sched_cb(void* data);
    void* ftnpy_py_alloc_cb(void* data);
    void ftnpy_py_state_cleanup_cb(void* data, void* value);
    void ftnpy_py_stack_cleanup_cb(void* value);
    void ftnpy_py_unhandled_cb(FutoInAsyncSteps* bsi, void* data, const char* code);
}
"""


def _types_init(owned: bool) -> str:
    cleanup = "ftnpy_value_cleanup" if owned else "NULL"
    return ",\n".join(f"    {{ 0x{i:02X}, {cleanup} }}" for i in range(32))


_F_TABLE = [
    # (python-facing name, index, api field, params decl, call args, out decl or None)
    (
        "add",
        0,
        "add",
        "void* data, FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh",
        "data, f, eh",
        None,
    ),
    (
        "parallel",
        1,
        "parallel",
        "void* data, FutoInAsyncSteps_error_callback eh",
        "data, eh",
        "FutoInAsyncSteps*",
    ),
    (
        "state_variable",
        2,
        "stateVariable",
        "void* data, const char* name, ftnpy_alloc_f allocate, ftnpy_state_cleanup_f cleanup",
        "data, name, allocate, cleanup",
        "void*",
    ),
    ("stack", 3, "stack", "size_t size, ftnpy_stack_cleanup_f cleanup", "size, cleanup", "void*"),
    ("success", 4, "success", "FutoInArgs* args", "args", None),
    ("handle_error", 5, "handle_error", "const char* code, const char* info", "code, info", None),
    ("set_timeout", 6, "setTimeout", "uint32_t ms", "ms", None),
    (
        "set_cancel",
        7,
        "setCancel",
        "void* data, FutoInAsyncSteps_cancel_callback ch",
        "data, ch",
        None,
    ),
    ("wait_external", 8, "waitExternal", "", "", None),
    ("loop", 9, "loop", "void* data, ftnpy_loop_f f, const char* label", "data, f, label", None),
    (
        "repeat",
        10,
        "repeat",
        "void* data, size_t count, ftnpy_repeat_f f, const char* label",
        "data, count, f, label",
        None,
    ),
    ("break_loop", 11, "breakLoop", "const char* label", "label", None),
    ("continue_loop", 12, "continueLoop", "const char* label", "label", None),
    ("execute", 13, "execute", "void* data, FutoInAsyncSteps_error_callback eh", "data, eh", None),
    ("cancel", 14, "cancel", "", "", None),
    (
        "add_sync",
        15,
        "addSync",
        "FutoInSync* sync, void* data, FutoInAsyncSteps_execute_callback f, "
        "FutoInAsyncSteps_error_callback eh",
        "sync, data, f, eh",
        None,
    ),
    ("root_id", 16, "rootId", "", "", "ptrdiff_t"),
    ("is_valid", 17, "isValid", "", "", "int"),
    ("new_instance", 18, "newInstance", "", "", "FutoInAsyncSteps*"),
    ("free", 19, "free", "", "", None),
    (
        "sched_immediate",
        20,
        "sched_immediate",
        "void* data, ftnpy_sched_f cb",
        "data, cb",
        "FutoInHandle",
    ),
    (
        "sched_deferred",
        21,
        "sched_deferred",
        "uint32_t ms, void* data, ftnpy_sched_f cb",
        "ms, data, cb",
        "FutoInHandle",
    ),
    ("sched_cancel", 22, "sched_cancel", "FutoInHandle* handle", "handle", None),
    ("sched_is_valid", 23, "sched_is_valid", "FutoInHandle* handle", "handle", "int"),
    ("is_same_thread", 24, "is_same_thread", "", "", "int"),
]


def _foreign_calls() -> str:
    out = []
    for name, index, field, params, args, ret in _F_TABLE:
        decl = "FutoInAsyncSteps* bsi" + (", " + params if params else "")
        call_args = "bsi" + (", " + args if args else "")
        if ret is not None:
            decl += f", {ret}* out"
            body = f"*out = bsi->api->{field}({call_args});"
        else:
            body = f"bsi->api->{field}({call_args});"
        out.append(
            f"int ftnpy_f_{name}({decl})\n{{\n"
            f"    if (ftnpy_f_check(bsi, {index}) < 0) return -1;\n"
            f"    {body}\n    return 0;\n}}\n"
        )
    return "\n".join(out)


C_SOURCE = (
    r"""
#include <string.h>
#include "futoin.h"

#define FTNPY_ALIVE 0x46544E31u /* "FTN1" */
#define FTNPY_DEAD 0xDEADF7F7u

typedef void (*ftnpy_loop_f)(FutoInAsyncSteps* bsi, void* data);
typedef void (*ftnpy_repeat_f)(FutoInAsyncSteps* bsi, void* data, size_t i);
typedef void (*ftnpy_sched_f)(void* data);
typedef void* (*ftnpy_alloc_f)(void* data);
typedef void (*ftnpy_state_cleanup_f)(void* data, void* value);
typedef void (*ftnpy_stack_cleanup_f)(void* value);

typedef struct {
    FutoInAsyncSteps base;
    uint32_t magic;
    void* handle;
} FtnPyAsyncSteps;

typedef struct {
    FutoInSync base;
    uint32_t magic;
    void* handle;
} FtnPySync;

/* extern "Python" trampolines (defined by cffi below, in _bridge.py) */
static void ftnpy_py_add(void*, void*, FutoInAsyncSteps_execute_callback,
        FutoInAsyncSteps_error_callback);
static FutoInAsyncSteps* ftnpy_py_parallel(void*, void*, FutoInAsyncSteps_error_callback);
static void* ftnpy_py_state_variable(void*, void*, const char*, ftnpy_alloc_f,
        ftnpy_state_cleanup_f);
static void* ftnpy_py_stack(void*, size_t, ftnpy_stack_cleanup_f);
static void ftnpy_py_success(void*, FutoInArgs*);
static void ftnpy_py_handle_error(void*, const char*, const char*);
static void ftnpy_py_set_timeout(void*, uint32_t);
static void ftnpy_py_set_cancel(void*, void*, FutoInAsyncSteps_cancel_callback);
static void ftnpy_py_wait_external(void*);
static void ftnpy_py_loop(void*, void*, ftnpy_loop_f, const char*);
static void ftnpy_py_repeat(void*, void*, size_t, ftnpy_repeat_f, const char*);
static void ftnpy_py_break_loop(void*, const char*);
static void ftnpy_py_continue_loop(void*, const char*);
static void ftnpy_py_execute(void*, void*, FutoInAsyncSteps_error_callback);
static void ftnpy_py_cancel(void*);
static void ftnpy_py_add_sync(void*, FutoInSync*, void*, FutoInAsyncSteps_execute_callback,
        FutoInAsyncSteps_error_callback);
static ptrdiff_t ftnpy_py_root_id(void*);
static int ftnpy_py_is_valid(void*);
static FutoInAsyncSteps* ftnpy_py_new_instance(void*);
static void ftnpy_py_free(void*);
static void ftnpy_py_sched(void*, int, uint32_t, void*, ftnpy_sched_f, FutoInHandle*);
static void ftnpy_py_sched_cancel(void*, FutoInHandle*);
static int ftnpy_py_sched_is_valid(void*, FutoInHandle*);
static int ftnpy_py_is_same_thread(void*);
static void ftnpy_py_misuse(const char*, const char*);
static void ftnpy_py_release(FutoInBinaryValue*);
static void ftnpy_py_lock(void*, FutoInAsyncSteps*);
static void ftnpy_py_unlock(void*, FutoInAsyncSteps*);

/* --- values --------------------------------------------------------- */

static void ftnpy_value_cleanup(FutoInBinaryValue* v)
{
    ftnpy_py_release(v);
}

static const FutoInType ftnpy_types_plain[32] = {
"""
    + _types_init(False)
    + r"""
};

static const FutoInType ftnpy_types_owned[32] = {
"""
    + _types_init(True)
    + r"""
};

const FutoInType* ftnpy_type(int flags, int owned)
{
    if (flags < 0 || flags >= 32) return NULL;
    return owned ? &ftnpy_types_owned[flags] : &ftnpy_types_plain[flags];
}

size_t ftnpy_strlen16(const char16_t* s)
{
    size_t n = 0;
    while (s[n]) ++n;
    return n;
}

size_t ftnpy_strlen32(const char32_t* s)
{
    size_t n = 0;
    while (s[n]) ++n;
    return n;
}

void ftnpy_reset(FutoInBinaryValue* v)
{
    futoin_reset_binval(v);
}

void ftnpy_reset_args(FutoInArgs* args)
{
    int i;
    for (i = 0; i < 4; ++i) futoin_reset_binval(&args->args[i]);
}

int ftnpy_flags(const FutoInBinaryValue* v)
{
    return v->type ? (int)v->type->flags : -1;
}

/* --- our AsyncSteps ------------------------------------------------- */

static FtnPyAsyncSteps* ftnpy_self(FutoInAsyncSteps* bsi, const char* func)
{
    FtnPyAsyncSteps* s = (FtnPyAsyncSteps*)bsi;
    if (!bsi) {
        ftnpy_py_misuse(func, "NULL FutoInAsyncSteps pointer");
        return NULL;
    }
    if (s->magic != FTNPY_ALIVE || !s->handle) {
        ftnpy_py_misuse(func, "FutoInAsyncSteps pointer used after free()");
        return NULL;
    }
    return s;
}

#define FTNPY_SELF(name) FtnPyAsyncSteps* s = ftnpy_self(bsi, name)

static void ftnpy_add(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_execute_callback f,
        FutoInAsyncSteps_error_callback eh)
{
    FTNPY_SELF("add");
    if (s) ftnpy_py_add(s->handle, data, f, eh);
}

static FutoInAsyncSteps* ftnpy_parallel(FutoInAsyncSteps* bsi, void* data,
        FutoInAsyncSteps_error_callback eh)
{
    FTNPY_SELF("parallel");
    return s ? ftnpy_py_parallel(s->handle, data, eh) : NULL;
}

static void* ftnpy_state_variable(FutoInAsyncSteps* bsi, void* data, const char* name,
        ftnpy_alloc_f allocate, ftnpy_state_cleanup_f cleanup)
{
    FTNPY_SELF("stateVariable");
    return s ? ftnpy_py_state_variable(s->handle, data, name, allocate, cleanup) : NULL;
}

static void* ftnpy_stack(FutoInAsyncSteps* bsi, size_t size, ftnpy_stack_cleanup_f cleanup)
{
    FTNPY_SELF("stack");
    return s ? ftnpy_py_stack(s->handle, size, cleanup) : NULL;
}

static void ftnpy_success(FutoInAsyncSteps* bsi, FutoInArgs* args)
{
    FTNPY_SELF("success");
    if (s) {
        ftnpy_py_success(s->handle, args);
    } else if (args) {
        ftnpy_reset_args(args); /* we own them: never leak, even on misuse */
    }
}

static void ftnpy_handle_error(FutoInAsyncSteps* bsi, const char* code, const char* info)
{
    FTNPY_SELF("handle_error");
    if (s) ftnpy_py_handle_error(s->handle, code, info);
}

static void ftnpy_set_timeout(FutoInAsyncSteps* bsi, uint32_t ms)
{
    FTNPY_SELF("setTimeout");
    if (s) ftnpy_py_set_timeout(s->handle, ms);
}

static void ftnpy_set_cancel(FutoInAsyncSteps* bsi, void* data,
        FutoInAsyncSteps_cancel_callback ch)
{
    FTNPY_SELF("setCancel");
    if (s) ftnpy_py_set_cancel(s->handle, data, ch);
}

static void ftnpy_wait_external(FutoInAsyncSteps* bsi)
{
    FTNPY_SELF("waitExternal");
    if (s) ftnpy_py_wait_external(s->handle);
}

static void ftnpy_loop(FutoInAsyncSteps* bsi, void* data, ftnpy_loop_f f, const char* label)
{
    FTNPY_SELF("loop");
    if (s) ftnpy_py_loop(s->handle, data, f, label);
}

static void ftnpy_repeat(FutoInAsyncSteps* bsi, void* data, size_t count, ftnpy_repeat_f f,
        const char* label)
{
    FTNPY_SELF("repeat");
    if (s) ftnpy_py_repeat(s->handle, data, count, f, label);
}

static void ftnpy_break_loop(FutoInAsyncSteps* bsi, const char* label)
{
    FTNPY_SELF("breakLoop");
    if (s) ftnpy_py_break_loop(s->handle, label);
}

static void ftnpy_continue_loop(FutoInAsyncSteps* bsi, const char* label)
{
    FTNPY_SELF("continueLoop");
    if (s) ftnpy_py_continue_loop(s->handle, label);
}

static void ftnpy_execute(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_error_callback eh)
{
    FTNPY_SELF("execute");
    if (s) ftnpy_py_execute(s->handle, data, eh);
}

static void ftnpy_cancel(FutoInAsyncSteps* bsi)
{
    FTNPY_SELF("cancel");
    if (s) ftnpy_py_cancel(s->handle);
}

static void ftnpy_add_sync(FutoInAsyncSteps* bsi, FutoInSync* sync, void* data,
        FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh)
{
    FTNPY_SELF("addSync");
    if (s) ftnpy_py_add_sync(s->handle, sync, data, f, eh);
}

static ptrdiff_t ftnpy_root_id(FutoInAsyncSteps* bsi)
{
    FTNPY_SELF("rootId");
    return s ? ftnpy_py_root_id(s->handle) : 0;
}

static int ftnpy_is_valid(FutoInAsyncSteps* bsi)
{
    /* isValid() is the one query that must answer on a freed object. */
    FtnPyAsyncSteps* s = (FtnPyAsyncSteps*)bsi;
    if (!bsi || s->magic != FTNPY_ALIVE || !s->handle) return 0;
    return ftnpy_py_is_valid(s->handle);
}

static FutoInAsyncSteps* ftnpy_new_instance(FutoInAsyncSteps* bsi)
{
    FTNPY_SELF("newInstance");
    return s ? ftnpy_py_new_instance(s->handle) : NULL;
}

static void ftnpy_free(FutoInAsyncSteps* bsi)
{
    FTNPY_SELF("free");
    if (s) ftnpy_py_free(s->handle);
}

static FutoInHandle ftnpy_sched_immediate(FutoInAsyncSteps* bsi, void* data, ftnpy_sched_f cb)
{
    FutoInHandle out = { NULL, NULL, 0 };
    FTNPY_SELF("sched_immediate");
    if (s) ftnpy_py_sched(s->handle, 0, 0, data, cb, &out);
    return out;
}

static FutoInHandle ftnpy_sched_deferred(FutoInAsyncSteps* bsi, uint32_t ms, void* data,
        ftnpy_sched_f cb)
{
    FutoInHandle out = { NULL, NULL, 0 };
    FTNPY_SELF("sched_deferred");
    if (s) ftnpy_py_sched(s->handle, 1, ms, data, cb, &out);
    return out;
}

static void ftnpy_sched_cancel(FutoInAsyncSteps* bsi, FutoInHandle* handle)
{
    FTNPY_SELF("sched_cancel");
    if (s) ftnpy_py_sched_cancel(s->handle, handle);
}

static int ftnpy_sched_is_valid(FutoInAsyncSteps* bsi, FutoInHandle* handle)
{
    FTNPY_SELF("sched_is_valid");
    return s ? ftnpy_py_sched_is_valid(s->handle, handle) : 0;
}

static int ftnpy_is_same_thread(FutoInAsyncSteps* bsi)
{
    FTNPY_SELF("is_same_thread");
    return s ? ftnpy_py_is_same_thread(s->handle) : 0;
}

static const FutoInAsyncStepsAPI ftnpy_api = { { {
    ftnpy_add,
    ftnpy_parallel,
    ftnpy_state_variable,
    ftnpy_stack,
    ftnpy_success,
    ftnpy_handle_error,
    ftnpy_set_timeout,
    ftnpy_set_cancel,
    ftnpy_wait_external,
    ftnpy_loop,
    ftnpy_repeat,
    ftnpy_break_loop,
    ftnpy_continue_loop,
    ftnpy_execute,
    ftnpy_cancel,
    ftnpy_add_sync,
    ftnpy_root_id,
    ftnpy_is_valid,
    ftnpy_new_instance,
    ftnpy_free,
    ftnpy_sched_immediate,
    ftnpy_sched_deferred,
    ftnpy_sched_cancel,
    ftnpy_sched_is_valid,
    ftnpy_is_same_thread,
} } };

FutoInAsyncSteps* ftnpy_asi_init(FtnPyAsyncSteps* s, void* handle)
{
    const FutoInAsyncStepsAPI* api = &ftnpy_api;
    /* api is a const member: the memory is fresh, initialise it bytewise */
    memcpy((void*)&s->base.api, &api, sizeof(api));
    s->magic = FTNPY_ALIVE;
    s->handle = handle;
    return &s->base;
}

void ftnpy_asi_kill(FtnPyAsyncSteps* s)
{
    s->magic = FTNPY_DEAD;
    s->handle = NULL;
}

void* ftnpy_asi_handle(FutoInAsyncSteps* bsi)
{
    FtnPyAsyncSteps* s = (FtnPyAsyncSteps*)bsi;
    if (!bsi || bsi->api != &ftnpy_api || s->magic != FTNPY_ALIVE) return NULL;
    return s->handle;
}

/* --- our Sync ------------------------------------------------------- */

static FtnPySync* ftnpy_sync_self(FutoInSync* sync, const char* func)
{
    FtnPySync* s = (FtnPySync*)sync;
    if (!sync) {
        ftnpy_py_misuse(func, "NULL FutoInSync pointer");
        return NULL;
    }
    if (s->magic != FTNPY_ALIVE || !s->handle) {
        ftnpy_py_misuse(func, "FutoInSync pointer used after its object was released");
        return NULL;
    }
    return s;
}

static void ftnpy_lock(FutoInAsyncSteps* bsi, FutoInSync* sync)
{
    FtnPySync* s = ftnpy_sync_self(sync, "lock");
    if (s) ftnpy_py_lock(s->handle, bsi);
}

static void ftnpy_unlock(FutoInAsyncSteps* bsi, FutoInSync* sync)
{
    FtnPySync* s = ftnpy_sync_self(sync, "unlock");
    if (s) ftnpy_py_unlock(s->handle, bsi);
}

static const FutoInSyncAPI ftnpy_sync_api = { { { ftnpy_lock, ftnpy_unlock } } };

FutoInSync* ftnpy_sync_init(FtnPySync* s, void* handle)
{
    const FutoInSyncAPI* api = &ftnpy_sync_api;
    memcpy((void*)&s->base.api, &api, sizeof(api));
    s->magic = FTNPY_ALIVE;
    s->handle = handle;
    return &s->base;
}

void ftnpy_sync_kill(FtnPySync* s)
{
    s->magic = FTNPY_DEAD;
    s->handle = NULL;
}

void* ftnpy_sync_handle(FutoInSync* sync)
{
    FtnPySync* s = (FtnPySync*)sync;
    if (!sync || sync->api != &ftnpy_sync_api || s->magic != FTNPY_ALIVE) return NULL;
    return s->handle;
}

/* --- calling C callbacks from Python ------------------------------- */

void ftnpy_call_exec(FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps* bsi, void* data,
        const FutoInArgs* args)
{
    f(bsi, data, args);
}

void ftnpy_call_error(FutoInAsyncSteps_error_callback f, FutoInAsyncSteps* bsi, void* data,
        const char* code)
{
    f(bsi, data, code);
}

void ftnpy_call_cancel(FutoInAsyncSteps_cancel_callback f, FutoInAsyncSteps* bsi, void* data)
{
    f(bsi, data);
}

void ftnpy_call_loop(ftnpy_loop_f f, FutoInAsyncSteps* bsi, void* data)
{
    f(bsi, data);
}

void ftnpy_call_repeat(ftnpy_repeat_f f, FutoInAsyncSteps* bsi, void* data, size_t i)
{
    f(bsi, data, i);
}

void ftnpy_call_sched(ftnpy_sched_f f, void* data)
{
    f(data);
}

void* ftnpy_call_alloc(ftnpy_alloc_f f, void* data)
{
    return f(data);
}

void ftnpy_call_state_cleanup(ftnpy_state_cleanup_f f, void* data, void* value)
{
    f(data, value);
}

void ftnpy_call_stack_cleanup(ftnpy_stack_cleanup_f f, void* value)
{
    f(value);
}

/* --- calling foreign tables from Python ---------------------------- */

int ftnpy_f_check(FutoInAsyncSteps* bsi, int index)
{
    if (!bsi || !bsi->api || !bsi->api->funcs[index]) return -1;
    return 0;
}

int ftnpy_f_lock(FutoInSync* sync, FutoInAsyncSteps* bsi)
{
    if (!sync || !sync->api || !sync->api->lock) return -1;
    sync->api->lock(bsi, sync);
    return 0;
}

int ftnpy_f_unlock(FutoInSync* sync, FutoInAsyncSteps* bsi)
{
    if (!sync || !sync->api || !sync->api->unlock) return -1;
    sync->api->unlock(bsi, sync);
    return 0;
}

"""
    + _foreign_calls()
)

ffi = FFI()
ffi.cdef(CDEF_SPEC + CDEF_IMPL)
ffi.set_source(
    "futoin_anyio.binary._ffi",
    C_SOURCE,
    include_dirs=[INCLUDE_DIR],
    extra_compile_args=["-std=c11"] if os.name != "nt" else [],
)

if __name__ == "__main__":
    ffi.compile(tmpdir=os.path.dirname(os.path.dirname(_HERE)), verbose=True)
