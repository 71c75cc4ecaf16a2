/*
 * The arena's files: private directories and files, refusal of paths that
 * belong to someone else or are open to others or are symlinks, growth of
 * a slot, files that outlive the mapping, and the retiring of a snapshot
 * newer than a restore point.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "check.h"
#include "image.h"

int main(void)
{
    char root[] = "/tmp/ckpt-arena-XXXXXX", why[512], path[PATH_MAX + 64];
    struct ckpt_arena a;
    struct stat st;
    int moved;

    if (!mkdtemp(root))
        return 1;

    int rc = ckpt_arena_open(&a, root, "job1", 2, 0, why, sizeof(why));
    CHECK(rc == 0, "open: %d %s", rc, why);
    snprintf(path, sizeof(path), "%s/%u-job1", root, (unsigned)geteuid());
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700, "job dir mode %o", st.st_mode & 0777);
    snprintf(path, sizeof(path), "%s/%u-job1/rank2/slot1", root, (unsigned)geteuid());
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "slot mode %o", st.st_mode & 0777);

    rc = ckpt_arena_reserve(&a, 1, 1 << 20, &moved);
    CHECK(rc == 0 && moved && a.len[1] >= (1 << 20), "reserve: %d moved %d len %zu", rc, moved, a.len[1]);
    memset(a.base[1], 0xab, 1 << 20);
    rc = ckpt_arena_reserve(&a, 1, 1000, &moved);
    CHECK(rc == 0 && !moved, "smaller reserve remapped");
    rc = ckpt_arena_reserve(&a, 1, 4 << 20, &moved);
    CHECK(rc == 0 && moved && ((unsigned char *)a.base[1])[12345] == 0xab, "grow lost the data");
    ckpt_arena_close(&a);
    CHECK(stat(path, &st) == 0 && st.st_size >= (4 << 20), "slot file gone or short after close");

    /* The rank's own process holds the directory: another process (here a
     * child, which inherits no POSIX lock) is refused it and told who holds
     * it, and gets it once the owner lets go. */
    rc = ckpt_arena_open(&a, root, "job1", 2, CKPT_ARENA_OWN, why, sizeof(why));
    CHECK(rc == 0 && a.owner >= 0, "own: %d %s", rc, why);
    pid_t child = fork();
    if (child == 0) {
        struct ckpt_arena b;
        rc = ckpt_arena_open(&b, root, "job1", 2, CKPT_ARENA_OWN | CKPT_ARENA_FRESH, why, sizeof(why));
        _exit(rc == -EBUSY && b.holder == getppid() && strstr(why, "in use by process") ? 0 : 1);
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a second owner was not refused");
    CHECK(stat(path, &st) == 0 && st.st_size >= (4 << 20), "the refused open emptied a slot");
    ckpt_arena_close(&a);
    if ((child = fork()) == 0) {
        struct ckpt_arena b;
        _exit(ckpt_arena_open(&b, root, "job1", 2, CKPT_ARENA_OWN, why, sizeof(why)) == 0 ? 0 : 1);
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the directory stayed held after its owner closed it");

    /* A job directory opened to others is refused, not used. */
    snprintf(path, sizeof(path), "%s/%u-job1", root, (unsigned)geteuid());
    chmod(path, 0755);
    rc = ckpt_arena_open(&a, root, "job1", 2, 0, why, sizeof(why));
    CHECK(rc == -EPERM && strstr(why, "0700"), "open dir: rc %d '%s'", rc, why);
    chmod(path, 0700);

    /* A symlink planted where a rank directory goes is never followed. */
    snprintf(path, sizeof(path), "%s/%u-job1/rank5", root, (unsigned)geteuid());
    if (symlink("/tmp", path) == 0) {
        rc = ckpt_arena_open(&a, root, "job1", 5, 0, why, sizeof(why));
        CHECK(rc == -ENOTDIR && strstr(why, "symlink"), "symlink: rc %d '%s'", rc, why);
    }
    rc = ckpt_arena_open(&a, root, "../evil", 0, 0, why, sizeof(why));
    CHECK(rc == -EINVAL, "job with a slash accepted");

    /* Retiring: only a verified snapshot of this job and rank, newer than
     * the restore point, loses its magic; a damaged one is left as it is. */
    struct ckpt_rec rec = {.ordinal = 0, .size = 8192, .bytes = 8192};
    struct ckpt_header h = {.rank = 2, .world = 4, .generation = 4, .iteration = 20, .nallocs = 1,
                            .chunk_bytes = 4096};
    struct ckpt_header got;
    uint64_t it = 0;
    snprintf(h.job, sizeof(h.job), "job1");
    size_t len = ckpt_image_layout(&h, &rec, 1);
    rc = ckpt_arena_open(&a, root, "job1", 2, 0, why, sizeof(why));
    CHECK(rc == 0 && ckpt_arena_reserve(&a, 0, len, &moved) == 0, "open for retiring: %d %s", rc, why);
    ckpt_image_commit(a.base[0], &h, &rec);
    CHECK(ckpt_slot_retire(a.fd[0], "job1", 2, 20, &it) == 0, "retired a snapshot of the restore point itself");
    CHECK(ckpt_slot_retire(a.fd[0], "job2", 2, 15, &it) == 0, "retired another job's snapshot");
    CHECK(ckpt_slot_retire(a.fd[0], "job1", 3, 15, &it) == 0, "retired another rank's snapshot");
    CHECK(ckpt_image_verify(a.base[0], len, &got, why, sizeof(why)) == 0, "a kept snapshot no longer verifies: %s",
          why);
    rc = ckpt_slot_retire(a.fd[0], "job1", 2, 15, &it);
    CHECK(rc == 1 && it == 20, "retire after 15: %d, iteration %llu", rc, (unsigned long long)it);
    CHECK(ckpt_image_verify(a.base[0], len, &got, why, sizeof(why)) == -ENODATA, "a retired snapshot still reads");
    ckpt_image_commit(a.base[0], &h, &rec);
    ((struct ckpt_header *)a.base[0])->time_ns ^= 1; /* the header no longer verifies */
    CHECK(ckpt_slot_retire(a.fd[0], "job1", 2, 15, &it) == 0, "retired a damaged header");
    CHECK(ckpt_image_verify(a.base[0], len, &got, why, sizeof(why)) == -EBADMSG, "a damaged header lost its magic");
    ckpt_arena_close(&a);

    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
