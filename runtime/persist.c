/*
 * The persistence engine's set-up and its view of the directories: the
 * rings and their registered buffers, the per-job directory in each persist
 * directory (checked like the arena's: this user's, private, never a
 * symlink), and finding the generations on disk, newest first, with the
 * reason each incomplete one is not used.  Writing a generation is in
 * persist_save.c, reading one back in persist_restore.c.  Nothing here
 * writes into a generation; the only thing it removes is a generation
 * directory it is asked to remove.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "log.h"
#include "persist_int.h"
#include "util.h"

void ckpt_persist_opts_from_config(struct ckpt_persist_opts *o)
{
    *o = (struct ckpt_persist_opts){
        .dirs = ckpt_cfg_str(CFG_PERSIST_DIRS),
        .depth = (unsigned)ckpt_cfg_int(CFG_IO_DEPTH),
        .block_kb = (unsigned)ckpt_cfg_int(CFG_IO_BLOCK_KB),
        .keep = (unsigned)ckpt_cfg_int(CFG_PERSIST_KEEP),
        .fault = ckpt_cfg_str(CFG_FAULT),
    };
}

int pdir_split(struct ckpt_persist *p, const char *list, char *why, size_t whylen)
{
    const char *s = list ? list : "";
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n) {
            if (p->ndirs == CKPT_PERSIST_MAX_DIRS || n >= PATH_MAX) {
                snprintf(why, whylen, "CKPT_PERSIST_DIRS: more than %d directories or a path too long",
                         CKPT_PERSIST_MAX_DIRS);
                return -EINVAL;
            }
            memcpy(p->dirs[p->ndirs], s, n);
            p->dirs[p->ndirs++][n] = '\0';
        }
        s += n + (s[n] == ',');
    }
    if (!p->ndirs) {
        snprintf(why, whylen, "no persist directory (CKPT_PERSIST_DIRS is empty)");
        return -EINVAL;
    }
    return 0;
}

/* Registered buffers count against RLIMIT_MEMLOCK (without CAP_IPC_LOCK):
 * raise the soft limit as far as the hard one allows, and where even that
 * is too little, go on with unregistered buffers. */
static void register_buffers(struct ckpt_persist *p, struct pio_ring *r)
{
    struct iovec iov[p->depth];
    for (unsigned i = 0; i < p->depth; i++)
        iov[i] = (struct iovec){.iov_base = r->buf + (size_t)i * p->block, .iov_len = p->block};
    int rc = io_uring_register_buffers(&r->ring, iov, p->depth);
    struct rlimit rl;
    if (rc == -ENOMEM && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_MEMLOCK, &rl) == 0)
            rc = io_uring_register_buffers(&r->ring, iov, p->depth);
    }
    r->fixed = rc == 0;
    if (rc < 0)
        ckpt_log_once(CKPT_WARN, "cannot register %zu KiB of I/O buffers with io_uring (%s; see RLIMIT_MEMLOCK): "
                      "persisting with unregistered buffers", (size_t)p->depth * p->block / 1024, strerror(-rc));
}

int ckpt_persist_open(struct ckpt_persist **out, const struct ckpt_persist_opts *o, char *why, size_t whylen)
{
    struct ckpt_persist *p = calloc(1, sizeof(*p));
    int rc;

    *out = NULL;
    if (!p) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    if ((rc = pdir_split(p, o->dirs, why, whylen)) < 0)
        goto fail;
    rc = -EINVAL;
    if (!o->depth || o->depth > 4096) {
        snprintf(why, whylen, "CKPT_IO_DEPTH=%u: expected 1..4096", o->depth);
        goto fail;
    }
    if (!o->block_kb || o->block_kb % (CKPT_PM_ALIGN / 1024) || o->block_kb > 65536) {
        snprintf(why, whylen, "CKPT_IO_BLOCK_KB=%u: expected a multiple of %u up to 65536 (O_DIRECT alignment)",
                 o->block_kb, CKPT_PM_ALIGN / 1024);
        goto fail;
    }
    if (!o->keep) {
        snprintf(why, whylen, "CKPT_PERSIST_KEEP=0: at least the newest generation must be kept");
        goto fail;
    }
    if (o->fault && *o->fault && ckpt_fault_parse(o->fault, &p->fault) < 0) {
        snprintf(why, whylen, "CKPT_FAULT='%s' does not parse", o->fault);
        goto fail;
    }
    if (p->fault.kind == CKPT_FAULT_IO && p->fault.delay_ms)
        ckpt_log(CKPT_WARN, "CKPT_FAULT: disk %s will each take %u ms longer (%s)",
                 p->fault.op == 1 ? "writes" : p->fault.op == 2 ? "reads" : "I/Os", p->fault.delay_ms, o->fault);
    else if (p->fault.kind == CKPT_FAULT_IO)
        ckpt_log(CKPT_WARN, "CKPT_FAULT: disk %s will fail with %s (%s)",
                 p->fault.op == 1 ? "writes" : p->fault.op == 2 ? "reads" : "I/O", strerror(p->fault.err), o->fault);
    p->depth = o->depth;
    p->block = (size_t)o->block_kb * 1024;
    p->keep = o->keep;
    p->nrings = o->rings ? o->rings : CKPT_PERSIST_RINGS_PER_DIR * p->ndirs;
    if (p->nrings > CKPT_PERSIST_MAX_RINGS)
        p->nrings = CKPT_PERSIST_MAX_RINGS;
    p->rings = calloc(p->nrings, sizeof(*p->rings));
    if (!p->rings) {
        snprintf(why, whylen, "out of memory");
        rc = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < p->nrings; i++) {
        struct pio_ring *r = &p->rings[i];
        size_t len = (size_t)p->depth * p->block;
        r->buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (r->buf == MAP_FAILED) {
            r->buf = NULL;
            rc = -errno;
            snprintf(why, whylen, "cannot allocate %zu MiB of I/O buffers: %s", len >> 20, strerror(errno));
            goto fail;
        }
        if ((rc = io_uring_queue_init(p->depth, &r->ring, 0)) < 0) {
            munmap(r->buf, len);
            r->buf = NULL;
            snprintf(why, whylen, "io_uring is not available: %s", strerror(-rc));
            goto fail;
        }
        register_buffers(p, r);
    }
    *out = p;
    return 0;
fail:
    ckpt_persist_close(p);
    return rc;
}

void ckpt_persist_close(struct ckpt_persist *p)
{
    if (!p)
        return;
    for (unsigned i = 0; p->rings && i < p->nrings; i++) {
        if (!p->rings[i].buf)
            continue;
        io_uring_queue_exit(&p->rings[i].ring);
        munmap(p->rings[i].buf, (size_t)p->depth * p->block);
    }
    free(p->rings);
    for (size_t i = 0; i < p->nscans; i++)
        ckpt_rlog_scan_free(&p->scans[i].sc);
    free(p->scans);
    free(p);
}

void ckpt_persist_cancel(struct ckpt_persist *p)
{
    __atomic_store_n(&p->cancel, 1, __ATOMIC_RELEASE);
}

int ckpt_persist_job_dir(struct ckpt_persist *p, const char *job, char *out, size_t outlen, char *why, size_t whylen)
{
    int rc = pdir_job(p->dirs[0], job, true, out, outlen, why, whylen);
    return rc < 0 ? rc : 0;
}

int pdir_job(const char *dir, const char *job, bool create, char *out, size_t outlen, char *why, size_t whylen)
{
    struct stat st;

    if (!ckpt_job_name_ok(job)) {
        snprintf(why, whylen, "'%.80s' is not a job's name (" CKPT_JOB_NAME_RULE ")", job);
        return -EINVAL;
    }
    if (stat(dir, &st) < 0) {
        int e = errno;
        snprintf(why, whylen, "persist directory %s: %s", dir, e == ENOENT ? "does not exist" : strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "persist directory %s is not a directory", dir);
        return -ENOTDIR;
    }
    int rc = ckpt_shared_root_ok(dir, &st, why, whylen);
    if (rc < 0)
        return rc;
    if (ckpt_job_dir(out, outlen, dir, job) < 0) {
        snprintf(why, whylen, "persist path under %s is too long", dir);
        return -ENAMETOOLONG;
    }
    int made = create && mkdir(out, 0700) == 0;
    if (create && !made && errno != EEXIST) {
        int e = errno;
        snprintf(why, whylen, "cannot create %s: %s", out, strerror(e));
        return -e;
    }
    if (lstat(out, &st) < 0) {
        int e = errno;
        snprintf(why, whylen, "%s: %s", out, e == ENOENT ? "no generation of this job here" : strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "%s is not a directory (a symlink or a file is never followed)", out);
        return -ENOTDIR;
    }
    if (!ckpt_private(&st)) {
        snprintf(why, whylen, "%s belongs to uid %u with mode %03o; it must be this user's (uid %u) and 0700", out,
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
        return -EPERM;
    }
    return made;
}

int pdir_open(const char *path, int flags, char *why, size_t whylen)
{
    /* O_DIRECT is asked for after the open: a filesystem without direct
     * I/O (ramfs; tmpfs before Linux 6.6) refuses it only after it has
     * created the file, so an open with it and O_EXCL could not be tried
     * again without.  There the page cache and the fsync at the end still
     * make the data durable. */
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_DIRECT) < 0)
        ckpt_log_once(CKPT_WARN, "%s does not support O_DIRECT: going through the page cache", path);
    return fd;
}

void pdir_remove_gen(const char *jobdir, uint64_t iteration)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/gen-%llu", jobdir, (unsigned long long)iteration);
    /* The manifest first: from then on the generation is incomplete, and
     * a crash half-way leaves nothing a reader would take. */
    char manifest[PATH_MAX + 48];
    snprintf(manifest, sizeof(manifest), "%s/manifest", path);
    unlink(manifest);
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(path);
}

int pdir_sync(const char *dir, char *why, size_t whylen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot fsync directory %s: %s", dir, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    close(fd);
    return 0;
}

static int by_iteration_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

bool ckpt_persist_names_log(const char *path)
{
    char dir[PATH_MAX], why[PATH_MAX + 64];
    uint64_t *its = NULL;
    size_t n = 0;
    const char *slash = strrchr(path, '/');
    if (!slash || slash - path >= (ptrdiff_t)sizeof(dir))
        return false;
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (pdir_generations(dir, &its, &n, why, sizeof(why)) < 0)
        return false;
    free(its);
    return n > 0;
}

int pdir_generations(const char *jobdir, uint64_t **out, size_t *n, char *why, size_t whylen)
{
    DIR *d = opendir(jobdir);
    uint64_t *its = NULL;
    size_t cap = 0;

    *n = 0;
    if (!d) {
        int e = errno;
        snprintf(why, whylen, "cannot list %s: %s", jobdir, strerror(e));
        return -e;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "gen-", 4) != 0 || e->d_name[4] < '0' || e->d_name[4] > '9')
            continue;
        unsigned long long it = strtoull(e->d_name + 4, &end, 10);
        if (*end)
            continue;
        if (*n == cap) {
            uint64_t *more = realloc(its, (cap = cap ? 2 * cap : 16) * sizeof(*its));
            if (!more) {
                free(its);
                closedir(d);
                snprintf(why, whylen, "out of memory");
                return -ENOMEM;
            }
            its = more;
        }
        its[(*n)++] = it;
    }
    closedir(d);
    if (*n) /* none: its is NULL, which qsort may not be given */
        qsort(its, *n, sizeof(*its), by_iteration_desc);
    *out = its;
    return 0;
}

/* Everything about one generation, as list shows it. */
static void examine(struct ckpt_persist *p, const char *job, const char *jobdir, uint64_t it, unsigned flags,
                    struct ckpt_persist_gen *g)
{
    struct ckpt_pm_header *m;

    *g = (struct ckpt_persist_gen){.iteration = it};
    g->status = pm_load(jobdir, it, job, p->ndirs, &m, g->why, sizeof(g->why));
    if (g->status < 0)
        return;
    g->nranks = m->nranks;
    for (uint32_t i = 0; i < m->nranks; i++) { /* the headers verified as the manifest loaded */
        struct ckpt_header h;
        memcpy(&h, (const char *)m + pm_ranks(m)[i].head_offset, sizeof(h));
        g->epoch = !i || h.epoch < g->epoch ? h.epoch : g->epoch;
    }
    g->logical_bytes = m->logical_bytes;
    g->stored_bytes = m->stored_bytes;
    g->time_ns = m->time_ns;
    g->status = pm_check_stripes(p, job, m, g->why, sizeof(g->why));
    if (!g->status && (flags & CKPT_PERSIST_VERIFY))
        g->status = pm_read(p, job, m, NULL, NULL, NULL, NULL, NULL, g->why, sizeof(g->why));
    free(m);
}

int ckpt_persist_list(struct ckpt_persist *p, const char *job, unsigned flags,
                      void (*fn)(void *arg, const struct ckpt_persist_gen *g), void *arg, char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16];
    uint64_t *its;
    size_t n;
    int rc;

    __atomic_store_n(&p->cancel, 0, __ATOMIC_RELEASE);
    if ((rc = pdir_job(p->dirs[0], job, false, jobdir, sizeof(jobdir), why, whylen)) < 0 ||
        (rc = pdir_generations(jobdir, &its, &n, why, whylen)) < 0)
        return rc;
    struct ckpt_persist_gen *g = malloc(sizeof(*g));
    for (size_t i = 0; g && i < n; i++) {
        examine(p, job, jobdir, its[i], flags, g);
        fn(arg, g);
    }
    free(g);
    free(its);
    return 0;
}

int ckpt_persist_retire(struct ckpt_persist *p, const char *job, uint64_t after, const char *whose, char *why,
                        size_t whylen)
{
    char jobdir[PATH_MAX + 16], path[PATH_MAX + 64];
    uint64_t *its;
    size_t n;
    int rc = pdir_job(p->dirs[0], job, false, jobdir, sizeof(jobdir), why, whylen);

    if (rc == -ENOENT)
        return 0; /* nothing persisted yet */
    if (rc < 0)
        return rc;
    snprintf(path, sizeof(path), "%s/lock", jobdir);
    int lock = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
        return rc;
    }
    if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
        snprintf(why, whylen, "another process is persisting job %s (it holds %s)", job, path);
        close(lock);
        return -EBUSY;
    }
    for (unsigned d = 0; d < p->ndirs; d++) {
        char dwhy[256];
        if (pdir_job(p->dirs[d], job, false, jobdir, sizeof(jobdir), dwhy, sizeof(dwhy)) < 0 ||
            pdir_generations(jobdir, &its, &n, dwhy, sizeof(dwhy)) < 0)
            continue;
        for (size_t i = 0; i < n; i++) {
            if (its[i] <= after)
                continue;
            snprintf(path, sizeof(path), "%s/gen-%llu/manifest", jobdir, (unsigned long long)its[i]);
            if (d == 0 && access(path, F_OK) == 0)
                ckpt_log(CKPT_INFO, "retired %s generation of iteration %llu on disk (%s): newer than the restore "
                         "point %llu, it belongs to the run the restore replaces", whose,
                         (unsigned long long)its[i], jobdir, (unsigned long long)after);
            pdir_remove_gen(jobdir, its[i]);
        }
        free(its);
        pdir_sync(jobdir, dwhy, sizeof(dwhy));
    }
    close(lock);
    return 0;
}

int ckpt_persist_newest(struct ckpt_persist *p, const char *job, uint64_t below, unsigned flags,
                        struct ckpt_persist_gen *g, char *why, size_t whylen)
{
    char jobdir[PATH_MAX + 16];
    uint64_t *its;
    size_t n;
    int rc;

    __atomic_store_n(&p->cancel, 0, __ATOMIC_RELEASE);
    if ((rc = pdir_job(p->dirs[0], job, false, jobdir, sizeof(jobdir), why, whylen)) < 0 ||
        (rc = pdir_generations(jobdir, &its, &n, why, whylen)) < 0)
        return rc;
    rc = -ENOENT;
    for (size_t i = 0; i < n && rc == -ENOENT; i++) {
        if (below && its[i] >= below)
            continue;
        examine(p, job, jobdir, its[i], flags, g);
        if (!g->status)
            rc = 0;
        else
            ckpt_log(CKPT_WARN, "skipping the generation of iteration %llu in %s: %s", (unsigned long long)its[i],
                     jobdir, g->why);
    }
    free(its);
    if (rc == -ENOENT)
        snprintf(why, whylen, "no complete generation of job %s%s in %s", job, below ? " below that iteration" : "",
                 jobdir);
    return rc;
}
