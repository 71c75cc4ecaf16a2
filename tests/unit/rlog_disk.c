/*
 * A replay log kept on disk: the arena's replay.log is a stub of a few
 * bytes at any length of the log, and every reader (replay, a standby
 * following it, the checks tools run, a descriptor for persistence and
 * replication) reads the log through it; a restored run truncates the
 * file on disk where replay ended and appends there.  A log restored
 * whole into the arena (read back from disk or a peer) moves to disk when
 * the rank goes live.  Removing the log removes both.
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

static char dir[] = "/tmp/ckpt-rlogd-XXXXXX", disk[] = "/tmp/ckpt-rlogd-disk-XXXXXX", why[256];
static char stub[256], file[256];

#define T 1

static off_t size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* n iterations of one 1 KiB copy each. */
static void iterations(uint64_t from, uint64_t to)
{
    char payload[1024];
    for (uint64_t it = from; it <= to; it++) {
        memset(payload, (int)it, sizeof(payload));
        ckpt_rlog_append(CKPT_RL_D2H, T, sizeof(payload), T, 0, payload, sizeof(payload));
        ckpt_rlog_append(CKPT_RL_ITER, T, it, 0, 0, NULL, 0);
        ckpt_rlog_flush();
    }
}

/* Replays to iteration k, checking every payload. */
static void replay_to(uint64_t k)
{
    struct ckpt_rl_rec r;
    for (uint64_t it = 1; it <= k; it++) {
        CHECK(ckpt_rlog_next(T, CKPT_RL_D2H, &r, why, sizeof(why)) == 0 && r.len == 1024 &&
                  ((const unsigned char *)r.payload)[1023] == (unsigned char)it,
              "copy of iteration %llu: %s", (unsigned long long)it, why);
        CHECK(ckpt_rlog_next(T, CKPT_RL_ITER, &r, why, sizeof(why)) == 0 && r.a == it, "end of iteration %llu",
              (unsigned long long)it);
    }
}

int main(void)
{
    uint64_t last;

    if (!mkdtemp(dir) || !mkdtemp(disk))
        return 1;
    snprintf(stub, sizeof(stub), "%s/replay.log", dir);
    snprintf(file, sizeof(file), "%s/rank0.replay.log", disk);

    /* 2,000 iterations, 2 MiB of log: the arena holds a stub. */
    CHECK(ckpt_rlog_create(dir, file, 4096, why, sizeof(why)) == 0, "create on disk: %s", why);
    iterations(1, 2000);
    CHECK(ckpt_rlog_complete(), "a log on disk is not bounded by the arena's 4 KiB");
    ckpt_rlog_close();
    CHECK(size_of(stub) > 0 && size_of(stub) <= 4096, "the arena holds %lld bytes", (long long)size_of(stub));
    CHECK(size_of(file) > 2000 * 1024, "the disk holds %lld bytes", (long long)size_of(file));
    char where[256];
    CHECK(ckpt_rlog_where(dir, where, sizeof(where)) == 1 && strcmp(where, file) == 0, "where: %s", where);
    CHECK(ckpt_rlog_verify(dir, &last, why, sizeof(why)) == 0 && last == 2000, "verify through the stub: %s", why);
    int fd = ckpt_rlog_open_fd(dir, why, sizeof(why));
    CHECK(fd >= 0 && lseek(fd, 0, SEEK_END) == size_of(file), "a descriptor of the log on disk: %s", why);
    if (fd >= 0)
        close(fd);

    /* A standby follows it through the stub. */
    uint64_t it = 0;
    CHECK(ckpt_rlog_open_follow(dir, file, 4096, why, sizeof(why)) == 0, "follow: %s", why);
    int rc = 0;
    for (uint64_t k = 1; k <= 1500 && rc == 0; k++)
        rc = ckpt_rlog_follow_next(1500, &it, why, sizeof(why));
    CHECK(rc == 0 && it == 1500, "followed to %llu: %d %s", (unsigned long long)it, rc, why);
    CHECK(ckpt_rlog_follow_next(1500, &it, why, sizeof(why)) == -EBUSY, "held at 1500");
    replay_to(1500);
    ckpt_rlog_close();

    /* Restore to 1,000: replay reads the disk, going live cuts it there. */
    CHECK(ckpt_rlog_open_replay(dir, file, 1000, 4096, why, sizeof(why)) == 0, "open at 1000: %s", why);
    replay_to(1000);
    CHECK(ckpt_rlog_go_live() == 0, "go live");
    iterations(1001, 1100);
    ckpt_rlog_close();
    CHECK(size_of(stub) <= 4096, "still a stub");
    CHECK(ckpt_rlog_verify(dir, &last, why, sizeof(why)) == 0 && last == 1100, "the resumed log: %s %llu", why,
          (unsigned long long)last);

    /* A log whole in the arena (as read back from disk) moves to disk when the rank goes live. */
    ckpt_rlog_remove(dir);
    CHECK(size_of(stub) < 0 && size_of(file) < 0, "removed, both");
    CHECK(ckpt_rlog_create(dir, NULL, 1 << 22, why, sizeof(why)) == 0, "create in the arena: %s", why);
    iterations(1, 300);
    ckpt_rlog_close();
    CHECK(size_of(stub) > 300 * 1024, "whole in the arena");
    CHECK(ckpt_rlog_open_replay(dir, file, 200, 1 << 22, why, sizeof(why)) == 0, "open at 200: %s", why);
    replay_to(200);
    CHECK(ckpt_rlog_go_live() == 0, "go live");
    iterations(201, 250);
    ckpt_rlog_close();
    CHECK(size_of(stub) <= 4096 && size_of(file) > 250 * 1024, "moved to disk: arena %lld, disk %lld",
          (long long)size_of(stub), (long long)size_of(file));
    CHECK(ckpt_rlog_verify(dir, &last, why, sizeof(why)) == 0 && last == 250, "the moved log: %s", why);

    /* A stub naming a file that is gone: a clear error. */
    unlink(file);
    rc = ckpt_rlog_open_replay(dir, file, 10, 4096, why, sizeof(why));
    CHECK(rc == -ENOENT && strstr(why, file), "a stub without its file: %d '%s'", rc, why);

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, disk);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
