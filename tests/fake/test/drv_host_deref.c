/*
 * The host cannot touch device memory, as on a GPU: a host thread's load
 * or store of a live device allocation (plain, stream-ordered, a VMM
 * mapping) faults, in threads started before cuInit and after it, and in a
 * host function on a stream; kernels, copies and memsets reach it; managed
 * memory and pinned host memory stay the host's.  Skipped (77) on a CPU
 * without protection keys, where the double cannot tell.
 */
#include <pthread.h>
#include <sys/mman.h>

#include "drv_test.h"

static CUdeviceptr probe_at;
static int probe_faulted = -1;

static void *probe_thread(void *arg)
{
    (void)arg;
    probe_faulted = DRV_HOST_READ_FAULTS((const void *)(uintptr_t)probe_at);
    return NULL;
}

static int thread_faults(CUdeviceptr p)
{
    pthread_t t;
    probe_at = p;
    EXPECT(pthread_create(&t, NULL, probe_thread, NULL) == 0, "pthread_create");
    EXPECT(pthread_join(t, NULL) == 0, "pthread_join");
    return probe_faulted;
}

static int hostfn_faulted = -1;

static void hostfn(void *p)
{
    hostfn_faulted = DRV_HOST_READ_FAULTS(p);
}

static void set(void **args)
{
    *ARG(args, 0, uint32_t *) = ARG(args, 1, uint32_t);
}

/* A thread started before cuInit, waiting to probe. */
static pthread_mutex_t early_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t early_cond = PTHREAD_COND_INITIALIZER;
static int early_go, early_faulted = -1;

static void *early_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&early_lock);
    while (!early_go)
        pthread_cond_wait(&early_cond, &early_lock);
    pthread_mutex_unlock(&early_lock);
    early_faulted = DRV_HOST_READ_FAULTS((const void *)(uintptr_t)probe_at);
    return NULL;
}

int main(void)
{
    int key = pkey_alloc(0, 0);
    if (key < 0) {
        printf("no protection keys on this CPU (%s): the double cannot keep the host out of device memory\n",
               strerror(errno));
        return 77;
    }
    pkey_free(key);

    pthread_t early;
    EXPECT(pthread_create(&early, NULL, early_thread, NULL) == 0, "pthread_create");
    DRV_SETUP();

    CUstream s;
    CUdeviceptr d, pool, va, managed;
    CUmemGenericAllocationHandle h;
    void *pinned;
    uint32_t v = 0;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemAlloc_v2(&d, 4096));
    CHECK(cuMemAllocAsync(&pool, 4096, s));
    CHECK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocHost_v2(&pinned, 4096));

    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t gran = 2u << 20;
    CHECK(cuMemAddressReserve(&va, gran, 0, 0, 0));
    CHECK(cuMemCreate(&h, gran, &prop, 0));
    CHECK(cuMemMap(va, gran, 0, h, 0));
    CHECK(cuMemSetAccess(va, gran, &access, 1));

    /* The device reaches all of it. */
    CHECK(LAUNCH(s, set, PTR(d), 7));
    CHECK(LAUNCH(s, set, PTR(pool), 8));
    CHECK(LAUNCH(s, set, PTR(va), 9));
    CHECK(cuMemsetD32Async(managed, 10, 1, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH_v2(&v, va, sizeof(v)));
    EXPECT(v == 9, "a kernel's store into a VMM mapping: read back %u", v);

    /* The host does not. */
    EXPECT(DRV_HOST_READ_FAULTS((const void *)(uintptr_t)d), "the host reads cuMemAlloc memory");
    EXPECT(DRV_HOST_READ_FAULTS((const void *)(uintptr_t)pool), "the host reads a stream-ordered allocation");
    EXPECT(DRV_HOST_READ_FAULTS((const void *)(uintptr_t)va), "the host reads a VMM mapping");
    EXPECT(thread_faults(d), "a thread started after cuInit reads device memory");
    probe_at = d;
    pthread_mutex_lock(&early_lock);
    early_go = 1;
    pthread_cond_broadcast(&early_cond);
    pthread_mutex_unlock(&early_lock);
    EXPECT(pthread_join(early, NULL) == 0, "pthread_join");
    EXPECT(early_faulted == 1, "a thread started before cuInit reads device memory");
    CHECK(cuLaunchHostFunc(s, hostfn, (void *)(uintptr_t)d));
    CHECK(cuStreamSynchronize(s));
    EXPECT(hostfn_faulted == 1, "a host function reads device memory");

    /* Managed and pinned memory stay the host's. */
    EXPECT(!DRV_HOST_READ_FAULTS((const void *)(uintptr_t)managed), "the host cannot read managed memory");
    EXPECT(*(volatile uint32_t *)(uintptr_t)managed == 10, "managed memory reads %u", *(uint32_t *)(uintptr_t)managed);
    EXPECT(!DRV_HOST_READ_FAULTS(pinned), "the host cannot read pinned memory");
    EXPECT(!thread_faults((CUdeviceptr)(uintptr_t)pinned), "another thread cannot read pinned memory");

    CHECK(cuMemUnmap(va, gran));
    CHECK(cuMemRelease(h));
    CHECK(cuMemAddressFree(va, gran));
    CHECK(cuMemFreeAsync(pool, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemFree_v2(d));
    CHECK(cuMemFree_v2(managed));
    CHECK(cuMemFreeHost(pinned));
    puts("host dereference: ok");
    return 0;
}
