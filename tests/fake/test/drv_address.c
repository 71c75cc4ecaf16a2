/*
 * Device addresses come from one range the driver reserves at cuInit, as
 * under UVA: the same sequence of allocation calls (cuMemAlloc, pitch,
 * managed, stream-ordered, cuMemAddressReserve) gives the same addresses in
 * two processes with address-space randomisation off, even when one of
 * them maps other memory and starts threads between the calls; with
 * randomisation on, the range moves but the addresses keep their offsets.
 * Small allocations are 512-byte aligned, large ones 2 MiB-aligned, a freed
 * address is reused first fit, freed pages fault and come back zeroed, a
 * copy naming a freed device address fails instead of faulting, and pinned
 * host memory is not in the range.
 *
 * The test runs itself: "drv_address child quiet|noisy" prints the
 * addresses of the sequence, one per line.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drv_test.h"

#define MiB ((size_t)1 << 20)
#define NADDR 16

static void *idle(void *arg)
{
    pthread_barrier_t *b = arg;

    pthread_barrier_wait(b);
    return NULL;
}

/* Host mappings and threads a program makes between its allocations. */
static void noise(int noisy, pthread_barrier_t *b, pthread_t *threads, int *nthreads)
{
    if (!noisy)
        return;
    for (int i = 0; i < 3; i++) {
        void *p = mmap(NULL, (size_t)(i + 1) * 64 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT(p != MAP_FAILED, "mmap");
        ((char *)p)[0] = 1;
        EXPECT(malloc((size_t)(i + 1) << 20), "malloc");
    }
    for (int i = 0; i < 2; i++)
        EXPECT(pthread_create(&threads[(*nthreads)++], NULL, idle, b) == 0, "pthread_create");
}

static int child(int noisy)
{
    CUdeviceptr a[NADDR];
    CUstream s;
    size_t pitch, n = 0;
    pthread_barrier_t b;
    pthread_t threads[8];
    int nthreads = 0;

    pthread_barrier_init(&b, NULL, noisy ? 7 : 1);
    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&a[n++], 100));
    noise(noisy, &b, threads, &nthreads);
    CHECK(cuMemAlloc_v2(&a[n++], 4096));
    CHECK(cuMemAlloc_v2(&a[n++], 3 * MiB));
    noise(noisy, &b, threads, &nthreads);
    CHECK(cuMemAllocPitch_v2(&a[n++], &pitch, 1000, 10, 4));
    CHECK(cuMemAllocManaged(&a[n++], 1000, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocAsync(&a[n++], 5000, s));
    CHECK(cuMemAllocAsync(&a[n++], 8 * MiB, s));
    CHECK(cuStreamSynchronize(s));
    noise(noisy, &b, threads, &nthreads);
    CHECK(cuMemAddressReserve(&a[n++], 64 * MiB, 0, 0, 0));
    CHECK(cuMemFree_v2(a[0]));
    CHECK(cuMemAlloc_v2(&a[n++], 200)); /* first fit: a[0]'s place */
    CHECK(cuMemAlloc_v2(&a[n++], 2 * MiB));
    CHECK(cuMemAlloc_v2(&a[n++], 1));
    for (size_t i = 0; i < n; i++)
        printf("%#llx\n", a[i]);
    pthread_barrier_wait(&b);
    for (int i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);
    return 0;
}

/*
 * Runs "self child <mode>", with randomisation off when norandom, into
 * out[]: the number of addresses read, or -1 when the personality cannot
 * be changed here (the test is then skipped).
 */
static int run_child(const char *mode, int norandom, unsigned long long *out)
{
    int fd[2], status, n = 0;
    char line[64];
    pid_t pid;
    FILE *f;

    EXPECT(pipe(fd) == 0, "pipe");
    pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        if (norandom && personality(personality(0xffffffff) | ADDR_NO_RANDOMIZE) < 0)
            _exit(77);
        execl("/proc/self/exe", "drv_address", "child", mode, (char *)NULL);
        _exit(76);
    }
    close(fd[1]);
    f = fdopen(fd[0], "r");
    while (n < NADDR && fgets(line, sizeof(line), f))
        out[n++] = strtoull(line, NULL, 16);
    fclose(f);
    EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        return -1;
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %s exited with status %#x", mode, status);
    return n;
}

/* Whether writing to p faults. */
static int faults(volatile char *p)
{
    int status;
    pid_t pid = fork();

    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        *p = 1;
        _exit(0);
    }
    EXPECT(waitpid(pid, &status, 0) == pid, "waitpid");
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

static int aslr_on(void)
{
    FILE *f = fopen("/proc/sys/kernel/randomize_va_space", "r");
    int v = 2;

    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = 2;
        fclose(f);
    }
    return v != 0;
}

int main(int argc, char **argv)
{
    unsigned long long quiet[NADDR], noisy[NADDR], r1[NADDR], r2[NADDR];
    int n, nq;

    DRV_HOST_DEREF_ALLOW(argv);
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(strcmp(argv[2], "noisy") == 0);

    /* Same sequence, same addresses, whatever else the process maps. */
    nq = run_child("quiet", 1, quiet);
    if (nq < 0) {
        printf("cannot turn address-space randomisation off here\n");
        return 77;
    }
    n = run_child("noisy", 1, noisy);
    EXPECT(n == nq && n == 11, "%d and %d addresses", nq, n);
    for (int i = 0; i < n; i++)
        EXPECT(quiet[i] == noisy[i], "address %d: %#llx without noise, %#llx with", i, quiet[i], noisy[i]);

    /* Alignment: small ones 512 bytes, large ones 2 MiB; first fit. */
    for (int i = 0; i < n; i++)
        EXPECT(quiet[i] % 512 == 0, "address %d %#llx is not 512-byte aligned", i, quiet[i]);
    EXPECT(quiet[2] % (2 * MiB) == 0 && quiet[6] % (2 * MiB) == 0 && quiet[7] % (2 * MiB) == 0 &&
               quiet[9] % (2 * MiB) == 0, "a large allocation is not 2 MiB-aligned");
    EXPECT(quiet[8] == quiet[0], "the freed address %#llx was not reused first fit (%#llx)", quiet[0], quiet[8]);
    EXPECT(quiet[1] == quiet[0] + 512, "small allocations are not packed: %#llx then %#llx", quiet[0], quiet[1]);

    /* With randomisation on, the range moves; offsets stay. */
    if (aslr_on()) {
        EXPECT(run_child("quiet", 0, r1) == n && run_child("noisy", 0, r2) == n, "randomised children");
        EXPECT(r1[0] != r2[0] || r1[0] != quiet[0], "the device range did not move: %#llx", r1[0]);
        for (int i = 1; i < n; i++)
            EXPECT(r1[i] - r1[0] == quiet[i] - quiet[0] && r2[i] - r2[0] == quiet[i] - quiet[0],
                   "address %d is not at the same offset when randomised", i);
    }

    /* In this process: freed pages fault and come back fresh.  Whether
     * live ones are mapped is seen from the host, which the double
     * otherwise keeps out of device pages (drv_host_deref). */
    CUdeviceptr d, again, s1, s2;
    void *pinned;
    unsigned char buf[64];

    DRV_SETUP();
    CHECK(cuMemAlloc_v2(&s1, 4096)); /* before d: its chunk must not reuse d's place */
    CHECK(cuMemAlloc_v2(&d, 4 * MiB));
    EXPECT(!faults((volatile char *)(uintptr_t)d), "live device memory faults");
    CHECK(cuMemsetD8_v2(d, 0xab, 4 * MiB));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemFree_v2(d));
    EXPECT(faults((volatile char *)(uintptr_t)d), "freed device memory does not fault");
    /* A freed device address is no host memory either: copies refuse it. */
    CHECK_RES(cuMemcpy((CUdeviceptr)(uintptr_t)buf, d, sizeof(buf)), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemcpyAsync(d, (CUdeviceptr)(uintptr_t)buf, sizeof(buf), NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemcpyDtoH_v2((void *)(uintptr_t)d, s1, sizeof(buf)), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemcpyHtoD_v2(s1, (const void *)(uintptr_t)d, sizeof(buf)), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAlloc_v2(&again, 4 * MiB));
    EXPECT(again == d, "the freed range %#llx was not reused (%#llx)", d, again);
    CHECK(cuMemcpyDtoH_v2(buf, again + 4 * MiB - sizeof(buf), sizeof(buf)));
    for (size_t i = 0; i < sizeof(buf); i++)
        EXPECT(buf[i] == 0, "reused memory holds old bytes: %#x", buf[i]);
    CHECK(cuMemFree_v2(s1));

    /* Small neighbours share a page; the page goes when both are freed. */
    CHECK(cuMemAlloc_v2(&s1, 512));
    CHECK(cuMemAlloc_v2(&s2, 512));
    EXPECT(s2 == s1 + 512, "%#llx then %#llx", s1, s2);
    CHECK(cuMemFree_v2(s1));
    EXPECT(!faults((volatile char *)(uintptr_t)s2), "a live small allocation faults after its neighbour's free");
    CHECK(cuMemFree_v2(s2));
    EXPECT(faults((volatile char *)(uintptr_t)s2), "a page of freed small allocations does not fault");

    /* Pinned host memory is ordinary host memory, far from the range. */
    CHECK(cuMemAllocHost_v2(&pinned, 4096));
    EXPECT((uintptr_t)pinned + 4096 <= again || (uintptr_t)pinned >= again + ((size_t)64 << 30),
           "pinned memory %p is inside the device range", pinned);
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree_v2(again));
    return 0;
}
