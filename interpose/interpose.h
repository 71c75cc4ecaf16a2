/*
 * What the hook files of interpose/ share: the typed pointers to the real
 * CUDA/NCCL functions (from hooks.def), their resolution, and the
 * thread-local depths that attribute a call to the layer that made it.
 * Only interpose/ converts between -errno and CUresult/cudaError_t/
 * ncclResult_t; runtime/ never sees a CUDA type it does not need.
 */
#ifndef CKPT_INTERPOSE_H
#define CKPT_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>

#include "ckpt_nccl.h"

enum ckpt_lib { LIB_DRV, LIB_RT, LIB_NCCL };

#define DRV(ret, name, params, args) extern __typeof__(&name) real_##name;
#define RT DRV
#define NCCL DRV
#define USE DRV
#include "hooks.def"

/* One row per hooked symbol (and per USE, with no wrapper).  real points
 * at real_<name>. */
struct ckpt_hook {
    const char *name;
    void *wrapper;
    void **real;
    enum ckpt_lib lib;
};
extern const struct ckpt_hook ckpt_hooks[];
extern const size_t ckpt_nhooks;

/* Resolves real_<name> (row's library, see real.c).  Returns 0, or -ENOENT
 * after logging the missing name once; the caller then fails the call with
 * the API's "not found/not initialised" error, never calls NULL. */
int ckpt_resolve(const char *name);

#define NEED_REAL(name, err)                                                   \
    do {                                                                       \
        if (__builtin_expect(!real_##name, 0) && ckpt_resolve(#name) < 0)      \
            return (err);                                                      \
    } while (0)

/* glibc's own dlsym, never ours: libckpt must not look itself up. */
void *ckpt_real_dlsym(void *handle, const char *name);

/* The wrapper for an exported name, or NULL when libckpt does not hook it. */
void *ckpt_hook_wrapper(const char *name);

/* If fn is the real driver function of a hooked name, the wrapper of that
 * exact versioned name; otherwise fn. */
void *ckpt_hook_substitute(void *fn);

/* Depth of wrappers on this thread: a runtime call (cudaMalloc) runs the
 * driver hook underneath (cuMemAlloc_v2), which must not count it again; a
 * call inside NCCL allocates library-internal state that is never
 * snapshotted or restored. */
extern __thread int ckpt_rt_depth;
extern __thread int ckpt_nccl_depth;

/* True once the program's cuInit succeeded, CKPT_DISABLE is off and this is
 * not a child forked after CUDA initialised. */
extern bool ckpt_active;
void ckpt_wake(void);

/* ---- the snapshot engine (snapshot.c), driven by the hooks. */

/* Records that the program queued work on s (cheap; called per launch). */
void ckpt_stream_seen(CUstream s);

/* A host synchronisation of the program returned; token identifies the
 * kind of call.  May take a snapshot: boundaries are found here. */
void ckpt_on_sync(uint64_t token);

/* The program ended an iteration explicitly (CKPT_BOUNDARY=nvtx:NAME, at
 * the end of that range).  May take a snapshot. */
void ckpt_on_marker(void);

/* The program queued a collective on s; token hashes what it was. */
void ckpt_on_collective(uint64_t token, CUstream s);

/* Before a free takes effect: the device copies of a snapshot in flight may
 * still read that memory.  With a stream the free is ordered on it (a
 * GPU-side wait); without, the host waits for the copies. */
void ckpt_before_free(CUstream stream, bool on_stream);

/* Streams being captured into graphs right now. */
extern int ckpt_capturing;

#endif
