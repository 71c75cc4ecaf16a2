/*
 * A program that forks after CUDA is initialised, as data-loader workers
 * do: the parent keeps training (one host sync per iteration) while the
 * child, which shares no device state, does host work and exits.  Under
 * libckpt the parent checkpoints and the child never does.
 * Prints "parent iterations <n>" and "child exit <status>".
 */
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

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 6;
    unsigned *buf;
    cudaStream_t s;
    if (cudaMalloc((void **)&buf, 1 << 16) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess)
        return 1;
    cudaMemset(buf, 0, 1 << 16);
    bump_launch(DIM3(1), DIM3(1), s, buf, (1 << 16) / 4);
    cudaStreamSynchronize(s);

    pid_t child = fork();
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
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("parent iterations %d\n", iters);
    printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
