/* cffi cdef of our side of the bridge (futoin_anyio.binary._ffi): our objects, helpers
 * Python calls, and the extern "Python" trampolines of futoin_anyio/binary/_bridge.py.
 * The ftnpy_f_* calls into foreign tables are generated from table.py by build.py. */
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

/* scheduler handles as a C++ IAsyncTool (layout: IASYNCTOOL_VTABLE in table.py); the slot
 * indices FTNPY_HTOOL_SLOT_* are generated from it by build.py */
#define FTNPY_HTOOL_ITANIUM ...
void* ftnpy_htool_ptr(void);

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

/* foreign tables, called from Python; return -1 for a NULL pointer/function. The 25
 * ftnpy_f_<name> of FutoInAsyncStepsAPI are generated from table.py. */
int ftnpy_f_check(FutoInAsyncSteps* bsi, int index);
int ftnpy_f_lock(FutoInSync* sync, FutoInAsyncSteps* bsi);
int ftnpy_f_unlock(FutoInSync* sync, FutoInAsyncSteps* bsi);

extern "Python" {
    /* our AsyncSteps table (the generic entries are generated from table.py); h is the
     * handle of the Python binding */
    void ftnpy_py_success(void* h, FutoInArgs* args);
    int ftnpy_py_is_valid(void* h);
    void ftnpy_py_sched(void* h, int deferred, uint32_t ms, void* data, ftnpy_sched_f cb,
            FutoInHandle* out);
    /* the cancel / is_valid slots of the C++ IAsyncTool behind our handles' data2 */
    void ftnpy_py_htool_cancel(FutoInHandle* handle);
    int ftnpy_py_htool_is_valid(FutoInHandle* handle);
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
