/* The declarations of futoin.h as cffi's parser accepts them (no preprocessor, no inline
 * bodies). cffi checks at build time that they match futoin.h; tests/native reuses them. */
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
