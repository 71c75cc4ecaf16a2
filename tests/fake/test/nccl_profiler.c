/*
 * The double's NCCL drives an NCCL profiler plugin as NCCL 2.28 does.  The
 * test builds a small plugin against interpose/abi/ckpt_nccl_profiler.h
 * with the C compiler ($CC, else cc; skipped without one) that logs every
 * call, then runs two ranks three times: ncclProfiler_v5 found through
 * NCCL_PROFILER_PLUGIN=<path>; ncclProfiler_v4 found through a name
 * (libnccl-profiler-<name>.so on LD_LIBRARY_PATH); and v5 with a mask
 * without ncclProfileKernelCh.  Each rank checks its own log: init with the
 * comm's name, size and rank first, finalize last; one Coll event per
 * collective with NCCL's fields (seqNumber per function, func, buffers,
 * count, root, datatype, channels, algo, proto) and one P2p event per send
 * and receive, each stopped as soon as it is enqueued; and, when asked
 * for, a KernelCh child per operation that starts only when the stream
 * reaches it (behind a 200 ms host function), with GPU timer values that
 * record the data movement, and stops after recordEventState.
 */
#include <libgen.h>
#include <limits.h>

#include "nccl_test.h"

#define DELAY_MS 200
#define COUNT 1000
#define MASK_ALL "70" /* ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh */
#define MASK_TASKS "6" /* ncclProfileColl | ncclProfileP2p */

static const char plugin_src[] =
    "#include <pthread.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <time.h>\n"
    "#include \"ckpt_nccl_profiler.h\"\n"
    "#ifdef V4\n"
    "typedef ncclProfilerEventDescr_v4_t descr_t;\n"
    "typedef ncclProfilerEventStateArgs_v4_t args_t;\n"
    "#else\n"
    "typedef ncclProfilerEventDescr_v5_t descr_t;\n"
    "typedef ncclProfilerEventStateArgs_v5_t args_t;\n"
    "#endif\n"
    "struct ev { int id; };\n"
    "static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;\n"
    "static FILE *out;\n"
    "static int next_id = 1;\n"
    "static unsigned long long now(void) {\n"
    "  struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);\n"
    "  return ts.tv_sec * 1000000000ull + ts.tv_nsec;\n"
    "}\n"
    "static int id(void *h) { return h ? ((struct ev *)h)->id : 0; }\n"
    "static ncclResult_t init(void **ctx, int *mask, const char *name, int nranks, int rank) {\n"
    "  char path[4096];\n"
    "  snprintf(path, sizeof(path), \"%s.%d\", getenv(\"FGTEST_PROFILE_OUT\"), rank);\n"
    "  out = fopen(path, \"w\");\n"
    "  if (!out) return ncclSystemError;\n"
    "  *mask = atoi(getenv(\"FGTEST_MASK\"));\n"
    "  fprintf(out, \"init name=%s nranks=%d rank=%d\\n\", name ? name : \"-\", nranks, rank);\n"
    "  fflush(out);\n"
    "  *ctx = out;\n"
    "  return ncclSuccess;\n"
    "}\n"
    "static ncclResult_t start(void *ctx, void **h, descr_t *d) {\n"
    "  struct ev *e = malloc(sizeof(*e));\n"
    "  (void)ctx;\n"
    "  pthread_mutex_lock(&lock);\n"
    "  e->id = next_id++;\n"
    "  if (d->type == ncclProfileColl)\n"
    "    fprintf(out, \"start %d Coll parent=%d rank=%d seq=%llu func=%s send=%p recv=%p \"\n"
    "            \"count=%zu root=%d dtype=%s nch=%u algo=%s proto=%s t=%llu\\n\", e->id,\n"
    "            id(d->parentObj), d->rank, (unsigned long long)d->coll.seqNumber,\n"
    "            d->coll.func, d->coll.sendBuff, d->coll.recvBuff, d->coll.count,\n"
    "            d->coll.root, d->coll.datatype, d->coll.nChannels, d->coll.algo,\n"
    "            d->coll.proto, now());\n"
    "  else if (d->type == ncclProfileP2p)\n"
    "    fprintf(out, \"start %d P2p parent=%d rank=%d func=%s buff=%p count=%zu peer=%d \"\n"
    "            \"dtype=%s nch=%u t=%llu\\n\", e->id, id(d->parentObj), d->rank,\n"
    "            d->p2p.func, d->p2p.buff, d->p2p.count, d->p2p.peer, d->p2p.datatype,\n"
    "            d->p2p.nChannels, now());\n"
    "  else if (d->type == ncclProfileKernelCh)\n"
    "    fprintf(out, \"start %d KernelCh parent=%d rank=%d ch=%u ptimer=%llu\\n\", e->id,\n"
    "            id(d->parentObj), d->rank, d->kernelCh.channelId,\n"
    "            (unsigned long long)d->kernelCh.pTimer);\n"
    "  else\n"
    "    fprintf(out, \"start %d Other type=%d\\n\", e->id, (int)d->type);\n"
    "  fflush(out);\n"
    "  pthread_mutex_unlock(&lock);\n"
    "  *h = e;\n"
    "  return ncclSuccess;\n"
    "}\n"
    "static ncclResult_t stop(void *h) {\n"
    "  pthread_mutex_lock(&lock);\n"
    "  fprintf(out, \"stop %d t=%llu\\n\", id(h), now());\n"
    "  fflush(out);\n"
    "  pthread_mutex_unlock(&lock);\n"
    "  return ncclSuccess;\n"
    "}\n"
    "static ncclResult_t record(void *h, ncclProfilerEventState_t s, args_t *a) {\n"
    "  pthread_mutex_lock(&lock);\n"
    "  fprintf(out, \"state %d %d ptimer=%llu\\n\", id(h), (int)s,\n"
    "          (unsigned long long)a->kernelCh.pTimer);\n"
    "  fflush(out);\n"
    "  pthread_mutex_unlock(&lock);\n"
    "  return ncclSuccess;\n"
    "}\n"
    "static ncclResult_t fini(void *ctx) {\n"
    "  fprintf(ctx, \"finalize\\n\");\n"
    "  fclose(ctx);\n"
    "  return ncclSuccess;\n"
    "}\n"
    "#ifdef V4\n"
    "static ncclResult_t init4(void **ctx, int *mask, const char *name, uint64_t hash,\n"
    "                          int nnodes, int nranks, int rank, ncclDebugLogger_t log) {\n"
    "  (void)hash; (void)nnodes; (void)log;\n"
    "  return init(ctx, mask, name, nranks, rank);\n"
    "}\n"
    "ncclProfiler_v4_t ncclProfiler_v4 = {\"fgtest4\", init4, start, stop, record, fini};\n"
    "#else\n"
    "static ncclResult_t init5(void **ctx, uint64_t id, int *mask, const char *name,\n"
    "                          int nnodes, int nranks, int rank, ncclDebugLogger_t log) {\n"
    "  (void)id; (void)nnodes; (void)log;\n"
    "  return init(ctx, mask, name, nranks, rank);\n"
    "}\n"
    "ncclProfiler_v5_t ncclProfiler_v5 = {\"fgtest5\", init5, start, stop, record, fini};\n"
    "#endif\n";

/* ---- a rank: run operations, then read its own log ------------------ */

#define MAX_LINES 256

static char lines[MAX_LINES][512];
static int nlines;

/* The value of key=VALUE in line, or "" (a static copy). */
static const char *field(const char *line, const char *key)
{
    static char val[256];
    char pat[64];
    const char *p;
    size_t n;

    snprintf(pat, sizeof(pat), " %s=", key);
    p = strstr(line, pat);
    if (!p)
        return "";
    p += strlen(pat);
    n = strcspn(p, " \n");
    snprintf(val, sizeof(val), "%.*s", (int)(n < sizeof(val) ? n : sizeof(val) - 1), p);
    return val;
}

static unsigned long long num(const char *line, const char *key)
{
    return strtoull(field(line, key), NULL, 10);
}

/* The line index of "<verb> <id> ...", or -1. */
static int find(const char *verb, int id)
{
    char pat[32];

    snprintf(pat, sizeof(pat), "%s %d ", verb, id);
    for (int i = 0; i < nlines; i++)
        if (!strncmp(lines[i], pat, strlen(pat)))
            return i;
    return -1;
}

struct task {
    const char *kind, *func;
    const void *send, *recv;
    int seq, root;
};

static void delay(void *arg)
{
    (void)arg;
    usleep(DELAY_MS * 1000);
}

static void check_log(int rank, const char *path, const struct task *tasks, int ntasks, bool kernels)
{
    FILE *f = fopen(path, "r");
    char want[64], ptr[2][32];
    int next = 0;

    EXPECT(f, "rank %d: no profiler log %s", rank, path);
    while (nlines < MAX_LINES && fgets(lines[nlines], sizeof(lines[0]), f))
        nlines++;
    fclose(f);
    snprintf(want, sizeof(want), "init name=prof nranks=2 rank=%d\n", rank);
    EXPECT(nlines > 1 && !strcmp(lines[0], want), "rank %d: first line %s", rank, lines[0]);
    EXPECT(!strcmp(lines[nlines - 1], "finalize\n"), "rank %d: last line %s", rank,
           lines[nlines - 1]);

    for (int i = 0; i < nlines; i++) {
        const char *l = lines[i];
        int id, kernel, state, kstop, stop;
        const struct task *t;

        if (strncmp(l, "start ", 6) || strstr(l, " KernelCh "))
            continue;
        EXPECT(next < ntasks, "rank %d: unexpected event %s", rank, l);
        t = &tasks[next++];
        EXPECT(strstr(l, t->kind) && !strcmp(field(l, "func"), t->func) &&
               num(l, "rank") == (unsigned)rank && num(l, "count") == COUNT &&
               !strcmp(field(l, "dtype"), "ncclFloat32") && num(l, "nch") == 1 &&
               num(l, "parent") == 0, "rank %d: event %d: %s", rank, next, l);
        if (!strcmp(t->kind, "Coll")) {
            snprintf(ptr[0], sizeof(ptr[0]), "%p", t->send);
            snprintf(ptr[1], sizeof(ptr[1]), "%p", t->recv);
            EXPECT(num(l, "seq") == (unsigned)t->seq && num(l, "root") == (unsigned)t->root &&
                   !strcmp(field(l, "send"), ptr[0]) && !strcmp(field(l, "recv"), ptr[1]) &&
                   !strcmp(field(l, "algo"), "RING") && !strcmp(field(l, "proto"), "SIMPLE"),
                   "rank %d: Coll fields: %s", rank, l);
        } else {
            snprintf(ptr[0], sizeof(ptr[0]), "%p", t->send ? t->send : t->recv);
            EXPECT(num(l, "peer") == (unsigned)(1 - rank) && !strcmp(field(l, "buff"), ptr[0]),
                   "rank %d: P2p fields: %s", rank, l);
        }
        sscanf(l, "start %d", &id);
        stop = find("stop", id);
        EXPECT(stop > i, "rank %d: event %d never stopped", rank, id);

        /* The KernelCh child: the line that names this event as its parent. */
        kernel = -1;
        for (int j = i + 1; j < nlines && kernel < 0; j++)
            if (strstr(lines[j], " KernelCh ") && num(lines[j], "parent") == (unsigned)id)
                kernel = j;
        if (!kernels) {
            EXPECT(kernel < 0, "rank %d: KernelCh event though the mask has none", rank);
            continue;
        }
        EXPECT(kernel > 0, "rank %d: no KernelCh child for event %d", rank, id);
        sscanf(lines[kernel], "start %d", &id);
        state = find("state", id);
        kstop = find("stop", id);
        EXPECT(state > kernel && kstop > state && strstr(lines[state], " 22 ") &&
               num(lines[state], "ptimer") >= num(lines[kernel], "ptimer"),
               "rank %d: KernelCh %d: start, KernelChStop state, stop out of order", rank, id);
        if (next == 1) { /* behind the delay: it started when the stream got there */
            unsigned long long enq = num(l, "t"), ran = num(lines[kernel], "ptimer");

            EXPECT(ran >= enq + (DELAY_MS - 50) * 1000000ull && num(lines[stop], "t") < ran,
                   "rank %d: first KernelCh at +%.0f ms (stop of its Coll: +%.0f ms)", rank,
                   (double)(ran - enq) / 1e6, (double)(num(lines[stop], "t") - enq) / 1e6);
        }
    }
    EXPECT(next == ntasks, "rank %d: %d task events, expected %d", rank, next, ntasks);
}

static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    bool kernels = atoi(getenv("FGTEST_MASK")) & 64;
    char path[PATH_MAX];
    ncclComm_t comm;
    cudaStream_t s;
    float *a, *b, *c;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaMalloc((void **)&a, COUNT * sizeof(float)));
    CCHECK(cudaMalloc((void **)&b, COUNT * sizeof(float)));
    CCHECK(cudaMalloc((void **)&c, COUNT * sizeof(float)));
    config.commName = "prof";
    NCHECK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));

    CCHECK(cudaLaunchHostFunc(s, delay, NULL));
    NCHECK(ncclAllReduce(a, b, COUNT, ncclFloat32, ncclSum, comm, s));
    NCHECK(ncclAllReduce(b, b, COUNT, ncclFloat32, ncclMax, comm, s));
    NCHECK(ncclBroadcast(a, c, COUNT, ncclFloat32, 1, comm, s));
    NCHECK(ncclGroupStart());
    NCHECK(ncclSend(a, COUNT, ncclFloat32, 1 - rank, comm, s));
    NCHECK(ncclRecv(c, COUNT, ncclFloat32, 1 - rank, comm, s));
    NCHECK(ncclGroupEnd());
    CCHECK(cudaStreamSynchronize(s));
    NCHECK(ncclCommDestroy(comm));

    const struct task tasks[] = {
        {"Coll", "AllReduce", a, b, 0, 0},
        {"Coll", "AllReduce", b, b, 1, 0},
        {"Coll", "Broadcast", a, c, 0, 1},
        {"P2p", "Send", a, NULL, 0, 0},
        {"P2p", "Recv", NULL, c, 0, 0},
    };
    snprintf(path, sizeof(path), "%s.%d", getenv("FGTEST_PROFILE_OUT"), rank);
    check_log(rank, path, tasks, 5, kernels);
    return 0;
}

/* ---- the parent: build the plugins, run the three cases ------------- */

static int sh(const char *fmt, const char *a, const char *b, const char *c, const char *d)
{
    char cmd[4 * PATH_MAX + 256];

    snprintf(cmd, sizeof(cmd), fmt, a, b, c, d);
    return system(cmd);
}

/* Runs this program as "child" with the given environment; 0 on success. */
static int run_child(const char *plugin, const char *libpath, const char *mask, const char *out)
{
    pid_t pid = fork();
    int status;

    if (pid == 0) {
        setenv("NCCL_PROFILER_PLUGIN", plugin, 1);
        setenv("FGTEST_MASK", mask, 1);
        setenv("FGTEST_PROFILE_OUT", out, 1);
        if (libpath)
            setenv("LD_LIBRARY_PATH", libpath, 1);
        execl("/proc/self/exe", "nccl_profiler", "child", (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 1;
    return !WIFEXITED(status) || WEXITSTATUS(status);
}

int main(int argc, char **argv)
{
    char exe[PATH_MAX], root[PATH_MAX], dir[] = "/tmp/nccl-profiler-XXXXXX";
    char src[PATH_MAX + 16], so5[PATH_MAX + 32], so4[PATH_MAX + 32], out[PATH_MAX + 16];
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    ssize_t n;
    FILE *f;
    int failed;

    if (argc > 1 && !strcmp(argv[1], "child"))
        return nccl_test_run(2, rank_main, NULL, 60, -1);

    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    EXPECT(n > 0, "no /proc/self/exe");
    exe[n] = 0;
    /* build/tests/fake/<this> -> the source tree */
    snprintf(root, sizeof(root), "%s", dirname(dirname(dirname(dirname(exe)))));
    if (sh("%s --version >/dev/null 2>&1", cc, "", "", "")) {
        printf("no C compiler (%s) to build the test plugin\n", cc);
        return 77;
    }
    EXPECT(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    snprintf(src, sizeof(src), "%s/plugin.c", dir);
    snprintf(so5, sizeof(so5), "%s/libnccl-profiler-fgtest5.so", dir);
    snprintf(so4, sizeof(so4), "%s/libnccl-profiler-fgtest4.so", dir);
    snprintf(out, sizeof(out), "%s/log", dir);
    f = fopen(src, "w");
    EXPECT(f && fputs(plugin_src, f) >= 0 && !fclose(f), "cannot write %s", src);
    EXPECT(!sh("%s -shared -fPIC -Wall -Werror -I%s/interpose/abi -o %s %s", cc, root, so5, src),
           "the v5 plugin does not build against the project's header");
    EXPECT(!sh("%s -shared -fPIC -Wall -Werror -DV4 -I%s/interpose/abi -o %s %s", cc, root, so4,
               src), "the v4 plugin does not build against the project's header");

    failed = run_child(so5, NULL, MASK_ALL, out);
    if (failed)
        fprintf(stderr, "v5 plugin by path: failed\n");
    if (!failed && (failed = run_child("fgtest4", dir, MASK_ALL, out)))
        fprintf(stderr, "v4 plugin by name: failed\n");
    if (!failed && (failed = run_child(so5, NULL, MASK_TASKS, out)))
        fprintf(stderr, "v5 plugin without KernelCh: failed\n");
    sh("rm -rf %s", dir, "", "", "");
    return failed;
}
