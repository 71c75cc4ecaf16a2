/*
 * libckpt's own interface, for a program or a framework's helper that
 * knows more about its device memory than the CUDA calls show.  Nothing
 * here is needed: a program that never calls it is checkpointed whole.
 *
 * A caching allocator (PyTorch's native one) takes large segments with
 * cudaMalloc and places its tensors inside them; at an iteration boundary
 * most of a segment is free blocks, which a snapshot need not copy.  Tell
 * libckpt which blocks those are:
 *
 *     a new segment:            ckpt_declare_free(segment, its size);
 *     a block handed out:       ckpt_declare_live(block, its size);
 *     a block back in the pool: ckpt_declare_free(block, its size);
 *
 * A snapshot then copies only the live bytes of the segment (and restores
 * only those; the free bytes of a restored segment hold whatever the
 * device had).  Memory nobody declared anything about is live, so a
 * declaration that never comes costs bytes, never state; a block declared
 * free that the program then reads before writing it is a wrong state
 * after a restore, so declare free only what the allocator would hand out
 * again.  Declarations are by address and take effect in host order; an
 * allocation's go when it is freed.  Both return 0, or -EINVAL for an
 * empty or wrapping range; a free may fail with -ENOMEM, after which that
 * range is simply copied.
 *
 * libckpt.so exports these when it is preloaded.  A program that must run
 * without it too finds them with dlsym(RTLD_DEFAULT, "ckpt_declare_free")
 * (Python: getattr(ctypes.CDLL(None), "ckpt_declare_free", None)).
 */
#ifndef LIBCKPT_H
#define LIBCKPT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int ckpt_declare_free(const void *device_ptr, size_t bytes);
int ckpt_declare_live(const void *device_ptr, size_t bytes);

/*
 * An allocator that cannot report each block as it changes (PyTorch's,
 * seen from Python) declares at the snapshots instead: declare(arg) is
 * called at every iteration boundary that takes a snapshot, before the
 * snapshot lists what it copies, on the thread that ended the iteration.
 * It declares, as above, what is free at that moment (each segment live
 * from end to end, then its free blocks free), and returns 0, or nonzero
 * when it could not: then that snapshot copies every allocation whole.
 * It must make no CUDA call.  may_call, when not NULL, is asked first and
 * must be safe to call in any state; a zero answer also means whole
 * copies for that snapshot (PyGILState_Check, for a callback that needs
 * Python's interpreter lock the thread may not hold).  One source at a
 * time; a NULL declare removes it.  Returns 0.
 */
int ckpt_declare_source(int (*declare)(void *arg), int (*may_call)(void), void *arg);

#ifdef __cplusplus
}
#endif

#endif
