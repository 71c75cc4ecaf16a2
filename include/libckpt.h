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
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int ckpt_declare_free(const void *device_ptr, size_t bytes);
int ckpt_declare_live(const void *device_ptr, size_t bytes);

/*
 * An allocator that cannot report each block as it changes (PyTorch's,
 * seen from Python) answers at the snapshots instead, from a thread of
 * its own that makes no CUDA call:
 *
 *     uint64_t request;
 *     while (ckpt_declare_wait(&request, blocked) == 0) {
 *         ... list the free blocks of every segment, as they are now ...
 *         ckpt_declare_answer(request, ranges, n);  (address, bytes) pairs
 *     }
 *
 * ckpt_declare_wait blocks until a snapshot asks what is free (at an
 * iteration boundary, while the thread that ended the iteration waits)
 * and gives the request's number, returning 0 (in a process libckpt does
 * not checkpoint, it waits for ever).  An answer replaces everything declared
 * before, by ckpt_declare_free and ckpt_declare_live too: the free blocks
 * are exactly those it lists.  The iteration's thread waits for it at
 * most CKPT_DECLARE_WAIT seconds; an answer that comes later, or to an
 * older request, is dropped (-ESTALE), and that snapshot copies every
 * allocation whole, as it does when nobody is waiting to answer.
 * blocked, when not NULL, is called on the iteration's thread first: a
 * nonzero return says the answering thread cannot run now (Python's
 * PyGILState_Check: that thread holds the interpreter lock the answer
 * needs), and the snapshot copies whole allocations without waiting.
 * ckpt_declare_answer returns 0, -ESTALE, -EINVAL (an empty or wrapping
 * range) or -ENOMEM.
 */
int ckpt_declare_wait(uint64_t *request, int (*blocked)(void));
int ckpt_declare_answer(uint64_t request, const uint64_t *ranges, size_t n);

#ifdef __cplusplus
}
#endif

#endif
