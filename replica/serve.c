/*
 * The receiving end of replica.h.  It keeps the fabric progressing while
 * the sender writes (tcp's progress is manual: bytes land only while the
 * target drives its endpoint), copies the chunks it already held in the
 * meantime, and commits only what verified.  Whatever the sender says or
 * does, a replica is committed only when every chunk matches the sums of
 * the header it offered, and the rank's newest replica is never the slot
 * written to.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replica.h"
#include "wire.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int send_result(int ctl, const struct ckpt_replica_stats *st)
{
    struct ckpt_msg_result r = {.status = st->status, .slot = st->slot, .generation = st->generation};
    return ckpt_wire_send(ctl, CKPT_MSG_RESULT, &r, sizeof(r), st->why, st->status < 0 ? strlen(st->why) : 0);
}

/* Waits for the sender's DONE while driving the fabric.  Returns 0 with
 * *done filled, or -errno (the connection is gone). */
static int wait_done(struct ckpt_fab *f, int ctl, struct ckpt_msg_done *done)
{
    uint16_t type;
    void *msg;
    size_t len;
    int rc;

    while ((rc = ckpt_fab_wait(f, ctl, 1000)) == 0)
        ;
    if (rc < 0 || (rc = ckpt_wire_recv(ctl, 10000, &type, &msg, &len)) < 0)
        return rc;
    if (type != CKPT_MSG_DONE || len != sizeof(*done))
        rc = -EPROTO;
    else
        memcpy(done, msg, sizeof(*done));
    free(msg);
    return rc;
}

/* One OFFER..RESULT round.  Returns 0 when the connection can go on. */
static int receive(struct ckpt_fab *f, int ctl, struct ckpt_store *store, const void *offer, size_t len,
                   struct ckpt_replica_stats *st)
{
    struct ckpt_store_tx tx;
    struct ckpt_msg_done done;
    struct ckpt_header h;

    /* Who it claims to be, for the report, before anything is checked. */
    if (len >= sizeof(h)) {
        memcpy(&h, offer, sizeof(h));
        snprintf(st->job, sizeof(st->job), "%.*s", (int)sizeof(h.job), h.job);
        st->rank = h.rank;
        st->generation = h.generation;
    }
    int rc = ckpt_store_begin(store, offer, len, &tx, st->why, sizeof(st->why));
    if (rc < 0) {
        st->status = rc;
        return send_result(ctl, st);
    }
    st->slot = tx.slot;
    st->iteration = tx.h.iteration;
    st->chunks = tx.h.nchunks;
    st->sent_chunks = tx.nneed;
    st->data_bytes = tx.h.data_bytes;

    struct ckpt_msg_accept acc = {.data_roff = tx.data_roff, .need = tx.nneed};
    memcpy(acc.key, tx.key, sizeof(acc.key));
    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_ACCEPT, &acc, sizeof(acc), tx.need, (tx.h.nchunks + 7) / 8)) < 0)
        goto cut;
    /* The held chunks are copied while the others travel; driving the
     * fabric between copies keeps the sender's writes landing. */
    for (uint64_t c = 0; c < tx.h.nchunks; c++) {
        if (tx.need[c / 8] & (1u << (c % 8)))
            continue;
        if ((rc = ckpt_store_fill(store, &tx, c)) < 0 || (rc = ckpt_fab_wait(f, ctl, 0)) < 0)
            goto cut;
    }
    if ((rc = wait_done(f, ctl, &done)) < 0)
        goto cut;
    st->bytes_sent = done.bytes;
    if (done.status < 0) {
        ckpt_store_abort(&tx);
        st->status = -ECANCELED;
        snprintf(st->why, sizeof(st->why), "the sender stopped: %s", strerror(-done.status));
        return send_result(ctl, st);
    }
    st->status = ckpt_store_commit(store, &tx, st->why, sizeof(st->why));
    return send_result(ctl, st);
cut:
    ckpt_store_abort(&tx);
    st->status = rc;
    snprintf(st->why, sizeof(st->why), "the transfer was cut short: %s", strerror(-rc));
    return rc;
}

int ckpt_replica_serve(struct ckpt_fab *f, int ctl, struct ckpt_store *store,
                       void (*report)(void *arg, const struct ckpt_replica_stats *st), void *arg)
{
    for (;;) {
        struct ckpt_replica_stats st = {0};
        uint16_t type;
        void *offer;
        size_t len;
        int rc = ckpt_wire_recv(ctl, -1, &type, &offer, &len);
        if (rc == -ECONNRESET)
            return 0;
        if (rc < 0)
            return rc;
        if (type != CKPT_MSG_OFFER) {
            free(offer);
            return -EPROTO;
        }
        double t0 = now_s();
        rc = receive(f, ctl, store, offer, len, &st);
        free(offer);
        st.seconds = now_s() - t0;
        if (report)
            report(arg, &st);
        if (rc < 0)
            return rc;
    }
}
