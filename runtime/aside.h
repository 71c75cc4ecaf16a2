/*
 * libckpt's own mappings in a rank, kept out of the way of the program's.
 * Under unified addressing the driver places device memory where mmap puts
 * its reservations, top-down from the mmap base, so every mapping made
 * before or between the program's allocations moves them.  libckpt maps
 * different things in a recorded run and in its replay (the snapshot image
 * it restores, the replay log it reads), and a replayed allocation would
 * come back elsewhere (seen on an H200: 128 MiB apart under PyTorch, the
 * size of the image).  So its mappings go to a region of their own, far
 * from where mmap, the driver and the heap place anything.
 */
#ifndef CKPT_ASIDE_H
#define CKPT_ASIDE_H

#include <stddef.h>
#include <sys/types.h>

/* mmap(2) with the address chosen in libckpt's region (as a hint, kept
 * only where the kernel honours it); where that region is taken or
 * refused, wherever mmap puts it.
 * @flags must not hold MAP_FIXED. */
void *ckpt_mmap_aside(size_t len, int prot, int flags, int fd, off_t off);

/* A buffer of libckpt's own, anonymous and in that region, for what may be
 * large (glibc's malloc maps those where mmap puts them): *cap, its bytes,
 * grows to at least @want (by a new mapping and a copy; @old is released).
 * NULL without memory, @old then kept.  ckpt_aside_free(p, cap) releases. */
void *ckpt_aside_grow(void *old, size_t *cap, size_t want);
void ckpt_aside_free(void *p, size_t cap);

#endif
