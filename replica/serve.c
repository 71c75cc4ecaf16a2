/*
 * The receiving end of replica.h.  It keeps the fabric progressing while
 * the sender writes (tcp's progress is manual: bytes land only while the
 * target drives its endpoint), copies the chunks it already held in the
 * meantime, and has a verifier thread check each chunk as soon as it is in
 * place (the sender's PROGRESS with RMA writes, its own receives'
 * completions with tagged messages: inbound.c), so that little is left to
 * check after DONE; the first bad chunk refuses the replica at once.
 * Whatever the sender says or does, a replica is committed only when every
 * chunk matches the sums of the header it offered, the rank's newest
 * replica is never the slot written to, and no receive stays posted into a
 * slot after its round.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inbound.h"
#include "replica.h"
#include "verifier.h"
#include "wire.h"
#include "util.h"

#define SETTLE_S 10      /* after DONE, the most the last receives' completions may take to be read */
#define CANCEL_MS 10000  /* the most the provider may take to give back cancelled receives */

static int send_result(int ctl, const struct ckpt_replica_stats *st)
{
    struct ckpt_msg_result r = {.status = st->status, .slot = st->slot, .generation = st->generation};
    return ckpt_wire_send(ctl, CKPT_MSG_RESULT, &r, sizeof(r), st->why, st->status < 0 ? strlen(st->why) : 0);
}

/* One round's receiving state. */
struct round {
    struct ckpt_fab *f;
    int ctl;
    struct ckpt_store_tx *tx;
    struct ckpt_verifier *v;              /* NULL: commit verifies every chunk */
    struct ckpt_inbound *in;              /* tagged messages: the receives; NULL: RMA writes */
    struct ckpt_replica_stats *st;
    uint64_t upto;                        /* the sender's last PROGRESS (data bytes) */
    int done;                             /* DONE came, into msg */
    int refused;                          /* RESULT went before DONE */
    int lost;                             /* tagged: -errno when pieces are missing after DONE */
    struct ckpt_msg_done msg;
};

static int needed(const struct ckpt_store_tx *tx, uint64_t c)
{
    return tx->need[c / 8] & (1u << (c % 8));
}

/* Refuses the replica before DONE: the sender stops writing, and the
 * round goes on until its DONE.  Returns 0 or -errno. */
static int refuse(struct round *r, int status)
{
    r->refused = 1;
    r->st->status = status;
    return send_result(r->ctl, r->st);
}

/* PROGRESS {upto}: the bytes asked for below upto are in place. */
static int progress(struct round *r, uint64_t upto)
{
    if (r->refused)
        return 0;
    if (r->in) {
        snprintf(r->st->why, sizeof(r->st->why),
                 "the sender reported progress, which the tagged-message data path does not use");
        return refuse(r, -EPROTO);
    }
    if (upto < r->upto || upto > r->tx->h.data_bytes) {
        snprintf(r->st->why, sizeof(r->st->why),
                 "the sender's progress is inconsistent: byte %llu after %llu, of %llu bytes",
                 (unsigned long long)upto, (unsigned long long)r->upto, (unsigned long long)r->tx->h.data_bytes);
        return refuse(r, -EPROTO);
    }
    if (r->v)
        ckpt_verifier_landed(r->v, upto);
    r->upto = upto;
    return 0;
}

/* Tagged messages: takes the receives that completed, tells the verifier
 * how far the bytes are in place, and refuses at the first bad piece.
 * Returns 0 or -errno (the connection is lost). */
static int arrived(struct round *r)
{
    uint64_t upto;
    char why[sizeof(r->st->why)];
    int rc = ckpt_inbound_poll(r->in, &upto, why, sizeof(why));

    if (r->refused || r->lost)
        return 0;
    if (rc < 0 && r->done) { /* answered by finish */
        snprintf(r->st->why, sizeof(r->st->why), "%s", why);
        r->lost = rc;
        return 0;
    }
    if (rc < 0) {
        snprintf(r->st->why, sizeof(r->st->why), "%s", why);
        return refuse(r, rc);
    }
    if (r->v)
        ckpt_verifier_landed(r->v, upto);
    return 0;
}

/* Drives the fabric for up to ms or until the sender says something, and
 * takes that; refuses as soon as a chunk failed.  Returns 0, or -errno
 * when the connection is lost or the sender broke the protocol. */
static int step(struct round *r, int ms)
{
    uint16_t type;
    void *msg;
    size_t len;
    int rc = ckpt_fab_wait(r->f, r->ctl, ms);

    if (rc > 0 && (rc = ckpt_wire_recv(r->ctl, 10000, &type, &msg, &len)) == 0) {
        if (type == CKPT_MSG_PROGRESS && len == sizeof(struct ckpt_msg_progress))
            rc = progress(r, ((const struct ckpt_msg_progress *)msg)->upto);
        else if (type == CKPT_MSG_DONE && len == sizeof(r->msg)) {
            memcpy(&r->msg, msg, sizeof(r->msg));
            r->done = 1;
        } else
            rc = -EPROTO;
        free(msg);
    }
    if (rc == 0 && r->in)
        rc = arrived(r);
    if (rc == 0 && !r->refused && r->v && ckpt_verifier_failed(r->v, r->st->why, sizeof(r->st->why)) < 0)
        rc = refuse(r, -EBADMSG);
    return rc;
}

/* Tagged messages, after DONE: the sender's sends all completed, so every
 * piece's receive completed too; those not read yet are read now.  A
 * missing piece fails the round (r->lost).  Returns 0 or -errno. */
static int settle(struct round *r)
{
    double until = ckpt_now_s() + SETTLE_S;
    int rc = 0;
    if (!r->in || r->refused || r->msg.status < 0)
        return 0;
    while (!rc && !r->lost && !ckpt_inbound_complete(r->in, r->st->why, sizeof(r->st->why))) {
        if (ckpt_now_s() > until) {
            r->lost = -EPROTO;
            return 0;
        }
        if ((rc = ckpt_fab_wait(r->f, -1, 100)) == 0)
            rc = arrived(r);
    }
    return rc;
}

/* After DONE: every chunk is in place.  Verifies what is left and commits,
 * or says why not.  Returns 0 or -errno (the connection is lost). */
static int finish(struct ckpt_store *store, struct round *r)
{
    struct ckpt_replica_stats *st = r->st;
    char why[sizeof(st->why)];
    int rc = 0;

    st->bytes_sent = r->msg.bytes;
    if (r->v) {
        if (!r->lost)
            ckpt_verifier_landed(r->v, r->tx->h.data_bytes);
        rc = ckpt_verifier_end(r->v, !r->refused && !r->lost && r->msg.status == 0, &st->verify_seconds, why,
                               sizeof(why));
    }
    if (r->refused) { /* answered already */
        ckpt_store_abort(store, r->tx);
        return 0;
    }
    if (r->lost && r->msg.status == 0) { /* st->why says which piece */
        ckpt_store_abort(store, r->tx);
        st->status = r->lost;
    } else if (r->msg.status < 0) {
        ckpt_store_abort(store, r->tx);
        st->status = -ECANCELED;
        snprintf(st->why, sizeof(st->why), "the sender stopped: %s", strerror(-r->msg.status));
    } else if (rc < 0) {
        ckpt_store_abort(store, r->tx);
        st->status = rc;
        snprintf(st->why, sizeof(st->why), "%s", why);
    } else {
        double t0 = ckpt_now_s();
        st->status = ckpt_store_commit(store, r->tx, st->why, sizeof(st->why));
        st->verify_seconds += ckpt_now_s() - t0;
    }
    return send_result(r->ctl, st);
}

/* Who an offer claims to be, for the report, before anything is checked. */
static void claimed(const void *offer, size_t len, struct ckpt_replica_stats *st)
{
    struct ckpt_header h;
    if (len >= sizeof(h)) {
        memcpy(&h, offer, sizeof(h));
        snprintf(st->job, sizeof(st->job), "%.*s", (int)sizeof(h.job), h.job);
        st->rank = h.rank;
        st->generation = h.generation;
    }
}

/* One OFFER..RESULT round.  Returns 0 when the connection can go on. */
static int receive(struct ckpt_fab *f, int ctl, struct ckpt_store *store, const void *offer, size_t len,
                   struct ckpt_replica_stats *st)
{
    struct ckpt_store_tx tx;

    claimed(offer, len, st);
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

    struct round r = {.f = f, .ctl = ctl, .tx = &tx, .st = st};
    struct ckpt_msg_accept acc = {.data_roff = tx.data_roff, .need = tx.nneed};
    memcpy(acc.key, tx.key, sizeof(acc.key));
    if (ckpt_fab_data(f) == CKPT_FAB_DATA_TAGGED) {
        /* The receives are posted before the sender hears it may send. */
        uint64_t tag = ckpt_fab_round_tag(f);
        if ((rc = ckpt_inbound_start(&r.in, f, &tx, CKPT_REPLICA_PIECE, tag, st->why, sizeof(st->why))) < 0) {
            ckpt_store_abort(store, &tx);
            st->status = rc;
            return send_result(ctl, st);
        }
        memset(acc.key, 0, sizeof(acc.key));
        memcpy(acc.key, &tag, sizeof(tag));
    }
    if (ckpt_verifier_start(&r.v, store, &tx) < 0)
        r.v = NULL;
    if ((rc = ckpt_wire_send(ctl, CKPT_MSG_ACCEPT, &acc, sizeof(acc), tx.need, (tx.h.nchunks + 7) / 8)) < 0)
        goto cut;
    /* The held chunks are copied (and verified) while the others travel;
     * driving the fabric between copies keeps the sender's writes landing. */
    for (uint64_t c = 0; c < tx.h.nchunks; c++) {
        if (needed(&tx, c))
            continue;
        if ((rc = ckpt_store_fill(store, &tx, c)) < 0)
            goto cut;
        if (r.v)
            ckpt_verifier_add(r.v, c);
        if (!r.done && (rc = step(&r, 0)) < 0)
            goto cut;
    }
    while (!r.done)
        if ((rc = step(&r, 100)) < 0)
            goto cut;
    double t0 = ckpt_now_s();
    if ((rc = settle(&r)) < 0)
        goto cut;
    /* No receive may stay posted into the slot: commit or not, it is
     * trusted only as it is now, and it may be remapped. */
    if (r.in && (rc = ckpt_inbound_end(r.in, CANCEL_MS)) < 0) {
        r.in = NULL;
        goto cut;
    }
    r.in = NULL;
    rc = finish(store, &r);
    st->tail_seconds = ckpt_now_s() - t0;
    return rc;
cut:
    if (r.v)
        ckpt_verifier_end(r.v, 0, NULL, st->why, sizeof(st->why));
    if (r.in && ckpt_inbound_end(r.in, CANCEL_MS) < 0)
        rc = -ETIMEDOUT; /* the connection ends; the slot stays mapped */
    ckpt_store_abort(store, &tx);
    st->status = rc;
    snprintf(st->why, sizeof(st->why), "the transfer was cut short: %s", strerror(-rc));
    return rc;
}

/* An offer from a sender left behind by a newer plan: refused, unread. */
static int stale(int ctl, const void *offer, size_t len, uint64_t epoch, uint64_t now, struct ckpt_replica_stats *st)
{
    claimed(offer, len, st);
    st->status = -ESTALE;
    snprintf(st->why, sizeof(st->why), "a stale epoch: the offer is of epoch %llu, this node acts under epoch %llu "
             "(the sender was left behind by a newer plan and is fenced)", (unsigned long long)epoch,
             (unsigned long long)now);
    return send_result(ctl, st);
}

int ckpt_replica_serve(struct ckpt_fab *f, int ctl, struct ckpt_store *store, const uint64_t *epoch,
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
        double t0 = ckpt_now_s();
        struct ckpt_msg_offer o;
        if (len < sizeof(o)) {
            free(offer);
            return -EPROTO;
        }
        memcpy(&o, offer, sizeof(o));
        uint64_t now = epoch ? __atomic_load_n(epoch, __ATOMIC_ACQUIRE) : 0;
        if (o.epoch < now)
            rc = stale(ctl, (const char *)offer + sizeof(o), len - sizeof(o), o.epoch, now, &st);
        else
            rc = receive(f, ctl, store, (const char *)offer + sizeof(o), len - sizeof(o), &st);
        free(offer);
        st.epoch = o.epoch;
        st.seconds = ckpt_now_s() - t0;
        if (report)
            report(arg, &st);
        if (rc < 0)
            return rc;
    }
}
