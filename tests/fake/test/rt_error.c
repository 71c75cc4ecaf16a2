/*
 * The runtime's error model: a failing call becomes the calling thread's
 * last error and stays so through later successful calls, until
 * cudaGetLastError returns and clears it (cudaPeekAtLastError only looks);
 * another thread never sees it.  A driver failure reaches the program as
 * the matching cudaError_t, and every declared error has its own name and
 * message.  (double_dropin.bats compares the messages with the real
 * runtime's when a toolkit is present.)
 */
#include <pthread.h>
#include <string.h>

#include "rt_test.h"

static void *other_thread(void *arg)
{
    cudaError_t *seen = arg;

    seen[0] = cudaPeekAtLastError();
    seen[1] = cudaSetDevice(-1);
    seen[2] = cudaGetLastError();
    return NULL;
}

static void last_error_semantics(void)
{
    cudaError_t seen[3];
    pthread_t t;
    void *p;

    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK_ERR(cudaDeviceGetAttribute(&(int){0}, (enum cudaDeviceAttr)9999, 0), cudaErrorInvalidValue);
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidValue);
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidValue);

    /* Success does not clear it; a newer failure replaces it. */
    CHECK(cudaMalloc(&p, 64));
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidValue);
    CHECK_ERR(cudaSetDevice(1 << 20), cudaErrorInvalidDevice);
    CHECK(cudaFree(p));
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);

    /* Per thread: the other thread starts clean and keeps its own. */
    EXPECT(pthread_create(&t, NULL, other_thread, seen) == 0, "pthread_create");
    pthread_join(t, NULL);
    EXPECT(seen[0] == cudaSuccess, "other thread saw %s", cudaGetErrorName(seen[0]));
    EXPECT(seen[1] == cudaErrorInvalidDevice && seen[2] == cudaErrorInvalidDevice,
           "other thread: %s then %s", cudaGetErrorName(seen[1]), cudaGetErrorName(seen[2]));
    CHECK_ERR(cudaPeekAtLastError(), cudaErrorInvalidDevice);

    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK_ERR(cudaGetLastError(), cudaSuccess);
    CHECK_ERR(cudaPeekAtLastError(), cudaSuccess);
}

/* A failure inside the driver arrives as the runtime's error for it. */
static void driver_errors(void)
{
    cudaEvent_t a, b;
    float ms;
    void *p;
    size_t huge = (size_t)1 << 62;

    CHECK_ERR(cudaMalloc(&p, huge), cudaErrorMemoryAllocation);
    CHECK_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
    /* Events never recorded have no time between them. */
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK_ERR(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
}

#define E(code) {code, #code}
static const struct {
    cudaError_t code;
    const char *name;
} declared[] = {
    E(cudaSuccess), E(cudaErrorInvalidValue), E(cudaErrorMemoryAllocation),
    E(cudaErrorInitializationError), E(cudaErrorCudartUnloading),
    E(cudaErrorInvalidMemcpyDirection), E(cudaErrorInsufficientDriver),
    E(cudaErrorInvalidDeviceFunction), E(cudaErrorNoDevice), E(cudaErrorInvalidDevice),
    E(cudaErrorDeviceUninitialized), E(cudaErrorAlreadyMapped), E(cudaErrorNotMapped),
    E(cudaErrorPeerAccessUnsupported), E(cudaErrorInvalidPtx), E(cudaErrorOperatingSystem),
    E(cudaErrorInvalidResourceHandle), E(cudaErrorIllegalState), E(cudaErrorSymbolNotFound),
    E(cudaErrorNotReady), E(cudaErrorIllegalAddress), E(cudaErrorLaunchFailure),
    E(cudaErrorNotPermitted), E(cudaErrorNotSupported),
    E(cudaErrorStreamCaptureUnsupported), E(cudaErrorStreamCaptureInvalidated),
    E(cudaErrorStreamCaptureUnmatched), E(cudaErrorStreamCaptureUnjoined),
    E(cudaErrorStreamCaptureIsolation), E(cudaErrorStreamCaptureImplicit),
    E(cudaErrorCapturedEvent), E(cudaErrorStreamCaptureWrongThread),
    E(cudaErrorInvalidResourceType), E(cudaErrorUnknown),
};
#undef E
#define NDECLARED (sizeof(declared) / sizeof(declared[0]))

static void names_and_messages(void)
{
    static const struct {
        cudaError_t code;
        const char *text;
    } known[] = {
        {cudaSuccess, "no error"},
        {cudaErrorInvalidValue, "invalid argument"},
        {cudaErrorMemoryAllocation, "out of memory"},
        {cudaErrorNotReady, "device not ready"},
        {cudaErrorInvalidDevice, "invalid device ordinal"},
    };

    for (size_t i = 0; i < NDECLARED; i++) {
        const char *name = cudaGetErrorName(declared[i].code);
        const char *text = cudaGetErrorString(declared[i].code);

        EXPECT(name && strcmp(name, declared[i].name) == 0, "name of %d is %s",
               (int)declared[i].code, name ? name : "NULL");
        EXPECT(text && *text && strcmp(text, "unrecognized error code") != 0,
               "%s has no message", declared[i].name);
        for (size_t j = 0; j < i; j++)
            EXPECT(strcmp(text, cudaGetErrorString(declared[j].code)) != 0,
                   "%s and %s share the message \"%s\"", declared[i].name, declared[j].name, text);
    }
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        EXPECT(strcmp(cudaGetErrorString(known[i].code), known[i].text) == 0,
               "message of %s is \"%s\"", cudaGetErrorName(known[i].code),
               cudaGetErrorString(known[i].code));
    EXPECT(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0,
           "message of an unknown code");
    EXPECT(strcmp(cudaGetErrorName((cudaError_t)12345), "unrecognized error code") == 0,
           "name of an unknown code");
}

int main(void)
{
    /* Names and messages need no driver: ask before anything initialises. */
    names_and_messages();
    last_error_semantics();
    driver_errors();
    return 0;
}
