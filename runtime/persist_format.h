/*
 * The on-disk format of a persisted generation: the manifest that makes it
 * complete, and where its bytes lie.  Versioned like format.h: a fixed
 * magic, a version, sizes, and tests/unit/persist_format.c pins the layout
 * with offsetof, so a change here is a deliberate new version.  A
 * generation of iteration I of job J is, in each persist directory d,
 *     <dir_d>/<uid>-<J>/gen-<I>/stripe-<d>     the extents placed on d
 * and, in the first directory only,
 *     <dir_0>/<uid>-<J>/gen-<I>/manifest       written last, renamed in
 * The manifest is
 *     [ckpt_pm_header][ckpt_pm_rank x nranks][uint64 stripe bytes x ndirs]
 *     [ckpt_pm_extent x nextents][uint64 extent index x nrefs]
 *     [each rank's image header area (header, records, chunk sums), 8-aligned]
 * A rank's image data chunk c is extent refs[data_ref + c].  Its replay
 * log is where log_where says: CKPT_PM_LOG_CHUNKS, cut in chunks of the
 * same size, chunk c in extent refs[log_ref + c]; or CKPT_PM_LOG_FILE, the
 * first log_bytes of the rank's log on disk beside the generations,
 *     <dir_0>/<uid>-<J>/rank<R>.replay.log     (ckpt_rlog_disk_path)
 * whose records have the XXH3 log_sum (replay.h: ckpt_rlog_scan), no
 * chunk of it in the stripes: the log grows with the job, and each
 * generation writing all of it again would too.  Identical chunks of several ranks
 * (data-parallel replicas) name the same extent, which is stored once.
 * Extents start at multiples of CKPT_PM_ALIGN and are stored padded to it
 * (O_DIRECT); bytes is the true length.  All integers are little-endian.
 */
#ifndef CKPT_PERSIST_FORMAT_H
#define CKPT_PERSIST_FORMAT_H

#include <stdint.h>

#include "format.h"

#define CKPT_PM_MAGIC "CKPTGEN1"
#define CKPT_PM_VERSION 3u /* 3: the ranks' image headers of format 3 (their epoch) */
#define CKPT_PM_ALIGN 4096u             /* extent offsets and I/O sizes */
#define CKPT_PM_MAX_BYTES (1ull << 30)  /* a manifest larger than this is refused as corrupt */

struct ckpt_pm_header {
    char magic[8];             /* CKPT_PM_MAGIC */
    uint32_t version;          /* CKPT_PM_VERSION */
    uint32_t ndirs;            /* stripe files, one per persist directory */
    char job[CKPT_JOB_MAX];    /* NUL-terminated */
    uint64_t iteration;
    uint64_t time_ns;          /* CLOCK_REALTIME when it was persisted */
    uint32_t nranks;
    uint32_t reserved;
    uint64_t nextents;
    uint64_t nrefs;
    uint64_t manifest_bytes;   /* the whole file */
    uint64_t logical_bytes;    /* every rank's image and log */
    uint64_t stored_bytes;     /* the stripe files together (deduplicated, padded) */
    uint64_t sum;              /* XXH3-64 of manifest_bytes with this field 0 */
};

struct ckpt_pm_rank {
    uint32_t rank;
    uint32_t world;
    uint64_t generation;       /* the image's, in its arena */
    uint64_t image_bytes;      /* data_offset + data_bytes: the slot to restore */
    uint64_t head_offset;      /* of the image header area, in the manifest */
    uint64_t head_bytes;       /* = the image's header_bytes */
    uint64_t chunk_bytes;      /* the image's chunk size, the log's too */
    uint64_t data_ref;         /* first of data_chunks refs */
    uint64_t data_chunks;      /* = the image's nchunks */
    uint64_t log_bytes;        /* the replay log's length */
    uint64_t log_ref;          /* first of log_chunks refs */
    uint64_t log_chunks;       /* of chunk_bytes, the last shorter; 0 for CKPT_PM_LOG_FILE */
    uint64_t log_sum;          /* CKPT_PM_LOG_FILE: the XXH3 of the log's records */
    uint32_t log_where;        /* CKPT_PM_LOG_CHUNKS or CKPT_PM_LOG_FILE */
    uint32_t reserved;
};

#define CKPT_PM_LOG_CHUNKS 0u
#define CKPT_PM_LOG_FILE 1u

struct ckpt_pm_extent {
    uint32_t dir;              /* stripe file index */
    uint32_t reserved;
    uint64_t offset;           /* in the stripe file, a multiple of CKPT_PM_ALIGN */
    uint64_t bytes;            /* true length; stored padded to CKPT_PM_ALIGN */
    uint64_t sum;              /* XXH3-64 of the bytes */
};

_Static_assert(sizeof(struct ckpt_pm_header) == 152, "ckpt_pm_header layout changed: bump CKPT_PM_VERSION");
_Static_assert(sizeof(struct ckpt_pm_rank) == 104, "ckpt_pm_rank layout changed: bump CKPT_PM_VERSION");
_Static_assert(sizeof(struct ckpt_pm_extent) == 32, "ckpt_pm_extent layout changed: bump CKPT_PM_VERSION");

#endif
