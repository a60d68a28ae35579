// Interop cases against the FutoIn C++ reference implementation (test data, not shipped).
//
// Built by tests/interop/refbuild.py together with the reference sources named by the
// FUTOIN_CPP_REFERENCE environment variable. Every function is extern "C" and takes plain
// pointers, so Python loads this library with cffi in ABI mode.
//
// C++ -> Py: the cpp_* execute callbacks run as our steps (futoin_anyio.binary.c_step) and
// drive our FutoInAsyncSteps * through the reference's own wrapper (ri::wrap_binary_steps),
// as C++ code written against the reference would. They use the no-throw calls
// (errorNoThrow, breakLoopNoThrow) and return: a C++ throw over a pointer that is not the
// reference's own aborts in the reference's wrapper.
//
// Py -> C++: ref_* make a reference AsyncTool (external loop, pumped from Python) and a root
// AsyncSteps whose binary() pointer Python drives through AsyncSteps.wrap().

#include <futoin/ri/asyncsteps.hpp>
#include <futoin/ri/asynctool.hpp>
#include <futoin/ri/binaryapi.hpp>
#include <futoin/ri/mutex.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace futoin;

namespace {
    std::string g_log;
    std::vector<std::unique_ptr<IAsyncSteps>> g_instances;
    std::unique_ptr<ri::Mutex> g_mutex;
    IAsyncTool::Handle g_kept_handle;

    void log(const std::string& s)
    {
        g_log += s;
        g_log += ';';
    }

    std::unique_ptr<IAsyncSteps> W(FutoInAsyncSteps* bsi)
    {
        return ri::wrap_binary_steps(*bsi);
    }

    ri::Mutex& mutex()
    {
        if (!g_mutex) {
            g_mutex.reset(new ri::Mutex(1));
        }
        return *g_mutex;
    }

    // Completes a waiting step through the raw table, from a scheduled callback.
    void finish_later(FutoInAsyncSteps* bsi, uint32_t ms)
    {
        bsi->api->waitExternal(bsi);
        bsi->api->sched_deferred(bsi, ms, bsi, [](void* data) {
            auto* b = static_cast<FutoInAsyncSteps*>(data);
            FutoInArgs args{};
            b->api->success(b, &args);
        });
    }
} // namespace

extern "C" {

const char* cpp_log()
{
    return g_log.c_str();
}

void cpp_reset()
{
    g_log.clear();
    g_instances.clear();
    g_mutex.reset();
    g_kept_handle.reset();
}

// -- C++ -> Py ------------------------------------------------------------------------------

// Row 3: add() on our root before execute(): the wrapper keeps its step data with stack().
void cpp_add_to_root(uintptr_t root)
{
    W(reinterpret_cast<FutoInAsyncSteps*>(root))->add([](IAsyncSteps& asi) {
        log("root-step");
        asi(futoin::string("from-root-add"));
    });
}

// Row 3: parallel().add() and newInstance().add() over our step pointers.
void cpp_parallel_and_instance(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    auto& p = asi->parallel();
    p.add([](IAsyncSteps&) { log("branch-a"); });
    p.add([](IAsyncSteps&) { log("branch-b"); });
    auto inst = asi->newInstance();
    inst->add([](IAsyncSteps&) { log("instance-step"); });
    inst->execute();
    g_instances.push_back(std::move(inst));
    asi->add([](IAsyncSteps& asi) { asi(int64_t(7)); });
}

// Row 4: error_info read from C++, none set, then after an error with info.
void cpp_error_info(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    log("info=[" + std::string(asi->state().error_info().c_str()) + "]");
    asi->add(
            [](IAsyncSteps& asi) { asi.errorNoThrow("MyError", "my details"); },
            [](IAsyncSteps& asi, ErrorCode code) {
                log(std::string(static_cast<const char*>(code)) + "=[" + asi.state().error_info().c_str() + "]");
                asi();
            });
}

// Row 5: a handle from our sched_deferred(), tested and cancelled through the table.
void cpp_sched_handles(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    FutoInHandle h = bsi->api->sched_deferred(
            bsi, 50, nullptr, [](void*) { log("cancelled-timer-fired"); });
    log(h.data1 != nullptr ? "data1-set" : "data1-null");
    log(bsi->api->sched_is_valid(bsi, &h) ? "valid" : "invalid");
    bsi->api->sched_cancel(bsi, &h);
    log(bsi->api->sched_is_valid(bsi, &h) ? "valid" : "invalid");
    FutoInHandle h2 = bsi->api->sched_deferred(
            bsi, 20, nullptr, [](void*) { log("kept-timer-fired"); });
    log(bsi->api->sched_is_valid(bsi, &h2) ? "valid2" : "invalid2");
}

// Row 6: values each way. C++ steps taking values are added at the level where the values
// flow (our root or an executing step of ours), as C++ code would build its flow.
void cpp_add_echo(uintptr_t bsi)
{
    W(reinterpret_cast<FutoInAsyncSteps*>(bsi))
            ->add([](IAsyncSteps& asi, futoin::string&& s) { asi(std::move(s)); });
}

void cpp_add_leave(uintptr_t bsi)
{
    // Takes the string by rvalue reference and leaves it in its slot: the implicit success
    // re-sends it (and three placeholders) to the next step.
    W(reinterpret_cast<FutoInAsyncSteps*>(bsi))->add([](IAsyncSteps&, futoin::string&& s) {
        if (s.size() == 0) {
            log("empty");
        }
    });
}

// Row 7: an INT32 (and a UTF-16 string) received and sent back through Python keep their type.
void cpp_int32_out(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    W(bsi)->add([](IAsyncSteps& asi) { asi(int32_t(41), futoin::u16string(u"w\u00e9")); });
}

void cpp_add_int32_in(uintptr_t bsi)
{
    W(reinterpret_cast<FutoInAsyncSteps*>(bsi))
            ->add([](IAsyncSteps& asi, int32_t v, futoin::u16string&& s) {
                log("int32=" + std::to_string(v) + " u16=" + std::to_string(s.size()));
                asi(int32_t(v + 1));
            });
}

// Row 8: the reference's placeholder values travel through our engine between C++ steps.
void cpp_placeholders(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    asi->add([](IAsyncSteps& asi) { asi(int64_t(1)); });
    asi->add([](IAsyncSteps& asi, int64_t v) { asi(v + 1, futoin::string("s")); });
    asi->add([](IAsyncSteps& asi, int64_t v, const futoin::string& s) {
        log("chain=" + std::to_string(v) + s.c_str());
    });
}

// Row 10: the reference's Mutex over our pointers; data is a number for the log. Python runs
// two roots through it at once: the second enters after the first left.
void cpp_mutex(FutoInAsyncSteps* bsi, void* data, const FutoInArgs*)
{
    auto i = reinterpret_cast<uintptr_t>(data);
    W(bsi)->sync(mutex(), [i](IAsyncSteps& asi) {
        log("enter" + std::to_string(i));
        asi.add([i](IAsyncSteps& asi) {
            log("hold" + std::to_string(i));
            finish_later(&asi.binary(), 10);
        });
        asi.add([i](IAsyncSteps&) { log("leave" + std::to_string(i)); });
    });
}

// Row 11: rootId of the root step and of three parallel branches.
void cpp_root_ids(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    log("root=" + std::to_string(asi->sync_root_id()));
    auto& p = asi->parallel();
    for (int i = 0; i < 3; ++i) {
        p.add([](IAsyncSteps& asi) { log("branch=" + std::to_string(asi.sync_root_id())); });
    }
}

// Row 12: a library function adding reference steps: nested add, error handler, timeout,
// parallel of 3, loop with break, Mutex; hands a string and an int back. data != NULL:
// the step waits for ever (the Python side cancels the root), with a cancel handler.
void cpp_e2e(FutoInAsyncSteps* bsi, void* data, const FutoInArgs*)
{
    auto asi = W(bsi);
    bool wait_forever = data != nullptr;
    asi->add([](IAsyncSteps& asi) {
        asi.add([](IAsyncSteps& asi) {
            asi.add([](IAsyncSteps& asi) { asi(int64_t(1)); });
        });
    });
    asi->add(
            [](IAsyncSteps& asi, int64_t) { asi.errorNoThrow("Boom", "nested"); },
            [](IAsyncSteps& asi, ErrorCode code) {
                log(std::string("handled-") + static_cast<const char*>(code));
                asi(int64_t(2));
            });
    asi->add(
            [](IAsyncSteps& asi, int64_t) {
                asi.setTimeout(std::chrono::milliseconds(100));
            },
            [](IAsyncSteps& asi, ErrorCode code) {
                log(std::string("timeout-") + static_cast<const char*>(code));
                asi();
            });
    asi->add([](IAsyncSteps& asi) {
        auto& p = asi.parallel();
        for (int i = 0; i < 3; ++i) {
            p.add([i](IAsyncSteps& asi) {
                asi.sync(mutex(), [i](IAsyncSteps& asi) {
                    log("par" + std::to_string(i));
                    finish_later(&asi.binary(), 5);
                });
            });
        }
    });
    asi->add([](IAsyncSteps& asi) {
        asi.loop([](IAsyncSteps& asi) {
            auto& n = asi.state<int64_t>("loop_n", 0);
            if (++n == 3) {
                asi.breakLoopNoThrow();
                return;
            }
        });
    });
    asi->add([wait_forever](IAsyncSteps& asi) {
        log("loop=" + std::to_string(asi.state<int64_t>("loop_n", 0)));
        if (wait_forever) {
            asi.setCancel([](IAsyncSteps&) { log("cancel-handler"); });
            return;
        }
        asi(futoin::string("done"), int32_t(3));
    });
}

// Issue 18 row 7: a deferred callback that outlives its root.
void cpp_sched_far(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    bsi->api->sched_deferred(bsi, 60000, nullptr, [](void*) { log("far-fired"); });
}

// Issue 28: the reference's own IAsyncTool::Handle over handles of our scheduler, from
// asi.tool() of the reference's wrapper: Handle::cancel() and operator bool are C++ virtual
// calls through data2. A copy of the handle made before cancel() names a timer that is gone.
void cpp_handle_cancel(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    IAsyncTool& tool = asi->tool();
    IAsyncTool::Handle h = tool.deferred(
            std::chrono::milliseconds(50), [] { log("cancelled-timer-fired"); });
    FutoInHandle copy = h.binary();
    log(h ? "bool-before-cancel=1" : "bool-before-cancel=0");
    h.cancel();
    log(h ? "bool-after-cancel=1" : "bool-after-cancel=0");
    h.cancel(); // emptied by the first: a no-op
    IAsyncTool::Handle stale(copy);
    log(stale ? "copy-after-cancel=1" : "copy-after-cancel=0");
    stale.cancel(); // the timer is gone: a no-op
    IAsyncTool::Handle imm = tool.immediate([] { log("cancelled-immediate-fired"); });
    log(imm ? "immediate-before-cancel=1" : "immediate-before-cancel=0");
    imm.cancel();
    log(imm ? "immediate-after-cancel=1" : "immediate-after-cancel=0");
    g_kept_handle = tool.deferred(
            std::chrono::milliseconds(20), [] { log("control-timer-fired"); });
    log(g_kept_handle ? "control-before=1" : "control-before=0");
}

// After the control timer fired: the kept Handle still dispatches, and is false.
void cpp_handle_kept()
{
    log(g_kept_handle ? "control-after-fired=1" : "control-after-fired=0");
    g_kept_handle.cancel(); // fired already: a no-op
}

// Issue 28: the reference's relinquish() over our steps (it cancels through a Handle when the
// step is cancelled), in a flow and in each turn of a loop.
void cpp_relinquish(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    asi->add([](IAsyncSteps&) { log("before"); });
    asi->relinquish();
    asi->repeat(3, [](IAsyncSteps& asi, std::size_t i) {
        log("turn" + std::to_string(i));
        asi.relinquish();
    });
    asi->add([](IAsyncSteps& asi) {
        log("after");
        asi(int64_t(5));
    });
}

// Issue 28: a step waiting in relinquish(), for the Python side to cancel before it resumes.
void cpp_relinquish_wait(FutoInAsyncSteps* bsi, void*, const FutoInArgs*)
{
    auto asi = W(bsi);
    asi->add([](IAsyncSteps&) { log("waiting"); });
    asi->relinquish();
    asi->add([](IAsyncSteps&) { log("resumed"); });
}

// -- Py -> C++ ------------------------------------------------------------------------------

struct RefRoot
{
    ri::AsyncTool tool{[]() {}};
    ri::AsyncSteps asi{tool};
};

void* ref_new()
{
    return new RefRoot();
}

uintptr_t ref_binary(void* r)
{
    return reinterpret_cast<uintptr_t>(&static_cast<RefRoot*>(r)->asi.binary());
}

// One loop cycle: 1 if there is work now, else 0 and *delay_ms the wait for the next timer.
int ref_iterate(void* r, int64_t* delay_ms)
{
    auto res = static_cast<RefRoot*>(r)->tool.iterate();
    *delay_ms = res.delay.count();
    return res.have_work ? 1 : 0;
}

// 1 when the root is not executing (the reference's operator bool on a root)
int ref_idle(void* r)
{
    return bool(static_cast<RefRoot*>(r)->asi) ? 1 : 0;
}

void ref_free(void* r)
{
    delete static_cast<RefRoot*>(r);
}

// A C++ step in the reference root: takes a string, logs its size and sends it on.
void ref_add_cpp_echo(void* r)
{
    static_cast<RefRoot*>(r)->asi.add([](IAsyncSteps& asi, futoin::string&& s) {
        log("cpp-got=" + std::to_string(s.size()));
        asi(std::move(s));
    });
}

uintptr_t ref_mutex()
{
    return reinterpret_cast<uintptr_t>(static_cast<FutoInSync*>(&mutex()));
}

} // extern "C"
