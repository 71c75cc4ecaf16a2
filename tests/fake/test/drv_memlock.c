/*
 * cuMemHostRegister pins pages against RLIMIT_MEMLOCK, as the real driver
 * does (root is not exempt here): a registration that would take the
 * registered pages past the soft limit fails with CUDA_ERROR_OUT_OF_MEMORY
 * and registers nothing, unregistering gives the pages back, and with
 * RLIM_INFINITY there is no limit.  So a program's fallback for a failed
 * registration can be tested.
 */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "drv_test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

int main(void)
{
    setenv("FAKEGPU_MEMLOCK", "1", 1);
    struct rlimit rl, low;
    char *buf;

    if (getrlimit(RLIMIT_MEMLOCK, &rl))
        return 77;
    low.rlim_cur = MiB;
    low.rlim_max = rl.rlim_max;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < MiB) {
        printf("RLIMIT_MEMLOCK's hard limit is below 1 MiB\n");
        return 77;
    }
    EXPECT(setrlimit(RLIMIT_MEMLOCK, &low) == 0, "setrlimit");
    buf = mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(buf != MAP_FAILED, "mmap");

    DRV_SETUP();
    CHECK(cuMemHostRegister_v2(buf, 512 * KiB, 0));
    CHECK_RES(cuMemHostRegister_v2(buf + MiB, 768 * KiB, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RES(cuMemHostUnregister(buf + MiB), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED); /* nothing registered */
    CHECK(cuMemHostRegister_v2(buf + MiB, 512 * KiB, 0)); /* exactly the limit */
    CHECK_RES(cuMemHostRegister_v2(buf + 2 * MiB, 1, 0), CUDA_ERROR_OUT_OF_MEMORY); /* a whole page */
    CHECK(cuMemHostUnregister(buf));
    CHECK(cuMemHostRegister_v2(buf + 2 * MiB, 100, 0));
    CHECK(cuMemHostUnregister(buf + 2 * MiB));
    CHECK(cuMemHostUnregister(buf + MiB));

    /* A registration larger than the limit fails at once. */
    CHECK_RES(cuMemHostRegister_v2(buf, 2 * MiB, 0), CUDA_ERROR_OUT_OF_MEMORY);

    /* The limit is read at each call; RLIM_INFINITY lifts it. */
    low.rlim_cur = rl.rlim_max;
    EXPECT(setrlimit(RLIMIT_MEMLOCK, &low) == 0, "setrlimit");
    if (rl.rlim_max == RLIM_INFINITY) {
        CHECK(cuMemHostRegister_v2(buf, 4 * MiB, 0));
        CHECK(cuMemHostUnregister(buf));
    } else if (rl.rlim_max >= 2 * MiB) {
        CHECK(cuMemHostRegister_v2(buf, 2 * MiB, 0));
        CHECK(cuMemHostUnregister(buf));
    }
    return 0;
}
