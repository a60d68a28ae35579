/*
 * FutoIn universal binary interface, FTN12 v1.14 section 2.7.
 *
 * The declarations below follow the specification exactly: field order, the
 * 25-entry AsyncSteps function table and the 2-entry synchronization table.
 * Deviations from the spec's text, all needed for valid ISO C11 / C++11:
 *
 * - futoin_reset_binval() spells out the types the spec writes as ``auto``;
 * - in C, char16_t / char32_t come from <uchar.h> and bool from <stdbool.h>.
 *
 * The anonymous structs and unions are standard C11; in C++ they are a
 * universally supported extension (GCC, Clang, MSVC).
 *
 * Shipped with futoin_anyio: ``futoin_anyio.binary.get_include()`` returns
 * the folder holding this file.
 */
#ifndef FUTOIN_H_
#define FUTOIN_H_

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>
extern "C" {
#else
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uchar.h>
#endif

/* 2.7.1. Binary data */

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
    /* -- */
    FTN_TYPE_ARRAY = 0x10,
    FTN_COMPLEX_TYPE_MASK = 0xF0
};

struct FutoInType_
{
    const FutoInTypeFlags flags;
    void (*const cleanup)(FutoInBinaryValue* v);
    /* NOTE: extendable by implementation */
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

static inline void futoin_reset_binval(FutoInBinaryValue* v)
{
    const FutoInType* tp = v->type;
    if (tp) {
        void (*f)(FutoInBinaryValue*) = tp->cleanup;
        if (f) {
            f(v);
        }
    }

    v->type = 0;
    v->u64 = 0;
    v->custom_data = 0;
    v->length = 0;
}

/* 2.7.2. Binary AsyncSteps interface */

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
            /* Index 0 */
            void (*add)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_execute_callback f,
                    FutoInAsyncSteps_error_callback eh);
            /* Index 1 */
            FutoInAsyncSteps* (*parallel)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_error_callback eh);
            /* Index 2 */
            void* (*stateVariable)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    const char* name,
                    void* (*allocate)(void* data),
                    void (*cleanup)(void* data, void* value));
            /* Index 3 */
            void* (*stack)(
                    FutoInAsyncSteps* bsi,
                    size_t data_size,
                    void (*cleanup)(void* value));
            /* Index 4 */
            void (*success)(FutoInAsyncSteps* bsi, FutoInArgs* args);
            /* Index 5 */
            void (*handle_error)(
                    FutoInAsyncSteps* bsi, const char* code, const char* info);
            /* Index 6 */
            void (*setTimeout)(FutoInAsyncSteps* bsi, uint32_t timeout_ms);
            /* Index 7 */
            void (*setCancel)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_cancel_callback ch);
            /* Index 8 */
            void (*waitExternal)(FutoInAsyncSteps* bsi);
            /* Index 9 */
            void (*loop)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    void (*f)(FutoInAsyncSteps* bsi, void* data),
                    const char* label);
            /* Index 10 */
            void (*repeat)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    size_t count,
                    void (*f)(FutoInAsyncSteps* bsi, void* data, size_t i),
                    const char* label);
            /* Index 11 */
            void (*breakLoop)(FutoInAsyncSteps* bsi, const char* label);
            /* Index 12 */
            void (*continueLoop)(FutoInAsyncSteps* bsi, const char* label);
            /* Index 13 */
            void (*execute)(
                    FutoInAsyncSteps* bsi,
                    void* data,
                    FutoInAsyncSteps_error_callback unhandled_error);
            /* Index 14 */
            void (*cancel)(FutoInAsyncSteps* bsi);
            /* Index 15 */
            void (*addSync)(
                    FutoInAsyncSteps* bsi,
                    FutoInSync* sync,
                    void* data,
                    FutoInAsyncSteps_execute_callback f,
                    FutoInAsyncSteps_error_callback eh);
            /* Index 16 */
            ptrdiff_t (*rootId)(FutoInAsyncSteps* bsi);
            /* Index 17 */
            int (*isValid)(FutoInAsyncSteps* bsi);
            /* Index 18 */
            FutoInAsyncSteps* (*newInstance)(FutoInAsyncSteps* bsi);
            /* Index 19 */
            void (*free)(FutoInAsyncSteps* bsi);
            /* Index 20 */
            FutoInHandle (*sched_immediate)(
                    FutoInAsyncSteps* bsi, void* data, void (*cb)(void* data));
            /* Index 21 */
            FutoInHandle (*sched_deferred)(
                    FutoInAsyncSteps* bsi,
                    uint32_t delay_ms,
                    void* data,
                    void (*cb)(void* data));
            /* Index 22 */
            void (*sched_cancel)(FutoInAsyncSteps* bsi, FutoInHandle* handle);
            /* Index 23 */
            int (*sched_is_valid)(FutoInAsyncSteps* bsi, FutoInHandle* handle);
            /* Index 24 */
            int (*is_same_thread)(FutoInAsyncSteps* bsi);
        };
        void* funcs[25];
    };
    /* NOTE: extendable by implementation */
};

struct FutoInAsyncSteps_
{
#ifdef __cplusplus
    FutoInAsyncSteps_(const FutoInAsyncStepsAPI* api) noexcept : api(api) {}
#endif
    const FutoInAsyncStepsAPI* const api;
    /* NOTE: extendable by implementation */
};

/* 2.7.3. Binary synchronization primitive's interface */

struct FutoInSyncAPI_
{
    union
    {
        struct
        {
            /* Index 0 */
            void (*lock)(FutoInAsyncSteps* bsi, FutoInSync* sync);
            /* Index 1 */
            void (*unlock)(FutoInAsyncSteps* bsi, FutoInSync* sync);
        };
        void* funcs[2];
    };
    /* NOTE: extendable by implementation */
};

struct FutoInSync_
{
#ifdef __cplusplus
    FutoInSync_() noexcept : api(nullptr) {}
#endif
    const FutoInSyncAPI* const api;
    /* NOTE: extendable by implementation */
};

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FUTOIN_H_ */
