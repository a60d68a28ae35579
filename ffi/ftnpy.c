/*
 * Our side of the FTN12 binary interface (futoin_anyio.binary._ffi), compiled by ffi/build.py.
 *
 * Our FutoInAsyncSteps ({api, magic, handle}) and FutoInSync: each of the 25 (2) table
 * functions checks its pointer and calls an extern "Python" trampoline of
 * futoin_anyio/binary/_bridge.py with the Python handle. Small ftnpy_call_* helpers let
 * Python call C callbacks in API mode (a direct C call, no libffi); the ftnpy_f_* calls into
 * foreign tables are generated from ffi/table.py after this file.
 */
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

/* extern "Python" trampolines (defined by cffi, in futoin_anyio/binary/_ours.py and
 * _sync.py); those of the generic table functions are declared in ftnpy_table.h */
static void ftnpy_py_success(void*, FutoInArgs*);
static int ftnpy_py_is_valid(void*);
static void ftnpy_py_sched(void*, int, uint32_t, void*, ftnpy_sched_f, FutoInHandle*);
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
    { 0x00, NULL },
    { 0x01, NULL },
    { 0x02, NULL },
    { 0x03, NULL },
    { 0x04, NULL },
    { 0x05, NULL },
    { 0x06, NULL },
    { 0x07, NULL },
    { 0x08, NULL },
    { 0x09, NULL },
    { 0x0A, NULL },
    { 0x0B, NULL },
    { 0x0C, NULL },
    { 0x0D, NULL },
    { 0x0E, NULL },
    { 0x0F, NULL },
    { 0x10, NULL },
    { 0x11, NULL },
    { 0x12, NULL },
    { 0x13, NULL },
    { 0x14, NULL },
    { 0x15, NULL },
    { 0x16, NULL },
    { 0x17, NULL },
    { 0x18, NULL },
    { 0x19, NULL },
    { 0x1A, NULL },
    { 0x1B, NULL },
    { 0x1C, NULL },
    { 0x1D, NULL },
    { 0x1E, NULL },
    { 0x1F, NULL }
};

static const FutoInType ftnpy_types_owned[32] = {
    { 0x00, ftnpy_value_cleanup },
    { 0x01, ftnpy_value_cleanup },
    { 0x02, ftnpy_value_cleanup },
    { 0x03, ftnpy_value_cleanup },
    { 0x04, ftnpy_value_cleanup },
    { 0x05, ftnpy_value_cleanup },
    { 0x06, ftnpy_value_cleanup },
    { 0x07, ftnpy_value_cleanup },
    { 0x08, ftnpy_value_cleanup },
    { 0x09, ftnpy_value_cleanup },
    { 0x0A, ftnpy_value_cleanup },
    { 0x0B, ftnpy_value_cleanup },
    { 0x0C, ftnpy_value_cleanup },
    { 0x0D, ftnpy_value_cleanup },
    { 0x0E, ftnpy_value_cleanup },
    { 0x0F, ftnpy_value_cleanup },
    { 0x10, ftnpy_value_cleanup },
    { 0x11, ftnpy_value_cleanup },
    { 0x12, ftnpy_value_cleanup },
    { 0x13, ftnpy_value_cleanup },
    { 0x14, ftnpy_value_cleanup },
    { 0x15, ftnpy_value_cleanup },
    { 0x16, ftnpy_value_cleanup },
    { 0x17, ftnpy_value_cleanup },
    { 0x18, ftnpy_value_cleanup },
    { 0x19, ftnpy_value_cleanup },
    { 0x1A, ftnpy_value_cleanup },
    { 0x1B, ftnpy_value_cleanup },
    { 0x1C, ftnpy_value_cleanup },
    { 0x1D, ftnpy_value_cleanup },
    { 0x1E, ftnpy_value_cleanup },
    { 0x1F, ftnpy_value_cleanup }
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

/* the generic table functions and FTNPY_API_INIT, generated from ffi/table.py */
#include "ftnpy_table.h"

static void ftnpy_success(FutoInAsyncSteps* bsi, FutoInArgs* args)
{
    FTNPY_SELF("success");
    if (s) {
        ftnpy_py_success(s->handle, args);
    } else if (args) {
        ftnpy_reset_args(args); /* we own them: never leak, even on misuse */
    }
}

static int ftnpy_is_valid(FutoInAsyncSteps* bsi)
{
    /* isValid() is the one query that must answer on a freed object. */
    FtnPyAsyncSteps* s = (FtnPyAsyncSteps*)bsi;
    if (!bsi || s->magic != FTNPY_ALIVE || !s->handle) return 0;
    return ftnpy_py_is_valid(s->handle);
}

static FutoInHandle ftnpy_sched_immediate(FutoInAsyncSteps* bsi, void* data, ftnpy_sched_f cb)
{
    FutoInHandle out = { NULL, NULL, 0 }; /* Python fills it (see ftnpy_htool below) */
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

static const FutoInAsyncStepsAPI ftnpy_api = { { {
    FTNPY_API_INIT
} } };

/* --- scheduler handles as a C++ IAsyncTool ----------------------------
 *
 * data1 and data2 of every handle sched_immediate()/sched_deferred() return point at
 * ftnpy_htool, data3 is the timer's id: the reference's C++ IAsyncTool::Handle made from it
 * calls cancel()/is_valid() through data2 as virtual functions. Layout, slot order and the
 * Itanium C++ ABI this relies on: IASYNCTOOL_VTABLE in ffi/table.py (FTNPY_HTOOL_* below are
 * generated from it). The object is static and never changes: a Handle that C++ keeps after
 * its timer ended still dispatches to it, and only finds the timer gone. */
#if defined(_WIN32)
#pragma message("futoin_anyio: scheduler handles are laid out for the Itanium C++ ABI (GCC, Clang on Linux and macOS); a C++ IAsyncTool::Handle compiled with the MSVC ABI cannot cancel or test them: use sched_cancel / sched_is_valid of the table")
#define FTNPY_HTOOL_ITANIUM 0
#else
#define FTNPY_HTOOL_ITANIUM 1
#endif

typedef void (*ftnpy_htool_slot_f)(void);

typedef struct {
    const ftnpy_htool_slot_f* vptr; /* the vtable's address point: its first slot */
} FtnPyHandleTool;

static void ftnpy_py_htool_cancel(FutoInHandle*);
static int ftnpy_py_htool_is_valid(FutoInHandle*);

/* virtual void IAsyncTool::cancel(Handle& h) noexcept */
static void ftnpy_htool_cancel(const FtnPyHandleTool* self, FutoInHandle* h)
{
    (void)self;
    if (!h) return; /* a C++ reference is never NULL; a C caller may pass one */
    ftnpy_py_htool_cancel(h);
    h->data1 = NULL; /* as the reference's own tool: Handle::reset() after cancel */
}

/* virtual bool IAsyncTool::is_valid(Handle& h) noexcept */
static bool ftnpy_htool_is_valid(const FtnPyHandleTool* self, FutoInHandle* h)
{
    (void)self;
    return h && h->data1 && ftnpy_py_htool_is_valid(h) != 0;
}

/* every other slot: a Handle never calls them (they are the reference's own tool's) */
static void ftnpy_htool_unsupported(void)
{
    ftnpy_py_misuse("IAsyncTool::<virtual>",
            "only cancel() and is_valid() may be called on the IAsyncTool behind a "
            "FutoInHandle's data2 (a scheduler handle of futoin_anyio)");
}

/* #include "ftnpy_table.h" above defined FTNPY_HTOOL_NSLOTS and FTNPY_HTOOL_VTABLE_INIT */
static const struct {
    ptrdiff_t offset_to_top;
    const void* rtti;
    ftnpy_htool_slot_f slots[FTNPY_HTOOL_NSLOTS];
} ftnpy_htool_vtable = { 0, NULL, { FTNPY_HTOOL_VTABLE_INIT } };

static const FtnPyHandleTool ftnpy_htool = { ftnpy_htool_vtable.slots };

/* the value of data1 and data2 of our handles */
void* ftnpy_htool_ptr(void)
{
    return (void*)&ftnpy_htool;
}

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

