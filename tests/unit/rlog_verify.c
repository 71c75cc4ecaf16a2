/*
 * ckpt_rlog_verify, the read-only check of a replay log that ckpt-inspect
 * runs: an intact log verifies through its last iteration; a flipped bit
 * anywhere in a record, a log cut inside a record, a file that is no log
 * and a missing log are each refused with their own error and a reason,
 * and the log is never changed by the check.
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

static char dir[] = "/tmp/ckpt-rlogv-XXXXXX", path[64];

/* Header 64 bytes; records of 48 bytes + payload padded to 8.  Iteration
 * k is a 4-byte copy (56 bytes) then its end (48 bytes). */
#define ITER_BYTES 104
#define RECORD_AT(k) (64 + 48 + ((k) - 1) * ITER_BYTES) /* after one allocation record */

static void record(void)
{
    char why[256];
    CHECK(ckpt_rlog_create(dir, NULL, 1 << 20, why, sizeof(why)) == 0, "create: %s", why);
    ckpt_rlog_append(CKPT_RL_ALLOC, 1, 0, 4096, 0, NULL, 0);
    for (uint64_t it = 1; it <= 4; it++) {
        uint32_t word = (uint32_t)it * 7u;
        ckpt_rlog_append(CKPT_RL_D2H, 1, sizeof(word), 1, 0, &word, sizeof(word));
        ckpt_rlog_append(CKPT_RL_ITER, 1, it, 0, 0, NULL, 0);
        ckpt_rlog_flush();
    }
    ckpt_rlog_close();
}

static void flip(off_t at)
{
    int fd = open(path, O_RDWR);
    char c;
    if (fd < 0 || pread(fd, &c, 1, at) != 1 || (c ^= 1, pwrite(fd, &c, 1, at)) != 1)
        failures++;
    if (fd >= 0)
        close(fd);
}

static void cut(off_t len)
{
    if (truncate(path, len) < 0)
        failures++;
}

static void unlink_log(off_t unused)
{
    (void)unused;
    unlink(path);
}

static const struct {
    const char *name;
    void (*damage)(off_t);
    off_t at;
    int rc;
    uint64_t last;     /* the last iteration reported */
    const char *says;  /* in why */
} cases[] = {
    {"intact", NULL, 0, 0, 4, ""},
    {"payload bit of iteration 3", flip, RECORD_AT(3) + 48 + 1, -EBADMSG, 2, "record at byte 320 is damaged"},
    {"type bit of the first record", flip, 64, -EBADMSG, 0, "record at byte 64 is damaged"},
    {"checksum bit of iteration 4's end", flip, RECORD_AT(4) + 56 + 40, -EBADMSG, 3, "record at byte 480 is damaged"},
    {"cut inside iteration 2's copy", cut, RECORD_AT(2) + 34, -ENODATA, 1, "record at byte 216 is cut short"},
    {"cut after iteration 2", cut, RECORD_AT(3), 0, 2, ""},
    {"cut to the file header", cut, 64, 0, 0, ""},
    {"magic", flip, 0, -EBADMSG, 0, "is not a replay log"},
    {"missing", unlink_log, 0, -ENOENT, 0, "no replay log"},
};

int main(void)
{
    char why[256];
    struct stat before, after;

    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/replay.log", dir);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        uint64_t last = 99;
        record();
        if (cases[c].damage)
            cases[c].damage(cases[c].at);
        int had = stat(path, &before) == 0;
        why[0] = '\0';
        int rc = ckpt_rlog_verify(dir, &last, why, sizeof(why));
        CHECK(rc == cases[c].rc && last == cases[c].last && strstr(why, cases[c].says),
              "%s: rc %d (want %d), last %llu (want %llu), why '%s' (want '%s')", cases[c].name, rc, cases[c].rc,
              (unsigned long long)last, (unsigned long long)cases[c].last, why, cases[c].says);
        CHECK(!had || (stat(path, &after) == 0 && after.st_size == before.st_size &&
                       after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
                       after.st_mtim.tv_nsec == before.st_mtim.tv_nsec),
              "%s: the check changed the log", cases[c].name);
    }
    char cmd[80];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
