/*
 * What the fidelity pattern programs (tests/progs/fid_*.c, run by
 * tests/scenarios/fidelity.bats) share: the command line, the death at an
 * iteration's end, error checks, the digest, and two kernels.
 *
 * Each fid_ program reproduces one way real frameworks let the host observe
 * the device, in the shape of a training loop: every iteration changes
 * device state that depends on all earlier iterations, ends with the one
 * host synchronisation a real loop has (a loss read back, as loss.item()),
 * and prints "iter N ..." with what the host observed; at the end it prints
 * "digest <hex>" over all final device state, copied back, and the host
 * state built from device observations.  Same arguments, same output, on
 * every run: whatever the host observes is made deterministic by the
 * program's structure, never by luck of timing.
 *
 *   --iters N     iterations (default 40), numbered 1..N
 *   --stray-at J  at iteration J's end, make an allocation no other run
 *                 makes (4 KiB, freed at once): a run that differs from
 *                 the recorded one only after a restore went live, which
 *                 the resumed run's check must catch.
 *   --segv-at J   at iteration J's end, take SIGSEGV: a program that
 *                 crashes (given it only in restarted launches, it
 *                 crashes while it replays).
 *   --die-at K    right after iteration K's end, SIGKILL itself, once:
 *                 only when the file named by FID_DIE_ONCE does not exist
 *                 yet (it is created first), so that a restarted job runs
 *                 through.  stdout is flushed first (a crash loses no line
 *                 the program printed).
 *   --die-again-at K2
 *                 right after iteration K2's end in a launch after that
 *                 death, SIGKILL itself once more (FID_DIE_ONCE.again is
 *                 created first): the job is then restored from a
 *                 snapshot the restored run took, out of the log it wrote.
 *
 * Everything here is static inline or a kernel: each program is one .c
 * file (the Makefile builds every .c file of tests/progs into a program).
 */
#ifndef CKPT_TEST_FID_H
#define CKPT_TEST_FID_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "kernels.h"

struct fid_opts {
    const char *name;
    int iters;
    int die_at;   /* 0: never */
    int die_again_at; /* 0: never */
    int stray_at; /* 0: never */
    int segv_at;  /* 0: never */
};

static inline void fid_usage(const char *name)
{
    fprintf(stderr, "usage: %s [--iters N] [--die-at K [--die-again-at K2]] [--stray-at J] [--segv-at J]  (--die-at needs FID_DIE_ONCE=FILE)\n", name);
    exit(2);
}

static inline void fid_parse(int argc, char **argv, struct fid_opts *o, const char *name)
{
#ifdef __CUDACC__
    /* fid_busy spins until the host writes fid_released.  With lazy module
     * loading (CUDA's default since 12.2) the first use of a kernel or of
     * that variable loads its module, which waits for the device to idle:
     * a spinning kernel then never ends.  Programs that make kernels wait
     * on the host load eagerly, as this one does (before CUDA starts). */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
#endif
    o->name = name;
    o->iters = 40;
    o->die_at = o->die_again_at = o->stray_at = o->segv_at = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            o->iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--die-at") == 0 && i + 1 < argc)
            o->die_at = atoi(argv[++i]);
        else if (strcmp(argv[i], "--die-again-at") == 0 && i + 1 < argc)
            o->die_again_at = atoi(argv[++i]);
        else if (strcmp(argv[i], "--stray-at") == 0 && i + 1 < argc)
            o->stray_at = atoi(argv[++i]);
        else if (strcmp(argv[i], "--segv-at") == 0 && i + 1 < argc)
            o->segv_at = atoi(argv[++i]);
        else
            fid_usage(name);
    }
    if (o->iters < 1 || o->iters > 100000 || o->die_at < 0 || o->die_again_at < 0 ||
        (o->die_again_at && o->die_again_at <= o->die_at) || o->stray_at < 0 || o->segv_at < 0)
        fid_usage(name);
    if (o->die_at && !getenv("FID_DIE_ONCE"))
        fid_usage(name);
}

/* SIGKILL, unless the file @marker exists (created first): once. */
static inline void fid_die_once(const struct fid_opts *o, const char *marker)
{
    int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST)
        return; /* died there once already: run through */
    if (fd < 0) {
        fprintf(stderr, "%s: cannot create %s: %s\n", o->name, marker, strerror(errno));
        exit(1);
    }
    close(fd);
    fflush(stderr);
    kill(getpid(), SIGKILL);
}

/* Called right after iteration `it` ended (its line printed). */
static inline void fid_end_iteration(const struct fid_opts *o, int it)
{
    fflush(stdout);
    if (it == o->stray_at) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
            exit(1);
    }
    if (it == o->segv_at)
        raise(SIGSEGV); /* as a bad pointer would, whatever sanitizer checks stores */
    if (it == o->die_at)
        fid_die_once(o, getenv("FID_DIE_ONCE"));
    if (it == o->die_again_at && access(getenv("FID_DIE_ONCE"), F_OK) == 0) {
        char again[4096];
        snprintf(again, sizeof(again), "%s.again", getenv("FID_DIE_ONCE"));
        fid_die_once(o, again);
    }
}

static inline void fid_fail(const char *what, const char *why, const char *file, int line)
{
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, why);
    fflush(stdout);
    exit(1);
}

static inline void fid_check_rt(cudaError_t e, const char *what, const char *file, int line)
{
    if (e != cudaSuccess)
        fid_fail(what, cudaGetErrorName(e), file, line);
}

static inline void fid_check_cu(CUresult r, const char *what, const char *file, int line)
{
    const char *name = NULL;
    if (r != CUDA_SUCCESS) {
        cuGetErrorName(r, &name);
        fid_fail(what, name ? name : "unknown CUresult", file, line);
    }
}

#define CHECK(call) fid_check_rt((call), #call, __FILE__, __LINE__)
#define CHECK_CU(call) fid_check_cu((call), #call, __FILE__, __LINE__)
#define REQUIRE(cond) ((cond) ? (void)0 : fid_fail(#cond, "false", __FILE__, __LINE__))

/* FNV-1a, 64 bits: the digest of bytes the host holds. */
#define FID_HASH_INIT 0xcbf29ce484222325ULL
static inline uint64_t fid_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static inline uint64_t fid_hash_u64(uint64_t h, uint64_t v)
{
    return fid_hash(h, &v, sizeof(v));
}

/* Copies n bytes of device memory back and adds them to the digest. */
static inline uint64_t fid_hash_device(uint64_t h, const void *dev, size_t n)
{
    void *buf = malloc(n);
    REQUIRE(buf != NULL);
    CHECK(cudaMemcpy(buf, dev, n, cudaMemcpyDeviceToHost));
    h = fid_hash(h, buf, n);
    free(buf);
    return h;
}

/* What kernels call as well as the host: nvcc compiles it for both sides. */
#ifdef __CUDACC__
#define FID_HD __host__ __device__ static inline
#else
#define FID_HD static inline
#endif

/* A 32-bit mixer (murmur3's finaliser): every input bit reaches every output bit. */
FID_HD uint32_t fid_mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

/* Kernels sleep too (a long kernel's time).  The device has no nanosleep:
 * it waits on its nanosecond clock, since __nanosleep alone may return at
 * once. */
FID_HD void fid_sleep_us(long us)
{
#ifdef __CUDA_ARCH__
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)us * 1000);
#else
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
#endif
}

/* Kernels every program may use; not every program uses each. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

/* The "training step": w[i] = mix(w[i] + seed + i); the result depends on
 * every earlier step. */
KERNEL(fid_step, (uint32_t *, w), (size_t, n), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = fid_mix(w[i] + seed + (uint32_t)i * 0x9e3779b9u);
}

/* The "loss": one word summarising w, written to *out (one thread). */
KERNEL(fid_loss, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0x811c9dc5u;
        for (size_t i = 0; i < n; i++)
            h = fid_mix(h ^ w[i]);
        *out = h;
    }
}

#pragma GCC diagnostic pop

/*
 * Device work that lasts until the host reaches a point: fid_busy(want)
 * on a stream finishes once the host has called fid_release(v) with
 * v >= want.  It stands for a long kernel (a big GEMM, an all-reduce on a
 * communication stream) that makes the device lag the host; written this
 * way, which events are complete when the host queries them is fixed by
 * the program instead of by the machine's speed, so a run is
 * deterministic.  Programs release every wait before they synchronise
 * with the device, so no host sync ever waits for host progress.  (The
 * double runs kernels on the host, so the kernel can read a host
 * variable.  On a GPU it is a __device__ variable instead, which the host
 * writes with a copy on a stream of its own while the kernel spins: device
 * state like any other, which libckpt tracks and snapshots; a __managed__
 * one would be memory the host may read, which libckpt must refuse.)
 */
#ifdef __CUDACC__
static __device__ int fid_released;

static inline void fid_release(int v)
{
    static cudaStream_t s;
    if (!s && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        exit(1);
    /* From pageable memory: the copy has taken v when the call returns. */
    if (cudaMemcpyToSymbolAsync(fid_released, &v, sizeof(v), 0, cudaMemcpyHostToDevice, s) != cudaSuccess)
        exit(1);
}
#else
static int fid_released;

static inline void fid_release(int v)
{
    __atomic_store_n(&fid_released, v, __ATOMIC_RELEASE);
}
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
KERNEL(fid_busy, (int, want))
{
    if (KERNEL_INDEX == 0)
#ifdef __CUDACC__
        while (*(volatile int *)&fid_released < want) /* a fresh load each time */
#else
        while (__atomic_load_n(&fid_released, __ATOMIC_ACQUIRE) < want)
#endif
            fid_sleep_us(20);
}
#pragma GCC diagnostic pop

#endif /* CKPT_TEST_FID_H */
