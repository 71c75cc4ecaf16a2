/*
 * The replay log: records come back in order with their payloads; a
 * restore to iteration k reads exactly the records up to k's end and the
 * next run appends after it; a call of another kind than the log holds is
 * a divergence; damage, a log too short, and an overflowed log are refused
 * with a reason.
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

/* Three iterations: an allocation in the first, one loss copy in each. */
static void record(uint64_t max)
{
    CHECK(ckpt_rlog_create(dir, max, why, sizeof(why)) == 0, "create: %s", why);
    ckpt_rlog_append(CKPT_RL_ALLOC, 0, 4096, NULL, 0);
    for (uint64_t it = 1; it <= 3; it++) {
        float loss = 1.0f / (float)it;
        ckpt_rlog_append(CKPT_RL_D2H, sizeof(loss), 0, &loss, sizeof(loss));
        ckpt_rlog_append(CKPT_RL_ITER, it, 0, NULL, 0);
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
    uint64_t a, b;
    const void *p;
    uint32_t len;

    if (!mkdtemp(dir))
        return 1;
    record(1 << 20);

    /* Restore to iteration 2: allocation, loss 1, iter 1, loss 1/2, iter 2. */
    CHECK(ckpt_rlog_open_replay(dir, 2, 1 << 20, why, sizeof(why)) == 0, "open at 2: %s", why);
    CHECK(ckpt_rlog_next(CKPT_RL_ALLOC, &a, &b, NULL, NULL, why, sizeof(why)) == 0 && a == 0 && b == 4096,
          "allocation record");
    CHECK(ckpt_rlog_next(CKPT_RL_D2H, &a, &b, &p, &len, why, sizeof(why)) == 0 && len == 4 &&
              *(const float *)p == 1.0f,
          "first loss");
    int rc = ckpt_rlog_next(CKPT_RL_D2H, &a, &b, &p, &len, why, sizeof(why));
    CHECK(rc == -EPROTO && strstr(why, "where the log has a iteration end"), "divergence: %d '%s'", rc, why);
    CHECK(ckpt_rlog_next(CKPT_RL_ITER, &a, &b, NULL, NULL, why, sizeof(why)) == 0 && a == 1, "iter 1");
    CHECK(ckpt_rlog_next(CKPT_RL_D2H, &a, &b, &p, &len, why, sizeof(why)) == 0 && *(const float *)p == 0.5f,
          "second loss");
    CHECK(ckpt_rlog_next(CKPT_RL_ITER, &a, &b, NULL, NULL, why, sizeof(why)) == 0 && a == 2, "iter 2");
    rc = ckpt_rlog_next(CKPT_RL_D2H, &a, &b, &p, &len, why, sizeof(why));
    CHECK(rc == -ENODATA, "read past the restore point: %d", rc);

    /* Going live cuts iteration 3 off; the new run's records follow. */
    off_t full = log_size();
    CHECK(ckpt_rlog_go_live() == 0, "go live");
    CHECK(log_size() < full, "iteration 3 not cut off (%lld >= %lld)", (long long)log_size(), (long long)full);
    float again = 0.25f;
    ckpt_rlog_append(CKPT_RL_D2H, 4, 0, &again, 4);
    ckpt_rlog_append(CKPT_RL_ITER, 3, 0, NULL, 0);
    CHECK(ckpt_rlog_flush() == 0, "flush after going live");
    ckpt_rlog_close();
    CHECK(ckpt_rlog_open_replay(dir, 3, 1 << 20, why, sizeof(why)) == 0, "open at 3 after the rewrite: %s", why);
    for (int k = 0; k < 5; k++)
        ckpt_rlog_next(k == 0 ? CKPT_RL_ALLOC : (k % 2 ? CKPT_RL_D2H : CKPT_RL_ITER), &a, &b, &p, &len, why, sizeof(why));
    CHECK(ckpt_rlog_next(CKPT_RL_D2H, &a, &b, &p, &len, why, sizeof(why)) == 0 && *(const float *)p == 0.25f,
          "the rewritten iteration 3");
    ckpt_rlog_close();

    rc = ckpt_rlog_open_replay(dir, 9, 1 << 20, why, sizeof(why));
    CHECK(rc == -ERANGE && strstr(why, "ends at iteration 3"), "too far: %d '%s'", rc, why);

    /* A flipped byte in a payload. */
    char path[128];
    snprintf(path, sizeof(path), "%s/replay.log", dir);
    int fd = open(path, O_RDWR);
    char c;
    if (pread(fd, &c, 1, 64 + 32 + 32 + 1) == 1) {
        c ^= 1;
        if (pwrite(fd, &c, 1, 64 + 32 + 32 + 1) != 1)
            failures++;
    }
    close(fd);
    rc = ckpt_rlog_open_replay(dir, 2, 1 << 20, why, sizeof(why));
    CHECK(rc == -EBADMSG && strstr(why, "damaged"), "damage: %d '%s'", rc, why);

    /* A log limited to a few records overflows, and says where. */
    record(64 + 3 * 40);
    rc = ckpt_rlog_open_replay(dir, 3, 1 << 20, why, sizeof(why));
    CHECK(rc == -ERANGE && strstr(why, "CKPT_REPLAY_LOG_MAX"), "overflow: %d '%s'", rc, why);

    /* A copy of nearly 4 GiB is too large for a 1 GiB log: it overflows
     * the log, its bytes never read (the payload here is 8 bytes long). */
    CHECK(ckpt_rlog_create(dir, 1 << 30, why, sizeof(why)) == 0, "create: %s", why);
    uint64_t small = 0;
    ckpt_rlog_append(CKPT_RL_D2H, UINT32_MAX - 5, 0, &small, UINT32_MAX - 5);
    ckpt_rlog_append(CKPT_RL_ITER, 1, 0, NULL, 0);
    ckpt_rlog_close();
    rc = ckpt_rlog_open_replay(dir, 1, 1 << 30, why, sizeof(why));
    CHECK(rc == -ERANGE && strstr(why, "CKPT_REPLAY_LOG_MAX"), "a 4 GiB copy: %d '%s'", rc, why);

    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
