/*
 * A minimal *foreign* FutoInAsyncSteps: a tiny synchronous executor in plain C11,
 * written against the shipped futoin.h only. futoin_anyio's wrap() must drive it
 * through its function table, and Python steps added to it are called back from here.
 *
 * Semantics (deliberately small): steps run depth-first, synchronously, inside
 * execute(); parallel() branches run one after another; waitExternal()/setTimeout()
 * only mark the step (a step still waiting when it returns fails with
 * "InternalError"); sched_*() callbacks run after the root completes. It owns the
 * FutoInArgs given to success() and resets (cleans up) them after the next step.
 */
#include <stdlib.h>
#include <string.h>

#include "futoin.h"

#define F_MAX_STEPS 16
#define F_MAX_VARS 8
#define F_MAX_STACK 8
#define F_MAX_SCHED 8

enum { F_STEP, F_LOOP, F_REPEAT, F_PARALLEL };
enum { F_RUNNING, F_SUCCESS, F_ERROR };

typedef struct FStep FStep;
typedef struct FRoot FRoot;
typedef struct FAsi FAsi;

struct FStep {
    int kind;
    FutoInAsyncSteps_execute_callback f;
    FutoInAsyncSteps_error_callback eh;
    void (*loop_f)(FutoInAsyncSteps*, void*);
    void (*repeat_f)(FutoInAsyncSteps*, void*, size_t);
    size_t count;
    void* data;
    char label[32];
    FAsi* par; /* F_PARALLEL: the branch collector */
    FutoInSync* sync;
};

struct FAsi {
    FutoInAsyncSteps base;
    FRoot* root;
    FStep queue[F_MAX_STEPS];
    int nqueue;
    int status;
    int waiting;
    int valid;
    int is_parallel;
    FutoInArgs result;
    void* stack_ptrs[F_MAX_STACK];
    void (*stack_cleanups[F_MAX_STACK])(void*);
    int nstack;
    FutoInAsyncSteps_cancel_callback oncancel;
    void* cancel_data;
    char loop_label[32];
};

typedef struct {
    void (*cb)(void*);
    void* data;
    ptrdiff_t id;
} FSched;

struct FRoot {
    FAsi top; /* the root object: add() before execute() lands in top.queue */
    unsigned magic;
    char code[64];
    char error_info[256];
    int has_error_info;
    char var_names[F_MAX_VARS][48];
    void* var_ptrs[F_MAX_VARS];
    void (*var_cleanups[F_MAX_VARS])(void*, void*);
    void* var_data[F_MAX_VARS];
    int nvars;
    FSched sched[F_MAX_SCHED];
    int nsched;
    ptrdiff_t next_sched;
    int cancelled;
    int timeouts_set;
};

/* statistics the tests read */
typedef struct {
    int steps_run;
    int lock_calls;
    int unlock_calls;
    int locked;
    int values_reset;
    int freed;
} FStats;

FStats f_stats;

static const FutoInAsyncStepsAPI f_api;

static FAsi* f_self(FutoInAsyncSteps* bsi) { return (FAsi*)bsi; }

/* bounded copy, always NUL-terminated */
static void f_copy(char* dst, const char* src, size_t size)
{
    size_t i = 0;
    for (; i + 1 < size && src[i]; ++i) dst[i] = src[i];
    dst[i] = 0;
}

static void f_init_asi(FAsi* a, FRoot* root)
{
    memset(a, 0, sizeof(*a));
    memcpy((void*)&a->base.api, &(const FutoInAsyncStepsAPI*){ &f_api }, sizeof(void*));
    a->root = root;
    a->valid = 1;
}

static void f_reset_args(FutoInArgs* args)
{
    int i;
    for (i = 0; i < 4; ++i) {
        if (args->args[i].type) ++f_stats.values_reset;
        futoin_reset_binval(&args->args[i]);
    }
}

static void f_fail(FAsi* a, const char* code)
{
    if (a->status != F_RUNNING) return;
    a->status = F_ERROR;
    f_copy(a->root->code, code, sizeof(a->root->code));
}

/* --- table ------------------------------------------------------------ */

static FStep* f_push(FAsi* a)
{
    FStep* st;
    if (a->nqueue >= F_MAX_STEPS) {
        f_fail(a, "InternalError");
        return NULL;
    }
    st = &a->queue[a->nqueue++];
    memset(st, 0, sizeof(*st));
    return st;
}

static void f_add(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_execute_callback f,
        FutoInAsyncSteps_error_callback eh)
{
    FStep* st = f_push(f_self(bsi));
    if (!st) return;
    st->kind = F_STEP;
    st->f = f;
    st->eh = eh;
    st->data = data;
}

static FutoInAsyncSteps* f_parallel(FutoInAsyncSteps* bsi, void* data,
        FutoInAsyncSteps_error_callback eh)
{
    FAsi* a = f_self(bsi);
    FStep* st = f_push(a);
    if (!st) return NULL;
    st->kind = F_PARALLEL;
    st->eh = eh;
    st->data = data;
    st->par = (FAsi*)malloc(sizeof(FAsi));
    f_init_asi(st->par, a->root);
    st->par->is_parallel = 1;
    return &st->par->base;
}

static void* f_state_variable(FutoInAsyncSteps* bsi, void* data, const char* name,
        void* (*allocate)(void*), void (*cleanup)(void*, void*))
{
    FRoot* r = f_self(bsi)->root;
    int i;
    if (strcmp(name, "error_info") == 0) return r->has_error_info ? r->error_info : NULL;
    for (i = 0; i < r->nvars; ++i) {
        if (strcmp(r->var_names[i], name) == 0) return r->var_ptrs[i];
    }
    if (!allocate || r->nvars >= F_MAX_VARS) return NULL;
    f_copy(r->var_names[i], name, sizeof(r->var_names[i]));
    r->var_ptrs[i] = allocate(data);
    r->var_cleanups[i] = cleanup;
    r->var_data[i] = data;
    ++r->nvars;
    return r->var_ptrs[i];
}

static void* f_stack(FutoInAsyncSteps* bsi, size_t size, void (*cleanup)(void*))
{
    FAsi* a = f_self(bsi);
    void* p;
    if (a->nstack >= F_MAX_STACK) return NULL;
    p = calloc(1, size ? size : 1);
    a->stack_ptrs[a->nstack] = p;
    a->stack_cleanups[a->nstack] = cleanup;
    ++a->nstack;
    return p;
}

static void f_success(FutoInAsyncSteps* bsi, FutoInArgs* args)
{
    FAsi* a = f_self(bsi);
    if (a->status != F_RUNNING || a->nqueue) {
        if (args) f_reset_args(args);
        f_fail(a, "InternalError");
        return;
    }
    a->status = F_SUCCESS;
    a->waiting = 0;
    if (args) {
        a->result = *args; /* moved: we own them now */
        memset(args, 0, sizeof(*args));
    }
}

static void f_handle_error(FutoInAsyncSteps* bsi, const char* code, const char* info)
{
    FAsi* a = f_self(bsi);
    FRoot* r = a->root;
    r->has_error_info = info != NULL;
    if (info) {
        f_copy(r->error_info, info, sizeof(r->error_info));
        r->error_info[sizeof(r->error_info) - 1] = 0;
    }
    a->status = F_RUNNING;
    f_fail(a, code);
}

static void f_set_timeout(FutoInAsyncSteps* bsi, uint32_t ms)
{
    (void)ms;
    f_self(bsi)->waiting = 1;
    ++f_self(bsi)->root->timeouts_set;
}

static void f_set_cancel(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_cancel_callback ch)
{
    FAsi* a = f_self(bsi);
    a->oncancel = ch;
    a->cancel_data = data;
    a->waiting = 1;
}

static void f_wait_external(FutoInAsyncSteps* bsi) { f_self(bsi)->waiting = 1; }

static void f_loop(FutoInAsyncSteps* bsi, void* data, void (*f)(FutoInAsyncSteps*, void*),
        const char* label)
{
    FStep* st = f_push(f_self(bsi));
    if (!st) return;
    st->kind = F_LOOP;
    st->loop_f = f;
    st->data = data;
    if (label) f_copy(st->label, label, sizeof(st->label));
}

static void f_repeat(FutoInAsyncSteps* bsi, void* data, size_t count,
        void (*f)(FutoInAsyncSteps*, void*, size_t), const char* label)
{
    FStep* st = f_push(f_self(bsi));
    if (!st) return;
    st->kind = F_REPEAT;
    st->repeat_f = f;
    st->count = count;
    st->data = data;
    if (label) f_copy(st->label, label, sizeof(st->label));
}

static void f_break_loop(FutoInAsyncSteps* bsi, const char* label)
{
    FAsi* a = f_self(bsi);
    f_fail(a, "LoopBreak");
    f_copy(a->root->error_info, label ? label : "", sizeof(a->root->error_info));
    a->root->has_error_info = 0;
    f_copy(a->loop_label, label ? label : "", sizeof(a->loop_label));
}

static void f_continue_loop(FutoInAsyncSteps* bsi, const char* label)
{
    FAsi* a = f_self(bsi);
    f_fail(a, "LoopCont");
    a->root->has_error_info = 0;
    f_copy(a->loop_label, label ? label : "", sizeof(a->loop_label));
}

static int f_run_queue(FRoot* r, FStep* steps, int n, FutoInArgs* args, char* label_out);

static void f_run_sched(FRoot* r)
{
    int i;
    while (r->nsched > 0) {
        FSched s = r->sched[0];
        for (i = 1; i < r->nsched; ++i) r->sched[i - 1] = r->sched[i];
        --r->nsched;
        s.cb(s.data);
    }
}

static void f_execute(FutoInAsyncSteps* bsi, void* data, FutoInAsyncSteps_error_callback eh)
{
    FRoot* r = f_self(bsi)->root;
    FutoInArgs args;
    char label[32] = "";
    int rc;
    memset(&args, 0, sizeof(args));
    rc = f_run_queue(r, r->top.queue, r->top.nqueue, &args, label);
    r->top.nqueue = 0;
    f_reset_args(&args);
    if (rc != 0 && eh) eh(bsi, data, r->code);
    f_run_sched(r);
}

static void f_cancel(FutoInAsyncSteps* bsi) { f_self(bsi)->root->cancelled = 1; }

static void f_add_sync(FutoInAsyncSteps* bsi, FutoInSync* sync, void* data,
        FutoInAsyncSteps_execute_callback f, FutoInAsyncSteps_error_callback eh)
{
    FStep* st = f_push(f_self(bsi));
    if (!st) return;
    st->kind = F_STEP;
    st->f = f;
    st->eh = eh;
    st->data = data;
    st->sync = sync;
}

static ptrdiff_t f_root_id(FutoInAsyncSteps* bsi) { return (ptrdiff_t)f_self(bsi)->root; }

static int f_is_valid(FutoInAsyncSteps* bsi) { return f_self(bsi)->valid; }

FutoInAsyncSteps* f_new_root(void);

static FutoInAsyncSteps* f_new_instance(FutoInAsyncSteps* bsi)
{
    (void)bsi;
    return f_new_root();
}

static void f_free(FutoInAsyncSteps* bsi)
{
    FRoot* r = f_self(bsi)->root;
    int i;
    for (i = 0; i < r->nvars; ++i) {
        if (r->var_cleanups[i]) r->var_cleanups[i](r->var_data[i], r->var_ptrs[i]);
    }
    r->magic = 0;
    ++f_stats.freed;
    free(r);
}

static FutoInHandle f_sched(FutoInAsyncSteps* bsi, void* data, void (*cb)(void*))
{
    FRoot* r = f_self(bsi)->root;
    FutoInHandle h = { NULL, NULL, 0 };
    if (r->nsched >= F_MAX_SCHED) return h;
    h.data1 = r;
    h.data3 = ++r->next_sched;
    r->sched[r->nsched].cb = cb;
    r->sched[r->nsched].data = data;
    r->sched[r->nsched].id = h.data3;
    ++r->nsched;
    return h;
}

static FutoInHandle f_sched_immediate(FutoInAsyncSteps* bsi, void* data, void (*cb)(void*))
{
    return f_sched(bsi, data, cb);
}

static FutoInHandle f_sched_deferred(FutoInAsyncSteps* bsi, uint32_t ms, void* data,
        void (*cb)(void*))
{
    (void)ms;
    return f_sched(bsi, data, cb);
}

static void f_sched_cancel(FutoInAsyncSteps* bsi, FutoInHandle* h)
{
    FRoot* r = f_self(bsi)->root;
    int i, j;
    for (i = 0; i < r->nsched; ++i) {
        if (r->sched[i].id == h->data3) {
            for (j = i + 1; j < r->nsched; ++j) r->sched[j - 1] = r->sched[j];
            --r->nsched;
            return;
        }
    }
}

static int f_sched_is_valid(FutoInAsyncSteps* bsi, FutoInHandle* h)
{
    FRoot* r = f_self(bsi)->root;
    int i;
    for (i = 0; i < r->nsched; ++i) {
        if (r->sched[i].id == h->data3) return 1;
    }
    return 0;
}

static int f_is_same_thread(FutoInAsyncSteps* bsi)
{
    (void)bsi;
    return 1;
}

static const FutoInAsyncStepsAPI f_api = { { {
    f_add, f_parallel, f_state_variable, f_stack, f_success, f_handle_error, f_set_timeout,
    f_set_cancel, f_wait_external, f_loop, f_repeat, f_break_loop, f_continue_loop, f_execute,
    f_cancel, f_add_sync, f_root_id, f_is_valid, f_new_instance, f_free, f_sched_immediate,
    f_sched_deferred, f_sched_cancel, f_sched_is_valid, f_is_same_thread,
} } };

/* --- executor --------------------------------------------------------- */

static void f_end_asi(FAsi* a)
{
    int i;
    for (i = a->nstack - 1; i >= 0; --i) {
        if (a->stack_cleanups[i]) a->stack_cleanups[i](a->stack_ptrs[i]);
        free(a->stack_ptrs[i]);
    }
    a->nstack = 0;
    a->valid = 0;
}

/* Run one step; 0 = success (args replaced by its result), -1 = error (r->code). */
static int f_run_step(FRoot* r, FStep* st, FutoInArgs* args, char* label_out)
{
    FAsi a;
    int rc = 0;
    int i;
    if (r->cancelled) {
        f_copy(r->code, "Cancelled", sizeof(r->code));
        return -1;
    }
    ++f_stats.steps_run;
    f_init_asi(&a, r);
    if (st->kind == F_PARALLEL) {
        for (i = 0; i < st->par->nqueue && rc == 0; ++i) {
            FutoInArgs none;
            memset(&none, 0, sizeof(none));
            rc = f_run_queue(r, &st->par->queue[i], 1, &none, label_out);
            f_reset_args(&none);
        }
        free(st->par);
        st->par = NULL;
        f_reset_args(args);
        if (rc == 0) return 0;
    } else if (st->kind == F_LOOP || st->kind == F_REPEAT) {
        size_t n;
        f_reset_args(args);
        for (n = 0; st->kind == F_LOOP || n < st->count; ++n) {
            FAsi body;
            FutoInArgs none;
            char lbl[32] = "";
            f_init_asi(&body, r);
            memset(&none, 0, sizeof(none));
            if (st->kind == F_LOOP) {
                st->loop_f(&body.base, st->data);
            } else {
                st->repeat_f(&body.base, st->data, n);
            }
            rc = 0;
            if (body.status == F_ERROR) {
                rc = -1;
                f_copy(lbl, body.loop_label, sizeof(lbl));
            } else if (body.nqueue) {
                rc = f_run_queue(r, body.queue, body.nqueue, &none, lbl);
            }
            f_reset_args(&body.result);
            f_reset_args(&none);
            f_end_asi(&body);
            if (rc != 0) {
                int mine = lbl[0] == 0 || strcmp(lbl, st->label) == 0;
                if (strcmp(r->code, "LoopCont") == 0 && mine) continue;
                if (strcmp(r->code, "LoopBreak") == 0 && mine) {
                    rc = 0;
                    break;
                }
                f_copy(label_out, lbl, 32);
                return -1;
            }
        }
        return 0;
    } else {
        if (st->sync) {
            ++f_stats.lock_calls;
            st->sync->api->lock(&a.base, st->sync);
        }
        st->f(&a.base, st->data, args);
        f_reset_args(args);
        if (a.status == F_RUNNING && a.nqueue) {
            rc = f_run_queue(r, a.queue, a.nqueue, args, label_out);
            a.nqueue = 0;
            if (rc == 0) a.status = F_SUCCESS;
        } else if (a.status == F_RUNNING && a.waiting) {
            f_fail(&a, "InternalError"); /* nothing can complete it later here */
            rc = -1;
        } else if (a.status == F_RUNNING) {
            a.status = F_SUCCESS;
        } else if (a.status == F_ERROR) {
            rc = -1;
            f_copy(label_out, a.loop_label, 32);
        } else {
            *args = a.result;
            memset(&a.result, 0, sizeof(a.result));
        }
        if (st->sync) {
            ++f_stats.unlock_calls;
            st->sync->api->unlock(&a.base, st->sync);
        }
        if (rc == 0) {
            f_end_asi(&a);
            return 0;
        }
    }
    /* error path: cancel handler, then the error handler */
    if (a.oncancel) a.oncancel(&a.base, a.cancel_data);
    f_end_asi(&a);
    if (st->eh && strcmp(r->code, "LoopBreak") != 0 && strcmp(r->code, "LoopCont") != 0) {
        FAsi h;
        char code[64];
        f_init_asi(&h, r);
        f_copy(code, r->code, sizeof(code));
        st->eh(&h.base, st->data, code);
        if (h.status == F_SUCCESS) {
            *args = h.result;
            f_end_asi(&h);
            return 0;
        }
        if (h.status == F_RUNNING && h.nqueue) {
            FutoInArgs none;
            memset(&none, 0, sizeof(none));
            rc = f_run_queue(r, h.queue, h.nqueue, &none, label_out);
            f_end_asi(&h);
            if (rc == 0) {
                *args = none;
                return 0;
            }
            return -1;
        }
        f_end_asi(&h);
    }
    return -1;
}

static int f_run_queue(FRoot* r, FStep* steps, int n, FutoInArgs* args, char* label_out)
{
    int i;
    for (i = 0; i < n; ++i) {
        if (f_run_step(r, &steps[i], args, label_out) != 0) return -1;
    }
    return 0;
}

/* --- entry points for the tests -------------------------------------- */

FutoInAsyncSteps* f_new_root(void)
{
    FRoot* r = (FRoot*)calloc(1, sizeof(FRoot));
    f_init_asi(&r->top, r);
    r->magic = 0x46524F4Fu;
    return &r->top.base;
}

void f_free_root(FutoInAsyncSteps* bsi) { f_free(bsi); }

const char* f_error_info(FutoInAsyncSteps* bsi) { return f_self(bsi)->root->error_info; }

const char* f_last_code(FutoInAsyncSteps* bsi) { return f_self(bsi)->root->code; }

int f_timeouts_set(FutoInAsyncSteps* bsi) { return f_self(bsi)->root->timeouts_set; }

/* A C step for the foreign executor: success(int32 data) */
void f_c_step(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    static const FutoInType i32 = { FTN_TYPE_INT32, NULL };
    FutoInArgs out;
    (void)args;
    memset(&out, 0, sizeof(out));
    out.arg0.type = &i32;
    out.arg0.i32 = (int32_t)(intptr_t)data;
    bsi->api->success(bsi, &out);
}

/* A foreign FutoInSync: a non-blocking counting lock. */
typedef struct {
    FutoInSync base;
    int holders;
    int max;
} FSync;

static void fs_lock(FutoInAsyncSteps* bsi, FutoInSync* sync)
{
    FSync* s = (FSync*)sync;
    ++f_stats.lock_calls;
    if (s->holders >= s->max) {
        bsi->api->handle_error(bsi, "DefenseRejected", "foreign lock is busy");
        return;
    }
    ++s->holders;
    ++f_stats.locked;
}

static void fs_unlock(FutoInAsyncSteps* bsi, FutoInSync* sync)
{
    FSync* s = (FSync*)sync;
    (void)bsi;
    ++f_stats.unlock_calls;
    --s->holders;
}

static const FutoInSyncAPI fs_api = { { { fs_lock, fs_unlock } } };
static const FutoInSyncAPI fs_null_api = { { { NULL, NULL } } };

FutoInSync* f_new_sync(int max, int null_api)
{
    FSync* s = (FSync*)calloc(1, sizeof(FSync));
    const FutoInSyncAPI* api = null_api ? &fs_null_api : &fs_api;
    memcpy((void*)&s->base.api, &api, sizeof(api));
    s->max = max;
    return &s->base;
}

int f_sync_holders(FutoInSync* sync) { return ((FSync*)sync)->holders; }

void f_free_sync(FutoInSync* sync) { free(sync); }

FStats* f_get_stats(void) { return &f_stats; }

void f_reset_stats(void) { memset(&f_stats, 0, sizeof(f_stats)); }
