/*
 * libckpt as the program's NVTX injection library, for
 * CKPT_BOUNDARY=nvtx:NAME: the end of every range named NAME ends an
 * iteration.  At load it points NVTX_INJECTION64_PATH at libckpt.so (and
 * refuses to replace another tool named there); the NVTX v3 client compiled
 * into the program loads it at its first NVTX call and calls
 * InitializeInjectionNvtx2, which stores handlers for the core range calls
 * in the client's table.  Pushes and pops are matched on a small per-thread
 * stack, starts and ends by a bit carried in the range id.  The handlers
 * run on the program's threads at every range: they must stay cheap (no
 * allocation, no lock; the snapshot engine runs only at the end of NAME),
 * never fail the program's call, and do nothing but their bookkeeping
 * while libckpt is not active.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <wchar.h>

#include "ckpt_nvtx.h"
#include "interpose.h"
#include "log.h"

#define ENV "NVTX_INJECTION64_PATH"

/* Set once in the constructor, read-only afterwards. */
static bool nvtx_mode;
static char name[64];
static wchar_t wname[64];

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int ckpt_nvtx_setup(const char *boundary, char *err, size_t errlen)
{
    char self[PATH_MAX];
    Dl_info info;

    if (strncmp(boundary, "nvtx:", 5) != 0)
        return 0;
    snprintf(name, sizeof(name), "%s", boundary + 5);
    for (size_t i = 0; i < sizeof(name); i++)
        wname[i] = (wchar_t)(unsigned char)name[i]; /* ASCII: the same code points */

    /* An absolute path: the program may change directory before its first
     * NVTX call, and LD_PRELOAD may have named libckpt.so relatively. */
    if (!dladdr((void *)ckpt_nvtx_setup, &info) || !info.dli_fname || !realpath(info.dli_fname, self)) {
        snprintf(err, errlen, "CKPT_BOUNDARY=%s: libckpt.so cannot find its own file to set %s to", boundary, ENV);
        return -EINVAL;
    }
    const char *set = getenv(ENV);
    if (set && *set && !same_file(set, self)) {
        /* The value last: a long path may be cut, the advice must not. */
        snprintf(err, errlen,
                 "%s names another NVTX injection library, but CKPT_BOUNDARY=%s needs libckpt.so there: unset "
                 "%s or choose another CKPT_BOUNDARY (%s='%s')",
                 ENV, boundary, ENV, ENV, set);
        return -EINVAL;
    }
    if ((!set || !*set) && setenv(ENV, self, 1) < 0) {
        snprintf(err, errlen, "CKPT_BOUNDARY=%s: cannot set %s: %s", boundary, ENV, strerror(errno));
        return -EINVAL;
    }
    nvtx_mode = true;
    return 0;
}

/* The context current on this thread, or NULL. */
static CUcontext current_ctx(void)
{
    CUcontext c = NULL;
    if (!real_cuCtxGetCurrent && ckpt_resolve("cuCtxGetCurrent") < 0)
        return NULL;
    return real_cuCtxGetCurrent(&c) == CUDA_SUCCESS ? c : NULL;
}

/* The snapshot engine works in the context current on the thread that
 * reaches the boundary, but a range may end on a thread that never made a
 * CUDA call.  Such a thread borrows the program's context, learned at the
 * start of any range on a thread that has one (one driver call per range
 * until then, a load afterwards). */
static CUcontext program_ctx;

static void learn_ctx(void)
{
    if (__atomic_load_n(&program_ctx, __ATOMIC_RELAXED) || !__atomic_load_n(&ckpt_active, __ATOMIC_ACQUIRE))
        return;
    CUcontext c = current_ctx();
    if (c)
        __atomic_store_n(&program_ctx, c, __ATOMIC_RELAXED);
}

static void iteration_end(void)
{
    if (!__atomic_load_n(&ckpt_active, __ATOMIC_ACQUIRE))
        return;
    if (current_ctx()) {
        ckpt_on_marker();
        return;
    }
    CUcontext ctx = __atomic_load_n(&program_ctx, __ATOMIC_RELAXED);
    if (!ctx || (!real_cuCtxSetCurrent && ckpt_resolve("cuCtxSetCurrent") < 0) ||
        real_cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        ckpt_log_once(CKPT_WARN, "range %s ended on a thread without a CUDA context before libckpt knew the "
                      "program's: that end is not counted", name);
        return;
    }
    ckpt_on_marker();
    real_cuCtxSetCurrent(NULL); /* the thread as the program left it */
}

static bool is_name(const char *m)
{
    return m && strcmp(m, name) == 0;
}

static bool is_wname(const wchar_t *m)
{
    return m && wcscmp(m, wname) == 0;
}

/* Registered-string messages never match: libckpt registers no strings,
 * so the client hands out no handles. */
static bool is_name_ex(const nvtxEventAttributes_t *a)
{
    if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof(a->message))
        return false;
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
        return is_name(a->message.ascii);
    if (a->messageType == NVTX_MESSAGE_TYPE_UNICODE)
        return is_wname(a->message.unicode);
    return false;
}

/* This thread's push/pop nesting, and which levels hold a NAME range.  A
 * fixed stack: NAME ranges nested deeper than it end no iteration. */
#define LEVELS 256
static __thread int depth;
static __thread uint64_t named[LEVELS / 64];

/* Returns the 0-based level of the range, as nvtxRangePush* must. */
static int push(bool match)
{
    learn_ctx();
    int level = depth++;
    if (level < LEVELS) {
        uint64_t bit = 1ULL << (level % 64);
        named[level / 64] = match ? named[level / 64] | bit : named[level / 64] & ~bit;
    } else if (match) {
        ckpt_log_once(CKPT_WARN, "NVTX range %s opened %d levels deep: deeper than %d, it ends no iteration", name,
                      level, LEVELS);
    }
    return level;
}

/* Returns the level of the range ended, or -1 (NVTX's error) for a pop
 * with nothing pushed on this thread. */
static int pop(void)
{
    if (depth == 0)
        return -1;
    int level = --depth;
    if (level < LEVELS && (named[level / 64] >> (level % 64) & 1))
        iteration_end();
    return level;
}

static int push_a(const char *m) { return push(is_name(m)); }
static int push_w(const wchar_t *m) { return push(is_wname(m)); }
static int push_ex(const nvtxEventAttributes_t *a) { return push(is_name_ex(a)); }

/* Range ids are the tool's to choose: the low bit says whether the range
 * is NAME, so an end needs no table of open ranges.  Never 0. */
static uint64_t next_range = 1;

static nvtxRangeId_t start(bool match)
{
    learn_ctx();
    return __atomic_fetch_add(&next_range, 1, __ATOMIC_RELAXED) << 1 | (match ? 1 : 0);
}

static nvtxRangeId_t start_a(const char *m) { return start(is_name(m)); }
static nvtxRangeId_t start_w(const wchar_t *m) { return start(is_wname(m)); }
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a) { return start(is_name_ex(a)); }

static void end(nvtxRangeId_t id)
{
    if (id & 1)
        iteration_end();
}

/* Every handler, with the core callback it serves; each is checked against
 * the client's function type. */
#define HANDLERS(X)                                                            \
    X(RangePushA, push_a)                                                      \
    X(RangePushW, push_w)                                                      \
    X(RangePushEx, push_ex)                                                    \
    X(RangePop, pop)                                                           \
    X(RangeStartA, start_a)                                                    \
    X(RangeStartW, start_w)                                                    \
    X(RangeStartEx, start_ex)                                                  \
    X(RangeEnd, end)

#define CHECK(call, fn)                                                        \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), nvtx##call##_impl_fntype), \
                   #fn " must have the type of nvtx" #call);
HANDLERS(CHECK)
_Static_assert(__builtin_types_compatible_p(__typeof__(&InitializeInjectionNvtx2),
                                           NvtxInitializeInjectionNvtxFunc_t),
               "the entry point must have NVTX's type");

static const struct {
    NvtxCallbackIdCore id;
    NvtxFunctionPointer fn;
} handlers[] = {
#define ROW(call, fn) {NVTX_CBID_CORE_##call, (NvtxFunctionPointer)fn},
    HANDLERS(ROW)
#undef ROW
};

/* Called by each NVTX client in the process (every library built with the
 * header-only NVTX has its own) at its first NVTX call.  Returns 1 when
 * the handlers are installed; 0 makes that client's NVTX calls no-ops,
 * which is what a program gets when libckpt is not in nvtx mode. */
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable)
{
    if (!nvtx_mode || !getExportTable)
        return 0;
    const NvtxExportTableCallbacks *cb = getExportTable(NVTX_ETID_CALLBACKS);
    const size_t cb_needs =
        offsetof(NvtxExportTableCallbacks, GetModuleFunctionTable) + sizeof(cb->GetModuleFunctionTable);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cb || cb->struct_size < cb_needs ||
        !cb->GetModuleFunctionTable || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || !table ||
        size <= NVTX_CBID_CORE_RangePop) {
        ckpt_log(CKPT_ERROR, "an NVTX client without the core callback table: its ranges end no iteration");
        return 0;
    }
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        if (!table[handlers[i].id]) {
            ckpt_log(CKPT_ERROR, "an NVTX client without the core callback %d: its ranges end no iteration",
                     (int)handlers[i].id);
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
        *table[handlers[i].id] = handlers[i].fn;

    /* NVTX asks tools to say which version they were written for: 3. */
    const NvtxExportTableVersionInfo *vi = getExportTable(NVTX_ETID_VERSIONINFO);
    const size_t vi_needs =
        offsetof(NvtxExportTableVersionInfo, SetInjectionNvtxVersion) + sizeof(vi->SetInjectionNvtxVersion);
    if (vi && vi->struct_size >= vi_needs && vi->SetInjectionNvtxVersion)
        vi->SetInjectionNvtxVersion(3);
    ckpt_log(CKPT_DEBUG, "NVTX attached: the end of range %s ends an iteration", name);
    return 1;
}
