/*
 * libckpt's dlsym.  Programs that reach CUDA through dlopen + dlsym (the
 * static CUDA runtime asks libcuda.so.1 for cuGetProcAddress_v2 this way)
 * never see LD_PRELOAD exports, so dlsym answers the hooked cu and nccl names with
 * libckpt's wrappers, and only when the real lookup succeeds.  Every other
 * name passes through untouched.  RTLD_NEXT depends on who calls, and
 * glibc would take libckpt for the caller, so it is resolved here against
 * the objects that follow the real caller in the load order.
 */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "interpose.h"

static bool hookable(const char *name)
{
    return name && ((name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z') ||
                    (name[0] == 'c' && strncmp(name, "cuda", 4) == 0) || strncmp(name, "nccl", 4) == 0);
}

/* RTLD_NEXT as seen from caller: the first definition in the objects loaded
 * after the caller's own. */
static void *next_after(const void *caller, const char *name)
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
    void *fn;

    if (handle == RTLD_NEXT)
        fn = next_after(__builtin_return_address(0), name);
    else
        fn = ckpt_real_dlsym(handle, name);
    if (!fn || !hookable(name))
        return fn;
    void *wrapper = ckpt_hook_wrapper(name);
    return wrapper ? wrapper : fn;
}
