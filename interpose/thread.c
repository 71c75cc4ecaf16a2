/*
 * Which thread a call comes from, named the same way in every run: the
 * replay log keeps each thread's observations apart under that key, and
 * threads a CUDA or NCCL library starts for itself (NCCL's proxy and
 * service threads, a driver's worker threads) are told apart from the
 * program's.  A thread's key is derived from its creator's key and how
 * many program threads the creator had started before it, so a program
 * that starts its threads in the same order gets the same keys whatever
 * the scheduler does.  Threads a library starts are internal: their CUDA
 * calls are library work (never boundary tokens, never replayed, never
 * snapshotted), and so are the threads they start.  A library is known by
 * the object its resolved entry points live in, never by a file name.
 * This must never change what pthread_create does for the program.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose.h"

#define EXPORT __attribute__((visibility("default")))

__thread uint64_t ckpt_thread_key_;
__thread bool ckpt_thread_internal;
static __thread uint64_t owner; /* a library's thread: the program thread it was started from */
static __thread uint64_t children, allocations;
static uint64_t unnamed; /* threads that did not come through pthread_create below */

static uint64_t mix(uint64_t parent, uint64_t n)
{
    uint64_t x = parent * 0x9e3779b97f4a7c15ULL ^ (n + 0x632be59bd9b4e019ULL);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    return x | 2; /* never 0 (unknown) or 1 (the main thread) */
}

uint64_t ckpt_thread_key_slow(void)
{
    if (syscall(SYS_gettid) == getpid())
        ckpt_thread_key_ = 1;
    else /* started before libckpt could see it, or by a sanitizer's own pthread_create */
        ckpt_thread_key_ = (1ULL << 63) | __atomic_add_fetch(&unnamed, 1, __ATOMIC_RELAXED);
    return ckpt_thread_key_;
}

uint64_t ckpt_thread_ordinal(bool take)
{
    uint64_t n = take ? allocations++ : allocations, key = ckpt_thread_key();
    /* The main thread's are 0, 1, 2...; another thread's carry its key
     * above 32 bits, so threads that allocate side by side never swap
     * names, however they interleave. */
    return key == 1 ? n : (mix(key, 0) & ~0xffffffffULL) | (n & 0xffffffffULL);
}

/* The load address of the object holding fn, or 0. */
static uintptr_t object_of(const void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) ? (uintptr_t)info.dli_fbase : 0;
}

/* A function of NCCL's, once the program has called one (NCCL's threads
 * start inside such a call: a communicator's init makes them): the real
 * functions resolve as they are first called, whichever comes first. */
static const void *nccl_function(void)
{
    const void *f = (const void *)real_ncclGroupStart;
    f = f ? f : (const void *)real_ncclCommInitRank;
    f = f ? f : (const void *)real_ncclCommInitRankConfig;
    f = f ? f : (const void *)real_ncclCommSplit;
    return f ? f : (const void *)real_ncclAllReduce;
}

bool ckpt_caller_is_library(const void *caller)
{
    uintptr_t base = object_of(caller);
    if (!base)
        return false;
    /* The driver, NCCL (also when linked into another library: that
     * library is where its entry points resolve), and libckpt itself. */
    return base == object_of((const void *)real_cuInit) || base == object_of(nccl_function()) ||
           base == object_of((const void *)ckpt_caller_is_library);
}

/* What a new thread needs before it runs its function.  From a fixed pool,
 * not malloc: under a sanitizer the start routine handed to us may be the
 * sanitizer's own, and nothing intercepted may run before it (this file is
 * built without instrumentation for the same reason). */
struct start {
    void *(*fn)(void *);
    void *arg;
    uint64_t key, owner;
    bool internal;
    int used;
};
static struct start pool[1024];

static struct start *claim(void)
{
    for (size_t i = 0; i < sizeof(pool) / sizeof(pool[0]); i++) {
        int free_ = 0;
        if (__atomic_compare_exchange_n(&pool[i].used, &free_, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return &pool[i];
    }
    return NULL;
}

static void *trampoline(void *p)
{
    struct start *slot = p;
    void *(*fn)(void *) = slot->fn, *arg = slot->arg; /* field by field: no memcpy call */
    ckpt_thread_key_ = slot->key;
    ckpt_thread_internal = slot->internal;
    owner = slot->owner;
    __atomic_store_n(&slot->used, 0, __ATOMIC_RELEASE);
    return fn(arg);
}

EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static __typeof__(&pthread_create) resolved;
    __typeof__(&pthread_create) real = __atomic_load_n(&resolved, __ATOMIC_ACQUIRE);
    if (!real) {
        /* The next definition, whoever it is: a sanitizer's interceptor
         * must see the thread made. */
        real = (__typeof__(real))ckpt_real_dlsym(RTLD_NEXT, "pthread_create");
        if (!real)
            real = (__typeof__(real))dlvsym(RTLD_NEXT, "pthread_create", "GLIBC_2.34");
        if (!real)
            real = (__typeof__(real))dlvsym(RTLD_NEXT, "pthread_create", "GLIBC_2.2.5");
        if (!real)
            return EAGAIN;
        __atomic_store_n(&resolved, real, __ATOMIC_RELEASE);
    }
    struct start *s = claim();
    if (!s) /* a thousand threads starting at once: this one keeps no key */
        return real(thread, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    s->internal = ckpt_thread_internal || ckpt_caller_is_library(__builtin_return_address(0));
    /* Library threads do not count: the program's threads keep their keys
     * however many a library started (on a GPU, or not in replay). */
    s->key = s->internal ? mix(ckpt_thread_key(), 1ULL << 40) : mix(ckpt_thread_key(), ++children);
    s->owner = ckpt_thread_owner();
    int rc = real(thread, attr, trampoline, s);
    if (rc != 0) {
        if (!s->internal)
            children--;
        __atomic_store_n(&s->used, 0, __ATOMIC_RELEASE);
    }
    return rc;
}

uint64_t ckpt_thread_owner(void)
{
    return ckpt_thread_internal ? owner : ckpt_thread_key();
}
