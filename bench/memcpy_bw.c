/*
 * This machine's memcpy bandwidth: the ceiling for any copy the double's
 * "PCIe" can make, and the limit bench/run compares device-to-host copies
 * with.  One thread copies one large buffer into another, both touched
 * first so page faults are not timed; the best of several runs counts, as
 * the machine may be busy.  It measures, never judges: no threshold here.
 * Usage: memcpy_bw [MiB] [runs]   Prints: "<GB/s>" (decimal, 10^9 bytes/s).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int runs = argc > 2 ? atoi(argv[2]) : 8;
    if (mib == 0 || runs <= 0) {
        fprintf(stderr, "usage: memcpy_bw [MiB > 0] [runs > 0]\n");
        return 2;
    }
    size_t n = mib << 20;
    char *src = malloc(n), *dst = malloc(n);
    if (!src || !dst) {
        fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu MiB\n", mib);
        return 1;
    }
    memset(src, 0x5a, n);
    memset(dst, 0, n);

    double best = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_s();
        memcpy(dst, src, n);
        double t = now_s() - t0;
        if (t > 0 && n / t > best)
            best = n / t;
    }
    /* Read the copy back, so the compiler cannot drop it and a broken copy shows. */
    if (dst[0] != 0x5a || dst[n / 2] != 0x5a || dst[n - 1] != 0x5a) {
        fprintf(stderr, "memcpy_bw: the copy is wrong\n");
        return 1;
    }
    printf("%.2f\n", best / 1e9);
    free(src);
    free(dst);
    return 0;
}
