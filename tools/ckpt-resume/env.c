/*
 * The environment each rank starts with: ckpt-resume's own, plus the
 * variables torchrun sets (RANK = node rank * nproc + LOCAL_RANK,
 * WORLD_SIZE = nodes * nproc, LOCAL_WORLD_SIZE, GROUP_RANK = the node
 * rank, MASTER_ADDR, MASTER_PORT), so programs
 * written for torchrun run unchanged, and the job's (LD_PRELOAD with
 * libckpt.so first, CKPT_JOB, CKPT_AGENT_SOCKET, CKPT_RESTORE).  The
 * environment is built in the parent, before any fork, so a child never
 * allocates; ckpt-resume's own environment is never modified.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#include "resume.h"

extern char **environ;

/* The variables a rank gets from us; any inherited value is replaced. */
static const char *const rank_vars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
};
#define N_RANK_VARS (sizeof(rank_vars) / sizeof(rank_vars[0]))

/*
 * The job's variables, the same for every rank: inherited values are
 * dropped even when this launch sets no value of its own (a restart from
 * the beginning must not pass on the user's CKPT_RESTORE).
 */
static const char *const job_vars[] = { "LD_PRELOAD", "CKPT_JOB", "CKPT_AGENT_SOCKET", "CKPT_RESTORE", "CKPT_FOLLOW", "PYTHONPATH",
                                        "CKPT_REPLAY_LOG_DIR", "CKPT_LAUNCHER",
                                        "CKPT_JOB_KEY" /* the agents' secret: never the ranks' */ };
#define N_JOB_VARS (sizeof(job_vars) / sizeof(job_vars[0]))

static bool named(const char *entry, const char *const *names, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(names[i]);
        if (strncmp(entry, names[i], n) == 0 && entry[n] == '=')
            return true;
    }
    return false;
}

/* Whether one of @vars ("NAME=value") sets the variable of @entry. */
static bool set_by(const char *entry, char *const *vars)
{
    size_t n = strcspn(entry, "=");
    for (; *vars; vars++)
        if (strncmp(*vars, entry, n) == 0 && (*vars)[n] == '=')
            return true;
    return false;
}

/*
 * The kernel's ephemeral ports: the source port of every outgoing
 * connection comes from here.  A rank 0 that listens on one can find it
 * taken by any connection on the machine, its own ranks' included (a
 * connect to a port nobody listens on yet can connect to itself), and
 * every restart would fail as the first did.
 */
static void ephemeral_ports(int *lo, int *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");

    *lo = 32768, *hi = 60999; /* Linux's default */
    if (f) {
        int a, b;
        if (fscanf(f, "%d %d", &a, &b) == 2 && 0 < a && a <= b && b < 65536)
            *lo = a, *hi = b;
        fclose(f);
    }
}

static bool port_free(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/*
 * A TCP port that is free on the loopback interface right now, outside the
 * ephemeral ports (below them, else above).  Another process may still bind
 * it before rank 0 does; torchrun accepts the same race, a rank that loses
 * it fails visibly, and the next launch draws another port.
 */
static int free_port(int *port)
{
    int lo, hi;
    ephemeral_ports(&lo, &hi);
    int first = lo > 11024 ? 10000 : hi + 1, last = lo > 11024 ? lo - 1 : 65535;
    if (last - first < 256)
        return -EADDRNOTAVAIL;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint32_t x = (uint32_t)getpid() * 2654435761u ^ (uint32_t)ts.tv_nsec;
    for (int tries = 0; tries < 256; tries++) {
        x = x * 1664525u + 1013904223u;
        int p = first + (int)((x >> 8) % (uint32_t)(last - first + 1));
        if (port_free(p)) {
            *port = p;
            return 0;
        }
    }
    return -EADDRINUSE;
}

/*
 * Rank 0's port for the next launch, in @port (16 bytes), unless
 * MASTER_PORT is set: then ours stays the user's.  Returns 1 when a new
 * port was drawn, 0 when none was, or a negative errno.
 */
int job_master_port(char *port)
{
    const char *p = getenv("MASTER_PORT");
    int n = 0;

    if (p && *p)
        return 0;
    int rc = free_port(&n);
    if (rc < 0)
        return rc;
    snprintf(port, 16, "%d", n);
    return 1;
}

/* A free port for the standbys' rank 0, in @port (16 bytes): never
 * MASTER_PORT, which the live rank 0 holds.  0, or a negative errno. */
int job_spare_port(char *port)
{
    int n = 0, rc = free_port(&n);
    if (rc < 0)
        return rc;
    snprintf(port, 16, "%d", n);
    return 0;
}

/*
 * Decides where rank 0 listens: MASTER_ADDR and MASTER_PORT from our own
 * environment when set (a wrapping scheduler chose them), else 127.0.0.1
 * and a free port.  The caller frees *addr and *port.
 */
int job_master(char **addr, char **port)
{
    const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
    int n = 0;

    *addr = strdup(a && *a ? a : "127.0.0.1");
    if (p && *p) {
        *port = strdup(p);
    } else {
        int rc = free_port(&n);
        if (rc < 0) {
            free(*addr);
            *addr = NULL;
            return rc;
        }
        if (asprintf(port, "%d", n) < 0)
            *port = NULL;
    }
    if (!*addr || !*port) {
        free(*addr);
        free(*port);
        *addr = *port = NULL;
        return -ENOMEM;
    }
    return 0;
}

/*
 * Builds the environment of one rank in @out: every inherited variable
 * except those in rank_vars and job_vars and those @vars set, then the job's @vars
 * ("NAME=value", NULL-terminated; the caller keeps them), then the rank's.
 * The caller releases it with rank_env_free().
 */
int rank_env(char ***out, const struct options *opt, int local, const char *master_addr, const char *master_port,
             char *const *vars)
{
    int nnodes = opt->coord ? opt->nnodes : 1;
    size_t n = 0, nvars = 0;
    while (environ[n])
        n++;
    while (vars[nvars])
        nvars++;
    char **env = calloc(n + nvars + 3 + N_RANK_VARS + 1, sizeof(*env));
    if (!env)
        return -ENOMEM;

    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!named(environ[i], rank_vars, N_RANK_VARS) && !named(environ[i], job_vars, N_JOB_VARS) &&
            !set_by(environ[i], vars))
            env[k++] = environ[i];
    for (size_t i = 0; i < nvars; i++)
        env[k++] = vars[i];
    /* Kernels loaded at context creation, unless the user chose: with lazy
     * loading (CUDA's default) a kernel's first launch loads it, taking
     * device memory between the program's allocations, and a replay, whose
     * launches are suppressed, would find its allocations elsewhere (seen
     * on an H200: 2 MiB apart, the restore refused).  A kernel that spins
     * until another runs can also wait forever for that one's loading. */
    if (!getenv("CUDA_MODULE_LOADING"))
        env[k++] = (char *)"CUDA_MODULE_LOADING=EAGER";
    /* ckpt-resume restarts the job, not torchrun (torchrun.c); its workers are the ranks. */
    if (torchrun_command(opt->cmd) && !getenv("PET_MAX_RESTARTS"))
        env[k++] = (char *)"PET_MAX_RESTARTS=0";
    if (torchrun_command(opt->cmd))
        env[k++] = (char *)"CKPT_LAUNCHER=torchrun";
    size_t ours = k;

    /* One per rank_vars entry, in the same order. */
    int ok = asprintf(&env[k++], "RANK=%d", opt->first_rank + local) >= 0 &&
             asprintf(&env[k++], "LOCAL_RANK=%d", local) >= 0 &&
             asprintf(&env[k++], "WORLD_SIZE=%d", nnodes * opt->nproc) >= 0 &&
             asprintf(&env[k++], "LOCAL_WORLD_SIZE=%d", opt->nproc) >= 0 &&
             asprintf(&env[k++], "GROUP_RANK=%d", opt->coord ? opt->node_rank : 0) >= 0 &&
             asprintf(&env[k++], "MASTER_ADDR=%s", master_addr) >= 0 &&
             asprintf(&env[k++], "MASTER_PORT=%s", master_port) >= 0;
    if (!ok) {
        /* asprintf leaves the failed slot undefined: clear it, free the rest. */
        env[k - 1] = NULL;
        for (size_t i = ours; i < k - 1; i++)
            free(env[i]);
        free(env);
        return -ENOMEM;
    }
    env[k] = NULL;
    *out = env;
    return 0;
}

/* Frees what rank_env() built: our strings are the last N_RANK_VARS entries. */
void rank_env_free(char **env)
{
    if (!env)
        return;
    size_t n = 0;
    while (env[n])
        n++;
    for (size_t i = n - N_RANK_VARS; i < n; i++)
        free(env[i]);
    free(env);
}

/*
 * Whether the LD_PRELOAD entry @e (@len bytes) is a libckpt.so: the file
 * @ours itself, or another one by name, which must not be loaded beside
 * ours (two interposers would hook every call twice).
 */
static bool is_libckpt(const char *e, size_t len, const struct stat *ours)
{
    char path[PATH_MAX];
    struct stat st;

    if (len == 0 || len >= sizeof(path))
        return false;
    memcpy(path, e, len);
    path[len] = '\0';
    if (stat(path, &st) == 0 && st.st_dev == ours->st_dev && st.st_ino == ours->st_ino)
        return true;
    const char *base = strrchr(path, '/');
    if (strcmp(base ? base + 1 : path, "libckpt.so") != 0)
        return false;
    ckpt_log(CKPT_WARN, "LD_PRELOAD names another libckpt.so (%s): the ranks get only the one chosen here", path);
    return true;
}

/*
 * The LD_PRELOAD of the ranks in *@out (the caller frees it): the
 * libckpt.so @lib (CKPT_LIB) or, when @lib is NULL or empty, the one
 * installed beside this program (<dir of /proc/self/exe>/../lib), then
 * whatever our own LD_PRELOAD names except a libckpt.so.  A library that
 * cannot be read is an error that names its path.
 */
int preload_value(char **out, const char *lib)
{
    char exe[PATH_MAX], want[PATH_MAX + 32], real[PATH_MAX];
    struct stat st;

    if (lib && *lib) {
        snprintf(want, sizeof(want), "%s", lib);
    } else {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n < 0) {
            int e = errno;
            ckpt_log(CKPT_ERROR, "cannot find where ckpt-resume is installed (/proc/self/exe: %s); set CKPT_LIB",
                     strerror(e));
            return -e;
        }
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        snprintf(want, sizeof(want), "%s/../lib/libckpt.so", exe);
    }
    int e = 0;
    if (!realpath(want, real) || stat(real, &st) < 0 || access(real, R_OK) < 0)
        e = errno;
    else if (!S_ISREG(st.st_mode))
        e = EISDIR;
    if (e) {
        ckpt_log(CKPT_ERROR, "cannot preload %s into the ranks: %s (CKPT_LIB names the libckpt.so to use)", want,
                 e == EISDIR ? "not a regular file" : strerror(e));
        return -e;
    }

    const char *old = getenv("LD_PRELOAD");
    size_t cap = strlen(real) + (old ? strlen(old) : 0) + 2, k = strlen(real);
    char *v = malloc(cap);
    if (!v)
        return -ENOMEM;
    memcpy(v, real, k + 1);
    /* ld.so separates entries with colons or spaces. */
    for (const char *p = old; p && *p;) {
        size_t len = strcspn(p, ": ");
        if (len && !is_libckpt(p, len, &st)) {
            v[k++] = ':';
            memcpy(v + k, p, len);
            v[k += len] = '\0';
        }
        p += len;
        p += *p != '\0';
    }
    *out = v;
    return 0;
}

int pythonpath_value(char **out, const char *preload, bool helper)
{
    const char *old = getenv("PYTHONPATH");
    char dir[PATH_MAX + 32];
    struct stat st;

    *out = NULL;
    int n = snprintf(dir, sizeof(dir), "%.*s", (int)strcspn(preload, ": "), preload);
    char *slash = strrchr(dir, '/');
    if (helper && slash && n < PATH_MAX) {
        snprintf(slash, sizeof(dir) - (size_t)(slash - dir), "/libckpt-python");
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            ckpt_log(CKPT_WARN, "no PyTorch helper in %s: snapshots of PyTorch programs copy the caching "
                     "allocator's segments whole", dir);
            helper = false;
        }
    } else {
        helper = false;
    }
    if (!helper && !old)
        return 0;
    if (asprintf(out, "%s%s%s", helper ? dir : "", helper && old && *old ? ":" : "", old ? old : "") < 0) {
        *out = NULL;
        return -ENOMEM;
    }
    return 0;
}
