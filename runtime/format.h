/*
 * The snapshot format, in a slot file of the arena and (later) on disk.
 * Versioned: a fixed magic, a format version and sizes; tests/unit/format.c
 * pins the layout with offsetof, so a change here is a deliberate new
 * version.  A slot is
 *     [struct ckpt_header][ckpt_rec x nallocs][uint64 chunk sum x nchunks]
 *     ... zero padding up to data_offset ...
 *     [data: each allocation at its rec.offset]
 * An allocation is one record holding all of it, or, when the program
 * declared parts of it free (blocks.h), one record per part still live, in
 * order of start, each holding bytes [start, start + bytes) of it: the
 * records of one allocation are adjacent and agree on ordinal, size, kind
 * and birth.  An allocation declared free from end to end is one record of
 * 0 bytes, so every allocation live at the boundary has a record.
 * All integers are little-endian (the machines libckpt runs on).  The
 * header is written last: readers trust only a header whose magic is set,
 * whose header_sum verifies, and whose chunk sums match the data.
 */
#ifndef CKPT_FORMAT_H
#define CKPT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "LIBCKPT1"
#define CKPT_FORMAT_VERSION 3u /* 2: records of parts of allocations; 3: the epoch */
#define CKPT_JOB_MAX 64
#define CKPT_DATA_ALIGN 4096u     /* data_offset, and each allocation's offset */
#define CKPT_CHUNK_DEFAULT (8u << 20)

struct ckpt_header {
    char magic[8];             /* CKPT_MAGIC once committed, zero before */
    uint32_t version;          /* CKPT_FORMAT_VERSION */
    uint32_t header_bytes;     /* header + records + chunk sums */
    char job[CKPT_JOB_MAX];    /* NUL-terminated */
    uint32_t rank;
    uint32_t world;
    uint64_t generation;       /* 1, 2, ... per rank */
    uint64_t iteration;        /* iterations completed at the boundary */
    uint64_t time_ns;          /* CLOCK_REALTIME at the boundary */
    uint64_t nallocs;
    uint64_t data_offset;
    uint64_t data_bytes;
    uint64_t chunk_bytes;      /* checksum granularity over the data */
    uint64_t nchunks;
    uint64_t header_sum;       /* XXH3-64 of header_bytes with this field 0 */
    uint64_t epoch;            /* the plan the rank committed under (the etcd revision of its decision,
                                * pins.h), 0: none (one node) */
};

struct ckpt_rec {
    uint64_t ordinal;          /* allocation order, as in the registry */
    uint64_t size;             /* the allocation's */
    uint64_t offset;           /* of this record's bytes, from data_offset */
    uint32_t kind;             /* enum ckpt_alloc_kind */
    uint32_t reserved;
    uint64_t birth;            /* iteration it was allocated in */
    uint64_t start;            /* the first byte of the allocation it holds */
    uint64_t bytes;            /* how many it holds: size, unless parts are free */
};

_Static_assert(sizeof(struct ckpt_header) == 168, "ckpt_header layout changed: bump CKPT_FORMAT_VERSION");
_Static_assert(sizeof(struct ckpt_rec) == 56, "ckpt_rec layout changed: bump CKPT_FORMAT_VERSION");

static inline uint64_t ckpt_align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

#endif
