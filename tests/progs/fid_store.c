/*
 * fid_store: ranks that meet the way PyTorch's TCPStore has them meet, and
 * keep meeting there.  Rank 0 serves a store at MASTER_ADDR:MASTER_PORT
 * on a thread of its own for the whole run: it hands each rank that
 * connects rank 0's NCCL unique id, then answers a barrier every
 * iteration (each other rank sends the iteration, and once all have, gets
 * back the sum of what they sent).  The other ranks keep their connection
 * to the end, as a process group keeps its store, and what the store
 * answers steers their device work.  Every rank prints a digest of its
 * device state and of what the store told it.
 *
 *   --early   meet at the store before the first CUDA call (a Python
 *             program makes its process group before it touches a tensor)
 *
 * Ranks from RANK and WORLD_SIZE; --iters and --die-at as fid.h says.
 */
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <nccl.h>

#include "fid.h"

#define NCHECK(call)                                                                                        \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess)                                                                              \
            fid_fail(#call, ncclGetErrorString(r_), __FILE__, __LINE__);                                    \
    } while (0)

#define STORE_TIMEOUT_S 60

struct store {
    int listener, world;
    ncclUniqueId id;
};

static struct addrinfo *store_address(void)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (!addr || !port || getaddrinfo(addr, port, &hints, &ai) != 0)
        fid_fail("getaddrinfo", "MASTER_ADDR and MASTER_PORT must name the store", __FILE__, __LINE__);
    return ai;
}

static void put_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = send(fd, (const char *)p + done, n - done, MSG_NOSIGNAL);
        if (k <= 0)
            fid_fail("send", strerror(errno), __FILE__, __LINE__);
        done += (size_t)k;
    }
}

static void get_all(int fd, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = recv(fd, (char *)p + done, n - done, 0);
        if (k == 0)
            fid_fail("recv", "the store's peer closed the connection", __FILE__, __LINE__);
        if (k < 0 && errno != EINTR)
            fid_fail("recv", strerror(errno), __FILE__, __LINE__);
        done += k > 0 ? (size_t)k : 0;
    }
}

/* Rank 0's store: accepts every other rank, hands each the id, then
 * answers barriers until every rank has closed its connection. */
static void *serve(void *arg)
{
    struct store *st = arg;
    int n = st->world - 1, *fd = calloc((size_t)n, sizeof(int));
    for (int k = 0; k < n;) {
        struct pollfd p = {st->listener, POLLIN, 0};
        if (poll(&p, 1, STORE_TIMEOUT_S * 1000) <= 0)
            fid_fail("poll", "not every rank reached the store in time", __FILE__, __LINE__);
        if ((fd[k] = accept(st->listener, NULL, NULL)) < 0)
            continue;
        put_all(fd[k++], &st->id, sizeof(st->id));
    }
    close(st->listener);
    for (;;) {
        uint64_t sum = 0, v;
        for (int k = 0; k < n; k++) {
            ssize_t got = recv(fd[k], &v, sizeof(v), MSG_WAITALL);
            if (got == 0) { /* the run is over */
                for (int j = 0; j < n; j++)
                    close(fd[j]);
                free(fd);
                return NULL;
            }
            if (got != (ssize_t)sizeof(v))
                fid_fail("recv", "a short barrier request", __FILE__, __LINE__);
            sum += v;
        }
        for (int k = 0; k < n; k++)
            put_all(fd[k], &sum, sizeof(sum));
    }
}

/* Rank 0 starts its store (with the id made), the others connect to it
 * and get the id; returns the connection (-1 on rank 0). */
static int meet(int rank, int world, ncclUniqueId *id, pthread_t *thread)
{
    struct addrinfo *ai = store_address();
    int fd = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
    if (rank == 0) {
        static struct store st;
        NCHECK(ncclGetUniqueId(&st.id));
        *id = st.id;
        st.world = world;
        st.listener = fd;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64))
            fid_fail("bind", strerror(errno), __FILE__, __LINE__);
        freeaddrinfo(ai);
        if (world > 1)
            pthread_create(thread, NULL, serve, &st);
        return -1;
    }
    time_t deadline = time(NULL) + STORE_TIMEOUT_S;
    while (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        close(fd);
        if (time(NULL) > deadline)
            fid_fail("connect", "rank 0's store did not answer in time", __FILE__, __LINE__);
        usleep(50 * 1000);
        fd = socket(ai->ai_family, SOCK_STREAM, 0);
    }
    freeaddrinfo(ai);
    get_all(fd, id, sizeof(*id));
    return fd;
}

int main(int argc, char **argv)
{
    bool early = false;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--early") == 0) {
            early = true;
            memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(*argv));
            argc--;
            break;
        }
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_store [--early]");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    int rank = r ? atoi(r) : 0, world = w ? atoi(w) : 1, fd = -1;
    ncclUniqueId id;
    pthread_t thread;

    if (early)
        fd = meet(rank, world, &id, &thread);
    cudaStream_t s;
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!early)
        fd = meet(rank, world, &id, &thread);
    ncclComm_t comm;
    NCHECK(ncclCommInitRank(&comm, world, id, rank));

    const size_t n = 4096;
    uint32_t *x, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&x, n * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(fid_step_launch(DIM3(4), DIM3(256), s, x, n, 11u));
    uint64_t told = FID_HASH_INIT;
    for (int it = 1; it <= o.iters; it++) {
        uint32_t salt = (uint32_t)(it * 31 + rank);
        if (fd >= 0) { /* the store's barrier: what it answers steers the step */
            uint64_t v = (uint64_t)it, sum;
            put_all(fd, &v, sizeof(v));
            get_all(fd, &sum, sizeof(sum));
            told = fid_hash_u64(told, sum);
            salt += (uint32_t)sum;
        }
        CHECK(fid_step_launch(DIM3(4), DIM3(256), s, x, n, salt));
        NCHECK(ncclAllReduce(x, x, n, ncclUint32, ncclSum, comm, s));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, x, n, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        if (rank == 0)
            printf("iter %d loss 0x%08x\n", it, *loss_h);
        fid_end_iteration(&o, it);
    }
    uint64_t h = fid_hash_device(told, x, n * sizeof(uint32_t));
    printf("rank %d digest %016llx\n", rank, (unsigned long long)h);
    if (fd >= 0)
        close(fd);
    if (rank == 0 && world > 1)
        pthread_join(thread, NULL);
    NCHECK(ncclCommDestroy(comm));
    return 0;
}
