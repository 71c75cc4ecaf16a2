/*
 * The table of hooks and the resolution of the real functions behind them.
 * Driver functions come from libcuda.so.1 itself (opened by soname, so the
 * program's copy), runtime functions from the next libcudart in the lookup
 * order, NCCL functions as pnccl<name>, which the real library exports as
 * the strong definitions behind its weak nccl<name>.  This file must never
 * call the exported dlsym: that is libckpt's own override.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "interpose.h"
#include "log.h"

#define DRV(ret, name, params, args) __typeof__(&name) real_##name;
#define RT DRV
#define NCCL DRV
#define USE DRV
#define UNFOLLOWED DRV
#define PROMOTE DRV
#define QUERY DRV
#include "hooks.def"

const struct ckpt_hook ckpt_hooks[] = {
#define DRV(ret, name, params, args) {#name, (void *)name, (void **)&real_##name, LIB_DRV},
#define RT(ret, name, params, args) {#name, (void *)name, (void **)&real_##name, LIB_RT},
#define NCCL(ret, name, params, args) {#name, (void *)name, (void **)&real_##name, LIB_NCCL},
#define USE(ret, name, params, args) {#name, NULL, (void **)&real_##name, LIB_DRV},
#define UNFOLLOWED DRV
#define PROMOTE DRV
#define QUERY DRV
#include "hooks.def"
};
const size_t ckpt_nhooks = sizeof(ckpt_hooks) / sizeof(ckpt_hooks[0]);
_Static_assert(sizeof(ckpt_hooks) / sizeof(ckpt_hooks[0]) == CKPT_NHOOKS, "enum ckpt_hook_index is not the table's order");

static const char *const sonames[] = {
    [LIB_DRV] = "libcuda.so.1",
    [LIB_RT] = "libcudart.so.13",
    [LIB_NCCL] = "libnccl.so.2",
};

/* The real definition of one hooked name.  RTLD_NEXT first (the library is
 * in the global scope when the program linked it), then the library by
 * soname: dlopen'ed libraries (RTLD_LOCAL, as the static runtime opens
 * libcuda) are found only that way.  The driver is always opened by
 * soname, so a program that links libcuda finds it already loaded. */
static void *lookup(const struct ckpt_hook *h)
{
    char pname[96];
    const char *name = h->name;
    void *fn = NULL;

    if (h->lib == LIB_NCCL) {
        snprintf(pname, sizeof(pname), "p%s", h->name);
        name = pname;
    }
    if (h->lib != LIB_DRV)
        fn = ckpt_real_dlsym(RTLD_NEXT, name);
    if (!fn) {
        int flags = RTLD_NOW | RTLD_LOCAL | (h->lib == LIB_DRV ? 0 : RTLD_NOLOAD);
        void *lib = dlopen(sonames[h->lib], flags);
        if (lib)
            fn = ckpt_real_dlsym(lib, name);
    }
    return fn;
}

/* Fills in real_<name> of one row; NULL when the library lacks it. */
static void *resolve_row(const struct ckpt_hook *h)
{
    void *fn = __atomic_load_n(h->real, __ATOMIC_ACQUIRE);
    if (!fn && (fn = lookup(h)))
        __atomic_store_n(h->real, fn, __ATOMIC_RELEASE);
    return fn;
}

int ckpt_resolve(const char *name)
{
    for (size_t i = 0; i < ckpt_nhooks; i++) {
        const struct ckpt_hook *h = &ckpt_hooks[i];
        if (strcmp(h->name, name) != 0)
            continue;
        if (resolve_row(h))
            return 0;
        ckpt_log(CKPT_ERROR, "cannot find the real %s in %s; the call fails", name, sonames[h->lib]);
        return -ENOENT;
    }
    return -ENOENT;
}

void *ckpt_hook_wrapper(const char *name)
{
    for (size_t i = 0; i < ckpt_nhooks; i++)
        if (strcmp(ckpt_hooks[i].name, name) == 0)
            return ckpt_hooks[i].wrapper;
    return NULL;
}

/* cuGetProcAddress answers a base name with one versioned variant; only the
 * pointer says which.  Compare it with the real function of each hooked
 * versioned name (resolving them on first use) and substitute that one. */
void *ckpt_hook_substitute(void *fn)
{
    for (size_t i = 0; i < ckpt_nhooks; i++) {
        const struct ckpt_hook *h = &ckpt_hooks[i];
        if (h->lib != LIB_DRV || !h->wrapper)
            continue;
        if (resolve_row(h) == fn)
            return h->wrapper;
    }
    return fn;
}
