/*
 * C steps that drive futoin_anyio's AsyncSteps through asi.binary(), written against
 * the shipped futoin.h only. Every table entry is used at least once; counters let
 * the Python tests prove that each allocate/stack/value cleanup ran exactly once.
 */
#include <stdlib.h>
#include <string.h>

#include "futoin.h"

typedef struct {
    int allocs;
    int state_cleanups;
    int stack_cleanups;
    int value_cleanups;
    int cancels;
    int unhandled;
    int sched_fired;
    int branches;
    int repeat_mask;
    int loop_count;
    int valid_checks;
    int same_thread;
    ptrdiff_t root_ids[4];
    int args_seen;
    int stack_zeroed;
    int shared_counter_seen;
    char log[512];
    int bench_steps;
} CStats;

CStats c_stats;

void c_reset(void) { memset(&c_stats, 0, sizeof(c_stats)); }

CStats* c_get_stats(void) { return &c_stats; }

static void c_log(const char* s)
{
    size_t n = strlen(c_stats.log);
    size_t m = strlen(s);
    if (n + m + 2 >= sizeof(c_stats.log)) return;
    memcpy(c_stats.log + n, s, m);
    c_stats.log[n + m] = ';';
    c_stats.log[n + m + 1] = 0;
}

/* --- values --------------------------------------------------------------------------- */

static void c_value_cleanup(FutoInBinaryValue* v)
{
    ++c_stats.value_cleanups;
    if (v->custom_data == (void*)1) free((void*)v->p); /* we malloc'ed it */
}

#define C_TYPE(flags) { (FutoInTypeFlags)(flags), c_value_cleanup }
static const FutoInType c_types[32] = {
    C_TYPE(0x00), C_TYPE(0x01), C_TYPE(0x02), C_TYPE(0x03), C_TYPE(0x04), C_TYPE(0x05),
    C_TYPE(0x06), C_TYPE(0x07), C_TYPE(0x08), C_TYPE(0x09), C_TYPE(0x0A), C_TYPE(0x0B),
    C_TYPE(0x0C), C_TYPE(0x0D), C_TYPE(0x0E), C_TYPE(0x0F), C_TYPE(0x10), C_TYPE(0x11),
    C_TYPE(0x12), C_TYPE(0x13), C_TYPE(0x14), C_TYPE(0x15), C_TYPE(0x16), C_TYPE(0x17),
    C_TYPE(0x18), C_TYPE(0x19), C_TYPE(0x1A), C_TYPE(0x1B), C_TYPE(0x1C), C_TYPE(0x1D),
    C_TYPE(0x1E), C_TYPE(0x1F),
};
static const FutoInType c_bad_type = C_TYPE(0x33);

static int c_custom_payload = 42;

static const void* c_dup(const void* src, size_t size)
{
    void* p = malloc(size);
    memcpy(p, src, size);
    return p;
}

/* Fill v with a value of the given flags, owned by C (malloc'ed memory, counted cleanup). */
static void c_make(FutoInBinaryValue* v, int flags)
{
    static const char utf8[] = "h\xc3\xa9llo \xe2\x82\xac";
    static const char16_t utf16[] = { 'h', 0x20AC, 'l', 0xD834, 0xDD1E, 0 };
    static const char32_t utf32[] = { 'h', 0x20AC, 'l', 0x1D11E, 0 };
    static const int32_t i32s[] = { -1, 2, 3 };
    static const uint8_t u8s[] = { 0, 255 };
    static const double ds[] = { 0.5, -1.25 };
    memset(v, 0, sizeof(*v));
    v->type = &c_types[flags];
    switch (flags) {
    case FTN_TYPE_BOOL: v->b = true; break;
    case FTN_TYPE_INT8: v->i8 = -5; break;
    case FTN_TYPE_INT16: v->i16 = -300; break;
    case FTN_TYPE_INT32: v->i32 = -70000; break;
    case FTN_TYPE_INT64: v->i64 = -5000000000LL; break;
    case FTN_TYPE_UINT8: v->u8 = 200; break;
    case FTN_TYPE_UINT16: v->u16 = 60000; break;
    case FTN_TYPE_UINT32: v->u32 = 4000000000u; break;
    case FTN_TYPE_UINT64: v->u64 = 18000000000000000000ull; break;
    case FTN_TYPE_FLOAT: v->f = 1.5f; break;
    case FTN_TYPE_DOUBLE: v->d = 2.25; break;
    case FTN_TYPE_STRING:
        v->p = c_dup(utf8, sizeof(utf8));
        v->length = (uint32_t)strlen(utf8);
        v->custom_data = (void*)1;
        break;
    case FTN_TYPE_STRING16:
        v->p = c_dup(utf16, sizeof(utf16));
        v->length = 5;
        v->custom_data = (void*)1;
        break;
    case FTN_TYPE_STRING32:
        v->p = c_dup(utf32, sizeof(utf32));
        v->length = 0; /* NUL-terminated: the receiver measures it */
        v->custom_data = (void*)1;
        break;
    case FTN_TYPE_ARRAY | FTN_TYPE_INT32:
        v->p = c_dup(i32s, sizeof(i32s));
        v->length = 3;
        v->custom_data = (void*)1;
        break;
    case FTN_TYPE_ARRAY | FTN_TYPE_UINT8:
        v->p = c_dup(u8s, sizeof(u8s));
        v->length = 2;
        v->custom_data = (void*)1;
        break;
    case FTN_TYPE_ARRAY | FTN_TYPE_DOUBLE:
        v->p = c_dup(ds, sizeof(ds));
        v->length = 2;
        v->custom_data = (void*)1;
        break;
    case FTN_TYPE_CUSTOM_OBJECT:
        v->p = &c_custom_payload;
        v->length = 7;
        break;
    default: break;
    }
}

/* success(value of flags=data) */
void c_emit(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    FutoInArgs out;
    (void)args;
    memset(&out, 0, sizeof(out));
    c_make(&out.arg0, (int)(intptr_t)data);
    bsi->api->success(bsi, &out);
}

/* success(the borrowed args, as they are) */
void c_echo(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    FutoInArgs out = *args;
    (void)data;
    bsi->api->success(bsi, &out);
}

/* Bad values: data selects the kind. The step must fail with InternalError. */
void c_emit_bad(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    static const char bad8[] = "\xff\xfe";
    static const char16_t bad16[] = { 'a', 0xD800, 0 };
    static const char32_t bad32[] = { 'a', 0x110000, 0 };
    FutoInArgs out;
    (void)args;
    memset(&out, 0, sizeof(out));
    switch ((int)(intptr_t)data) {
    case 0: /* unknown type flags */
        out.arg0.type = &c_bad_type;
        break;
    case 1:
        out.arg0.type = &c_types[FTN_TYPE_STRING];
        out.arg0.cstr = bad8;
        out.arg0.length = 2;
        break;
    case 2:
        out.arg0.type = &c_types[FTN_TYPE_STRING16];
        out.arg0.cstr16 = bad16;
        out.arg0.length = 2;
        break;
    case 3:
        out.arg0.type = &c_types[FTN_TYPE_STRING32];
        out.arg0.cstr32 = bad32;
        out.arg0.length = 2;
        break;
    case 4: /* a gap: arg1 set, arg0 empty */
        c_make(&out.arg1, FTN_TYPE_INT8);
        break;
    case 5: /* array of strings */
        out.arg0.type = &c_types[FTN_TYPE_ARRAY | FTN_TYPE_STRING];
        break;
    case 6: /* NULL string */
        out.arg0.type = &c_types[FTN_TYPE_STRING];
        break;
    default: /* a good value first, then a bad one */
        c_make(&out.arg0, FTN_TYPE_INT32);
        out.arg1.type = &c_bad_type;
        break;
    }
    bsi->api->success(bsi, &out);
}

/* Record what Python sent (args borrowed), succeed with nothing. */
void c_record_args(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    int i;
    (void)data;
    c_stats.args_seen = 0;
    for (i = 0; i < 4; ++i) {
        if (args->args[i].type) ++c_stats.args_seen;
    }
    if (args->arg0.type && args->arg0.type->flags == FTN_TYPE_INT64 && args->arg0.i64 == -7) {
        c_log("i64=-7");
    }
    if (args->arg1.type && args->arg1.type->flags == FTN_TYPE_STRING
            && strcmp(args->arg1.cstr, "\xc3\xa9t\xc3\xa9") == 0 && args->arg1.length == 5) {
        c_log("str=ete");
    }
    if (args->arg2.type && args->arg2.type->flags == (FTN_TYPE_ARRAY | FTN_TYPE_DOUBLE)
            && args->arg2.length == 2 && ((const double*)args->arg2.p)[1] == 2.5) {
        c_log("doubles");
    }
    if (args->arg3.type && args->arg3.type->flags == FTN_TYPE_CUSTOM_OBJECT
            && args->arg3.custom_data != NULL) {
        c_log("custom");
    }
    bsi->api->success(bsi, NULL);
}

/* --- the table, entry by entry ----------------------------------------------------- */

static void* c_alloc(void* data)
{
    (void)data;
    ++c_stats.allocs;
    return calloc(1, sizeof(int));
}

static void c_state_cleanup(void* data, void* value)
{
    (void)data;
    ++c_stats.state_cleanups;
    free(value);
}

static void c_stack_cleanup(void* value)
{
    (void)value;
    ++c_stats.stack_cleanups;
}

static void c_on_cancel(FutoInAsyncSteps* bsi, void* data)
{
    (void)bsi;
    (void)data;
    ++c_stats.cancels;
    c_log("cancel");
}

static void c_failing(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->handle_error(bsi, "MyError", "my info");
    /* C cannot throw: everything after handle_error() is ignored until we return */
    bsi->api->success(bsi, NULL);
}

static void c_recover(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    const char* info = (const char*)bsi->api->stateVariable(bsi, NULL, "error_info", NULL, NULL);
    FutoInArgs out;
    (void)data;
    c_log(code);
    c_log(info ? info : "(null)");
    memset(&out, 0, sizeof(out));
    out.arg0.type = &c_types[FTN_TYPE_INT32];
    out.arg0.i32 = 7;
    bsi->api->success(bsi, &out);
}

static void c_after_recover(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    if (args->arg0.type && args->arg0.i32 == 7) c_log("got7");
    bsi->api->success(bsi, NULL);
}

static void c_branch(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    int* shared = (int*)bsi->api->stateVariable(bsi, NULL, "shared", c_alloc, c_state_cleanup);
    (void)data;
    (void)args;
    ++*shared;
    ++c_stats.branches;
    c_stats.root_ids[1 + (c_stats.branches & 1)] = bsi->api->rootId(bsi);
}

static void c_repeat_body(FutoInAsyncSteps* bsi, void* data, size_t i)
{
    (void)data;
    if (i == 1) {
        bsi->api->continueLoop(bsi, NULL);
        return;
    }
    if (i == 3) {
        bsi->api->breakLoop(bsi, "R");
        return;
    }
    c_stats.repeat_mask |= 1 << i;
}

static void c_loop_body(FutoInAsyncSteps* bsi, void* data)
{
    (void)data;
    if (++c_stats.loop_count == 3) bsi->api->breakLoop(bsi, NULL);
}

static void c_check_shared(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    int* shared = (int*)bsi->api->stateVariable(bsi, NULL, "shared", c_alloc, c_state_cleanup);
    (void)data;
    (void)args;
    c_stats.shared_counter_seen = *shared;
}

/* Uses add, parallel, stateVariable, stack, success, handle_error, loop, repeat,
 * breakLoop, continueLoop, rootId, isValid, is_same_thread. */
void c_full(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    const FutoInAsyncStepsAPI* api = bsi->api;
    int* a = (int*)api->stateVariable(bsi, NULL, "shared", c_alloc, c_state_cleanup);
    int* b = (int*)api->stateVariable(bsi, NULL, "shared", c_alloc, c_state_cleanup);
    unsigned char* mem = (unsigned char*)api->stack(bsi, 64, c_stack_cleanup);
    FutoInAsyncSteps* par;
    int i;
    (void)data;
    (void)args;
    if (a != b) c_log("stateVariable allocated twice");
    c_stats.stack_zeroed = 1;
    for (i = 0; i < 64; ++i) {
        if (mem[i]) c_stats.stack_zeroed = 0;
    }
    c_stats.root_ids[0] = api->rootId(bsi);
    c_stats.valid_checks += api->isValid(bsi);
    c_stats.same_thread = api->is_same_thread(bsi);
    api->add(bsi, NULL, c_failing, c_recover);
    api->add(bsi, NULL, c_after_recover, NULL);
    par = api->parallel(bsi, NULL, NULL);
    if (!par) return; /* the bridge recorded why: the step fails with it */
    par->api->add(par, NULL, c_branch, NULL);
    par->api->add(par, NULL, c_branch, NULL);
    api->add(bsi, NULL, c_check_shared, NULL);
    api->repeat(bsi, NULL, 10, c_repeat_body, "R");
    api->loop(bsi, NULL, c_loop_body, NULL);
}

/* --- waiting, cancel, timeout, sched ---------------------------------------------- */

static void c_complete(void* data)
{
    FutoInAsyncSteps* bsi = (FutoInAsyncSteps*)data;
    FutoInArgs out;
    ++c_stats.sched_fired;
    memset(&out, 0, sizeof(out));
    out.arg0.type = &c_types[FTN_TYPE_INT32];
    out.arg0.i32 = 99;
    bsi->api->success(bsi, &out);
}

static void c_never(void* data)
{
    (void)data;
    c_log("cancelled sched fired");
}

/* waitExternal + setCancel; sched_immediate completes it; a deferred one is cancelled */
void c_wait(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    const FutoInAsyncStepsAPI* api = bsi->api;
    FutoInHandle later;
    FutoInHandle now;
    (void)data;
    (void)args;
    api->waitExternal(bsi);
    api->setCancel(bsi, NULL, c_on_cancel);
    later = api->sched_deferred(bsi, 100000, NULL, c_never);
    if (api->sched_is_valid(bsi, &later)) c_log("deferred valid");
    api->sched_cancel(bsi, &later);
    if (!api->sched_is_valid(bsi, &later)) c_log("deferred cancelled");
    now = api->sched_immediate(bsi, bsi, c_complete);
    if (api->sched_is_valid(bsi, &now)) c_log("immediate valid");
}

static void c_count_fired(void* data)
{
    (void)data;
    ++c_stats.sched_fired;
}

/* schedules a callback data ms later and returns: the root may end before it fires */
void c_sched_far(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    bsi->api->sched_deferred(bsi, (uint32_t)(intptr_t)data, NULL, c_count_fired);
}

/* setTimeout + setCancel: times out */
void c_timeout(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    bsi->api->setTimeout(bsi, (uint32_t)(intptr_t)data);
    bsi->api->setCancel(bsi, NULL, c_on_cancel);
    c_log("waiting");
}

/* --- newInstance, execute, cancel, free ------------------------------------------- */

static FutoInAsyncSteps* c_freed;

static void c_unhandled(FutoInAsyncSteps* bsi, void* data, const char* code)
{
    (void)data;
    ++c_stats.unhandled;
    c_log(code);
    bsi->api->free(bsi);
    c_freed = bsi;
}

static void c_fail_plain(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    bsi->api->handle_error(bsi, "Oops", NULL);
}

/* Starts a new instance that fails; its unhandled-error callback frees it. */
void c_spawn(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    FutoInAsyncSteps* n = bsi->api->newInstance(bsi);
    (void)data;
    (void)args;
    c_stats.root_ids[3] = n->api->rootId(n);
    n->api->add(n, NULL, c_fail_plain, NULL);
    n->api->execute(n, NULL, c_unhandled);
}

static FutoInAsyncSteps* c_spawned;

/* Starts a new instance that waits (c_timeout with data as the timeout). */
void c_spawn_waiting(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    FutoInAsyncSteps* n = bsi->api->newInstance(bsi);
    (void)args;
    n->api->add(n, data, c_timeout, NULL);
    n->api->execute(n, NULL, c_unhandled);
    c_spawned = n;
}

/* Cancels and frees the instance c_spawn_waiting started. */
void c_cancel_spawned(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)bsi;
    (void)data;
    (void)args;
    c_spawned->api->cancel(c_spawned);
    c_spawned->api->free(c_spawned);
    c_spawned = NULL;
}

/* Use after free: isValid says 0, any other call fails the step. */
void c_use_freed(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    if (c_freed && !c_freed->api->isValid(c_freed)) c_log("freed invalid");
    if (c_freed) c_freed->api->add(c_freed, NULL, c_fail_plain, NULL);
    (void)bsi;
}

/* --- bad input --------------------------------------------------------------------- */

void c_bad_call(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    switch ((int)(intptr_t)data) {
    case 0: bsi->api->add(bsi, NULL, NULL, NULL); break;
    case 1: bsi->api->add(NULL, NULL, c_echo, NULL); break;
    case 2: bsi->api->handle_error(bsi, "\xff\xfe", NULL); break;
    case 3: bsi->api->handle_error(bsi, NULL, NULL); break;
    case 4: bsi->api->free(bsi); break; /* not from newInstance() */
    case 5: bsi->api->stateVariable(bsi, NULL, "py", c_alloc, c_state_cleanup); break;
    default: bsi->api->setCancel(bsi, NULL, NULL); break;
    }
}

/* --- sync -------------------------------------------------------------------------- */

static void c_in_section(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    c_log("section");
    bsi->api->success(bsi, NULL);
}

/* addSync(data = FutoInSync *) */
void c_add_sync(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    bsi->api->addSync(bsi, (FutoInSync*)data, NULL, c_in_section, NULL);
}

/* A foreign FutoInSync with a lock that may wait: queued steps get success() on unlock. */
typedef struct {
    FutoInSync base;
    int held;
    FutoInAsyncSteps* waiting[8];
    int nwaiting;
    int locks;
    int unlocks;
} CSync;

static void cs_lock(FutoInAsyncSteps* bsi, FutoInSync* sync)
{
    CSync* s = (CSync*)sync;
    ++s->locks;
    if (!s->held) {
        s->held = 1;
        return; /* acquired: the lock step succeeds implicitly */
    }
    s->waiting[s->nwaiting++] = bsi;
    bsi->api->waitExternal(bsi);
}

static void cs_unlock(FutoInAsyncSteps* bsi, FutoInSync* sync)
{
    CSync* s = (CSync*)sync;
    (void)bsi;
    ++s->unlocks;
    if (s->nwaiting) {
        FutoInAsyncSteps* next = s->waiting[0];
        int i;
        for (i = 1; i < s->nwaiting; ++i) s->waiting[i - 1] = s->waiting[i];
        --s->nwaiting;
        next->api->success(next, NULL); /* hand over, still held */
    } else {
        s->held = 0;
    }
}

static const FutoInSyncAPI cs_api = { { { cs_lock, cs_unlock } } };

FutoInSync* c_new_sync(void)
{
    CSync* s = (CSync*)calloc(1, sizeof(CSync));
    const FutoInSyncAPI* api = &cs_api;
    memcpy((void*)&s->base.api, &api, sizeof(api));
    return &s->base;
}

int c_sync_counts(FutoInSync* sync, int which)
{
    CSync* s = (CSync*)sync;
    return which == 0 ? s->locks : which == 1 ? s->unlocks : s->held;
}

void c_free_sync(FutoInSync* sync) { free(sync); }

/* --- the loop measured by the benchmark -------------------------------------------- */

static void c_bench_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    ++c_stats.bench_steps;
    bsi->api->success(bsi, NULL);
}

static void c_bench_body(FutoInAsyncSteps* bsi, void* data, size_t i)
{
    (void)i;
    bsi->api->add(bsi, data, c_bench_step, NULL);
}

void c_bench(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)args;
    bsi->api->repeat(bsi, NULL, (size_t)(intptr_t)data, c_bench_body, NULL);
}
