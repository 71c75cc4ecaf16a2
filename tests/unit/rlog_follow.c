/*
 * Following a replay log while its rank writes it (a standby): the cut
 * moves forward one iteration at a time, and only to iterations the log
 * holds whole; each thread reads its own records, payloads intact across
 * many pages of log; a tainted log stops the follower with the reason; at
 * takeover the live run's records after the cut are the failed run's, and
 * going live cuts the log there (in the rank's own log, when the standby
 * followed a copy).  The writer is a child process, as the
 * live rank is.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "replay.h"
#include "check.h"

#define A 1 /* the iterations' thread */
#define B 2 /* a thread beside it */
#define ITERS 3000

/* Moves the cut to the end of iteration it, one iteration at a time. */
static int follow_to(uint64_t it, char *why, size_t whylen)
{
    uint64_t got = 0;
    int rc;
    while ((rc = ckpt_rlog_follow_next(it, &got, why, whylen)) == 0 && got < it)
        ;
    return rc;
}

static char dir[] = "/tmp/ckpt-follow-XXXXXX", why[256];

/* Iteration it's records: a copy of it bytes of pattern on A, a value on B. */
static void write_iteration(uint64_t it)
{
    char bytes[1000];
    size_t n = 1 + it % sizeof(bytes);
    memset(bytes, (int)(it & 0xff), n);
    ckpt_rlog_append(CKPT_RL_D2H, A, n, A, it, bytes, (uint32_t)n);
    ckpt_rlog_append(CKPT_RL_VALUE, B, 7, it * 3, 0, NULL, 0);
    ckpt_rlog_append(CKPT_RL_ITER, A, it, 0, 0, NULL, 0);
    ckpt_rlog_flush();
}

/* The writer: iteration 1, then on each byte from go, up to `upto`
 * iterations more (a byte of 0: all the rest). */
static void writer(int go, int done)
{
    char c;
    uint64_t it = 1;
    if (ckpt_rlog_create(dir, NULL, 1 << 30, why, sizeof(why)) < 0)
        _exit(2);
    write_iteration(it++);
    if (write(done, "x", 1) != 1)
        _exit(2);
    while (read(go, &c, 1) == 1) {
        for (int k = 0; c ? k < c : it <= ITERS; k++)
            write_iteration(it++);
        if (write(done, "x", 1) != 1)
            _exit(2);
    }
    _exit(0);
}

static int check_iteration(uint64_t it)
{
    struct ckpt_rl_rec r;
    int bad = 0;
    size_t n = 1 + it % 1000;
    bad |= ckpt_rlog_next(A, CKPT_RL_D2H, &r, why, sizeof(why)) != 0 || r.a != n || r.c != it || r.len != n;
    for (size_t i = 0; !bad && i < n; i++)
        bad |= ((const unsigned char *)r.payload)[i] != (it & 0xff);
    bad |= ckpt_rlog_next(B, CKPT_RL_VALUE, &r, why, sizeof(why)) != 0 || r.b != it * 3;
    bad |= ckpt_rlog_next(A, CKPT_RL_ITER, &r, why, sizeof(why)) != 0 || r.a != it;
    return bad;
}

/*
 * A spare's standby follows a copy of the log (its agent's, from the
 * rank's node); at takeover it goes on writing the rank's log in its own
 * arena, a longer copy of the same bytes; a copy whose bytes before the
 * cut differ is refused.
 */
static void spare_standby(void)
{
    char peer[64], own[64], bad[64], cmd[512];
    snprintf(peer, sizeof(peer), "%s/peer", dir);
    snprintf(own, sizeof(own), "%s/own", dir);
    snprintf(bad, sizeof(bad), "%s/bad", dir);
    CHECK(mkdir(peer, 0700) == 0 && mkdir(own, 0700) == 0 && mkdir(bad, 0700) == 0, "dirs");
    CHECK(ckpt_rlog_create(peer, NULL, 1 << 30, why, sizeof(why)) == 0, "create: %s", why);
    for (uint64_t it = 1; it <= 20; it++)
        write_iteration(it);
    ckpt_rlog_close();
    snprintf(cmd, sizeof(cmd), "cp %s/replay.log %s/ && cp %s/replay.log %s/ && "
             "printf X | dd of=%s/replay.log bs=1 seek=200 conv=notrunc status=none", peer, own, peer, bad, bad);
    CHECK(system(cmd) == 0, "%s", cmd);

    CHECK(ckpt_rlog_open_follow(peer, NULL, 1 << 30, why, sizeof(why)) == 0, "follow the copy: %s", why);
    CHECK(follow_to(10, why, sizeof(why)) == 0, "to 10: %s", why);
    CHECK(ckpt_rlog_follow_end(bad, NULL, why, sizeof(why)) == -EBADMSG && strstr(why, "not the one"),
          "a log that differs before the cut is refused: %s", why);
    ckpt_rlog_close();

    /* A byte of the lineage flipped (a constant written there would be the
     * lineage's own byte one time in 256). */
    snprintf(cmd, sizeof(cmd), "cp %s/replay.log %s/", peer, bad);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof(cmd), "%s/replay.log", bad);
    int fd = open(cmd, O_RDWR);
    unsigned char b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, 20) == 1, "read the lineage of %s", cmd);
    b ^= 0xff;
    CHECK(pwrite(fd, &b, 1, 20) == 1, "write the lineage of %s", cmd);
    close(fd);
    CHECK(ckpt_rlog_open_follow(peer, NULL, 1 << 30, why, sizeof(why)) == 0, "follow the copy: %s", why);
    CHECK(follow_to(10, why, sizeof(why)) == 0, "to 10: %s", why);
    CHECK(ckpt_rlog_follow_end(bad, NULL, why, sizeof(why)) == -EBADMSG && strstr(why, "not the one"),
          "a log of another lineage (its header differs, its records the same) is refused: %s", why);
    ckpt_rlog_close();

    CHECK(ckpt_rlog_open_follow(peer, NULL, 1 << 30, why, sizeof(why)) == 0, "follow the copy again: %s", why);
    CHECK(follow_to(10, why, sizeof(why)) == 0, "to 10: %s", why);
    for (uint64_t it = 1; it <= 10; it++)
        check_iteration(it);
    CHECK(ckpt_rlog_follow_end(own, NULL, why, sizeof(why)) == 0, "the rank's own log: %s", why);
    CHECK(ckpt_rlog_go_live() == 0, "go live");
    write_iteration(11);
    ckpt_rlog_close();
    uint64_t last = 0;
    CHECK(ckpt_rlog_verify(own, &last, why, sizeof(why)) == 0 && last == 11,
          "the rank's own log goes on from the cut: last iteration %llu (%s)", (unsigned long long)last, why);
    CHECK(ckpt_rlog_verify(peer, &last, why, sizeof(why)) == 0 && last == 20,
          "the copy followed is untouched: last iteration %llu (%s)", (unsigned long long)last, why);
}

int main(void)
{
    int go[2], done[2];
    char c;

    if (!mkdtemp(dir) || pipe(go) < 0 || pipe(done) < 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0)
        writer(go[0], done[1]);
    CHECK(read(done[0], &c, 1) == 1, "the writer did not start");

    CHECK(ckpt_rlog_open_follow(dir, NULL, 1 << 30, why, sizeof(why)) == 0, "open to follow: %s", why);
    CHECK(follow_to(1, why, sizeof(why)) == 0, "follow to 1: %s", why);
    CHECK(check_iteration(1) == 0, "iteration 1's records");
    CHECK(ckpt_rlog_peek(A, NULL) == 0 && ckpt_rlog_peek(B, NULL) == 0, "records past the cut at 1");
    CHECK(follow_to(2, why, sizeof(why)) == -EAGAIN, "iteration 2 is not written yet");

    /* Two more: the cut goes one at a time, a thread's record past it waits. */
    CHECK(write(go[1], "\2", 1) == 1 && read(done[0], &c, 1) == 1, "writer");
    CHECK(follow_to(2, why, sizeof(why)) == 0, "follow to 2: %s", why);
    CHECK(ckpt_rlog_peek(B, NULL) == CKPT_RL_VALUE, "thread B's record of iteration 2");
    CHECK(check_iteration(2) == 0, "iteration 2's records");
    CHECK(ckpt_rlog_peek(B, NULL) == 0, "thread B's record of iteration 3 is past the cut");
    CHECK(follow_to(3, why, sizeof(why)) == 0 && check_iteration(3) == 0, "iteration 3: %s", why);

    /* The rest, many pages of log: each iteration's records come back whole. */
    CHECK(write(go[1], "", 1) == 1 && read(done[0], &c, 1) == 1, "writer");
    int bad = 0;
    for (uint64_t it = 4; it <= ITERS - 10; it++)
        bad += follow_to(it, why, sizeof(why)) != 0 || check_iteration(it) != 0;
    CHECK(bad == 0, "%d iterations did not come back whole (%s)", bad, why);
    uint64_t got = 0;
    CHECK(ckpt_rlog_follow_next(ITERS - 10, &got, why, sizeof(why)) == -EBUSY, "the cut went past its bound");
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);

    /* Takeover at ITERS - 10: the ten iterations after it are the failed run's. */
    CHECK(ckpt_rlog_follow_end(NULL, NULL, why, sizeof(why)) == 0, "follow end: %s", why);
    struct ckpt_rl_rec r;
    CHECK(ckpt_rlog_failed_run(A, &r, true) == CKPT_RL_D2H && r.c == ITERS - 9, "the failed run's next copy");
    CHECK(ckpt_rlog_go_live() == 0, "go live");
    write_iteration(ITERS - 9);
    ckpt_rlog_close();
    uint64_t last = 0;
    CHECK(ckpt_rlog_verify(dir, &last, why, sizeof(why)) == 0 && last == ITERS - 9,
          "the log goes on from the cut: last iteration %llu (%s)", (unsigned long long)last, why);

    /* A taint stops the follower with its reason, where the live run wrote it. */
    CHECK(ckpt_rlog_open_follow(dir, NULL, 1 << 30, why, sizeof(why)) == 0, "open again: %s", why);
    CHECK(follow_to(ITERS - 9, why, sizeof(why)) == 0, "to iteration %d: %s", ITERS - 9, why);
    ckpt_rlog_append(CKPT_RL_TAINT, A, ITERS - 8, 0, 0, "a test's reason", 15); /* ignored: not live */
    CHECK(ckpt_rlog_follow_end(NULL, NULL, why, sizeof(why)) == 0, "follow end: %s", why);
    CHECK(ckpt_rlog_go_live() == 0, "go live again");
    ckpt_rlog_append(CKPT_RL_TAINT, A, ITERS - 8, 0, 0, "a test's reason", 15);
    ckpt_rlog_flush();
    ckpt_rlog_close();
    CHECK(ckpt_rlog_open_follow(dir, NULL, 1 << 30, why, sizeof(why)) == 0, "open a third time: %s", why);
    CHECK(follow_to(ITERS - 9, why, sizeof(why)) == 0, "to the cut: %s", why);
    CHECK(ckpt_rlog_follow_next(UINT64_MAX, &got, why, sizeof(why)) == -EPERM && strstr(why, "a test's reason"),
          "a taint stops the follower with its reason: %s", why);
    ckpt_rlog_close();
    spare_standby();

    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    return failures ? 1 : 0;
}
