/*
 * The program's own word on its device memory (include/libckpt.h): blocks
 * it declares free are left out of the snapshots (runtime/blocks.c), as
 * it declares them or, from a declaring source, at each snapshot.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "blocks.h"
#include "interpose.h"
#include "libckpt.h"
#include "log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int (*declare)(void *arg);
    int (*may_call)(void);
    void *arg;
} source;
static uint64_t asked, declined, failed; /* snapshots: asked the source, it could not be called, it failed */

static void first_word(void)
{
    ckpt_log_once(CKPT_INFO, "the program declares which blocks of its allocations are free "
                  "(ckpt_declare_free): snapshots copy the rest");
}

__attribute__((visibility("default"))) int ckpt_declare_free(const void *device_ptr, size_t bytes)
{
    if (!ckpt_active)
        return 0;
    first_word();
    return ckpt_blocks_free((uint64_t)(uintptr_t)device_ptr, bytes);
}

__attribute__((visibility("default"))) int ckpt_declare_live(const void *device_ptr, size_t bytes)
{
    if (!ckpt_active)
        return 0;
    return ckpt_blocks_live((uint64_t)(uintptr_t)device_ptr, bytes);
}

__attribute__((visibility("default"))) int ckpt_declare_source(int (*declare)(void *arg), int (*may_call)(void),
                                                               void *arg)
{
    pthread_mutex_lock(&lock);
    source.declare = declare;
    source.may_call = declare ? may_call : NULL;
    source.arg = declare ? arg : NULL;
    pthread_mutex_unlock(&lock);
    if (declare && ckpt_active)
        ckpt_log(CKPT_INFO, "the program declares the free blocks of its allocations at each snapshot: "
                 "snapshots copy the rest");
    return 0;
}

bool ckpt_declare_refresh(uint64_t iter)
{
    pthread_mutex_lock(&lock);
    int (*declare)(void *) = source.declare, (*may_call)(void) = source.may_call;
    void *arg = source.arg;
    if (declare)
        asked++;
    pthread_mutex_unlock(&lock);
    if (!declare)
        return true;
    if (may_call && !may_call()) {
        pthread_mutex_lock(&lock);
        int level = declined++ ? CKPT_DEBUG : CKPT_INFO;
        pthread_mutex_unlock(&lock);
        ckpt_log(level, "iteration %llu: the program's declaring source cannot be called now; this snapshot "
                 "copies whole allocations", (unsigned long long)iter);
        return false;
    }
    ckpt_self_depth++;
    int rc = declare(arg);
    ckpt_self_depth--;
    if (rc != 0) {
        pthread_mutex_lock(&lock);
        int level = failed++ ? CKPT_DEBUG : CKPT_WARN;
        pthread_mutex_unlock(&lock);
        ckpt_log(level, "iteration %llu: the program's declaring source failed (%d); this snapshot copies whole "
                 "allocations", (unsigned long long)iter, rc);
    }
    return rc == 0;
}

void ckpt_declare_unused(bool segments)
{
    static bool said;
    if (said || !segments || ckpt_blocks_any())
        return;
    said = true; /* the snapshot lock serialises the callers */
    pthread_mutex_lock(&lock);
    bool source_set = source.declare != NULL;
    pthread_mutex_unlock(&lock);
    void *c10 = source_set ? NULL : dlopen("libc10_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    if (!c10)
        return;
    dlclose(c10);
    ckpt_log(CKPT_INFO, "PyTorch's caching allocator is in this process and nothing declares its free blocks: "
             "snapshots copy its segments whole, cache and all (ckpt-resume puts a helper on PYTHONPATH that "
             "declares them, unless CKPT_TORCH_HELPER=0)");
}

void ckpt_declare_counts(uint64_t *n_asked, uint64_t *n_whole)
{
    pthread_mutex_lock(&lock);
    *n_asked = asked;
    *n_whole = declined + failed;
    pthread_mutex_unlock(&lock);
}
