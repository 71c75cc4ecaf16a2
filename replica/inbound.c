/*
 * The receives of inbound.h.  The piece list is computed here from the
 * ACCEPT's bitmap exactly as the sender walks it (send.c); a piece is
 * posted once, in order, and counted as in place only by its own receive's
 * completion with its full length.  Nothing here touches the slot's bytes:
 * the provider writes them, the verifier reads them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inbound.h"

enum { WAITING, POSTED, ARRIVED, FAILED };

struct ckpt_inbound {
    struct ckpt_fab *f;
    struct ckpt_fab_region *reg;
    uint64_t tag, roff;                   /* the round's tag; the data area's place in reg */
    struct span {
        uint64_t off, end;                /* in the data area */
    } *pieces;
    uint8_t *state;
    uint64_t npieces, posted, prefix;     /* pieces posted (in order); arrived from the first */
    int error;
    char why[256];
};

static int post_more(struct ckpt_inbound *in)
{
    while (in->posted < in->npieces && ckpt_fab_recv_room(in->f)) {
        const struct span *p = &in->pieces[in->posted];
        int rc = ckpt_fab_recv(in->f, in->reg, in->roff + p->off, p->end - p->off, in->tag | in->posted);
        if (rc < 0) {
            snprintf(in->why, sizeof(in->why), "%s", ckpt_fab_error(in->f));
            return rc;
        }
        in->state[in->posted++] = POSTED;
    }
    return 0;
}

int ckpt_inbound_start(struct ckpt_inbound **out, struct ckpt_fab *f, const struct ckpt_store_tx *tx, uint64_t piece,
                       uint64_t tag, char *why, size_t whylen)
{
    const struct ckpt_header *h = &tx->h;
    uint64_t per_chunk = (h->chunk_bytes + piece - 1) / piece;
    struct ckpt_inbound *in = calloc(1, sizeof(*in));

    if (!tx->reg || !piece || per_chunk > (1ull << 32) / (tx->nneed + 1)) {
        free(in);
        snprintf(why, whylen, "%s", !tx->reg ? "the slot is not registered" : "too many pieces for a round's tags");
        return !tx->reg ? -EINVAL : -E2BIG;
    }
    if (!in || !(in->pieces = calloc(tx->nneed * per_chunk + 1, sizeof(*in->pieces))) ||
        !(in->state = calloc(tx->nneed * per_chunk + 1, 1))) {
        if (in)
            free(in->pieces);
        free(in);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    in->f = f;
    in->reg = tx->reg;
    in->tag = tag;
    in->roff = tx->data_roff;
    for (uint64_t c = 0; c < h->nchunks; c++) {
        if (!(tx->need[c / 8] & (1u << (c % 8))))
            continue;
        uint64_t off = c * h->chunk_bytes;
        uint64_t end = h->data_bytes - off < h->chunk_bytes ? h->data_bytes : off + h->chunk_bytes;
        for (; off < end; off += piece)
            in->pieces[in->npieces++] = (struct span){off, end - off < piece ? end : off + piece};
    }
    *out = in;
    int rc = post_more(in);
    if (rc < 0) {
        snprintf(why, whylen, "%s", in->why);
        ckpt_inbound_end(in, 1000);
        *out = NULL;
    }
    return rc;
}

/* Records the first failure; the round goes on. */
static void failed(struct ckpt_inbound *in, int rc, uint64_t i, const char *what)
{
    if (!in->error) {
        in->error = rc;
        snprintf(in->why, sizeof(in->why), "the piece at data bytes %llu..%llu %s",
                 (unsigned long long)in->pieces[i].off, (unsigned long long)in->pieces[i].end, what);
    }
}

int ckpt_inbound_poll(struct ckpt_inbound *in, uint64_t *upto, char *why, size_t whylen)
{
    struct ckpt_fab_arrival a[32];
    size_t n;

    while ((n = ckpt_fab_arrivals(in->f, a, sizeof(a) / sizeof(a[0]))) > 0) {
        for (size_t k = 0; k < n; k++) {
            uint64_t i = a[k].tag - in->tag;
            if (a[k].tag < in->tag || i >= in->posted || in->state[i] != POSTED)
                continue; /* not this round's (a receive is posted once: cannot happen) */
            const struct span *p = &in->pieces[i];
            in->state[i] = FAILED;
            if (a[k].status == -EMSGSIZE)
                failed(in, -EPROTO, i, "came as a longer message");
            else if (a[k].status < 0)
                failed(in, a[k].status, i, strerror(-a[k].status));
            else if (a[k].len != p->end - p->off)
                failed(in, -EPROTO, i, "came as a shorter message");
            else
                in->state[i] = ARRIVED;
        }
    }
    while (in->prefix < in->npieces && in->state[in->prefix] == ARRIVED)
        in->prefix++;
    *upto = in->prefix ? in->pieces[in->prefix - 1].end : 0;
    int rc = post_more(in);
    if (rc < 0 && !in->error)
        in->error = rc;
    if (in->error)
        snprintf(why, whylen, "%s", in->why);
    return in->error;
}

int ckpt_inbound_complete(const struct ckpt_inbound *in, char *why, size_t whylen)
{
    if (in->prefix == in->npieces)
        return 1;
    snprintf(why, whylen, "the sender said it was done, but the piece at data bytes %llu..%llu never arrived",
             (unsigned long long)in->pieces[in->prefix].off, (unsigned long long)in->pieces[in->prefix].end);
    return 0;
}

int ckpt_inbound_end(struct ckpt_inbound *in, int timeout_ms)
{
    if (!in)
        return 0;
    int rc = ckpt_fab_cancel(in->f, timeout_ms);
    free(in->pieces);
    free(in->state);
    free(in);
    return rc;
}
