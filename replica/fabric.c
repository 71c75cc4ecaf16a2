/*
 * The libfabric endpoint of fabric.h: RMA writes, or tagged sends and the
 * receives they land in, over one FI_EP_RDM endpoint and one completion
 * queue.  It asks for FI_DELIVERY_COMPLETE so that a write's (or send's)
 * completion means its bytes are in the peer's memory: the receiver
 * verifies bytes as soon as the sender says their writes are complete
 * (PROGRESS, DONE), and a merely-sent byte would fail that check.  It must
 * never let a receive stay posted into memory its caller gave back
 * (ckpt_fab_cancel).  Every libfabric error becomes -errno (fi_* return
 * -FI_E*, which are errno values) with a line in f->why; nothing here
 * prints.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "fabric.h"
#include "util.h"

#define API_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define WINDOW 32             /* writes (sends) in flight at most, and receives posted */
#define PIECE_MAX (8u << 20)  /* bytes per write at most (the sender writes 1 MiB pieces) */
#define EAGAIN_MS 10000       /* a write the provider keeps refusing for this long: the peer
                                 takes no connection (rxm answers a refused connect with
                                 EAGAIN, for the application to try again) */
#define MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

struct ckpt_fab {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    int wait_fd;              /* the CQ's, to sleep on; -1: none, poll */
    int data;                 /* CKPT_FAB_DATA_RMA or CKPT_FAB_DATA_TAGGED */
    size_t window, inflight, piece;
    int error;                /* the first failed write, sticky */
    uint64_t calls;           /* ckpt_fab_write calls that queued all their pieces */
    struct fi_context ctx[WINDOW];
    uint64_t call_of[WINDOW]; /* the call a context's piece belongs to */
    unsigned char busy[WINDOW];
    unsigned free_ctx[WINDOW], nfree;
    struct fi_context rctx[WINDOW]; /* posted receives */
    uint64_t rtag[WINDOW];
    unsigned rfree[WINDOW], nrfree, rwindow;
    struct ckpt_fab_arrival arrived[WINDOW]; /* completed receives not handed over yet */
    size_t narrived;
    uint32_t round;           /* ckpt_fab_round_tag's */
    char why[256];
};

struct ckpt_fab_region {
    struct fid_mr *mr;
    void *base;
    size_t len;
    uint64_t raddr;           /* what a peer writes to: the address, or 0 for offsets */
};

/* Providers in the order they are taken when none is named; one that is
 * not listed (shm: one machine only; udp: datagrams under rxd) only when
 * named. */
static const char *const preferred[] = {"verbs", "efa", "cxi", "opx", "psm3", "psm2", "tcp", "net", "sockets"};

static int preference(const struct fi_info *i)
{
    const char *name = i->fabric_attr->prov_name;
    size_t core = strcspn(name, ";");
    for (size_t k = 0; k < sizeof(preferred) / sizeof(preferred[0]); k++)
        if (strlen(preferred[k]) == core && strncmp(preferred[k], name, core) == 0)
            return (int)k;
    return -1;
}

static struct fi_info *choose(struct fi_info *list, int named)
{
    struct fi_info *best = NULL;
    for (struct fi_info *i = list; i; i = i->next)
        if (named ? !best : preference(i) >= 0 && (!best || preference(i) < preference(best)))
            best = i;
    return best;
}

static int by_ip(const struct fi_info *i)
{
    return i->addr_format == FI_SOCKADDR || i->addr_format == FI_SOCKADDR_IN || i->addr_format == FI_SOCKADDR_IN6 ||
           i->addr_format == FI_SOCKADDR_IB;
}

static int query(const char *node, const char *provider, uint64_t caps, struct fi_info **out)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return -ENOMEM;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = caps;
    hints->mode = FI_CONTEXT;
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->domain_attr->mr_mode = MR_MODES;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    if (provider && *provider && !(hints->fabric_attr->prov_name = strdup(provider))) {
        fi_freeinfo(hints);
        return -ENOMEM;
    }
    int rc = fi_getinfo(API_VERSION, node, NULL, node ? FI_SOURCE : 0, hints, out);
    fi_freeinfo(hints);
    return rc;
}

static int fail(struct ckpt_fab *f, int rc, const char *what)
{
    snprintf(f->why, sizeof(f->why), "%s (%s): %s", what, f->info->fabric_attr->prov_name, fi_strerror(-rc));
    return rc;
}

/* fi_getinfo for caps at node, else anywhere (efa and the like are not
 * found by IP).  Returns 0 or -FI_E*. */
static int lookup(const char *node, const char *provider, uint64_t caps, struct fi_info **out)
{
    int rc = query(node, provider, caps, out);
    return rc == -FI_ENODATA && node ? query(NULL, provider, caps, out) : rc;
}

static const char *const data_caps[] = {"FI_RMA or FI_TAGGED", "FI_RMA", "FI_TAGGED"};

/* No provider with what data needs: say whether one with reliable
 * messages but another data path exists. */
static int unfit(const char *node, const char *provider, int data, char *why, size_t whylen)
{
    struct fi_info *msg = NULL;
    const char *named = provider && *provider ? provider : NULL;
    if (query(NULL, provider, FI_MSG, &msg) == 0 && msg) {
        int tagged = (msg->caps & FI_TAGGED) != 0;
        snprintf(why, whylen, "libfabric provider %s offers reliable messages but not %s%s",
                 msg->fabric_attr->prov_name, data_caps[data],
                 data == CKPT_FAB_DATA_RMA && tagged ? ": set CKPT_FABRIC_DATA=auto (or tagged) to send replicas as "
                                                       "tagged messages"
                 : data == CKPT_FAB_DATA_TAGGED && (msg->caps & FI_RMA) ? ": set CKPT_FABRIC_DATA=auto (or rma)"
                                                                          : "");
        fi_freeinfo(msg);
        return -EOPNOTSUPP;
    }
    snprintf(why, whylen, "no libfabric provider%s%s offers FI_EP_RDM endpoints with %s%s%s", named ? " " : "",
             named ? named : "", data_caps[data], node ? " on " : "", node ? node : "");
    return -ENODATA;
}

int ckpt_fab_open(struct ckpt_fab **out, const char *node, const char *provider, int data, char *why,
                  size_t whylen)
{
    struct fi_info *list = NULL, *best = NULL;
    int named = provider && *provider;

    if (data < CKPT_FAB_DATA_AUTO || data > CKPT_FAB_DATA_TAGGED) {
        snprintf(why, whylen, "no such data path (%d)", data);
        return -EINVAL;
    }
    uint64_t caps = FI_MSG | (data == CKPT_FAB_DATA_TAGGED ? FI_TAGGED : FI_RMA);
    int rc = lookup(node, provider, caps, &list);
    struct fi_info *tagged = NULL;
    /* auto: the provider that would be taken either way, with RMA where it
     * offers it; one without RMA is not passed over for a lesser one with. */
    if (data == CKPT_FAB_DATA_AUTO && (rc == 0 || rc == -FI_ENODATA) &&
        lookup(node, provider, FI_MSG | FI_TAGGED, &tagged) == 0) {
        struct fi_info *r = rc ? NULL : choose(list, named), *t = choose(tagged, named);
        if (t && (!r || (!named && preference(t) < preference(r)))) {
            fi_freeinfo(list);
            list = tagged;
            tagged = NULL;
            caps = FI_MSG | FI_TAGGED;
            rc = 0;
        }
        fi_freeinfo(tagged);
    }
    if (rc == -FI_ENODATA)
        return unfit(node, provider, data, why, whylen);
    if (rc) {
        snprintf(why, whylen, "fi_getinfo: %s", fi_strerror(-rc));
        return rc;
    }
    best = choose(list, named);
    /* A provider addressed by name rather than by IP (shm) takes its own
     * name: several processes bound to one IP would collide. */
    if (best && node && !by_ip(best)) {
        struct fi_info *any = NULL;
        if (query(NULL, provider, caps, &any) == 0) {
            fi_freeinfo(list);
            list = any;
            best = choose(list, named);
        }
    }
    if (!best) {
        snprintf(why, whylen, "only %s offers FI_EP_RDM with %s here, and it is used only when "
                 "CKPT_FABRIC_PROVIDER names it", list->fabric_attr->prov_name, caps & FI_RMA ? "FI_RMA" : "FI_TAGGED");
        fi_freeinfo(list);
        return -ENODATA;
    }

    struct ckpt_fab *f = calloc(1, sizeof(*f));
    if (!f || !(f->info = fi_dupinfo(best))) {
        free(f);
        fi_freeinfo(list);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    fi_freeinfo(list);
    f->wait_fd = -1;
    f->data = caps & FI_RMA ? CKPT_FAB_DATA_RMA : CKPT_FAB_DATA_TAGGED;
    struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC, .count = 64};
    struct fi_cq_attr cq_attr = {.format = f->data == CKPT_FAB_DATA_TAGGED ? FI_CQ_FORMAT_TAGGED : FI_CQ_FORMAT_CONTEXT,
                                 .size = WINDOW * 4, .wait_obj = FI_WAIT_FD};
    if ((rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL))) {
        fail(f, rc, "fi_fabric");
        goto out;
    }
    if ((rc = fi_domain(f->fabric, f->info, &f->domain, NULL)) ||
        (rc = fi_av_open(f->domain, &av_attr, &f->av, NULL))) {
        fail(f, rc, f->domain ? "fi_av_open" : "fi_domain");
        goto out;
    }
    if (fi_cq_open(f->domain, &cq_attr, &f->cq, NULL)) {
        cq_attr.wait_obj = FI_WAIT_NONE; /* nothing to sleep on: ckpt_fab_wait polls */
        if ((rc = fi_cq_open(f->domain, &cq_attr, &f->cq, NULL))) {
            fail(f, rc, "fi_cq_open");
            goto out;
        }
    }
    if ((rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)) || (rc = fi_ep_bind(f->ep, &f->av->fid, 0)) ||
        (rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(f->ep))) {
        fail(f, rc, "opening the endpoint");
        goto out;
    }
    if (cq_attr.wait_obj == FI_WAIT_FD && fi_control(&f->cq->fid, FI_GETWAIT, &f->wait_fd))
        f->wait_fd = -1;
    f->window = f->info->tx_attr->size && f->info->tx_attr->size < WINDOW ? f->info->tx_attr->size : WINDOW;
    f->piece = f->info->ep_attr->max_msg_size < PIECE_MAX ? f->info->ep_attr->max_msg_size : PIECE_MAX;
    for (unsigned i = 0; i < f->window; i++)
        f->free_ctx[f->nfree++] = i;
    f->rwindow = f->info->rx_attr->size && f->info->rx_attr->size < WINDOW ? f->info->rx_attr->size : WINDOW;
    for (unsigned i = 0; i < f->rwindow; i++)
        f->rfree[f->nrfree++] = i;
    uint32_t r = 0;
    f->round = getrandom(&r, sizeof(r), 0) == (ssize_t)sizeof(r) ? r : (uint32_t)ckpt_now_ms();
    *out = f;
    return 0;
out:
    snprintf(why, whylen, "%s", f->why);
    ckpt_fab_close(f);
    return rc;
}

void ckpt_fab_close(struct ckpt_fab *f)
{
    if (!f)
        return;
    if (f->ep)
        fi_close(&f->ep->fid);
    if (f->av)
        fi_close(&f->av->fid);
    if (f->cq)
        fi_close(&f->cq->fid);
    if (f->domain)
        fi_close(&f->domain->fid);
    if (f->fabric)
        fi_close(&f->fabric->fid);
    fi_freeinfo(f->info);
    free(f);
}

const char *ckpt_fab_provider(const struct ckpt_fab *f)
{
    return f->info->fabric_attr->prov_name;
}

int ckpt_fab_data(const struct ckpt_fab *f)
{
    return f->data;
}

const char *ckpt_fab_error(const struct ckpt_fab *f)
{
    return f->why;
}

int ckpt_fab_name(struct ckpt_fab *f, void *buf, size_t *len)
{
    int rc = fi_getname(&f->ep->fid, buf, len);
    return rc ? fail(f, rc, "fi_getname") : 0;
}

int ckpt_fab_peer(struct ckpt_fab *f, const void *name, size_t len, uint64_t *peer)
{
    char own[CKPT_FAB_NAME_MAX];
    size_t own_len = sizeof(own);
    fi_addr_t addr;

    /* The provider reads as many bytes as its address format has: a
     * shorter blob (another provider's) must not get that far. */
    if (ckpt_fab_name(f, own, &own_len) < 0)
        return -EINVAL;
    if (len != own_len) {
        snprintf(f->why, sizeof(f->why), "a peer address of %zu bytes; %s's are %zu", len, ckpt_fab_provider(f),
                 own_len);
        return -EINVAL;
    }
    int rc = fi_av_insert(f->av, name, 1, &addr, 0, NULL);
    if (rc != 1)
        return fail(f, rc < 0 ? rc : -EINVAL, "fi_av_insert");
    *peer = addr;
    return 0;
}

/* A key of the provider's size from the kernel's random source (a taken
 * one is FI_ENOKEY: the caller draws again). */
static uint64_t random_key(const struct ckpt_fab *f)
{
    uint64_t key = 0;
    size_t size = f->info->domain_attr->mr_key_size;
    if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        key = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) * 0x9e3779b97f4a7c15ull;
    }
    return size && size < sizeof(key) ? key & ((1ull << (8 * size)) - 1) : key;
}

int ckpt_fab_register(struct ckpt_fab *f, void *base, size_t len, int remote, struct ckpt_fab_region **out)
{
    uint64_t mode = f->info->domain_attr->mr_mode;
    struct ckpt_fab_region *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    /* Peers may write into a replica slot, never read it; where this end
     * picks the key, it is random, so that only the peer the key was sent
     * to (over the sealed control connection) can name the region.  With
     * tagged messages no peer names it at all: it is receive buffers. */
    int rma = f->data == CKPT_FAB_DATA_RMA;
    uint64_t access = remote ? (rma ? FI_REMOTE_WRITE : FI_RECV) : (rma ? FI_WRITE : FI_SEND);
    int rc = -FI_ENOKEY;
    for (int tries = 0; rc == -FI_ENOKEY && tries < 8; tries++)
        rc = fi_mr_reg(f->domain, base, len, access, 0, mode & FI_MR_PROV_KEY ? 0 : random_key(f), 0, &r->mr, NULL);
    if (!rc && (mode & FI_MR_ENDPOINT) && ((rc = fi_mr_bind(r->mr, &f->ep->fid, 0)) || (rc = fi_mr_enable(r->mr))))
        fi_close(&r->mr->fid);
    if (rc) {
        free(r);
        return fail(f, rc, "fi_mr_reg");
    }
    r->base = base;
    r->len = len;
    r->raddr = mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)base : 0;
    *out = r;
    return 0;
}

void ckpt_fab_unregister(struct ckpt_fab_region *r)
{
    if (r) {
        fi_close(&r->mr->fid);
        free(r);
    }
}

void ckpt_fab_region_key(const struct ckpt_fab_region *r, uint8_t key[CKPT_FAB_KEY_BYTES])
{
    uint64_t k[3] = {r->raddr, fi_mr_key(r->mr), r->len};
    memcpy(key, k, sizeof(k));
}

/* Sleeps until the CQ (or fd, when >= 0) may have news, at most ms.
 * Returns 1 when fd is readable, 0 otherwise, or -errno. */
static int idle(struct ckpt_fab *f, int fd, int ms)
{
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = f->wait_fd, .events = POLLIN}};
    struct fid *cq = &f->cq->fid;
    int n = 1;

    if (f->wait_fd >= 0 && fi_trywait(f->fabric, &cq, 1) == 0)
        n = 2;
    else
        ms = f->wait_fd >= 0 || ms < 1 ? 0 : 1; /* events pending, or nothing to sleep on */
    if (poll(p, n, ms) < 0 && errno != EINTR)
        return -errno;
    return fd >= 0 && p[0].revents ? 1 : 0;
}

static void release_ctx(struct ckpt_fab *f, unsigned slot)
{
    f->busy[slot] = 0;
    f->free_ctx[f->nfree++] = slot;
}

static const char *transfer_name(const struct ckpt_fab *f)
{
    return f->data == CKPT_FAB_DATA_RMA ? "RMA write" : "tagged send";
}

/* A completion's context: one of a receive (taken as an arrival, its
 * context freed; returns 1) or of a write or send (freed; returns 0). */
static int complete(struct ckpt_fab *f, void *ctx, size_t len, int status)
{
    struct fi_context *c = ctx;
    if (c >= f->rctx && c < f->rctx + WINDOW) {
        unsigned slot = (unsigned)(c - f->rctx);
        f->arrived[f->narrived++] = (struct ckpt_fab_arrival){.tag = f->rtag[slot], .len = len, .status = status};
        f->rfree[f->nrfree++] = slot;
        return 1;
    }
    release_ctx(f, (unsigned)(c - f->ctx));
    f->inflight--;
    return 0;
}

/* A libfabric completion error as -errno (its own codes past the errno
 * range become -EIO; a receive too small for its message, -EMSGSIZE). */
static int cq_errno(int err)
{
    return err == FI_ETRUNC ? -EMSGSIZE : err > 0 && err < FI_ERRNO_OFFSET ? -err : -EIO;
}

/* Reads completions (which also drives the provider's progress); with
 * timeout_ms > 0 waits that long for at least one.  Returns how many, or
 * -errno (the failed write's error, kept in f->error; a failed receive is
 * an arrival with its error instead). */
static int reap(struct ckpt_fab *f, int timeout_ms)
{
    union {
        struct fi_cq_entry c[WINDOW];
        struct fi_cq_tagged_entry t[WINDOW];
    } done;
    long long deadline = ckpt_now_ms() + timeout_ms;
    int tagged = f->data == CKPT_FAB_DATA_TAGGED;

    for (;;) {
        ssize_t n = fi_cq_read(f->cq, &done, WINDOW);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                complete(f, tagged ? done.t[i].op_context : done.c[i].op_context, tagged ? done.t[i].len : 0, 0);
            return (int)n;
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry e = {0};
            char text[160];
            if (fi_cq_readerr(f->cq, &e, 0) > 0 && e.op_context &&
                complete(f, e.op_context, e.len, cq_errno(e.err ? e.err : EIO)))
                return 1;
            f->error = cq_errno(e.err ? e.err : EIO);
            snprintf(f->why, sizeof(f->why), "%s failed (%s): %s", transfer_name(f), ckpt_fab_provider(f),
                     fi_cq_strerror(f->cq, e.prov_errno, e.err_data, text, sizeof(text)));
            return f->error;
        }
        if (n != -FI_EAGAIN)
            return fail(f, (int)n, "fi_cq_read");
        long long left = deadline - ckpt_now_ms();
        if (timeout_ms <= 0)
            return 0;
        if (left <= 0) {
            snprintf(f->why, sizeof(f->why), "no %s completed for %d ms (%s)", transfer_name(f), timeout_ms,
                     ckpt_fab_provider(f));
            return -ETIMEDOUT;
        }
        int rc = idle(f, -1, (int)left);
        if (rc < 0)
            return rc;
    }
}

/* Takes a free context for a write or send, reading completions while the
 * window is full.  Returns its index, or -errno. */
static int take_ctx(struct ckpt_fab *f)
{
    while (!f->nfree) {
        int rc = reap(f, 30000);
        if (rc < 0)
            return rc;
    }
    return (int)f->free_ctx[--f->nfree];
}

/* Issues one write (rma) or send (tm) on context slot, driving progress
 * while the provider says to try again.  Returns 0 or -errno (the slot is
 * given back then). */
static int issue(struct ckpt_fab *f, unsigned slot, const struct fi_msg_rma *rma, const struct fi_msg_tagged *tm)
{
    ssize_t rc;
    long long give_up = ckpt_now_ms() + EAGAIN_MS;
    while ((rc = rma ? fi_writemsg(f->ep, rma, FI_COMPLETION | FI_DELIVERY_COMPLETE)
                     : fi_tsendmsg(f->ep, tm, FI_COMPLETION | FI_DELIVERY_COMPLETE)) == -FI_EAGAIN) {
        int r = reap(f, 0);
        if (r == 0 && ckpt_now_ms() > give_up) {
            snprintf(f->why, sizeof(f->why), "the peer took nothing for %d s (%s): it does not accept connections",
                     EAGAIN_MS / 1000, ckpt_fab_provider(f));
            r = f->error = -EHOSTUNREACH;
        } else if (r == 0) {
            r = idle(f, -1, 1); /* not a busy loop while a connection forms */
        }
        if (r < 0) {
            f->free_ctx[f->nfree++] = slot;
            return r;
        }
    }
    if (rc) {
        f->free_ctx[f->nfree++] = slot;
        return f->error = fail(f, (int)rc, rma ? "fi_writemsg" : "fi_tsendmsg");
    }
    f->busy[slot] = 1;
    f->inflight++;
    return 0;
}

int ckpt_fab_write(struct ckpt_fab *f, uint64_t peer, struct ckpt_fab_region *src, size_t off, size_t len,
                   const uint8_t key[CKPT_FAB_KEY_BYTES], uint64_t roff)
{
    uint64_t k[3]; /* address, key, length of the peer's region */
    memcpy(k, key, sizeof(k));
    if (f->error)
        return f->error;
    if (f->data != CKPT_FAB_DATA_RMA) {
        snprintf(f->why, sizeof(f->why), "an RMA write on an endpoint for tagged messages (%s)", ckpt_fab_provider(f));
        return -EOPNOTSUPP;
    }
    if (off > src->len || len > src->len - off || roff > k[2] || len > k[2] - roff) {
        snprintf(f->why, sizeof(f->why), "a write of %zu bytes does not fit the regions", len);
        return -ERANGE;
    }
    void *desc = fi_mr_desc(src->mr);
    while (len) {
        size_t n = len < f->piece ? len : f->piece;
        int slot = take_ctx(f);
        if (slot < 0)
            return slot;
        f->call_of[slot] = f->calls;
        struct iovec iov = {.iov_base = (char *)src->base + off, .iov_len = n};
        struct fi_rma_iov rma = {.addr = k[0] + roff, .len = n, .key = k[1]};
        struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = peer,
                                 .rma_iov = &rma, .rma_iov_count = 1, .context = &f->ctx[slot]};
        int rc = issue(f, (unsigned)slot, &msg, NULL);
        if (rc < 0)
            return rc;
        off += n;
        roff += n;
        len -= n;
    }
    f->calls++;
    return 0;
}

int ckpt_fab_send(struct ckpt_fab *f, uint64_t peer, struct ckpt_fab_region *src, size_t off, size_t len,
                  uint64_t tag)
{
    if (f->error)
        return f->error;
    if (f->data != CKPT_FAB_DATA_TAGGED) {
        snprintf(f->why, sizeof(f->why), "a tagged send on an endpoint for RMA writes (%s)", ckpt_fab_provider(f));
        return -EOPNOTSUPP;
    }
    if (off > src->len || len > src->len - off) {
        snprintf(f->why, sizeof(f->why), "a send of %zu bytes does not fit the region", len);
        return -ERANGE;
    }
    if (len > f->info->ep_attr->max_msg_size) {
        snprintf(f->why, sizeof(f->why), "a message of %zu bytes is over %s's %zu", len, ckpt_fab_provider(f),
                 f->info->ep_attr->max_msg_size);
        return -EMSGSIZE;
    }
    int slot = take_ctx(f);
    if (slot < 0)
        return slot;
    f->call_of[slot] = f->calls;
    void *desc = fi_mr_desc(src->mr);
    struct iovec iov = {.iov_base = (char *)src->base + off, .iov_len = len};
    struct fi_msg_tagged msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = peer, .tag = tag,
                                .context = &f->ctx[slot]};
    int rc = issue(f, (unsigned)slot, NULL, &msg);
    if (rc < 0)
        return rc;
    f->calls++;
    return 0;
}

uint64_t ckpt_fab_queued(const struct ckpt_fab *f)
{
    return f->calls;
}

uint64_t ckpt_fab_completed(const struct ckpt_fab *f)
{
    uint64_t first = f->calls; /* the oldest call with a piece still in flight */
    for (unsigned i = 0; i < f->window; i++)
        if (f->busy[i] && f->call_of[i] < first)
            first = f->call_of[i];
    return first;
}

int ckpt_fab_reap(struct ckpt_fab *f, int timeout_ms)
{
    if (f->error)
        return f->error;
    return f->inflight ? reap(f, timeout_ms) : 0;
}

int ckpt_fab_drain(struct ckpt_fab *f, int timeout_ms)
{
    while (f->inflight) {
        int rc = reap(f, timeout_ms);
        if (rc < 0)
            return rc;
    }
    return f->error;
}

int ckpt_fab_wait(struct ckpt_fab *f, int fd, int timeout_ms)
{
    long long deadline = ckpt_now_ms() + timeout_ms;
    for (;;) {
        int rc = reap(f, 0);
        if (rc < 0)
            return rc;
        long long left = f->narrived ? 0 : deadline - ckpt_now_ms(); /* arrivals to hand over: only look at fd */
        if ((rc = idle(f, fd, left > 0 ? (int)left : 0)) != 0 || left <= 0)
            return rc;
    }
}

uint64_t ckpt_fab_round_tag(struct ckpt_fab *f)
{
    return (uint64_t)(++f->round & 0xffffu) << 32;
}

size_t ckpt_fab_recv_room(const struct ckpt_fab *f)
{
    return f->nrfree;
}

int ckpt_fab_recv(struct ckpt_fab *f, struct ckpt_fab_region *r, size_t off, size_t len, uint64_t tag)
{
    if (f->data != CKPT_FAB_DATA_TAGGED) {
        snprintf(f->why, sizeof(f->why), "a tagged receive on an endpoint for RMA writes (%s)", ckpt_fab_provider(f));
        return -EOPNOTSUPP;
    }
    if (off > r->len || len > r->len - off) {
        snprintf(f->why, sizeof(f->why), "a receive of %zu bytes does not fit the region", len);
        return -ERANGE;
    }
    if (!f->nrfree)
        return -EBUSY;
    unsigned slot = f->rfree[--f->nrfree];
    void *desc = fi_mr_desc(r->mr);
    struct iovec iov = {.iov_base = (char *)r->base + off, .iov_len = len};
    struct fi_msg_tagged msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = tag,
                                .context = &f->rctx[slot]};
    f->rtag[slot] = tag;
    ssize_t rc;
    while ((rc = fi_trecvmsg(f->ep, &msg, FI_COMPLETION)) == -FI_EAGAIN) {
        int e = reap(f, 0);
        if (e < 0) {
            f->rfree[f->nrfree++] = slot;
            return e;
        }
    }
    if (rc) {
        f->rfree[f->nrfree++] = slot;
        return fail(f, (int)rc, "fi_trecvmsg");
    }
    return 0;
}

size_t ckpt_fab_arrivals(struct ckpt_fab *f, struct ckpt_fab_arrival *out, size_t max)
{
    size_t n = f->narrived < max ? f->narrived : max;
    memcpy(out, f->arrived, n * sizeof(*out));
    memmove(f->arrived, f->arrived + n, (f->narrived - n) * sizeof(*out));
    f->narrived -= n;
    return n;
}

int ckpt_fab_cancel(struct ckpt_fab *f, int timeout_ms)
{
    unsigned char unused[WINDOW] = {0};
    long long deadline = ckpt_now_ms() + timeout_ms;

    for (unsigned i = 0; i < f->nrfree; i++)
        unused[f->rfree[i]] = 1;
    for (unsigned i = 0; i < f->rwindow; i++)
        if (!unused[i])
            fi_cancel(&f->ep->fid, &f->rctx[i]); /* -FI_ENOENT: it completed, and says so */
    while (f->nrfree < f->rwindow) {
        int rc = reap(f, 0);
        if (rc < 0)
            return rc;
        long long left = deadline - ckpt_now_ms();
        if (f->nrfree < f->rwindow && left <= 0) {
            snprintf(f->why, sizeof(f->why), "%u receives still posted %d ms after they were cancelled (%s)",
                     f->rwindow - f->nrfree, timeout_ms, ckpt_fab_provider(f));
            return -ETIMEDOUT;
        }
        if (!rc && (rc = idle(f, -1, (int)left)) < 0)
            return rc;
    }
    f->narrived = 0;
    return 0;
}
