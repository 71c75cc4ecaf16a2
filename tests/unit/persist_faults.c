/*
 * The persistence engine's faults: a full disk (a small tmpfs this test
 * mounts), a read-only one, a missing directory, and job directories that
 * belong to another user, are open to others or are symlinks.  Each fails
 * with its errno and one line naming the path, removes the partial
 * generation, and leaves the complete one restorable; a read-only disk
 * still restores.  Exits 77 after the other checks when tmpfs cannot be
 * mounted here (the full and read-only disks need it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "image.h"
#include "persist.h"
#include "check.h"

static char root[] = "/tmp/ckpt-persist-faults-XXXXXX", arena[PATH_MAX], back[PATH_MAX];
static const int rank0[] = {0};

/* A committed image of 1.2 MB (64 KiB chunks, none alike) in slot it/10 % 2 of
 * rank 0, and a replay log. */
static void make_image(uint64_t it)
{
    struct ckpt_rec rec = {.ordinal = 0, .size = 1200000, .bytes = 1200000};
    struct ckpt_header h = {.world = 1, .generation = it, .iteration = it, .chunk_bytes = 65536};
    struct ckpt_arena a;
    char why[256], path[PATH_MAX + 16];
    int moved, slot = (int)(it / 10 % 2);

    snprintf(h.job, sizeof(h.job), "job");
    if (ckpt_arena_open(&a, arena, "job", 0, 0, why, sizeof(why)) < 0) {
        printf("arena: %s\n", why);
        exit(1);
    }
    size_t len = ckpt_image_layout(&h, &rec, 1);
    if (ckpt_arena_reserve(&a, slot, len, &moved) < 0)
        exit(1);
    ckpt_image_invalidate(a.base[slot]);
    /* Words that differ everywhere: no two chunks deduplicate. */
    uint32_t *w = (uint32_t *)((char *)a.base[slot] + h.data_offset);
    for (size_t i = 0; i < rec.size / 4; i++)
        w[i] = (uint32_t)(it * 1000003u + i);
    ckpt_image_commit(a.base[slot], &h, &rec);
    snprintf(path, sizeof(path), "%s/replay.log", a.dir);
    ckpt_arena_close(&a);
    FILE *f = fopen(path, "wb");
    if (!f || fprintf(f, "log of iteration %llu\n", (unsigned long long)it) < 0 || fclose(f) != 0)
        exit(1);
}

static struct ckpt_persist *engine(const char *dirs)
{
    struct ckpt_persist_opts o = {.dirs = dirs, .depth = 4, .block_kb = 64, .keep = 2};
    struct ckpt_persist *p;
    char why[512];
    int rc = ckpt_persist_open(&p, &o, why, sizeof(why));
    if (rc < 0) {
        printf("open: %s\n", why);
        exit(rc == -ENOSYS || rc == -EPERM ? 77 : 1);
    }
    return p;
}

static int save(struct ckpt_persist *p, uint64_t it, char *why)
{
    struct ckpt_persist_req rq = {.arena = arena, .job = "job", .ranks = rank0, .nranks = 1, .iteration = it};
    struct ckpt_persist_stats st;
    return ckpt_persist_generation(p, &rq, &st, why, 512);
}

/* The newest generation restores, and is `it`. */
static void restores(struct ckpt_persist *p, uint64_t it, const char *what)
{
    struct ckpt_persist_req rq = {.arena = back, .job = "job"};
    struct ckpt_persist_stats st;
    char why[512];
    int rc = ckpt_persist_restore(p, &rq, &st, why, sizeof(why));
    CHECK(rc == 0 && st.iteration == it, "%s: restored %llu, not %llu (rc %d %s)", what,
          (unsigned long long)st.iteration, (unsigned long long)it, rc, why);
}

static bool has_gen(const char *dir, uint64_t it)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%u-job/gen-%llu", dir, (unsigned)geteuid(), (unsigned long long)it);
    return access(path, F_OK) == 0;
}

static void subdir(char *out, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", root, name);
    mkdir(out, 0755);
}

/* A directory that does not exist, and job directories that are not this
 * user's private ones. */
static void bad_dirs(void)
{
    char ok[PATH_MAX], missing[PATH_MAX], dirs[2 * PATH_MAX + 2], why[512], job[PATH_MAX + 16];

    subdir(ok, "ok");
    snprintf(missing, sizeof(missing), "%s/not-there", root);
    snprintf(dirs, sizeof(dirs), "%s,%s", ok, missing);
    struct ckpt_persist *p = engine(dirs);
    int rc = save(p, 10, why);
    CHECK(rc == -ENOENT && strstr(why, missing) && strstr(why, "does not exist"), "missing: %d '%s'", rc, why);
    CHECK(!has_gen(ok, 10), "missing: a partial generation is left in the other directory");
    ckpt_persist_close(p);

    static const struct {
        const char *what, *says;
        int expect;
    } cases[] = {
        {"owned by another user", "belongs to uid 65534", -EPERM},
        {"open to others", "mode 755", -EPERM},
        {"a symlink", "never followed", -ENOTDIR},
    };
    for (int k = 0; k < 3; k++) {
        char d[PATH_MAX];
        subdir(d, "bad");
        snprintf(job, sizeof(job), "%s/%u-job", d, (unsigned)geteuid());
        int made = k == 2 ? symlink(ok, job) : mkdir(job, 0700);
        if (made != 0 || (k == 1 && chmod(job, 0755) != 0))
            failures++;
        if (k == 0 && (geteuid() != 0 || chown(job, 65534, 65534) != 0)) {
            printf("skipped: %s (needs root to give a directory away)\n", cases[k].what);
            rmdir(job);
            continue;
        }
        snprintf(dirs, sizeof(dirs), "%s,%s", d, ok);
        p = engine(dirs);
        rc = save(p, 10, why);
        CHECK(rc == cases[k].expect && strstr(why, job) && strstr(why, cases[k].says), "%s: %d '%s'", cases[k].what,
              rc, why);
        struct ckpt_persist_req rq = {.arena = back, .job = "job"};
        struct ckpt_persist_stats st;
        rc = ckpt_persist_restore(p, &rq, &st, why, sizeof(why));
        CHECK(rc == cases[k].expect, "%s: restore read from it: %d '%s'", cases[k].what, rc, why);
        ckpt_persist_close(p);
        k == 2 ? unlink(job) : rmdir(job);
        CHECK(!has_gen(ok, 10), "%s: a partial generation is left in the other directory", cases[k].what);
    }
}

/* A 1 MiB disk as the first directory: iteration 10 fits, 20 does not. */
static void full_disk(const char *small, const char *big)
{
    char dirs[2 * PATH_MAX + 2], why[512];
    snprintf(dirs, sizeof(dirs), "%s,%s", small, big);
    struct ckpt_persist *p = engine(dirs);
    make_image(10);
    int rc = save(p, 10, why);
    CHECK(rc == 0, "full disk: the first generation: %d %s", rc, why);
    make_image(20);
    rc = save(p, 20, why);
    CHECK(rc == -ENOSPC && strstr(why, small) && strstr(why, "No space"), "full disk: %d '%s'", rc, why);
    CHECK(!has_gen(small, 20) && !has_gen(big, 20), "full disk: the partial generation is left");
    CHECK(has_gen(small, 10) && has_gen(big, 10), "full disk: the complete generation was touched");
    restores(p, 10, "full disk");
    ckpt_persist_close(p);
}

/* Read-only from the start, then remounted read-only under a complete
 * generation: persisting fails naming the path; restoring still works. */
static void read_only(const char *ro, const char *big)
{
    char dirs[2 * PATH_MAX + 2], why[512];
    snprintf(dirs, sizeof(dirs), "%s,%s", ro, big);
    struct ckpt_persist *p = engine(dirs);
    int rc = save(p, 20, why);
    CHECK(rc == -EROFS && strstr(why, ro), "read-only: %d '%s'", rc, why);
    CHECK(!has_gen(big, 20), "read-only: a partial generation is left in the other directory");
    CHECK(mount("tmpfs", ro, NULL, MS_REMOUNT, "size=8m") == 0, "cannot remount %s read-write", ro);
    rc = save(p, 20, why);
    CHECK(rc == 0, "read-write again: %d %s", rc, why);
    CHECK(mount("tmpfs", ro, NULL, MS_REMOUNT | MS_RDONLY, "size=8m") == 0, "cannot remount %s read-only", ro);
    make_image(30);
    rc = save(p, 30, why);
    CHECK(rc == -EROFS && strstr(why, ro), "remounted read-only: %d '%s'", rc, why);
    CHECK(!has_gen(big, 30), "remounted read-only: a partial generation is left");
    restores(p, 20, "read-only");
    ckpt_persist_close(p);
}

int main(void)
{
    char small[PATH_MAX], ro[PATH_MAX], big[PATH_MAX], cmd[PATH_MAX + 16];

    if (!mkdtemp(root))
        return 1;
    snprintf(arena, sizeof(arena), "%s/arena", root);
    snprintf(back, sizeof(back), "%s/back", root);
    make_image(10);
    bad_dirs();
    subdir(small, "small");
    subdir(ro, "ro");
    subdir(big, "big");
    bool mounted = mount("tmpfs", small, "tmpfs", 0, "size=1m") == 0 &&
                   mount("tmpfs", ro, "tmpfs", MS_RDONLY, "size=8m") == 0;
    if (mounted) {
        full_disk(small, big);
        read_only(ro, big);
    }
    umount2(ro, MNT_DETACH);
    umount2(small, MNT_DETACH);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        failures++;
    if (!failures && !mounted) {
        printf("skipped: a full and a read-only disk (cannot mount tmpfs here)\n");
        return 77;
    }
    return failures ? 1 : 0;
}
