/*
 * The sending end of replica.h, and the HELLO both ends start with.  The
 * sender trusts the receiver for nothing but the bitmap of chunks to send
 * and the region to write them to, which the fabric bounds; it reads the
 * image only, never writes it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "image.h"
#include "replica.h"
#include "wire.h"

#define REPLY_MS (300 * 1000) /* the receiver verifies a whole image before it answers */

int ckpt_replica_hello(struct ckpt_fab *f, int ctl, uint64_t *peer, char *why, size_t whylen)
{
    struct ckpt_msg_hello me = {0};
    char name[CKPT_FAB_NAME_MAX];
    size_t name_len = sizeof(name), len;
    uint16_t type;
    void *msg;

    snprintf(me.provider, sizeof(me.provider), "%s", ckpt_fab_provider(f));
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
    } else if ((rc = ckpt_fab_peer(f, peer_hello + 1, peer_hello->name_len, peer)) < 0) {
        snprintf(why, whylen, "%s", ckpt_fab_error(f));
    }
    free(msg);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
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

int ckpt_replica_send(struct ckpt_fab *f, int ctl, uint64_t peer, const void *image, size_t len,
                      struct ckpt_fab_region *src, ckpt_replica_pace_fn pace, void *arg, struct ckpt_replica_stats *st)
{
    struct ckpt_header h;
    uint16_t type;
    void *msg = NULL;
    size_t mlen;
    double t0 = now_s();

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

    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_OFFER, image, h.header_bytes, NULL, 0)) < 0 ||
        (rc = ckpt_wire_recv(ctl, REPLY_MS, &type, &msg, &mlen)) < 0)
        goto lost;
    if (type != CKPT_MSG_ACCEPT) {
        rc = result(msg, mlen, type, st);
        goto out;
    }
    struct ckpt_msg_accept acc;
    if (mlen != sizeof(acc) + (h.nchunks + 7) / 8) {
        snprintf(st->why, sizeof(st->why), "the receiver's accept is malformed");
        rc = -EPROTO;
        goto out;
    }
    memcpy(&acc, msg, sizeof(acc));
    const uint8_t *need = (const uint8_t *)msg + sizeof(acc);

    /* The chunks the receiver does not hold, straight from the image. */
    int status = 0;
    for (uint64_t c = 0; c < h.nchunks && !status; c++) {
        if (!(need[c / 8] & (1u << (c % 8))))
            continue;
        uint64_t off = c * h.chunk_bytes, n = h.data_bytes - off < h.chunk_bytes ? h.data_bytes - off : h.chunk_bytes;
        if (pace && (status = pace(arg, c, st->bytes_sent)) < 0)
            snprintf(st->why, sizeof(st->why), "stopped before chunk %llu: %s", (unsigned long long)c,
                     strerror(-status));
        else if ((status = ckpt_fab_write(f, peer, src, h.data_offset + off, n, acc.key, acc.data_roff + off)) < 0)
            snprintf(st->why, sizeof(st->why), "%s", ckpt_fab_error(f));
        else {
            st->sent_chunks++;
            st->bytes_sent += n;
        }
    }
    if (!status && (status = ckpt_fab_drain(f, 30000)) < 0)
        snprintf(st->why, sizeof(st->why), "%s", ckpt_fab_error(f));
    if (!status && memcmp(image, &h, sizeof(h)) != 0) {
        snprintf(st->why, sizeof(st->why), "the image changed while it was being sent (its slot was reused)");
        status = -ESTALE;
    }
    struct ckpt_msg_done done = {.status = status, .bytes = st->bytes_sent};
    free(msg);
    msg = NULL;
    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_DONE, &done, sizeof(done), NULL, 0)) < 0 ||
        (rc = ckpt_wire_recv(ctl, REPLY_MS, &type, &msg, &mlen)) < 0)
        goto lost;
    /* When this end stopped, its reason, not the receiver's echo of it. */
    rc = status ? status : result(msg, mlen, type, st);
    goto out;
lost:
    snprintf(st->why, sizeof(st->why), "control connection: %s", strerror(-rc));
out:
    free(msg);
    st->seconds = now_s() - t0;
    return st->status = rc;
}
