/*
 * The spares' side of the bridge (bridge.c): the keys a spare (--spare)
 * is known by and reads, and its wait beside the job.
 *
 *   <job>/spare/<lease>   a spare waiting: its address and, with
 *                         standbys, where it takes copies ("IP HOSTPORT");
 *                         node I sends its ranks' copies and logs to the
 *                         spare I mod S too (replicate.c, spare.c);
 *   <job>/plan            the newest plan, put by the leader: where the
 *                         job's rank 0 meets its peers (a spare's standbys
 *                         are its ranks' standbys alone) and the decisions
 *                         (recovery.h) that say which of its copies still
 *                         count: "ADDR PORT EPOCH:RESTORE ..." (the plan's
 *                         first, then those before it).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bridge_int.h"
#include "config.h"
#include "etcd.h"
#include "lease.h"
#include "log.h"
#include "placement.h"
#include "recovery.h"
#include "util.h"

/* The plan key, for the spares (a PLAN as the coordinator sends it, coord.h). */
void bridge_put_plan(const void *msg, size_t len)
{
    const struct coord_plan *p = msg;
    if (len < sizeof(*p) || p->ndecided > COORD_DECIDED_MAX)
        return;
    size_t at = sizeof(*p) + p->nnodes * sizeof(struct coord_addr) + p->nsend * sizeof(struct coord_send);
    if (len != at + p->ndecided * sizeof(struct ckpt_decision) || !p->master_addr[0] || !p->master_port[0])
        return;
    char key[300], value[128 + 44 * (COORD_DECIDED_MAX + 1)], why[256];
    int k = snprintf(value, sizeof(value), "%.*s %.*s %" PRIu64 ":%" PRIu64,
                     (int)strnlen(p->master_addr, sizeof(p->master_addr)), p->master_addr,
                     (int)strnlen(p->master_port, sizeof(p->master_port)), p->master_port, p->epoch, p->restore);
    for (uint32_t i = 0; i < p->ndecided; i++) {
        struct ckpt_decision d;
        memcpy(&d, (const char *)msg + at + i * sizeof(d), sizeof(d));
        k += snprintf(value + k, sizeof(value) - k, " %" PRIu64 ":%" PRIu64, d.epoch, d.restore);
    }
    snprintf(key, sizeof(key), "%splan", B.prefix);
    if (etcd_put(B.e, key, value, strlen(value), B.lease, why, sizeof(why)) < 0)
        ckpt_log(CKPT_DEBUG, "the plan is not in etcd (%s): the spares' standbys wait for it", why);
}

/*
 * The leader says when the spares with standbys change, with what they
 * do to the recovery-probability report (placement.h): every node's
 * copies reach one spare, so k nodes lost at once all come back from
 * memory while the spares stand, whatever placement makes of it alone.
 */
static void spares_said(unsigned n)
{
    if (!B.leading || n == B.spares_said)
        return;
    B.spares_said = n;
    if (!n) {
        ckpt_log(CKPT_INFO, "no spare with standbys beside the job now");
        return;
    }
    unsigned m = (unsigned)ckpt_cfg_int(CFG_REPLICAS);
    enum ckpt_placement p = ckpt_placement_choose((enum ckpt_placement)ckpt_cfg_int(CFG_PLACEMENT), B.n, m);
    char report[256];
    int k = 0;
    for (unsigned lost = 1; lost <= m + 1 && lost <= B.n && k < (int)sizeof(report) - 64; lost++)
        k += snprintf(report + k, sizeof(report) - k, "%s%u lost at once: 100%% (without the spares %.1f%%)",
                      lost > 1 ? "; " : "", lost, 100 * ckpt_placement_recovery(p, B.n, m, lost));
    ckpt_log(CKPT_INFO, "%u spare%s with standbys beside the job: node I's copies go to spare I mod %u too, and a "
             "lost node's place is taken by its spare's standbys; recovery from memory: %s", n, n == 1 ? "" : "s", n,
             report);
}

/* The spares' receivers (spare/, "IP HOSTPORT"), read at most once a second. */
void bridge_spares_turn(double now)
{
    char key[300], why[128];
    struct etcd_kv *kv;
    size_t n = 0;
    if (now - B.spares_read_s < 1.0)
        return;
    B.spares_read_s = now;
    snprintf(key, sizeof(key), "%sspare/", B.prefix);
    if (etcd_get(B.e, key, true, &kv, &n, NULL, why, sizeof(why)) < 0)
        return;
    struct coord_addr *a = calloc(n ? n : 1, sizeof(*a));
    unsigned k = 0;
    for (size_t i = 0; a && i < n; i++) {
        const char *rx = strchr(kv[i].value, ' ');
        if (rx && rx[1] && strlen(rx + 1) < COORD_ADDR_MAX)
            snprintf(a[k++].hostport, COORD_ADDR_MAX, "%s", rx + 1);
    }
    etcd_kvs_free(kv, n);
    if (!a)
        return;
    pthread_mutex_lock(&B.spares_lock);
    free(B.spares);
    B.spares = a;
    B.nspares = k;
    pthread_mutex_unlock(&B.spares_lock);
    spares_said(k);
}

int bridge_spare_for(unsigned node, char *out, size_t outlen)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&B.spares_lock);
    if (B.nspares)
        rc = 0, snprintf(out, outlen, "%s", B.spares[node % B.nspares].hostport);
    pthread_mutex_unlock(&B.spares_lock);
    return rc;
}

/*
 * A spare (--spare) waits beside the job, its lease held and itself under
 * spare/, and takes the rank of the first node lost.  A rank free while
 * the job forms is a node still starting; once every rank has been held
 * at one time, or when a rank has been free for twice the lease's TTL
 * while a leader runs the job (a spare started after the loss), it is a
 * lost node's: taken at once by the spare that runs standbys for its
 * ranks (spare.c), by any other SPARE_DEFER_S later.  Returns 0 when it took one (B.node), 1 when the job ended
 * without needing it (@why says how), -errno.
 */
#define SPARE_DEFER_S 2.0
int bridge_spare_wait(char *why, size_t whylen)
{
    char mine[300], key[300];
    bool formed = false;
    double gone_since = 0, short_since = 0, lost_since = 0;
    char value[160], rx[COORD_ADDR_MAX];
    snprintf(mine, sizeof(mine), "%sspare/%" PRIx64, B.prefix, B.lease);
    spare_open(B.opt, B.ip, rx, sizeof(rx));
    snprintf(value, sizeof(value), "%s%s%s", B.ip, *rx ? " " : "", rx);
    int rc = etcd_put(B.e, mine, value, strlen(value), B.lease, why, whylen);
    if (rc < 0) {
        spare_close(false);
        return rc;
    }
    lease_hold(B.keeper, mine);
    ckpt_log(CKPT_INFO, "a spare for job %s (%u nodes), through etcd at %s: it takes the place of the first node "
             "lost", B.opt->job_name, B.n, B.opt->etcd);
    for (;; usleep(200 * 1000)) {
        struct etcd_kv *kv;
        size_t n;
        char ended[16] = "";
        snprintf(key, sizeof(key), "%send", B.prefix);
        if (etcd_get(B.e, key, false, &kv, &n, NULL, why, whylen) == 0) {
            if (n)
                snprintf(ended, sizeof(ended), "%s", kv[0].value);
            etcd_kvs_free(kv, n);
        }
        if (*ended) {
            snprintf(why, whylen, "job %s ended (exit %s) without losing a node: this spare was not needed",
                     B.opt->job_name, ended);
            rc = 1;
            break;
        }
        if (*rx) {
            snprintf(key, sizeof(key), "%splan", B.prefix);
            if (etcd_get(B.e, key, false, &kv, &n, NULL, why, whylen) == 0) {
                if (n)
                    spare_plan(kv[0].value);
                etcd_kvs_free(kv, n);
            }
            /* Which nodes send here: node I to the spare I mod S, as the nodes read spare/ (spares_turn). */
            snprintf(key, sizeof(key), "%sspare/", B.prefix);
            if (etcd_get(B.e, key, true, &kv, &n, NULL, why, whylen) == 0) {
                unsigned index = 0, count = 0;
                bool listed = false;
                for (size_t i = 0; i < n; i++) {
                    const char *sp = strchr(kv[i].value, ' ');
                    if (!sp || !sp[1] || strlen(sp + 1) >= COORD_ADDR_MAX)
                        continue; /* a spare that takes no copies (as spares_turn reads them) */
                    if (strcmp(kv[i].key, mine) == 0)
                        index = count, listed = true;
                    count++;
                }
                etcd_kvs_free(kv, n);
                spare_assign(index, listed ? count : 0);
            }
            spare_turn();
        }
        bridge_note_leader();
        snprintf(key, sizeof(key), "%snode/", B.prefix);
        bool *held = calloc(B.n, sizeof(*held));
        if (!held || etcd_get(B.e, key, true, &kv, &n, NULL, why, whylen) < 0) {
            n = B.n; /* cannot tell: nothing is taken */
        } else {
            for (size_t i = 0; i < n; i++) {
                unsigned node = (unsigned)strtoul(kv[i].key + strlen(key), NULL, 10);
                if (node < B.n)
                    held[node] = true;
            }
            etcd_kvs_free(kv, n);
        }
        double now = ckpt_now_s();
        formed |= n == B.n;
        gone_since = n ? 0 : gone_since ? gone_since : now;
        short_since = n == B.n ? 0 : short_since ? short_since : now;
        bool lost = n < B.n && (formed || (now - short_since >= 2 * B.ttl_s && bridge_led()));
        lost_since = lost ? lost_since ? lost_since : now : 0;
        /* The spare whose standbys follow a lost node's ranks takes its
         * place; another, only if that one has not within SPARE_DEFER_S. */
        for (unsigned i = 0; lost && held && rc == 0 && i < B.n; i++)
            if (!held[i] && (spare_covers(i) || now - lost_since >= SPARE_DEFER_S))
                rc = bridge_claim((int)i, why, whylen);
        free(held);
        if (rc != 0) {
            if (rc == 1)
                ckpt_log(CKPT_INFO, "node %u of job %s was lost: this spare takes its place", B.node,
                         B.opt->job_name);
            B.claimed_s = now;
            rc = rc == 1 ? 0 : rc;
            break;
        }
        if (gone_since && now - gone_since > 10 * B.ttl_s) {
            snprintf(why, whylen, "job %s has had no node for %g s, and left no end: this spare ends",
                     B.opt->job_name, 10 * B.ttl_s);
            rc = 1;
            break;
        }
    }
    if (rc == 0) {
        spare_claimed(B.node);
    } else {
        spare_close(true);
    }
    char gone[128];
    if (etcd_delete(B.e, mine, false, gone, sizeof(gone)) < 0)
        ckpt_log(CKPT_DEBUG, "this spare's key stays until its lease ends: %s", gone);
    return rc;
}

double bridge_claimed_s(void)
{
    return B.claimed_s;
}
