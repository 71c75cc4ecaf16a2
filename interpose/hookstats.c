/*
 * What came through the hooks, by the library that made the call: kernel
 * launches and device allocations counted per caller (the object the
 * return address lies in: libcudart, a cuBLAS or NCCL library with its own
 * static runtime, the program itself), allocations NCCL made for itself,
 * and cuMemMap'ed ranges (PyTorch's expandable segments, NCCL's cuMem
 * buffers).  It exists to show on real hardware that every path into the
 * driver lands in libckpt's wrappers; at exit, with CKPT_LOG=debug, it is
 * one "hooks:" line per table.  It counts only at that level, so the hot
 * hooks cost one compare otherwise; it must never lock on the common path
 * (a per-thread cache maps a return address to its library), allocate, or
 * change what the hooked call does.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "interpose.h"
#include "log.h"

#define LIBS 16     /* distinct calling objects told apart; more share "other" */
#define CACHE 8     /* per-thread return address -> library, direct-mapped */
#define NAME_LEN 40

struct table {
    const char *what;
    uint64_t count[LIBS + 1]; /* [LIBS]: other */
    uint64_t internal[LIBS + 1];
};

static struct table tables[] = {
    [CKPT_HS_LAUNCH] = {.what = "kernel launches"},
    [CKPT_HS_ALLOC] = {.what = "allocations"},
};

static char names[LIBS][NAME_LEN];
static int nnames;
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t vmm_ranges[2], vmm_bytes[2]; /* [1]: NCCL-internal */
static pid_t counting_pid;

static __thread struct {
    const void *caller;
    int lib;
} cache[CACHE];

/* The index of the object caller lies in, or LIBS ("other") when it has
 * no name or the table is full.  Takes the lock only on a cache miss. */
static int lib_of(const void *caller)
{
    unsigned h = (unsigned)(((uintptr_t)caller >> 4) * 2654435761u) % CACHE;
    if (caller && cache[h].caller == caller)
        return cache[h].lib;

    Dl_info info;
    const char *base = NULL;
    if (caller && dladdr(caller, &info) && info.dli_fname && *info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        base = slash ? slash + 1 : info.dli_fname;
    }
    int lib = LIBS;
    if (base) {
        pthread_mutex_lock(&names_lock);
        for (int i = 0; i < nnames && lib == LIBS; i++)
            if (strncmp(names[i], base, NAME_LEN - 1) == 0)
                lib = i;
        if (lib == LIBS && nnames < LIBS) {
            snprintf(names[nnames], NAME_LEN, "%s", base);
            lib = nnames++;
        }
        pthread_mutex_unlock(&names_lock);
    }
    cache[h].caller = caller;
    cache[h].lib = lib;
    return lib;
}

void ckpt_hookstat(enum ckpt_hookstat which, const void *caller, bool internal)
{
    if (ckpt_log_level < CKPT_DEBUG || !ckpt_active)
        return;
    if (!__atomic_load_n(&counting_pid, __ATOMIC_RELAXED)) /* getpid is a system call: once */
        __atomic_store_n(&counting_pid, getpid(), __ATOMIC_RELAXED);
    int lib = lib_of(caller);
    __atomic_add_fetch(&tables[which].count[lib], 1, __ATOMIC_RELAXED);
    if (internal)
        __atomic_add_fetch(&tables[which].internal[lib], 1, __ATOMIC_RELAXED);
}

void ckpt_hookstat_vmm(uint64_t size, bool internal)
{
    if (ckpt_log_level < CKPT_DEBUG || !ckpt_active)
        return;
    __atomic_add_fetch(&vmm_ranges[internal], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&vmm_bytes[internal], size, __ATOMIC_RELAXED);
}

/* "hooks: kernel launches: libcudart.so.13 812, libnccl.so.2 40 (NCCL-internal 40)" */
static void say(const struct table *t)
{
    char line[900];
    int n = snprintf(line, sizeof(line), "hooks: %s:", t->what), shown = 0;
    for (int i = 0; i <= LIBS && n < (int)sizeof(line); i++) {
        if (!t->count[i])
            continue;
        n += snprintf(line + n, sizeof(line) - n, "%s %s %llu", shown++ ? "," : "", i < LIBS ? names[i] : "other",
                      (unsigned long long)t->count[i]);
        if (t->internal[i] && n < (int)sizeof(line))
            n += snprintf(line + n, sizeof(line) - n, " (NCCL-internal %llu)", (unsigned long long)t->internal[i]);
    }
    ckpt_log(CKPT_DEBUG, "%s%s", line, shown ? "" : " none");
}

uint64_t ckpt_hook_calls[CKPT_NHOOKS];
__thread enum ckpt_hook_index ckpt_hook_last;

const char *ckpt_hook_now(void)
{
    return ckpt_hooks[ckpt_hook_last].name;
}

/* "hooks: entry points: cuLaunchKernel 812, cuMemcpyDtoH_v2 30, ..." (those
 * called, in the table's order), in lines of up to ~900 characters. */
static void say_entry_points(void)
{
    char line[960];
    int n = 0;
    for (size_t i = 0; i < CKPT_NHOOKS; i++) {
        uint64_t k = __atomic_load_n(&ckpt_hook_calls[i], __ATOMIC_RELAXED);
        if (!k)
            continue;
        bool first = !n;
        if (n > 900) {
            ckpt_log(CKPT_DEBUG, "%s", line);
            first = true;
        }
        if (first)
            n = snprintf(line, sizeof(line), "hooks: entry points:");
        n += snprintf(line + n, sizeof(line) - n, "%s %s %llu", first ? "" : ",", ckpt_hooks[i].name,
                      (unsigned long long)k);
    }
    if (n)
        ckpt_log(CKPT_DEBUG, "%s", line);
    else
        ckpt_log(CKPT_DEBUG, "hooks: entry points: none");
}

__attribute__((destructor)) static void hookstat_exit(void)
{
    if (ckpt_log_level < CKPT_DEBUG || counting_pid != getpid())
        return; /* nothing counted, or a fork child's copy of the parent's counts */
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        say(&tables[i]);
    say_entry_points();
    ckpt_log(CKPT_DEBUG, "hooks: cuMemMap ranges: program %llu (%.1f MiB), NCCL-internal %llu (%.1f MiB); "
             "communicators that loaded libckpt as NCCL profiler plugin: %d",
             (unsigned long long)vmm_ranges[0], vmm_bytes[0] / 1048576.0, (unsigned long long)vmm_ranges[1],
             vmm_bytes[1] / 1048576.0, __atomic_load_n(&ckpt_prof_inits, __ATOMIC_RELAXED));
}
