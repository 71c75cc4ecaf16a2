/*
 * One GPU shared by two processes (FAKEGPU_SHARED_GPU): what one holds is
 * missing from the other's cuMemGetInfo, an allocation past the rest fails
 * with CUDA_ERROR_OUT_OF_MEMORY, address reservations cost nothing, and
 * the memory comes back when the holder frees it or dies.  Without the
 * knob each process has the whole device.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "drv_test.h"

#define MiB ((size_t)1 << 20)

/* The child: holds 6 MiB, says so on the pipe, waits for a word, frees 2 MiB,
 * says so, and waits to be killed. */
static void holder(int up, int down)
{
    CUdeviceptr a, b;
    char c;

    DRV_SETUP();
    CHECK(cuMemAlloc_v2(&a, 4 * MiB));
    CHECK(cuMemAlloc_v2(&b, 2 * MiB));
    EXPECT(write(up, "h", 1) == 1, "write");
    EXPECT(read(down, &c, 1) == 1, "read");
    CHECK(cuMemFree_v2(b));
    EXPECT(write(up, "f", 1) == 1, "write");
    pause();
}

int main(void)
{
    char dir[] = "/tmp/fakegpu-shared-XXXXXX", c;
    int up[2], down[2];
    size_t free_b, total;
    CUdeviceptr p, r;

    EXPECT(mkdtemp(dir), "mkdtemp");
    setenv("FAKEGPU_SHARED_GPU", dir, 1);
    setenv("FAKEGPU_MEM_MB", "10", 1);
    EXPECT(pipe(up) == 0 && pipe(down) == 0, "pipe");
    pid_t child = fork(); /* before cuInit: each process is its own driver */
    EXPECT(child >= 0, "fork");
    if (child == 0)
        holder(up[1], down[0]);

    EXPECT(read(up[0], &c, 1) == 1 && c == 'h', "the holder did not allocate");
    DRV_SETUP();
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    EXPECT(total == 10 * MiB && free_b == 4 * MiB, "free %zu of %zu, want 4 MiB of 10", free_b, total);
    CHECK_RES(cuMemAlloc_v2(&p, 6 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAddressReserve(&r, 64 * MiB, 0, 0, 0)); /* addresses only */
    CHECK(cuMemAlloc_v2(&p, 4 * MiB));
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    EXPECT(free_b == 0, "free %zu, want 0", free_b);
    CHECK(cuMemFree_v2(p));

    EXPECT(write(down[1], "g", 1) == 1, "write");
    EXPECT(read(up[0], &c, 1) == 1 && c == 'f', "the holder did not free");
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    EXPECT(free_b == 6 * MiB, "free %zu after the holder freed 2 MiB, want 6 MiB", free_b);

    kill(child, SIGKILL);
    EXPECT(waitpid(child, NULL, 0) == child, "waitpid");
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    EXPECT(free_b == 10 * MiB, "free %zu after the holder died, want all 10 MiB", free_b);
    CHECK(cuMemAlloc_v2(&p, 10 * MiB));
    CHECK(cuMemFree_v2(p));
    CHECK(cuMemAddressFree(r, 64 * MiB));

    char path[64];
    snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
    unlink(path);
    EXPECT(rmdir(dir) == 0, "the dead holder's file was not removed: %s", strerror(errno));
    printf("ok\n");
    return 0;
}
