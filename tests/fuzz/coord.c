/*
 * libFuzzer target: the coordinator of a job on several nodes (tools/
 * ckpt-resume/coord.c), as it meets broken or hostile members.  A real
 * coordinator listens on a loopback port and the input is a script of up
 * to four TCP clients that connect, send JOIN, FETCHED, HELD, REPLICATED,
 * FAILED and DONE frames with fuzzed fields (node ranks out of
 * range, held copies of any rank, tier and iteration), frames of any type
 * and length, garbage, truncated and oversized frames, and hang up.  The
 * coordinator's loop is turned here, one turn at a time, so that every run
 * of an input is the same.  Nothing may crash, block, read out of bounds,
 * close a descriptor twice (close() is checked here) or leak one; every
 * PLAN it sends must be one a member accepts (member.c's take_plan).
 */
#include <errno.h>
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "coord.h"
#include "log.h"
#include "resume.h"
#include "wire.h"

#define CLIENTS 4
#define TURNS 3 /* accept, the first frame of a new connection, what it sets off */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* watch.c's and restart.c's, which the coordinator calls (restart.c's backoff is 0 here: no waiting). */
double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

const char *sig_name(int sig)
{
    static char buf[32];
    snprintf(buf, sizeof(buf), "signal %d", sig);
    return buf;
}

double backoff_s(const struct options *opt, int n)
{
    (void)n;
    return opt->backoff_s;
}

/* env.c's: the ports of a launch's rank 0 and of its standbys (free ones there; any here). */
int job_master_port(char *port)
{
    snprintf(port, 16, "29500");
    return 0;
}

int job_spare_port(char *port)
{
    snprintf(port, 16, "29501");
    return 0;
}

/* Every close in this process: one of a descriptor already closed is a bug
 * (the number may belong to another thread's file by then). */
int close(int fd)
{
    long rc = syscall(SYS_close, fd);
    if (rc < 0 && errno == EBADF) {
        fprintf(stderr, "close(%d): not open: closed twice\n", fd);
        abort();
    }
    return (int)rc;
}

struct input {
    const uint8_t *p;
    size_t left;
};

static uint8_t byte(struct input *in)
{
    if (!in->left)
        return 0;
    in->left--;
    return *in->p++;
}

static uint32_t u32(struct input *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)byte(in) << (8 * i);
    return v;
}

/* An iteration: mostly small, so that the nodes' copies meet; now and then anything. */
static uint64_t iteration(struct input *in)
{
    uint8_t b = byte(in);
    return b < 0xf0 ? b : UINT64_MAX - (b & 0xf);
}

struct client {
    int fd;             /* -1: not connected */
    bool shut;          /* sent its last byte */
};

struct harness {
    struct coord *c;
    const char *addr;
    unsigned nnodes, nproc;
    struct client cl[CLIENTS];
};

static void hang_up(struct client *cl)
{
    if (cl->fd < 0)
        return;
    struct linger lg = { .l_onoff = 1, .l_linger = 0 }; /* no TIME_WAIT left behind */
    setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(cl->fd);
    cl->fd = -1;
}

/* A PLAN as member.c's take_plan checks it, and the sends as the coordinator must choose them. */
static void check_plan(const struct harness *h, const void *msg, size_t len)
{
    const struct coord_plan *p = msg;
    if (len < sizeof(*p) || p->nnodes != h->nnodes || p->ndecided > COORD_DECIDED_MAX ||
        len != sizeof(*p) + p->nnodes * sizeof(struct coord_addr) + p->nsend * sizeof(struct coord_send) +
                   p->ndecided * sizeof(struct ckpt_decision) ||
        !memchr(p->master_addr, '\0', sizeof(p->master_addr)) || !memchr(p->master_port, '\0', sizeof(p->master_port)))
        abort();
    const struct coord_addr *addrs = (const void *)(p + 1);
    const struct coord_send *sends = (const void *)(addrs + p->nnodes);
    for (uint32_t i = 0; i < p->nnodes; i++)
        if (!memchr(addrs[i].hostport, '\0', sizeof(addrs[i].hostport)))
            abort();
    for (uint32_t i = 0; i < p->nsend; i++)
        if (!p->restore || sends[i].iteration != p->restore || sends[i].node >= h->nnodes ||
            sends[i].rank >= h->nnodes * h->nproc || sends[i].rank / h->nproc != sends[i].node)
            abort();
}

/* Reads what the coordinator has said to client @k, without waiting. */
static void drain(struct harness *h, unsigned k)
{
    struct client *cl = &h->cl[k];
    while (cl->fd >= 0) {
        struct pollfd p = { .fd = cl->fd, .events = POLLIN };
        if (poll(&p, 1, 0) <= 0)
            return;
        uint16_t type;
        void *msg = NULL;
        size_t len;
        if (ckpt_wire_recv(cl->fd, 1000, &type, &msg, &len) < 0) {
            hang_up(cl); /* the coordinator closed it */
            return;
        }
        if (type == COORD_PLAN)
            check_plan(h, msg, len);
        if (((type == COORD_LAUNCH || type == COORD_REPLICATE || type == COORD_DURABLE) &&
             len != sizeof(struct coord_iter)) ||
            (type == COORD_FINISH && len < sizeof(struct coord_status)))
            abort();
        free(msg);
    }
}

/* Lets the coordinator take everything sent so far; then reads its answers. */
static void settle(struct harness *h)
{
    for (int t = 0; t < TURNS; t++)
        if (!coord_turn(h->c, 0))
            abort();
    for (unsigned k = 0; k < CLIENTS; k++)
        drain(h, k);
}

static int client(struct harness *h, unsigned k)
{
    struct client *cl = &h->cl[k];
    char why[256];
    if (cl->fd < 0 && ckpt_wire_connect(h->addr, &cl->fd, why, sizeof(why)) < 0)
        abort();
    return cl->shut ? -1 : cl->fd;
}

/* A JOIN, right unless the input says what to get wrong. */
static void send_join(struct harness *h, int fd, struct input *in, const struct options *opt)
{
    struct coord_join jn = { .node = byte(in) & 7, .nnodes = h->nnodes, .nproc = h->nproc,
                             .replicas = (uint32_t)ckpt_cfg_int(CFG_REPLICAS) };
    struct {
        struct ckpt_held held[16];
        struct ckpt_decision decided[8];
    } tail;
    struct ckpt_held *held = tail.held;
    uint8_t wrong = byte(in);

    snprintf(jn.job, sizeof(jn.job), "%s", opt->job_name);
    snprintf(jn.replica.hostport, sizeof(jn.replica.hostport), "127.0.0.1:%u", 40000 + jn.node);
    jn.nheld = byte(in) % 17;
    for (uint32_t i = 0; i < jn.nheld; i++) {
        uint8_t r = byte(in), t = byte(in);
        held[i] = (struct ckpt_held){ .rank = r < 0xf0 ? r % (h->nnodes * h->nproc) : UINT32_MAX - (r & 0xf),
                                      .tier = t & 7, .iteration = iteration(in), .node = t >> 3 };
    }
    /* Decisions the node acted under, in any order, epochs and restore points as the input says. */
    jn.ndecided = byte(in) % 9;
    for (uint32_t i = 0; i < jn.ndecided; i++)
        tail.decided[i] = (struct ckpt_decision){ .epoch = byte(in) % 8, .restore = iteration(in) };
    if (wrong & 1)
        jn.nnodes++;
    if (wrong & 2)
        jn.job[0] ^= 1;
    if (wrong & 4)
        memset(jn.replica.hostport, 'x', sizeof(jn.replica.hostport));
    if (wrong & 8)
        jn.refused = iteration(in);
    if (wrong & 16)
        jn.node = u32(in);
    if (wrong & 32)
        jn.nheld = u32(in); /* the length no longer matches */
    size_t nheld = wrong & 32 ? 16 : jn.nheld, len = nheld * sizeof(held[0]);
    memmove((char *)held + len, tail.decided, jn.ndecided * sizeof(tail.decided[0])); /* right after the copies */
    len += jn.ndecided * sizeof(tail.decided[0]);
    ckpt_wire_send(fd, COORD_JOIN, &jn, sizeof(jn), held, (wrong & 64) && len ? len - 1 : len);
}

/* One step of the script. */
static void step(struct harness *h, struct input *in, const struct options *opt)
{
    uint8_t op = byte(in);
    unsigned k = op % CLIENTS;
    struct client *cl = &h->cl[k];
    int fd;

    if ((op >> 2) % 12 == 10) { /* hang up */
        if (byte(in) & 1 && cl->fd >= 0 && !cl->shut) {
            shutdown(cl->fd, SHUT_WR);
            cl->shut = true;
        } else {
            hang_up(cl);
            cl->shut = false;
        }
        return;
    }
    if ((fd = client(h, k)) < 0)
        return;
    struct coord_status st = { 0 };
    struct coord_held hd;
    struct ckpt_wire_frame f = { .magic = CKPT_WIRE_MAGIC, .version = CKPT_WIRE_VERSION };
    uint8_t raw[256];
    size_t n;

    switch ((op >> 2) % 12) {
    case 0:
        send_join(h, fd, in, opt);
        break;
    case 1:
        st.status = (int8_t)byte(in);
        ckpt_wire_send(fd, COORD_FETCHED, &st, sizeof(st), NULL, 0);
        break;
    case 2:
        hd = (struct coord_held){ .newest = iteration(in), .other = iteration(in), .committed = iteration(in) };
        ckpt_wire_send(fd, COORD_HELD, &hd, sizeof(hd), NULL, 0);
        break;
    case 3:
        st.status = (int8_t)byte(in);
        st.iteration = iteration(in);
        ckpt_wire_send(fd, COORD_REPLICATED, &st, sizeof(st), NULL, 0);
        break;
    case 4:
        st.status = (int32_t)u32(in);
        st.value = iteration(in);
        ckpt_wire_send(fd, COORD_FAILED, &st, sizeof(st), NULL, 0);
        break;
    case 5:
        ckpt_wire_send(fd, COORD_DONE, NULL, 0, NULL, 0);
        break;
    case 6: /* a type past the protocol's, empty */
        ckpt_wire_send(fd, COORD_FINISH + 1, NULL, 0, NULL, 0);
        break;
    case 7: /* any type, any payload */
        f.type = (uint16_t)(COORD_JOIN - 2 + byte(in) % 20);
        n = byte(in);
        for (size_t i = 0; i < n; i++)
            raw[i] = byte(in);
        ckpt_wire_send(fd, f.type, raw, n, NULL, 0);
        break;
    case 8: /* not a frame, or a frame cut short: the last bytes of this client */
    case 9:
        n = byte(in) % 64;
        if ((op >> 2) % 12 == 9) {
            f.type = (uint16_t)(COORD_JOIN + byte(in) % 14);
            f.length = (uint32_t)n + 1 + byte(in);
            memcpy(raw, &f, sizeof(f));
            n += sizeof(f);
        }
        for (size_t i = (op >> 2) % 12 == 9 ? sizeof(f) : 0; i < n; i++)
            raw[i] = byte(in);
        send(fd, raw, n, MSG_NOSIGNAL);
        shutdown(fd, SHUT_WR);
        cl->shut = true;
        break;
    case 11: /* a length past CKPT_WIRE_MAX */
        f.type = COORD_JOIN;
        f.length = CKPT_WIRE_MAX + 1 + byte(in);
        send(fd, &f, sizeof(f), MSG_NOSIGNAL);
        break;
    }
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        abort();
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = { data, size };
    struct options opt = { .coord = "127.0.0.1:0", .backoff_s = 0, .job_name = "fuzz" };
    struct harness h = { 0 };
    int fds = count_fds();

    static bool loaded;
    char err[256];
    if (!loaded && ckpt_config_load(err, sizeof(err)) < 0)
        abort();
    loaded = true;
    ckpt_log_level = CKPT_ERROR - 1;
    uint8_t shape = byte(&in);
    opt.nnodes = 1 + (shape & 3);
    opt.nproc = 1 + ((shape >> 2) & 3);
    opt.max_restarts = (shape >> 4) & 3;
    h.nnodes = (unsigned)opt.nnodes;
    h.nproc = (unsigned)opt.nproc;
    for (unsigned k = 0; k < CLIENTS; k++)
        h.cl[k].fd = -1;
    if (coord_open(&h.c, &opt) < 0)
        abort();
    h.addr = coord_address(h.c);
    for (int steps = 0; in.left && steps < 256; steps++) {
        step(&h, &in, &opt);
        settle(&h);
    }
    for (unsigned k = 0; k < CLIENTS; k++)
        if (h.cl[k].fd >= 0)
            shutdown(h.cl[k].fd, SHUT_WR);
    settle(&h);
    coord_stop(h.c);
    for (unsigned k = 0; k < CLIENTS; k++)
        hang_up(&h.cl[k]);
    if (count_fds() != fds) {
        fprintf(stderr, "%d descriptors open after the run, %d before\n", count_fds(), fds);
        abort();
    }
    return 0;
}
