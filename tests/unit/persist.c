/*
 * The persistence engine through its API (persist.h): generations of one
 * and two ranks over two directories come back bit-exact into a fresh
 * arena; identical ranks are written once; a torn or damaged generation
 * is skipped with its reason and the older one restored, and a failed
 * restore leaves the arena as it was; CKPT_PERSIST_KEEP generations stay;
 * a cancelled persist, a slot that changed under the copy, a job another
 * process is persisting and an iteration persisted twice leave nothing
 * behind; without registered
 * buffers (RLIMIT_MEMLOCK) it still works.  A rank's replay log kept on
 * disk beside the generations is named, not copied: the generation holds
 * the part its snapshot needs and that part's sum; a restore checks that
 * part and names the log from the arena, and refuses a log whose part differs (damaged, or
 * written again by another run); a restore that cuts the log short keeps
 * the older generations restorable.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "image.h"
#include "persist.h"
#include "persist_int.h"
#include "replay.h"
#include "check.h"

static char root[] = "/tmp/ckpt-persist-XXXXXX";

/* One case's directories: two persist directories, an arena, a restore target. */
struct place {
    char d[2][PATH_MAX], dirs[2 * PATH_MAX + 2], arena[PATH_MAX], back[PATH_MAX];
};

static void fresh(struct place *c, const char *name)
{
    snprintf(c->d[0], sizeof(c->d[0]), "%s/%s-d0", root, name);
    snprintf(c->d[1], sizeof(c->d[1]), "%s/%s-d1", root, name);
    snprintf(c->dirs, sizeof(c->dirs), "%s,%s", c->d[0], c->d[1]);
    snprintf(c->arena, sizeof(c->arena), "%s/%s-arena", root, name);
    snprintf(c->back, sizeof(c->back), "%s/%s-back", root, name);
    mkdir(c->d[0], 0755);
    mkdir(c->d[1], 0755);
}

static void pattern(void *p, size_t n, uint32_t seed)
{
    uint32_t *w = p, x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n / 4; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        w[i] = x;
    }
    memset((char *)p + n / 4 * 4, (int)seed, n % 4);
}

/* Commits an image of iteration it (about 2.2 MB in 64 KiB chunks, the
 * last one short) into a slot of rank's arena, and gives the rank a replay
 * log of loglen bytes; both from seed. */
static void make_rank(const char *arena, int rank, int slot, uint64_t it, uint32_t seed, size_t loglen)
{
    struct ckpt_rec recs[3] = {{.ordinal = 0, .size = 1500000, .bytes = 1500000},
                               {.ordinal = 1, .size = 700001, .bytes = 700001},
                               {.ordinal = 5, .size = 12345, .bytes = 12345}};
    struct ckpt_header h = {.rank = (uint32_t)rank, .world = 2, .generation = it, .iteration = it,
                            .chunk_bytes = 65536};
    struct ckpt_arena a;
    char why[256], path[PATH_MAX + 16];
    int moved;

    snprintf(h.job, sizeof(h.job), "job");
    if (ckpt_arena_open(&a, arena, "job", rank, 0, why, sizeof(why)) < 0) {
        printf("arena: %s\n", why);
        exit(1);
    }
    size_t len = ckpt_image_layout(&h, recs, 3);
    if (ckpt_arena_reserve(&a, slot, len, &moved) < 0)
        exit(1);
    ckpt_image_invalidate(a.base[slot]);
    for (int i = 0; i < 3; i++)
        pattern((char *)a.base[slot] + h.data_offset + recs[i].offset, recs[i].bytes, seed + (uint32_t)i);
    ckpt_image_commit(a.base[slot], &h, recs);
    snprintf(path, sizeof(path), "%s/replay.log", a.dir);
    ckpt_arena_close(&a);
    char *log = malloc(loglen);
    pattern(log, loglen, seed ^ 0xabcu);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(log, 1, loglen, f) != loglen || fclose(f) != 0)
        exit(1);
    free(log);
}

static void rank_dir(char *out, size_t n, const char *arena, int rank)
{
    ckpt_arena_path(out, n, arena, "job", rank);
}

/* Rank's image in slot `slot` of arena `from` is byte for byte the slot0 of
 * arena `to`, whose slot1 is empty, and their replay logs are equal. */
static void same_rank(const char *from, int slot, const char *to, int rank, const char *what)
{
    char a[PATH_MAX + 16], b[PATH_MAX + 16], dir[PATH_MAX];
    size_t alen, blen, elen;
    struct ckpt_header h;
    char why[256];

    rank_dir(dir, sizeof(dir), from, rank);
    snprintf(a, sizeof(a), "%s/slot%d", dir, slot);
    rank_dir(dir, sizeof(dir), to, rank);
    snprintf(b, sizeof(b), "%s/slot0", dir);
    char *x = slurp(a, &alen), *y = slurp(b, &blen);
    int rc = y ? ckpt_image_verify(y, blen, &h, why, sizeof(why)) : -ENOENT;
    CHECK(rc == 0 && blen == h.data_offset + h.data_bytes && blen <= alen && memcmp(x, y, blen) == 0,
          "%s: rank %d image not restored bit-exact (rc %d, %zu of %zu bytes)", what, rank, rc, blen, alen);
    free(x);
    free(y);
    snprintf(b, sizeof(b), "%s/slot1", dir);
    free(slurp(b, &elen));
    CHECK(elen == 0, "%s: rank %d slot1 not emptied", what, rank);
    rank_dir(dir, sizeof(dir), from, rank);
    snprintf(a, sizeof(a), "%s/replay.log", dir);
    rank_dir(dir, sizeof(dir), to, rank);
    snprintf(b, sizeof(b), "%s/replay.log", dir);
    x = slurp(a, &alen);
    y = slurp(b, &blen);
    CHECK(x && y && alen == blen && memcmp(x, y, alen) == 0, "%s: rank %d replay log differs", what, rank);
    free(x);
    free(y);
}

static struct ckpt_persist *engine(const struct place *c, unsigned keep, unsigned block_kb, unsigned rings)
{
    struct ckpt_persist_opts o = {.dirs = c->dirs, .depth = 4, .block_kb = block_kb, .keep = keep, .rings = rings};
    struct ckpt_persist *p;
    char why[512];
    int rc = ckpt_persist_open(&p, &o, why, sizeof(why));
    if (rc == -ENOSYS || rc == -EPERM) {
        printf("skipped: %s\n", why);
        exit(77);
    }
    if (rc < 0) {
        printf("open: %s\n", why);
        exit(1);
    }
    return p;
}

static const int ranks01[] = {0, 1};

static int save(struct ckpt_persist *p, const char *arena, unsigned nranks, uint64_t it,
                struct ckpt_persist_stats *st, char *why)
{
    struct ckpt_persist_req rq = {.arena = arena, .job = "job", .ranks = ranks01, .nranks = nranks, .iteration = it};
    return ckpt_persist_generation(p, &rq, st, why, 512);
}

static int restore(struct ckpt_persist *p, const char *arena, uint64_t it, struct ckpt_persist_stats *st, char *why)
{
    struct ckpt_persist_req rq = {.arena = arena, .job = "job", .iteration = it};
    return ckpt_persist_restore(p, &rq, st, why, 512);
}

static void gen_path(char *out, size_t n, const char *dir, uint64_t it, const char *file)
{
    snprintf(out, n, "%s/%u-job/gen-%llu%s%s", dir, (unsigned)geteuid(), (unsigned long long)it, file ? "/" : "",
             file ? file : "");
}

static bool exists(const char *dir, uint64_t it, const char *file)
{
    char path[PATH_MAX + 64];
    gen_path(path, sizeof(path), dir, it, file);
    return access(path, F_OK) == 0;
}

static long long file_size(const char *dir, uint64_t it, const char *file)
{
    char path[PATH_MAX + 64];
    struct stat st;
    gen_path(path, sizeof(path), dir, it, file);
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

struct progress {
    int calls, cancel_at;
    uint64_t done, total;
};

static int on_progress(void *arg, uint64_t done, uint64_t total)
{
    struct progress *pr = arg;
    pr->done = done;
    pr->total = total;
    return ++pr->calls == pr->cancel_at;
}

static void round_trips(void)
{
    struct ckpt_persist_stats st;
    struct place c;
    char why[512];

    /* 1 rank, 2 ranks, and 2 ranks with one ring for both directories, or
     * five rings for two directories (three share one, two the other). */
    for (unsigned v = 0; v < 4; v++) {
        unsigned n = v ? 2 : 1;
        const char *what = (const char *[]){"one rank", "two ranks", "one ring", "five rings"}[v];
        fresh(&c, (const char *[]){"one", "two", "ring", "rings"}[v]);
        struct ckpt_persist *p = engine(&c, 2, 16, (unsigned[]){0, 0, 1, 5}[v]);
        for (unsigned r = 0; r < n; r++)
            make_rank(c.arena, (int)r, 1, 7, 100 + r, r ? 3000 : (9u << 20) + 1234);
        struct progress pr = {0};
        struct ckpt_persist_req rq = {.arena = c.arena, .job = "job", .ranks = ranks01, .nranks = n,
                                      .progress = on_progress, .arg = &pr};
        int rc = ckpt_persist_generation(p, &rq, &st, why, sizeof(why));
        CHECK(rc == 0 && st.iteration == 7 && st.nranks == n, "persist %s: %d %s", what, rc, why);
        CHECK(pr.calls > 2 && pr.done == pr.total && pr.total > 2000000ull * n,
              "persist %s: progress %d calls, %llu of %llu bytes", what, pr.calls, (unsigned long long)pr.done,
              (unsigned long long)pr.total);
        long long s0 = file_size(c.d[0], 7, "stripe-0"), s1 = file_size(c.d[1], 7, "stripe-1");
        CHECK(s0 > 0 && s1 > 0 && s0 < 2 * s1 && s1 < 2 * s0, "%s: not striped over both directories: %lld, %lld",
              what, s0, s1);
        CHECK(exists(c.d[0], 7, "manifest") && !exists(c.d[1], 7, "manifest"), "%s: manifest misplaced", what);
        /* The target arena holds another run's snapshots: they must go. */
        for (unsigned r = 0; r < n; r++)
            make_rank(c.back, (int)r, 1, 99, 999, 4000);
        rc = restore(p, c.back, 0, &st, why);
        CHECK(rc == 0 && st.iteration == 7 && st.nranks == n, "restore %s: %d %s", what, rc, why);
        for (unsigned r = 0; r < n; r++)
            same_rank(c.arena, 1, c.back, (int)r, what);
        ckpt_persist_close(p);
    }
}

static void dedup(void)
{
    struct ckpt_persist_stats one, two;
    struct place c;
    char why[512];

    fresh(&c, "dedup");
    struct ckpt_persist *p = engine(&c, 2, 64, 0);
    make_rank(c.arena, 0, 0, 3, 42, 5000);
    int rc = save(p, c.arena, 1, 3, &one, why);
    CHECK(rc == 0, "dedup: one rank: %d %s", rc, why);
    make_rank(c.arena, 0, 1, 4, 42, 5000);
    make_rank(c.arena, 1, 1, 4, 42, 5000);
    rc = save(p, c.arena, 2, 4, &two, why);
    CHECK(rc == 0 && two.logical_bytes == 2 * one.logical_bytes && two.moved_bytes < one.moved_bytes * 11 / 10,
          "dedup: two identical ranks wrote %llu bytes, one rank %llu (rc %d %s)", (unsigned long long)two.moved_bytes,
          (unsigned long long)one.moved_bytes, rc, why);
    rc = restore(p, c.back, 4, &two, why);
    CHECK(rc == 0, "dedup: restore: %d %s", rc, why);
    same_rank(c.arena, 1, c.back, 0, "dedup");
    same_rank(c.arena, 1, c.back, 1, "dedup");

    /* A forged manifest, its checksum right, in which rank 1 names rank 0's
     * chunks (their sizes agree): refused, no chunk placed twice. */
    char path[PATH_MAX + 64];
    size_t len;
    gen_path(path, sizeof(path), c.d[0], 4, "manifest");
    struct ckpt_pm_header *m = (struct ckpt_pm_header *)slurp(path, &len);
    CHECK(m && m->nranks == 2, "dedup: the manifest of two ranks");
    if (m && m->nranks == 2) {
        pm_ranks(m)[1].data_ref = pm_ranks(m)[0].data_ref;
        pm_seal(m);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(m, 1, len, f) != len || fclose(f) != 0)
            failures++;
    }
    free(m);
    rc = restore(p, c.back, 4, &two, why);
    CHECK(rc < 0 && strstr(why, "cover its chunk map"), "dedup: a forged manifest restored: %d %s", rc, why);
    ckpt_persist_close(p);
}

struct listing {
    int n;
    uint64_t it[8];
    int status[8];
    char why[8][320];
};

static void collect(void *arg, const struct ckpt_persist_gen *g)
{
    struct listing *l = arg;
    if (l->n < 8) {
        l->it[l->n] = g->iteration;
        l->status[l->n] = g->status;
        snprintf(l->why[l->n++], sizeof(l->why[0]), "%s", g->why);
    }
}

static void damage(const struct place *c, int what)
{
    char path[PATH_MAX + 64];
    switch (what) {
    case 0: gen_path(path, sizeof(path), c->d[0], 20, "manifest"); unlink(path); break;
    case 1: gen_path(path, sizeof(path), c->d[0], 20, "manifest"); failures += truncate(path, 200) != 0; break;
    case 2: gen_path(path, sizeof(path), c->d[1], 20, "stripe-1"); failures += truncate(path, 4096) != 0; break;
    case 3: gen_path(path, sizeof(path), c->d[1], 20, "stripe-1"); unlink(path); break;
    case 5: { /* a writer's bug, not damage: the checksum is right */
        gen_path(path, sizeof(path), c->d[0], 20, "manifest");
        size_t len;
        struct ckpt_pm_header *m = (struct ckpt_pm_header *)slurp(path, &len);
        pm_extents(m)[0].sum ^= 1;
        pm_seal(m);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(m, 1, len, f) != len || fclose(f) != 0)
            failures++;
        free(m);
        break;
    }
    case 4: case 6: {
        gen_path(path, sizeof(path), c->d[what == 4 ? 0 : 1], 20, what == 4 ? "manifest" : "stripe-1");
        FILE *f = fopen(path, "r+b");
        int ch = f && fseek(f, 300, SEEK_SET) == 0 ? fgetc(f) : EOF;
        if (ch == EOF || fseek(f, 300, SEEK_SET) != 0 || fputc(ch ^ 0x10, f) == EOF)
            failures++;
        if (f)
            fclose(f);
        break;
    }
    }
}

/* Generations of iterations 10 and 20; 20 is damaged in each way. */
static void torn(void)
{
    static const struct {
        const char *what, *says;
        uint64_t cheap;        /* what newest finds without reading the data */
    } cases[] = {
        {"manifest missing", "no manifest", 10},
        {"manifest truncated", "truncated", 10},
        {"stripe truncated", "torn", 10},
        {"stripe missing", "missing", 10},
        {"manifest byte flipped", "checksum", 10},
        {"manifest resealed with a wrong chunk sum", "does not match its image header", 10},
        {"stripe byte flipped", "do not match", 20},
    };
    struct ckpt_persist_stats st;
    struct ckpt_persist_gen g;
    char why[512], cmd[PATH_MAX + 16];

    for (int k = 0; k < (int)(sizeof(cases) / sizeof(cases[0])); k++) {
        struct place c;
        fresh(&c, "torn");
        struct ckpt_persist *p = engine(&c, 3, 16, 0);
        make_rank(c.arena, 0, 0, 10, 7, 100000);
        make_rank(c.arena, 0, 1, 20, 8, 100000);
        int rc = save(p, c.arena, 1, 10, &st, why);
        int rc2 = save(p, c.arena, 1, 20, &st, why);
        CHECK(rc == 0 && rc2 == 0, "%s: persist: %d %d %s", cases[k].what, rc, rc2, why);
        damage(&c, k);
        rc = ckpt_persist_newest(p, "job", 0, 0, &g, why, sizeof(why));
        CHECK(rc == 0 && g.iteration == cases[k].cheap, "%s: newest found %llu (rc %d %s)", cases[k].what,
              (unsigned long long)g.iteration, rc, why);
        rc = ckpt_persist_newest(p, "job", 0, CKPT_PERSIST_VERIFY, &g, why, sizeof(why));
        CHECK(rc == 0 && g.iteration == 10, "%s: verified newest found %llu (rc %d %s)", cases[k].what,
              (unsigned long long)g.iteration, rc, why);
        struct listing l = {0};
        ckpt_persist_list(p, "job", CKPT_PERSIST_VERIFY, collect, &l, why, sizeof(why));
        CHECK(l.n == 2 && l.it[0] == 20 && l.status[0] < 0 && strstr(l.why[0], cases[k].says) && l.status[1] == 0,
              "%s: listed %d generations, the newest %llu with '%s'", cases[k].what, l.n,
              (unsigned long long)l.it[0], l.why[0]);
        /* The newest that restores is 10; asking for 20 fails and changes nothing. */
        rc = restore(p, c.back, 0, &st, why);
        CHECK(rc == 0 && st.iteration == 10, "%s: restore fell back to %llu (rc %d %s)", cases[k].what,
              (unsigned long long)st.iteration, rc, why);
        rc = restore(p, c.back, 20, &st, why);
        CHECK(rc < 0, "%s: the damaged generation was restored", cases[k].what);
        same_rank(c.arena, 0, c.back, 0, cases[k].what);
        char dir[PATH_MAX], left[PATH_MAX + 32];
        rank_dir(dir, sizeof(dir), c.back, 0);
        snprintf(left, sizeof(left), "%s/slot0.from-disk", dir);
        CHECK(access(left, F_OK) != 0, "%s: a failed restore left %s", cases[k].what, left);
        ckpt_persist_close(p);
        snprintf(cmd, sizeof(cmd), "rm -rf %s/torn-*", root);
        if (system(cmd) != 0)
            failures++;
    }
}

/* Keep 2: after 10, 20 and 30, only 20 and 30 remain, in both directories;
 * a partial generation is cleared too.  Then the faults that must leave
 * nothing: cancel, another persist of the job, an iteration twice, a slot
 * changed under the copy. */
static void keep_and_leave_nothing(void)
{
    struct ckpt_persist_stats st;
    struct place c;
    char why[512], path[PATH_MAX + 64];
    int rc;

    fresh(&c, "keep");
    struct ckpt_persist *p = engine(&c, 2, 16, 0);
    for (uint64_t it = 10; it <= 30; it += 10) {
        make_rank(c.arena, 0, it == 20, it, (uint32_t)it, 5000);
        if (it == 30) {
            gen_path(path, sizeof(path), c.d[1], 25, NULL);
            mkdir(path, 0700);
        }
        rc = save(p, c.arena, 1, 0, &st, why);
        CHECK(rc == 0 && st.iteration == it, "keep: persist %llu: %d %s", (unsigned long long)it, rc, why);
    }
    for (int d = 0; d < 2; d++)
        CHECK(!exists(c.d[d], 10, NULL) && exists(c.d[d], 20, NULL) && exists(c.d[d], 30, NULL) &&
                  !exists(c.d[d], 25, NULL),
              "keep: directory %d holds the wrong generations", d);

    make_rank(c.arena, 0, 1, 40, 40, 5000);
    struct progress pr = {.cancel_at = 3};
    struct ckpt_persist_req rq = {.arena = c.arena, .job = "job", .ranks = ranks01, .nranks = 1,
                                  .progress = on_progress, .arg = &pr};
    rc = ckpt_persist_generation(p, &rq, &st, why, sizeof(why));
    /* Chunks in flight still finish and are reported; nothing new starts. */
    CHECK(rc == -ECANCELED && pr.calls >= 3 && pr.done < pr.total / 2 && strstr(why, "cancelled"),
          "cancel: %d '%s' after %d calls, %llu of %llu bytes", rc, why, pr.calls, (unsigned long long)pr.done,
          (unsigned long long)pr.total);
    CHECK(!exists(c.d[0], 40, NULL) && !exists(c.d[1], 40, NULL), "cancel: the partial generation is left");

    /* Another process persisting the same job holds its lock. */
    snprintf(path, sizeof(path), "%s/%u-job/lock", c.d[0], (unsigned)geteuid());
    int lock = open(path, O_RDWR);
    CHECK(lock >= 0 && flock(lock, LOCK_EX) == 0, "cannot take %s", path);
    rc = save(p, c.arena, 1, 40, &st, why);
    CHECK(rc == -EBUSY && strstr(why, path), "busy: %d '%s'", rc, why);
    CHECK(!exists(c.d[0], 40, NULL) && !exists(c.d[1], 40, NULL), "busy: a partial generation is left");
    close(lock);

    rc = save(p, c.arena, 1, 30, &st, why);
    CHECK(rc == -EEXIST && strstr(why, "already persisted"), "twice: %d '%s'", rc, why);
    CHECK(exists(c.d[0], 30, "manifest") && exists(c.d[1], 30, "stripe-1"), "twice: the complete one was touched");

    /* A byte of the slot changes after its commit, as when the rank writes
     * over it during the persist. */
    char dir[PATH_MAX], slot[PATH_MAX + 16];
    rank_dir(dir, sizeof(dir), c.arena, 0);
    snprintf(slot, sizeof(slot), "%s/slot1", dir);
    FILE *f = fopen(slot, "r+b");
    if (!f || fseek(f, 700000, SEEK_SET) != 0 || fputc(0x5a, f) == EOF || fclose(f) != 0)
        failures++;
    rc = save(p, c.arena, 1, 40, &st, why);
    CHECK(rc == -ESTALE && strstr(why, "changed while"), "changed slot: %d '%s'", rc, why);
    CHECK(!exists(c.d[0], 40, NULL) && !exists(c.d[1], 40, NULL), "changed slot: the partial generation is left");
    struct ckpt_persist_gen g;
    rc = ckpt_persist_newest(p, "job", 0, CKPT_PERSIST_VERIFY, &g, why, sizeof(why));
    CHECK(rc == 0 && g.iteration == 30, "after the faults the newest is %llu (rc %d)", (unsigned long long)g.iteration,
          rc);
    ckpt_persist_close(p);
}

/* Without CAP_IPC_LOCK and with 64 KiB of RLIMIT_MEMLOCK the 4 MiB of
 * buffers cannot be registered: it must work without. */
static void unregistered(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        failures = 0;
        struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct cap[2];
        if (syscall(SYS_capget, &hdr, cap) == 0) {
            cap[0].effective &= ~(1u << CAP_IPC_LOCK);
            cap[0].permitted &= ~(1u << CAP_IPC_LOCK);
            syscall(SYS_capset, &hdr, cap);
        }
        struct rlimit rl = {65536, 65536};
        setrlimit(RLIMIT_MEMLOCK, &rl);
        struct ckpt_persist_stats st;
        struct place c;
        char why[512];
        fresh(&c, "unreg");
        struct ckpt_persist *p = engine(&c, 2, 1024, 0);
        make_rank(c.arena, 0, 0, 5, 5, 5000);
        int rc = save(p, c.arena, 1, 5, &st, why);
        CHECK(rc == 0 && !st.registered, "unregistered: persist %d registered %d %s", rc, st.registered, why);
        rc = restore(p, c.back, 5, &st, why);
        CHECK(rc == 0, "unregistered: restore %d %s", rc, why);
        same_rank(c.arena, 0, c.back, 0, "unregistered");
        ckpt_persist_close(p);
        fflush(stdout);
        _exit(failures ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "unregistered buffers: child status %d", status);
}

/* iterations from..to of a log being written: each a copy of 300 bytes
 * (seeded) and its end. */
static void log_iterations(uint64_t from, uint64_t to, uint32_t seed)
{
    char payload[300];
    for (uint64_t it = from; it <= to; it++) {
        pattern(payload, sizeof(payload), seed + (uint32_t)it);
        ckpt_rlog_append(CKPT_RL_D2H, 1, sizeof(payload), 1, 0, payload, sizeof(payload));
        ckpt_rlog_append(CKPT_RL_ITER, 1, it, 0, 0, NULL, 0);
        ckpt_rlog_flush();
    }
}

/* Rank 0's restored log in arena is the log on disk, named by a stub,
 * whose records end iteration it (somewhere). */
static bool restored_log(const char *arena, const char *disk, uint64_t it)
{
    char dir[PATH_MAX], why[256], where[PATH_MAX];
    uint64_t last = 0;
    rank_dir(dir, sizeof(dir), arena, 0);
    return ckpt_rlog_where(dir, where, sizeof(where)) == 1 && strcmp(where, disk) == 0 &&
           ckpt_rlog_verify(dir, &last, why, sizeof(why)) == 0 && last >= it;
}

static void log_beside(void)
{
    struct ckpt_persist_stats st;
    struct ckpt_pm_header *m = NULL;
    struct place c;
    char why[512], jobdir[PATH_MAX + 16], disk[PATH_MAX + 64], dir[PATH_MAX];

    fresh(&c, "beside");
    struct ckpt_persist *p = engine(&c, 3, 16, 0);
    CHECK(ckpt_persist_job_dir(p, "job", jobdir, sizeof(jobdir), why, sizeof(why)) == 0, "job dir: %s", why);
    CHECK(ckpt_rlog_disk_path(disk, sizeof(disk), jobdir, 0) == 0, "the log's path in %s", jobdir);
    make_rank(c.arena, 0, 1, 70, 5, 100);
    rank_dir(dir, sizeof(dir), c.arena, 0);
    CHECK(ckpt_rlog_create(dir, disk, 4096, why, sizeof(why)) == 0, "log on disk: %s", why);
    log_iterations(1, 80, 1); /* the rank is past its snapshot of 70 */
    int rc = save(p, c.arena, 1, 70, &st, why);
    CHECK(rc == 0, "persist 70: %s", why);
    rc = pm_load(jobdir, 70, "job", 2, &m, why, sizeof(why));
    CHECK(rc == 0 && pm_ranks(m)[0].log_where == CKPT_PM_LOG_FILE && pm_ranks(m)[0].log_chunks == 0 &&
              m->stored_bytes < pm_ranks(m)[0].image_bytes + 8192,
          "the generation names the log, and holds none of it: %d %s (%llu bytes stored)", rc, why,
          m ? (unsigned long long)m->stored_bytes : 0ull);
    free(m);
    rc = restore(p, c.back, 70, &st, why);
    CHECK(rc == 0 && restored_log(c.back, disk, 70), "restore 70: %d %s", rc, why);

    /* Later generations read on where the last one stopped; the log grows. */
    make_rank(c.arena, 0, 0, 150, 6, 100); /* (its made-up log gives way to the one on disk) */
    rank_dir(dir, sizeof(dir), c.arena, 0);
    CHECK(ckpt_rlog_point(dir, disk, why, sizeof(why)) == 0, "point at %s: %s", disk, why);
    log_iterations(81, 160, 1);
    CHECK(save(p, c.arena, 1, 150, &st, why) == 0, "persist 150: %s", why);
    CHECK(restore(p, c.back, 150, &st, why) == 0 && restored_log(c.back, disk, 150), "restore 150: %s", why);
    ckpt_rlog_close();

    /* A restore of 70 goes live: the log is cut there and written on, with
     * a new lineage.  150 belongs to the run it replaced (retired when the
     * restore goes live, ckpt_persist_retire); 70 still restores, and a
     * generation of the new run reads the log afresh. */
    CHECK(ckpt_rlog_open_replay(dir, disk, 70, 4096, why, sizeof(why)) == 0 && ckpt_rlog_go_live() == 0,
          "restore 70 and go live: %s", why);
    log_iterations(71, 200, 2);
    ckpt_rlog_close();
    rc = restore(p, c.back, 150, &st, why);
    CHECK(rc == -EBADMSG && strstr(why, "replay log") && strstr(why, "not the ones"),
          "150, whose log part was written again, is refused: %d %s", rc, why);
    CHECK(restore(p, c.back, 70, &st, why) == 0 && restored_log(c.back, disk, 70), "70 after the cut: %s", why);
    make_rank(c.arena, 0, 1, 110, 7, 100);
    rank_dir(dir, sizeof(dir), c.arena, 0);
    CHECK(ckpt_rlog_point(dir, disk, why, sizeof(why)) == 0, "point at %s: %s", disk, why);
    CHECK(save(p, c.arena, 1, 110, &st, why) == 0, "persist 110 after the cut: %s", why);
    CHECK(restore(p, c.back, 110, &st, why) == 0 && restored_log(c.back, disk, 110), "restore 110: %s", why);

    /* A damaged byte in the part a generation needs: refused, naming the log. */
    int fd = open(disk, O_RDWR);
    char b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, 200) == 1, "read %s", disk);
    b ^= 1;
    CHECK(pwrite(fd, &b, 1, 200) == 1, "damage %s", disk);
    close(fd);
    rc = restore(p, c.back, 110, &st, why);
    CHECK(rc == -EBADMSG && strstr(why, disk), "a damaged log is refused, naming it: %d %s", rc, why);
    /* A log gone: refused too. */
    unlink(disk);
    rc = restore(p, c.back, 70, &st, why);
    CHECK(rc == -EBADMSG && strstr(why, disk), "a log gone is refused, naming it: %d %s", rc, why);
    ckpt_persist_close(p);
}

int main(void)
{
    if (!mkdtemp(root))
        return 1;
    round_trips();
    dedup();
    torn();
    keep_and_leave_nothing();
    unregistered();
    log_beside();
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
