/*
 * The replay log: records come back in order with their payloads; a
 * restore to iteration k reads exactly the records up to k's end and the
 * next run appends after it; a call of another kind than the log holds is
 * a divergence; each thread reads its own records whatever the order
 * they were written in; damage, a log too short, an overflowed log and a
 * tainted one are refused with a reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay.h"
#include "check.h"

static char dir[] = "/tmp/ckpt-replay-XXXXXX", why[256];

#define T 1 /* the main thread's key */
#define NEXT(type) ckpt_rlog_next(T, type, &r, why, sizeof(why))

/* Three iterations: an allocation in the first, one loss copy in each. */
static void record(uint64_t max)
{
    CHECK(ckpt_rlog_create(dir, NULL, max, why, sizeof(why)) == 0, "create: %s", why);
    ckpt_rlog_append(CKPT_RL_ALLOC, T, 0, 4096, 0x7f0000000000, NULL, 0);
    for (uint64_t it = 1; it <= 3; it++) {
        float loss = 1.0f / (float)it;
        ckpt_rlog_append(CKPT_RL_D2H, T, sizeof(loss), T, 0, &loss, sizeof(loss));
        ckpt_rlog_append(CKPT_RL_ITER, T, it, 0, 0, NULL, 0);
        ckpt_rlog_flush();
    }
    ckpt_rlog_close();
}

static off_t log_size(void)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof(path), "%s/replay.log", dir);
    return stat(path, &st) == 0 ? st.st_size : -1;
}

int main(void)
{
    struct ckpt_rl_rec r;

    if (!mkdtemp(dir))
        return 1;
    record(1 << 20);

    /* Restore to iteration 2: allocation, loss 1, iter 1, loss 1/2, iter 2. */
    CHECK(ckpt_rlog_open_replay(dir, NULL, 2, 1 << 20, why, sizeof(why)) == 0, "open at 2: %s", why);
    CHECK(NEXT(CKPT_RL_ALLOC) == 0 && r.a == 0 && r.b == 4096 && r.c == 0x7f0000000000, "allocation record");
    CHECK(ckpt_rlog_peek(T, &r) == CKPT_RL_D2H && r.len == 4, "peek at the first loss");
    CHECK(NEXT(CKPT_RL_D2H) == 0 && r.len == 4 && *(const float *)r.payload == 1.0f, "first loss");
    int rc = NEXT(CKPT_RL_D2H);
    CHECK(rc == -EPROTO && strstr(why, "where the log has a iteration end"), "divergence: %d '%s'", rc, why);
    CHECK(NEXT(CKPT_RL_ITER) == 0 && r.a == 1, "iter 1");
    CHECK(NEXT(CKPT_RL_D2H) == 0 && *(const float *)r.payload == 0.5f, "second loss");
    uint64_t who = 0;
    CHECK(ckpt_rlog_left(&who) == 1 && who == T, "one record left before the cut");
    CHECK(NEXT(CKPT_RL_ITER) == 0 && r.a == 2, "iter 2");
    CHECK(ckpt_rlog_left(&who) == 0 && ckpt_rlog_peek(T, NULL) == 0, "nothing left");
    rc = NEXT(CKPT_RL_D2H);
    CHECK(rc == -ENODATA, "read past the restore point: %d", rc);
    rc = ckpt_rlog_next(77, CKPT_RL_D2H, &r, why, sizeof(why));
    CHECK(rc == -ENODATA, "a thread the log does not know: %d", rc);

    /* Going live cuts iteration 3 off; the new run's records follow. */
    off_t full = log_size();
    CHECK(ckpt_rlog_go_live() == 0, "go live");
    CHECK(log_size() < full, "iteration 3 not cut off (%lld >= %lld)", (long long)log_size(), (long long)full);
    float again = 0.25f;
    ckpt_rlog_append(CKPT_RL_D2H, T, 4, T, 0, &again, 4);
    ckpt_rlog_append(CKPT_RL_ITER, T, 3, 0, 0, NULL, 0);
    CHECK(ckpt_rlog_flush() == 0, "flush after going live");
    ckpt_rlog_close();
    CHECK(ckpt_rlog_open_replay(dir, NULL, 3, 1 << 20, why, sizeof(why)) == 0, "open at 3 after the rewrite: %s", why);
    for (int k = 0; k < 5; k++)
        NEXT(k == 0 ? CKPT_RL_ALLOC : (k % 2 ? CKPT_RL_D2H : CKPT_RL_ITER));
    CHECK(NEXT(CKPT_RL_D2H) == 0 && *(const float *)r.payload == 0.25f, "the rewritten iteration 3");
    ckpt_rlog_close();

    rc = ckpt_rlog_open_replay(dir, NULL, 9, 1 << 20, why, sizeof(why));
    CHECK(rc == -ERANGE && strstr(why, "ends at iteration 3"), "too far: %d '%s'", rc, why);

    /* A flipped byte in a payload. */
    char path[128];
    snprintf(path, sizeof(path), "%s/replay.log", dir);
    int fd = open(path, O_RDWR);
    char c;
    if (pread(fd, &c, 1, 64 + 48 + 48 + 1) == 1) {
        c ^= 1;
        if (pwrite(fd, &c, 1, 64 + 48 + 48 + 1) != 1)
            failures++;
    }
    close(fd);
    rc = ckpt_rlog_open_replay(dir, NULL, 2, 1 << 20, why, sizeof(why));
    CHECK(rc == -EBADMSG && strstr(why, "damaged"), "damage: %d '%s'", rc, why);

    /* A log limited to a few records overflows, and says where. */
    record(64 + 3 * 56);
    rc = ckpt_rlog_open_replay(dir, NULL, 3, 1 << 20, why, sizeof(why));
    CHECK(rc == -ERANGE && strstr(why, "CKPT_REPLAY_LOG_MAX"), "overflow: %d '%s'", rc, why);

    /* A copy of nearly 4 GiB is too large for a 1 GiB log: it overflows
     * the log, its bytes never read (the payload here is 8 bytes long). */
    CHECK(ckpt_rlog_create(dir, NULL, 1 << 30, why, sizeof(why)) == 0, "create: %s", why);
    uint64_t small = 0;
    ckpt_rlog_append(CKPT_RL_D2H, T, UINT32_MAX - 5, T, 0, &small, UINT32_MAX - 5);
    ckpt_rlog_append(CKPT_RL_ITER, T, 1, 0, 0, NULL, 0);
    ckpt_rlog_flush();
    ckpt_rlog_close();
    rc = ckpt_rlog_open_replay(dir, NULL, 1, 1 << 30, why, sizeof(why));
    CHECK(rc == -ERANGE && strstr(why, "CKPT_REPLAY_LOG_MAX"), "a 4 GiB copy: %d '%s'", rc, why);

    /* Two threads whose records interleave: each reads its own, in its
     * own order, whichever runs first in replay. */
    CHECK(ckpt_rlog_create(dir, NULL, 1 << 20, why, sizeof(why)) == 0, "create: %s", why);
    for (uint64_t k = 1; k <= 3; k++) {
        ckpt_rlog_append(CKPT_RL_VALUE, 7, 1, 70 + k, 0, NULL, 0);
        ckpt_rlog_append(CKPT_RL_VALUE, T, 1, 10 + k, 0, NULL, 0);
    }
    ckpt_rlog_append(CKPT_RL_ITER, T, 1, 0, 0, NULL, 0);
    ckpt_rlog_append(CKPT_RL_VALUE, 7, 1, 99, 0, NULL, 0); /* after the cut */
    ckpt_rlog_flush();
    ckpt_rlog_close();
    CHECK(ckpt_rlog_open_replay(dir, NULL, 1, 1 << 20, why, sizeof(why)) == 0, "open two threads: %s", why);
    for (uint64_t k = 1; k <= 3; k++)
        CHECK(NEXT(CKPT_RL_VALUE) == 0 && r.b == 10 + k, "main thread's value %llu", (unsigned long long)k);
    CHECK(ckpt_rlog_left(&who) == 4, "the other thread's three and the ITER left");
    for (uint64_t k = 1; k <= 3; k++)
        CHECK(ckpt_rlog_next(7, CKPT_RL_VALUE, &r, why, sizeof(why)) == 0 && r.b == 70 + k, "thread 7's %llu",
              (unsigned long long)k);
    CHECK(ckpt_rlog_next(7, CKPT_RL_VALUE, &r, why, sizeof(why)) == -ENODATA, "thread 7's record past the cut");
    CHECK(ckpt_rlog_left(&who) == 1 && who == T, "the main thread's ITER left");
    ckpt_rlog_close();

    /* Equal answers in a row are one record, handed out as many times (a
     * record made between them, here from the same OS thread, starts a
     * new run). */
    CHECK(ckpt_rlog_create(dir, NULL, 1 << 20, why, sizeof(why)) == 0, "create: %s", why);
    for (int k = 0; k < 1000; k++) {
        ckpt_rlog_append(CKPT_RL_OBSERVE, T, 4, 600, 0, NULL, 0);
        if (k == 500)
            ckpt_rlog_append(CKPT_RL_VALUE, 7, 1, 5, 0, NULL, 0);
    }
    ckpt_rlog_append(CKPT_RL_OBSERVE, T, 4, 0, 0, NULL, 0);
    ckpt_rlog_append(CKPT_RL_ITER, T, 1, 0, 0, NULL, 0);
    ckpt_rlog_flush();
    ckpt_rlog_close();
    CHECK(log_size() == 64 + 5 * 48, "1000 equal answers take two records: %lld bytes", (long long)log_size());
    CHECK(ckpt_rlog_open_replay(dir, NULL, 1, 1 << 20, why, sizeof(why)) == 0, "open repeats: %s", why);
    int served = 0;
    while (ckpt_rlog_peek(T, &r) == CKPT_RL_OBSERVE && r.b == 600 && NEXT(CKPT_RL_OBSERVE) == 0)
        served++;
    CHECK(served == 1000, "1000 answers served, not %d", served);
    CHECK(NEXT(CKPT_RL_OBSERVE) == 0 && r.b == 0 && NEXT(CKPT_RL_ITER) == 0, "then the other answer, then the end");
    ckpt_rlog_close();

    /* A taint before the target refuses it, with the reason. */
    CHECK(ckpt_rlog_create(dir, NULL, 1 << 20, why, sizeof(why)) == 0, "create: %s", why);
    ckpt_rlog_append(CKPT_RL_ITER, T, 1, 0, 0, NULL, 0);
    ckpt_rlog_append(CKPT_RL_TAINT, T, 2, 0, 0, "managed memory", 14);
    ckpt_rlog_append(CKPT_RL_ITER, T, 2, 0, 0, NULL, 0);
    ckpt_rlog_flush();
    ckpt_rlog_close();
    CHECK(ckpt_rlog_open_replay(dir, NULL, 1, 1 << 20, why, sizeof(why)) == 0, "before the taint: %s", why);
    ckpt_rlog_close();
    rc = ckpt_rlog_open_replay(dir, NULL, 2, 1 << 20, why, sizeof(why));
    CHECK(rc == -EPERM && strstr(why, "from iteration 2 on: managed memory"), "taint: %d '%s'", rc, why);

    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
