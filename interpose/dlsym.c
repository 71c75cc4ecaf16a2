/*
 * libckpt's dlsym.  Programs that reach CUDA through dlopen + dlsym (the
 * static CUDA runtime asks libcuda.so.1 for cuGetProcAddress_v2 this way)
 * never see LD_PRELOAD exports, so dlsym answers the hooked cu and nccl names with
 * libckpt's wrappers, and only when the real lookup succeeds.  Every other
 * name passes through untouched.  RTLD_NEXT depends on who calls, and
 * glibc would take libckpt for the caller, so it is resolved here against
 * the objects that follow the real caller in the load order.  Sanitizer
 * runtimes call dlsym while they initialise, before their shadow memory
 * exists, so this file is built without sanitizer instrumentation (see the
 * Makefile) and calls nothing instrumented on that path.
 */
#include <dlfcn.h>
#include <link.h>

#include "interpose.h"

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn glibc_dlsym;

/* glibc's dlsym (2.34 moved it into libc; older ones only have the 2.2.5
 * node).  Looked up without pthread_once or a lock: a thread sanitizer
 * calls dlsym from its own start-up, before its interceptors of those
 * work; threads racing here store the same answer. */
static dlsym_fn find_dlsym(void)
{
    dlsym_fn fn = __atomic_load_n(&glibc_dlsym, __ATOMIC_ACQUIRE);
    if (fn)
        return fn;
    void *f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    fn = (dlsym_fn)f;
    __atomic_store_n(&glibc_dlsym, fn, __ATOMIC_RELEASE);
    return fn;
}

void *ckpt_real_dlsym(void *handle, const char *name)
{
    dlsym_fn fn = find_dlsym();
    return fn ? fn(handle, name) : NULL;
}

/* By hand, not strncmp: a sanitizer's strncmp interceptor may not be set
 * up yet when it asks for symbols. */
static bool starts(const char *s, const char *prefix)
{
    while (*prefix && *s == *prefix)
        s++, prefix++;
    return !*prefix;
}

static bool hookable(const char *name)
{
    return name && ((starts(name, "cu") && name[2] >= 'A' && name[2] <= 'Z') || starts(name, "cuda") ||
                    starts(name, "nccl"));
}

/* RTLD_NEXT, for a hooked name, as seen from caller: the first definition
 * in the objects loaded after the caller's own, then its wrapper. */
__attribute__((noinline)) static void *next_after(const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *lm = NULL;

    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return NULL;
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        void *h = dlopen(l->l_name[0] ? l->l_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue;
        void *fn = ckpt_real_dlsym(h, name);
        dlclose(h);
        if (fn)
            return fn;
    }
    return NULL;
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    /* Any other name with RTLD_NEXT: a sibling call, so glibc sees our
     * caller's return address and resolves RTLD_NEXT from there, exactly,
     * without anything that might not work yet (sanitizers ask for their
     * real functions this way while they start up). */
    if (handle == RTLD_NEXT && !hookable(name)) {
        dlsym_fn real = find_dlsym();
        return real(handle, name);
    }
    void *fn = handle == RTLD_NEXT ? next_after(__builtin_return_address(0), name) : ckpt_real_dlsym(handle, name);
    if (!fn || !hookable(name))
        return fn;
    void *wrapper = ckpt_hook_wrapper(name);
    return wrapper ? wrapper : fn;
}
