/*
 * A program that forks after CUDA is initialised, as data-loader workers
 * do: the parent keeps training (one host sync per iteration) while the
 * child, which shares no device state, does host work and exits.  Under
 * libckpt the parent checkpoints and the child never does.
 * With "exec", the child instead execs this program again as a helper
 * that uses CUDA itself (as compile workers and `python -c "import
 * torch..."` helpers do): it inherits RANK and LD_PRELOAD, and must leave
 * the parent's arena alone.
 * Prints "parent iterations <n>" and "child exit <status>".
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels.h"

KERNEL(bump, (unsigned *, p), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        p[i]++;
}

/* The exec'd helper: a little device work of its own. */
static int helper(void)
{
    unsigned *p;
    if (cudaMalloc((void **)&p, 1 << 16) != cudaSuccess)
        return 3;
    cudaMemset(p, 0, 1 << 16);
    bump_launch(DIM3(1), DIM3(1), 0, p, (1 << 16) / 4);
    int r = cudaDeviceSynchronize() == cudaSuccess && cudaFree(p) == cudaSuccess ? 0 : 4;
    printf("helper done %d\n", r);
    return r;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--helper") == 0)
        return helper();
    int iters = argc > 1 ? atoi(argv[1]) : 6;
    bool exec_helper = argc > 2 && strcmp(argv[2], "exec") == 0;
    unsigned *buf;
    cudaStream_t s;
    if (cudaMalloc((void **)&buf, 1 << 16) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess)
        return 1;
    cudaMemset(buf, 0, 1 << 16);
    bump_launch(DIM3(1), DIM3(1), s, buf, (1 << 16) / 4);
    cudaStreamSynchronize(s);

    fflush(stdout);
    pid_t child = fork();
    if (child == 0 && exec_helper) {
        execl("/proc/self/exe", argv[0], "--helper", (char *)NULL);
        _exit(127);
    }
    if (child == 0) {
        /* Host-only work, with the allocator and stdio of a forked child. */
        char *junk = malloc(1 << 20);
        memset(junk, 1, 1 << 20);
        free(junk);
        exit(7);
    }
    for (int it = 1; it < iters; it++) {
        bump_launch(DIM3(1), DIM3(1), s, buf, (1 << 16) / 4);
        cudaStreamSynchronize(s);
        if (it == 2 && exec_helper) /* the helper works while the parent takes snapshots */
            usleep(200 * 1000);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("parent iterations %d\n", iters);
    printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
