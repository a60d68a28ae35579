/* Steps written in C against the FTN12 binary interface (section 2.7).
 * Built and loaded by examples/c_step.py; only futoin.h is needed. */
#include <stdio.h>
#include <string.h>

#include "futoin.h"

static const FutoInType int64_type = {FTN_TYPE_INT64, NULL};
static const FutoInType string_type = {FTN_TYPE_STRING, NULL};

/* Squares its integer argument; answers (square, text). */
void c_square(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    const FutoInType* tp = args->arg0.type;
    if (!tp || tp->flags != FTN_TYPE_INT64) {
        bsi->api->handle_error(bsi, "InvalidRequest", "c_square: expected an integer");
        return; /* C has no exceptions: return right after an error */
    }
    int64_t n = args->arg0.i64;

    /* Memory that lives exactly as long as this step. */
    char* text = (char*)bsi->api->stack(bsi, 64, NULL);
    snprintf(text, 64, "%lld squared is %lld", (long long)n, (long long)(n * n));

    FutoInArgs out;
    memset(&out, 0, sizeof(out));
    out.arg0.type = &int64_type;
    out.arg0.i64 = n * n;
    out.arg1.type = &string_type;
    out.arg1.cstr = text;
    out.arg1.length = (uint32_t)strlen(text);
    bsi->api->success(bsi, &out);
}

static void c_wake(void* data)
{
    FutoInAsyncSteps* bsi = (FutoInAsyncSteps*)data;
    static const char text[] = "woken by a C timer";
    FutoInArgs out;
    memset(&out, 0, sizeof(out));
    out.arg0.type = &string_type;
    out.arg0.cstr = text;
    out.arg0.length = (uint32_t)strlen(text);
    bsi->api->success(bsi, &out);
}

static void c_cancel_timer(FutoInAsyncSteps* bsi, void* data)
{
    bsi->api->sched_cancel(bsi, (FutoInHandle*)data);
}

/* Waits for an event (a timer of the event loop), with a cancel handler. */
void c_wait(FutoInAsyncSteps* bsi, void* data, const FutoInArgs* args)
{
    (void)data;
    (void)args;
    FutoInHandle* timer = (FutoInHandle*)bsi->api->stack(bsi, sizeof(FutoInHandle), NULL);
    *timer = bsi->api->sched_deferred(bsi, 10, bsi, c_wake);
    bsi->api->setCancel(bsi, timer, c_cancel_timer);
    bsi->api->setTimeout(bsi, 1000);
}
