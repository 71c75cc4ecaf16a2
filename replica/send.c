/*
 * The sending end of replica.h, and the HELLO both ends start with.  The
 * sender trusts the receiver for nothing but the bitmap of chunks to send
 * and the region to write them to (or the tag to send them with), which
 * the fabric bounds; it reads the image only, never writes it.  RMA writes
 * and tagged sends go piece for piece the same way: same order, window
 * and completion counting; only PROGRESS is left out with tagged sends.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "image.h"
#include "replica.h"
#include "wire.h"
#include "util.h"

#define REPLY_MS (300 * 1000) /* a slow receiver may still verify a whole image after DONE */
#define DRAIN_MS 30000        /* the most a write in flight may take to complete */

static const char *data_name(uint32_t data)
{
    return data == CKPT_HELLO_RMA ? "RMA writes (rma)" : data == CKPT_HELLO_TAGGED ? "tagged messages (tagged)"
                                                                                   : "an unknown data path";
}

int ckpt_replica_hello(struct ckpt_fab *f, int ctl, uint64_t *peer, char *why, size_t whylen)
{
    struct ckpt_msg_hello me = {0};
    char name[CKPT_FAB_NAME_MAX];
    size_t name_len = sizeof(name), len;
    uint16_t type;
    void *msg;

    snprintf(me.provider, sizeof(me.provider), "%s", ckpt_fab_provider(f));
    me.data = ckpt_fab_data(f) == CKPT_FAB_DATA_TAGGED ? CKPT_HELLO_TAGGED : CKPT_HELLO_RMA;
    int rc = ckpt_fab_name(f, name, &name_len);
    if (rc < 0) {
        snprintf(why, whylen, "%s", ckpt_fab_error(f));
        return rc;
    }
    me.name_len = (uint32_t)name_len;
    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_HELLO, &me, sizeof(me), name, name_len)) < 0 ||
        (rc = ckpt_wire_recv(ctl, 30000, &type, &msg, &len)) < 0) {
        snprintf(why, whylen, "control connection: %s", strerror(-rc));
        return rc;
    }
    struct ckpt_msg_hello *peer_hello = msg;
    if (type != CKPT_MSG_HELLO || len < sizeof(*peer_hello) || peer_hello->name_len != len - sizeof(*peer_hello) ||
        !memchr(peer_hello->provider, 0, sizeof(peer_hello->provider))) {
        snprintf(why, whylen, "the peer's hello is malformed");
        rc = -EPROTO;
    } else if (strcmp(peer_hello->provider, me.provider) != 0) {
        snprintf(why, whylen,
                 "the peer uses libfabric provider %s, this end %s: set CKPT_FABRIC_PROVIDER alike on both",
                 peer_hello->provider, me.provider);
        rc = -EPROTONOSUPPORT;
    } else if (peer_hello->data != me.data) {
        snprintf(why, whylen,
                 "the peer sends replicas as %s, this end as %s: set CKPT_FABRIC_DATA alike on both (rma or tagged)",
                 data_name(peer_hello->data), data_name(me.data));
        rc = -EPROTONOSUPPORT;
    } else if ((rc = ckpt_fab_peer(f, peer_hello + 1, peer_hello->name_len, peer)) < 0) {
        snprintf(why, whylen, "%s", ckpt_fab_error(f));
    }
    free(msg);
    return rc;
}

/* Reads the RESULT that ends a round into st.  Returns its status. */
static int result(const void *msg, size_t len, uint16_t type, struct ckpt_replica_stats *st)
{
    const struct ckpt_msg_result *r = msg;
    if (type != CKPT_MSG_RESULT || len < sizeof(*r)) {
        snprintf(st->why, sizeof(st->why), "the receiver answered with message %u", type);
        return -EPROTO;
    }
    st->slot = r->slot;
    if (r->status < 0)
        snprintf(st->why, sizeof(st->why), "refused by the receiver: %.*s", (int)(len - sizeof(*r)),
                 (const char *)(r + 1));
    return r->status;
}

/* One round's sending state: the pieces written, and how far the
 * receiver was told they are delivered. */
struct round {
    struct ckpt_fab *f;
    int ctl;
    const struct ckpt_header *h;
    const uint8_t *need;
    uint64_t tag;                         /* tagged sends: the round's (ACCEPT); else RMA writes */
    int tagged;
    struct piece {
        uint64_t end;                     /* where it ends in the data area */
        uint64_t ticket;                  /* ckpt_fab_queued() after its write: it is
                                             delivered once ckpt_fab_completed() gets there */
    } *pieces;
    size_t written, reported;             /* pieces written; pieces reported delivered */
    uint64_t upto;                        /* the last PROGRESS's */
};

static int needed(const uint8_t *need, uint64_t c)
{
    return need[c / 8] & (1u << (c % 8));
}

/* Tells the receiver how far its bytes are delivered, when that moved, so
 * that it verifies them while the rest travel (and while they are still
 * in its caches).  Returns 0 or -errno. */
static int report(struct round *r)
{
    if (r->tagged) /* the receiver sees its receives complete */
        return 0;
    uint64_t done = ckpt_fab_completed(r->f);
    while (r->reported < r->written && r->pieces[r->reported].ticket <= done)
        r->reported++;
    if (!r->reported || r->pieces[r->reported - 1].end == r->upto)
        return 0;
    struct ckpt_msg_progress p = {.upto = r->upto = r->pieces[r->reported - 1].end};
    return ckpt_wire_send(r->ctl, CKPT_MSG_PROGRESS, &p, sizeof(p), NULL, 0);
}

/* Before DONE, the receiver speaks only to refuse.  Returns 0 when it has
 * not, else the (negative) status it refused with (*answered set), or the
 * control connection's error; st->why says which. */
static int refused(int ctl, struct ckpt_replica_stats *st, int *answered)
{
    struct pollfd p = {.fd = ctl, .events = POLLIN};
    uint16_t type;
    void *msg;
    size_t len;

    if (poll(&p, 1, 0) <= 0)
        return 0;
    int rc = ckpt_wire_recv(ctl, REPLY_MS, &type, &msg, &len);
    if (rc < 0) {
        snprintf(st->why, sizeof(st->why), "control connection: %s", strerror(-rc));
        return rc;
    }
    rc = result(msg, len, type, st);
    free(msg);
    *answered = 1;
    if (rc >= 0) {
        snprintf(st->why, sizeof(st->why), "the receiver answered before the transfer was done");
        rc = -EPROTO;
    }
    return rc;
}

/* Writes the chunks asked for straight from the image and reports them as
 * they are delivered, until all are, or this end stops (an error, pace),
 * or the receiver refuses (*answered set).  Every write is complete, or
 * the endpoint failed, when it returns.  Returns 0 or -errno with st->why. */
static int transfer(struct round *r, uint64_t peer, struct ckpt_fab_region *src, const struct ckpt_msg_accept *acc,
                    ckpt_replica_pace_fn pace, void *arg, struct ckpt_replica_stats *st, int *answered)
{
    const struct ckpt_header *h = r->h;
    int status = 0, rc;

    for (uint64_t c = 0; c < h->nchunks && !status; c++) {
        if (!needed(r->need, c))
            continue;
        uint64_t off = c * h->chunk_bytes;
        uint64_t end = h->data_bytes - off < h->chunk_bytes ? h->data_bytes : off + h->chunk_bytes;
        if ((status = refused(r->ctl, st, answered)) < 0)
            break;
        if (pace && (status = pace(arg, c, st->bytes_sent)) < 0) {
            snprintf(st->why, sizeof(st->why), "stopped before chunk %llu: %s", (unsigned long long)c,
                     strerror(-status));
            break;
        }
        for (uint64_t n; off < end && !status; off += n) {
            n = end - off < CKPT_REPLICA_PIECE ? end - off : CKPT_REPLICA_PIECE;
            uint64_t from = h->data_offset + off;
            status = r->tagged ? ckpt_fab_send(r->f, peer, src, from, n, r->tag | r->written)
                               : ckpt_fab_write(r->f, peer, src, from, n, acc->key, acc->data_roff + off);
            if (status < 0) {
                st->fabric_failed = 1;
                snprintf(st->why, sizeof(st->why), "%s", ckpt_fab_error(r->f));
                break;
            }
            r->pieces[r->written++] = (struct piece){off + n, ckpt_fab_queued(r->f)};
            st->bytes_sent += n;
            if ((status = report(r)) < 0)
                snprintf(st->why, sizeof(st->why), "control connection: %s", strerror(-status));
        }
        st->sent_chunks += !status;
    }
    /* What is in flight completes whatever happened: the image must stay
     * untouched until then, and DONE promises that no write follows. */
    while (ckpt_fab_completed(r->f) < ckpt_fab_queued(r->f)) {
        if ((rc = ckpt_fab_reap(r->f, DRAIN_MS)) < 0) {
            st->fabric_failed = 1;
            if (!status) {
                snprintf(st->why, sizeof(st->why), "%s", ckpt_fab_error(r->f));
                status = rc;
            }
            break;
        }
        if (!status && (status = report(r)) < 0)
            snprintf(st->why, sizeof(st->why), "control connection: %s", strerror(-status));
        if (!status)
            status = refused(r->ctl, st, answered);
    }
    return status;
}

int ckpt_replica_send(struct ckpt_fab *f, int ctl, uint64_t peer, uint64_t epoch, const void *image, size_t len,
                      struct ckpt_fab_region *src, ckpt_replica_pace_fn pace, void *arg, struct ckpt_replica_stats *st)
{
    struct ckpt_header h;
    struct ckpt_msg_accept acc;
    uint16_t type;
    void *msg = NULL;
    size_t mlen;
    int answered = 0;
    double t0 = ckpt_now_s();

    memset(st, 0, sizeof(*st));
    int rc = ckpt_image_verify_header(image, len, &h, st->why, sizeof(st->why));
    if (rc < 0)
        return st->status = rc;
    snprintf(st->job, sizeof(st->job), "%s", h.job);
    st->rank = h.rank;
    st->generation = h.generation;
    st->iteration = h.iteration;
    st->chunks = h.nchunks;
    st->data_bytes = h.data_bytes;

    struct ckpt_msg_offer offer = {.epoch = epoch};
    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_OFFER, &offer, sizeof(offer), image, h.header_bytes)) < 0 ||
        (rc = ckpt_wire_recv(ctl, REPLY_MS, &type, &msg, &mlen)) < 0)
        goto lost;
    if (type != CKPT_MSG_ACCEPT) {
        rc = result(msg, mlen, type, st);
        goto out;
    }
    if (mlen != sizeof(acc) + (h.nchunks + 7) / 8) {
        snprintf(st->why, sizeof(st->why), "the receiver's accept is malformed");
        rc = -EPROTO;
        goto out;
    }
    memcpy(&acc, msg, sizeof(acc));
    uint64_t per_chunk = (h.chunk_bytes + CKPT_REPLICA_PIECE - 1) / CKPT_REPLICA_PIECE;
    struct round r = {.f = f, .ctl = ctl, .h = &h, .need = (const uint8_t *)msg + sizeof(acc),
                      .tagged = ckpt_fab_data(f) == CKPT_FAB_DATA_TAGGED,
                      .pieces = calloc(h.nchunks * per_chunk + 1, sizeof(struct piece))};
    memcpy(&r.tag, acc.key, sizeof(r.tag));
    if (r.tagged && (r.tag & 0xffffffffu || h.nchunks * per_chunk >= 1ull << 32)) {
        free(r.pieces);
        snprintf(st->why, sizeof(st->why), "the receiver's accept is malformed (its tag)");
        rc = -EPROTO;
        goto out;
    }
    if (!r.pieces) {
        rc = -ENOMEM;
        goto out;
    }
    int status = transfer(&r, peer, src, &acc, pace, arg, st, &answered);
    free(r.pieces);
    if (!status && memcmp(image, &h, sizeof(h)) != 0) {
        snprintf(st->why, sizeof(st->why), "the image changed while it was being sent (its slot was reused)");
        status = -ESTALE;
    }
    double t_last = ckpt_now_s();
    struct ckpt_msg_done done = {.status = status, .bytes = st->bytes_sent};
    free(msg);
    msg = NULL;
    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_DONE, &done, sizeof(done), NULL, 0)) < 0)
        goto lost;
    /* A receiver that refused already said so; otherwise its verdict. */
    if (!answered && (rc = ckpt_wire_recv(ctl, REPLY_MS, &type, &msg, &mlen)) < 0)
        goto lost;
    st->tail_seconds = ckpt_now_s() - t_last;
    /* When this end stopped, its reason, not the receiver's echo of it;
     * but a receiver that refused on its own (a chunk that did not verify)
     * cut the transfer, and the writes failing after that say less. */
    if (!status || (msg && type == CKPT_MSG_RESULT && mlen >= sizeof(struct ckpt_msg_result) &&
                    ((const struct ckpt_msg_result *)msg)->status < 0 &&
                    ((const struct ckpt_msg_result *)msg)->status != status))
        rc = result(msg, mlen, type, st);
    else
        rc = status;
    goto out;
lost:
    snprintf(st->why, sizeof(st->why), "control connection: %s", strerror(-rc));
out:
    free(msg);
    st->seconds = ckpt_now_s() - t0;
    return st->status = rc;
}
