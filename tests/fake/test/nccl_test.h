/*
 * What the tests of the double's NCCL (nccl_*.c) share: checks that print
 * where and why and exit 1 (the harness's "fail"), and the way they start
 * ranks: one unique id made in the parent, then one forked process per
 * rank, which must not have touched CUDA before the fork.  Checks are plain
 * statements, never assert(), so they also run under NDEBUG.  Each test is
 * a single file (the Makefile builds one program per file), so the one
 * helper they all need lives here as a static inline function.
 */
#ifndef NCCL_TEST_H
#define NCCL_TEST_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

/* Fails unless the call returns ncclSuccess. */
#define NCHECK(call)                                                           \
    do {                                                                       \
        ncclResult_t r_ = (call);                                              \
        if (r_ != ncclSuccess) {                                               \
            fprintf(stderr, "%s:%d: %s: %s (%d): %s\n", __FILE__, __LINE__,    \
                    #call, ncclGetErrorString(r_), (int)r_,                    \
                    ncclGetLastError(NULL));                                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fails unless the call returns the result `want`. */
#define NCHECK_RES(call, want)                                                 \
    do {                                                                       \
        ncclResult_t r_ = (call);                                              \
        if (r_ != (want)) {                                                    \
            fprintf(stderr, "%s:%d: %s: %d, expected %d (%s)\n", __FILE__,     \
                    __LINE__, #call, (int)r_, (int)(want),                     \
                    ncclGetLastError(NULL));                                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fails unless the call returns cudaSuccess. */
#define CCHECK(call)                                                           \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
                    cudaGetErrorString(e_));                                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fails with a printf-style message unless cond holds. */
#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* A rank's work: exits (or returns) 0 on success. */
typedef int (*nccl_test_rank_fn)(int rank, int nranks, ncclUniqueId id, void *arg);

/*
 * Runs fn in nranks forked processes with a fresh unique id and waits for
 * them, killing all after timeout_s seconds.  Rank `dies` (or -1) is meant
 * to end by SIGKILL; it is reaped only after every other rank has ended,
 * so that it stays a zombie meanwhile, as under a launcher that is slow to
 * reap.  Returns 0 when every rank ended as meant; otherwise says which did
 * not and returns 1.
 */
static inline int nccl_test_run(int nranks, nccl_test_rank_fn fn, void *arg, int timeout_s,
                                int dies)
{
    pid_t pids[64];
    int status, failed = 0, left = nranks;
    struct timespec nap = {0, 10 * 1000 * 1000};
    time_t deadline = time(NULL) + timeout_s;
    ncclUniqueId id;

    if (nranks > 64 || ncclGetUniqueId(&id) != ncclSuccess) {
        fprintf(stderr, "cannot start %d ranks\n", nranks);
        return 1;
    }
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(fn(r, nranks, id, arg));
        if (pids[r] < 0) {
            perror("fork");
            nranks = left = r;
            failed = 1;
            break;
        }
    }
    while (left > 0) {
        bool reaped = false;

        for (int r = 0; r < nranks; r++) {
            bool killed;

            if (pids[r] <= 0 || (r == dies && left > 1) || waitpid(pids[r], &status, WNOHANG) <= 0)
                continue;
            pids[r] = 0;
            left--;
            reaped = true;
            killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            if (r == dies ? !killed : !WIFEXITED(status) || WEXITSTATUS(status)) {
                fprintf(stderr, "rank %d of %d: %s %d\n", r, nranks,
                        WIFEXITED(status) ? "exit" : "signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                failed = 1;
            }
        }
        if (reaped)
            continue;
        if (time(NULL) > deadline) {
            for (int r = 0; r < nranks; r++)
                if (pids[r] > 0) {
                    fprintf(stderr, "rank %d of %d: still running after %d s\n", r, nranks,
                            timeout_s);
                    kill(pids[r], SIGKILL);
                }
            dies = -1;
            deadline = time(NULL) + 5;
            timeout_s = 5;
            failed = 1;
        }
        nanosleep(&nap, NULL);
    }
    return failed;
}

#endif /* NCCL_TEST_H */
