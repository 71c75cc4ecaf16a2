/*
 * The names in a job's arena (arena.h, replay.h): the paths of a job's
 * directory, a rank's directory, slot files and replay logs, refused when
 * they do not fit, and the parsers of directory entries, which take a name
 * only as its writer spells it; the peers' store; what a job's name may be.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "check.h"
#include "replay.h"

static const struct {
    const char *name;
    bool rank_dir;    /* ckpt_rank_dir_name takes it */
    bool disk_log;    /* ckpt_rlog_disk_name takes it */
    int rank;         /* then, the rank */
} names[] = {
    {"rank0", true, false, 0},
    {"rank7", true, false, 7},
    {"rank2147483647", true, false, 2147483647},
    {"rank12.replay.log", false, true, 12},
    {"rank0.replay.log", false, true, 0},
    {"rank2147483648", false, false, 0},   /* past INT_MAX */
    {"rank01", false, false, 0},           /* a leading zero: not how rank 1 is written */
    {"rank-1", false, false, 0},
    {"rank+1", false, false, 0},
    {"rank 1", false, false, 0},
    {"rank", false, false, 0},
    {"rank1x", false, false, 0},
    {"rank1.replay.log.tmp", false, false, 0},
    {"rank1.replay", false, false, 0},
    {"Rank1", false, false, 0},
    {"slot0", false, false, 0},
    {"peers", false, false, 0},
    {"", false, false, 0},
};

/* Entries of a root, each @before, then a uid as @uid says, then @after. */
enum { MINE, OTHER, NO_UID }; /* this user's uid, another's (one more), none */
static const struct {
    const char *before;
    int uid;
    const char *after;
    const char *job; /* the job ckpt_job_dir_name reads, NULL: not this user's job directory */
} job_dirs[] = {
    {"", MINE, "-job", "job"},
    {"", MINE, "-a-b", "a-b"},
    {"", MINE, "--", "-"},
    {"", MINE, "-peers", "peers"},
    {"", OTHER, "-job", NULL},
    {"", MINE, "0-job", NULL},  /* a digit more: another uid */
    {"0", MINE, "-job", NULL},  /* a leading zero: not how the uid is written */
    {"+", MINE, "-job", NULL},
    {" ", MINE, "-job", NULL},
    {"", MINE, "-", NULL},      /* no job */
    {"", MINE, "", NULL},
    {"", MINE, "job", NULL},    /* no dash */
    {"", MINE, "_job", NULL},
    {"", NO_UID, "-job", NULL},
    {"", NO_UID, "peers", NULL},
    {"", NO_UID, "rank0", NULL},
    {"", NO_UID, "", NULL},
};

static void check_job_dirs(void)
{
    unsigned me = (unsigned)geteuid();
    char name[64], path[64], want[64];

    for (size_t i = 0; i < sizeof(job_dirs) / sizeof(job_dirs[0]); i++) {
        const char *job = NULL;
        if (job_dirs[i].uid == NO_UID)
            snprintf(name, sizeof(name), "%s%s", job_dirs[i].before, job_dirs[i].after);
        else
            snprintf(name, sizeof(name), "%s%u%s", job_dirs[i].before, me + (job_dirs[i].uid == OTHER),
                     job_dirs[i].after);
        bool took = ckpt_job_dir_name(name, &job);
        CHECK(took == !!job_dirs[i].job && (!took || strcmp(job, job_dirs[i].job) == 0),
              "ckpt_job_dir_name(\"%s\"): %d, %s", name, took, took ? job : "-");
    }

    snprintf(want, sizeof(want), "/a/%u-job", me);
    CHECK(ckpt_job_dir(path, sizeof(path), "/a", "job") == 0 && strcmp(path, want) == 0, "job dir: %s", path);
    /* What the writer makes, the parser takes back. */
    const char *job = NULL;
    CHECK(ckpt_job_dir(path, sizeof(path), "/a", "my-job.2") == 0 &&
          ckpt_job_dir_name(strrchr(path, '/') + 1, &job) && strcmp(job, "my-job.2") == 0,
          "job dir %s read as %s", path, job ? job : "-");
    /* A path that does not fit is refused, never cut short in silence. */
    CHECK(ckpt_job_dir(path, strlen(want), "/a", "job") == -ENAMETOOLONG, "a job dir one byte short");
    CHECK(ckpt_job_dir(path, strlen(want) + 1, "/a", "job") == 0, "a job dir that just fits");

    /* A rank's directory gives back its job's, and nothing else does. */
    ckpt_rank_dir(path, sizeof(path), want, 3);
    CHECK(ckpt_rank_dir_job(name, sizeof(name), path) == 0 && strcmp(name, want) == 0, "job dir of %s: %s", path,
          name);
    CHECK(ckpt_rank_dir_job(name, strlen(want), path) == -ENAMETOOLONG, "the job dir of %s one byte short", path);
    CHECK(ckpt_rank_dir_job(name, sizeof(name), want) == -EINVAL, "%s is no rank's directory", want);
    CHECK(ckpt_rank_dir_job(name, sizeof(name), "/a/rank01") == -EINVAL, "/a/rank01 is no rank's directory");
    CHECK(ckpt_rank_dir_job(name, sizeof(name), "rank3") == -EINVAL, "rank3 has no job dir in its path");
}

int main(void)
{
    char path[64];

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int rank = -1;
        bool took = ckpt_rank_dir_name(names[i].name, &rank);
        CHECK(took == names[i].rank_dir && (!took || rank == names[i].rank), "ckpt_rank_dir_name(\"%s\"): %d, %d",
              names[i].name, took, rank);
        rank = -1;
        took = ckpt_rlog_disk_name(names[i].name, &rank);
        CHECK(took == names[i].disk_log && (!took || rank == names[i].rank), "ckpt_rlog_disk_name(\"%s\"): %d, %d",
              names[i].name, took, rank);
    }

    CHECK(ckpt_rank_dir(path, sizeof(path), "/a/1000-job", 3) == 0 && strcmp(path, "/a/1000-job/rank3") == 0,
          "rank dir: %s", path);
    CHECK(ckpt_slot_path(path, sizeof(path), "/a/1000-job/rank3", 1) == 0 &&
          strcmp(path, "/a/1000-job/rank3/slot1") == 0, "slot path: %s", path);
    CHECK(strcmp(ckpt_slot_name(0), "slot0") == 0, "slot name: %s", ckpt_slot_name(0));
    CHECK(ckpt_rlog_arena_path(path, sizeof(path), "/a/1000-job/rank3") == 0 &&
          strcmp(path, "/a/1000-job/rank3/" CKPT_RLOG_ARENA_NAME) == 0, "arena log: %s", path);
    CHECK(ckpt_rlog_disk_path(path, sizeof(path), "/logs", 3) == 0 && strcmp(path, "/logs/rank3.replay.log") == 0,
          "disk log: %s", path);

    /* What the writers make, the parsers take back. */
    int rank = -1;
    ckpt_rank_dir(path, sizeof(path), "/a", 42);
    CHECK(ckpt_rank_dir_name(strrchr(path, '/') + 1, &rank) && rank == 42, "rank dir %s read as %d", path, rank);
    ckpt_rlog_disk_path(path, sizeof(path), "/logs", 42);
    CHECK(ckpt_rlog_disk_name(strrchr(path, '/') + 1, &rank) && rank == 42, "disk log %s read as %d", path, rank);

    /* A path that does not fit is refused, never cut short in silence. */
    CHECK(ckpt_rank_dir(path, sizeof("/a/rank1") - 1, "/a", 1) == -ENAMETOOLONG, "a rank dir one byte short");
    CHECK(ckpt_rank_dir(path, sizeof("/a/rank1"), "/a", 1) == 0, "a rank dir that just fits");
    CHECK(ckpt_slot_path(path, 8, "/a/rank1", 0) == -ENAMETOOLONG, "a slot path too long");
    CHECK(ckpt_rlog_arena_path(path, 8, "/a/rank1") == -ENAMETOOLONG, "an arena log path too long");
    CHECK(ckpt_rlog_disk_path(path, 8, "/logs", 1) == -ENAMETOOLONG, "a disk log path too long");
    char root[PATH_MAX];
    memset(root, 'x', sizeof(root) - 1);
    root[sizeof(root) - 1] = '\0';
    CHECK(ckpt_arena_path(path, sizeof(path), root, "job", 0) == -ENAMETOOLONG, "an arena path too long");
    CHECK(ckpt_job_dir(path, sizeof(path), root, "job") == -ENAMETOOLONG, "a job dir too long");

    CHECK(ckpt_peers_root(path, sizeof(path), "/dev/shm/ckpt") == 0 && strcmp(path, "/dev/shm/ckpt/peers") == 0,
          "the peers' store: %s", path);
    CHECK(ckpt_peers_root(path, sizeof(path), root) == -ENAMETOOLONG, "a peers' store too long");

    /* A job's name: one rule for CKPT_JOB, --job and a name a peer sends. */
    char longest[64], over[65];
    memset(longest, 'j', sizeof(longest) - 1), longest[sizeof(longest) - 1] = '\0';
    memset(over, 'j', sizeof(over) - 1), over[sizeof(over) - 1] = '\0';
    const char *good[] = {"a", "job-1", "Job_2.v3", "x..y", longest};
    const char *bad[] = {"", ".", "..", ".hidden", "../etc", "a/b", "a b", "job\n", "peers/x", over};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        CHECK(ckpt_job_name_ok(good[i]), "'%s' is a job's name", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(!ckpt_job_name_ok(bad[i]), "'%s' is no job's name", bad[i]);

    check_job_dirs();
    return failures ? 1 : 0;
}
