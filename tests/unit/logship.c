/*
 * A rank's replay log sent to a peer's agent (tools/ckpt-resume/logship.c),
 * over TCP on loopback, round after round as replication sends it: the
 * first round sends the whole log, the next ones only what it grew by, and
 * the peer's copy is the log byte for byte each time; a log cut short by a
 * restore and grown past its old length again (a new lineage) is sent
 * whole; a peer's copy changed behind its agent's back is sent whole; an
 * offer under an older epoch changes nothing.  A peer that keeps logs on
 * its disk takes one longer than CKPT_REPLAY_LOG_MAX (which one keeping
 * them in memory refuses), into its disk, the replica's replay.log naming
 * it, and the next rounds append to it there.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "replay.h"
#include "resume.h"
#include "wire.h"

#define JOB "ship"
#define RANK 1
#define EPOCH 5

static char root[] = "/tmp/ckpt-logship-XXXXXX", src[256], peers[256], held[512], why[256], y_target[512];
static struct logship *tx, *rx;
static int lfd;

/* The peer's agent: takes one offer per connection, as its receiver does. */
static void *receiver(void *arg)
{
    (void)arg;
    for (;;) {
        int ctl;
        if (ckpt_wire_accept(lfd, &ctl) < 0)
            return NULL;
        logship_receive(__atomic_load_n(&rx, __ATOMIC_ACQUIRE), peers, JOB, 4, EPOCH, ctl);
        close(ctl);
    }
}

/* Iterations from..to of rank 1's log, each with a copy whose bytes say
 * which run wrote them (tag). */
static void write_iterations(uint64_t from, uint64_t to, int tag)
{
    char bytes[600];
    for (uint64_t it = from; it <= to; it++) {
        size_t n = 1 + (it * 37) % sizeof(bytes);
        memset(bytes, tag + (int)it, n);
        ckpt_rlog_append(CKPT_RL_D2H, 1, n, 1, it, bytes, (uint32_t)n);
        ckpt_rlog_append(CKPT_RL_ITER, 1, it, 0, 0, NULL, 0);
    }
    ckpt_rlog_flush();
}

/* One round: the log sent; the peer's copy checked against it; the bytes
 * that travelled into *moved. */
static int round_trip(const char *to, uint64_t epoch, uint64_t *moved)
{
    uint64_t o0, s0, o1, s1;
    logship_totals(tx, &o0, &s0);
    int rc = logship_send(tx, src, JOB, RANK, epoch, to, why, sizeof(why));
    logship_totals(tx, &o1, &s1);
    *moved = s1 - s0;
    return rc;
}

static int same_files(void)
{
    size_t a, b;
    char path[300];
    snprintf(path, sizeof(path), "%s/replay.log", src);
    char *x = slurp(path, &a), *y = slurp(held, &b);
    if (y && b >= 8 && memcmp(y, "CKPTRLGD", 8) == 0) { /* a stub: the log it names */
        free(y);
        y = slurp(y_target, &b);
    }
    int same = x && y && a == b && memcmp(x, y, a) == 0;
    free(x);
    free(y);
    return same;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

int main(void)
{
    char addr[64], path[300];
    pthread_t t;
    uint64_t moved;

    if (!mkdtemp(root) || ckpt_config_load(why, sizeof(why)) < 0)
        return 1;
    snprintf(peers, sizeof(peers), "%s/peers", root);
    snprintf(path, sizeof(path), "%s/arena", root);
    CHECK(logship_rank_dir(path, JOB, RANK, src, sizeof(src)) == 0, "cannot make the rank's directory");
    CHECK(logship_rank_dir(peers, JOB, RANK, held, sizeof(held)) == 0, "cannot make the store's directory");
    strncat(held, "/replay.log", sizeof(held) - strlen(held) - 1);
    snprintf(path, sizeof(path), "%s/replay.log", src);
    if (ckpt_wire_listen("127.0.0.1:0", &lfd, addr, sizeof(addr), why, sizeof(why)) < 0 ||
        logship_open(&tx, 4, NULL) < 0 || logship_open(&rx, 4, NULL) < 0 || pthread_create(&t, NULL, receiver, NULL))
        return 1;

    CHECK(ckpt_rlog_create(src, NULL, 1 << 30, why, sizeof(why)) == 0, "cannot create the log: %s", why);
    write_iterations(1, 200, 0);
    CHECK(round_trip(addr, EPOCH, &moved) == 0, "first round: %s", why);
    CHECK(moved == file_size(path) && same_files(), "first round: %llu bytes sent of %llu, or the copy differs",
          (unsigned long long)moved, (unsigned long long)file_size(path));

    /* Grown: only the new bytes travel. */
    for (int r = 0; r < 3; r++) {
        uint64_t before = file_size(path);
        write_iterations(201 + 100 * (uint64_t)r, 300 + 100 * (uint64_t)r, 0);
        CHECK(round_trip(addr, EPOCH, &moved) == 0, "round %d: %s", r + 2, why);
        CHECK(moved == file_size(path) - before && same_files(),
              "round %d: %llu bytes sent, the log grew by %llu, or the copy differs", r + 2, (unsigned long long)moved,
              (unsigned long long)(file_size(path) - before));
    }

    /* Nothing new: nothing travels. */
    CHECK(round_trip(addr, EPOCH, &moved) == 0 && moved == 0 && same_files(), "an unchanged log sent %llu bytes",
          (unsigned long long)moved);

    /* A restore cuts the log at iteration 150 and the resumed run writes
     * other bytes past the old end: a new lineage, sent whole. */
    uint64_t old = file_size(path);
    CHECK(ckpt_rlog_open_replay(src, NULL, 150, 1 << 30, why, sizeof(why)) == 0, "cannot replay: %s", why);
    CHECK(ckpt_rlog_go_live() == 0, "cannot go live");
    write_iterations(151, 700, 9);
    CHECK(file_size(path) > old, "the resumed run's log is no longer than the old one");
    CHECK(round_trip(addr, EPOCH, &moved) == 0, "after the cut: %s", why);
    CHECK(moved == file_size(path) && same_files(), "after the cut: %llu bytes sent of %llu, or the copy differs",
          (unsigned long long)moved, (unsigned long long)file_size(path));
    write_iterations(701, 750, 9);
    CHECK(round_trip(addr, EPOCH, &moved) == 0 && moved < file_size(path) / 4 && same_files(),
          "after the cut, the next round sent %llu bytes of %llu", (unsigned long long)moved,
          (unsigned long long)file_size(path));

    /* The peer's copy cut short behind its agent's back: sent whole. */
    CHECK(truncate(held, 1000) == 0, "cannot cut the peer's copy");
    write_iterations(751, 760, 9);
    CHECK(round_trip(addr, EPOCH, &moved) == 0 && moved == file_size(path) && same_files(),
          "a peer's copy changed behind it: %llu bytes sent of %llu", (unsigned long long)moved,
          (unsigned long long)file_size(path));

    /* An older epoch: refused, the peer's copy as it was. */
    write_iterations(761, 800, 9);
    uint64_t kept = file_size(held);
    CHECK(round_trip(addr, EPOCH - 1, &moved) == -ESTALE && file_size(held) == kept,
          "an offer under an older epoch was not refused, or changed the copy");
    CHECK(round_trip(addr, EPOCH, &moved) == 0 && same_files(), "after the refusal: %s", why);

    /* A log longer than a peer keeps in memory: refused there, taken by a
     * peer that keeps logs on its disk. */
    CHECK(setenv("CKPT_REPLAY_LOG_MAX", "64K", 1) == 0 && ckpt_config_load(why, sizeof(why)) == 0, "%s", why);
    CHECK(file_size(path) > 64 * 1024, "the log is no longer than 64K");
    CHECK(round_trip(addr, EPOCH, &moved) == -EFBIG, "a peer keeping logs in memory took one over its bound");
    struct logship *mem = rx, *disk = NULL;
    char dir[300], stub[512];
    snprintf(dir, sizeof(dir), "%s/disk", root);
    if (mkdir(dir, 0700) < 0 || logship_open(&disk, 4, dir) < 0) {
        printf("cannot open a receiver with a disk\n");
        return 1;
    }
    __atomic_store_n(&rx, disk, __ATOMIC_RELEASE);
    snprintf(y_target, sizeof(y_target), "%s/peers/rank%d.replay.log", dir, RANK);
    snprintf(stub, sizeof(stub), "%s", held);
    *strrchr(stub, '/') = '\0';
    CHECK(round_trip(addr, EPOCH, &moved) == 0 && moved == file_size(path) && same_files(),
          "to a peer's disk: %s; %llu bytes sent of %llu, or the copy differs", why, (unsigned long long)moved,
          (unsigned long long)file_size(path));
    char named[512] = "";
    CHECK(ckpt_rlog_where(stub, named, sizeof(named)) == 1 && strcmp(named, y_target) == 0,
          "the replica's replay.log does not name %s (it names '%s')", y_target, named);
    write_iterations(801, 900, 9);
    uint64_t before = file_size(y_target);
    CHECK(round_trip(addr, EPOCH, &moved) == 0 && moved == file_size(path) - before && same_files(),
          "the next round to a peer's disk sent %llu bytes, the log grew by %llu", (unsigned long long)moved,
          (unsigned long long)(file_size(path) - before));
    logship_close(mem);
    logship_close(disk);

    ckpt_rlog_close();
    logship_close(tx);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        printf("cannot remove %s\n", root);
    return failures ? 1 : 0;
}
