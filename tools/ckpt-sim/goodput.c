/*
 * ckpt-sim goodput: the share of a whole job's time that trains, under the
 * failures of a published record, for four ways of coming back: periodic
 * checkpoints to remote storage (the baseline most jobs run), GEMINI-style
 * checkpoints in peers' host memory with a normal restart, and libckpt's
 * cold path (replay from iteration 0) and standbys with spare machines.
 *
 * Failures come from the Llama 3 405B report (466 interruptions in 54 days
 * on 16,384 GPUs), at the record's rate per GPU, each cause put in a class
 * by what coming back needs: a node lost (a GPU, network or host fault: a
 * replacement machine, and that machine's host memory is gone), a process
 * crash (the machines and their memory stay), a hang (found by a watchdog's
 * timeout), a planned stop (no work lost).  Each failure costs detection,
 * stop, replacement, restart, host-state recovery, state retrieval and the
 * work since the last usable checkpoint (GEMINI's t_ckpt + interval / 2);
 * each strategy also costs its steady overhead.  Every input is printed
 * with where it comes from, and the baseline at the record's own scale is
 * checked against the record's effective training time: a model that
 * misses it says so, for its other figures then mean nothing.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

enum fclass { NODE, CRASH, HANG, PLANNED, NCLASS };
static const char *const class_name[NCLASS] = {"node lost", "process crash", "hang", "planned stop"};

/* Table 5 of the report: the root causes of the 419 unexpected interruptions. */
static const struct cause {
    const char *name;
    unsigned count;
    enum fclass cls;
} llama3[] = {
    {"faulty GPU", 148, NODE},          {"GPU HBM3 memory", 72, NODE},
    {"software bug", 54, CRASH},        {"network switch or cable", 35, NODE},
    {"host maintenance", 32, NODE},     {"GPU SRAM memory", 19, NODE},
    {"GPU system processor", 17, NODE}, {"NIC", 7, NODE},
    {"NCCL watchdog timeout", 7, HANG}, {"silent data corruption", 6, NODE},
    {"GPU thermal interface", 6, NODE}, {"SSD", 3, NODE},
    {"power supply", 3, NODE},          {"server chassis", 2, NODE},
    {"IO expansion board", 2, NODE},    {"dependency", 2, CRASH},
    {"CPU", 2, NODE},                   {"system memory", 2, NODE},
};
#define RECORD_GPUS 16384
#define RECORD_DAYS 54.0
#define RECORD_PLANNED 47
#define RECORD_MANUAL 3
#define RECORD_EFFECTIVE 0.90 /* "above 90%" */
#define CALIBRATED_BAND 0.05  /* the baseline may land this far above the record's floor */

/* Every input: its option, value, bounds and where the value comes from. */
enum input {
    DAYS, STATE_GB, ITER_S, IDLE, GPUS_PER_MACHINE, PCIE, NET, STORAGE, DETECT_BASE, DETECT_CRASH,
    DETECT_NODE, WATCHDOG, STOP, REPLACE, START, CONTEXT, COMM_S, COMM_PER_GPU_MS, HOST_SHARE, OVERHEAD,
    MANUAL_H, NINPUTS
};
static struct input_def {
    const char *opt;
    double v, lo, hi;
    const char *unit, *source;
} in[NINPUTS] = {
    [DAYS] = {"days", RECORD_DAYS, 0.01, 3650, "days", "the record's window"},
    [STATE_GB] = {"state-gb", 4, 1e-6, 1e4, "GB per GPU", "the record: 1 MB to 4 GB of state per GPU; the largest"},
    [ITER_S] = {"iteration-s", 6, 1e-3, 1e5, "s",
                "405B parameters x 6 x 16M tokens per step at the record's 400 TFLOPS per GPU on 16,384 GPUs"},
    [IDLE] = {"idle-fraction", 0.5, 0.01, 1, "of an iteration", "assumed: the network's idle share (GEMINI)"},
    [GPUS_PER_MACHINE] = {"gpus-per-machine", 8, 1, 64, "GPUs", "the record: 8 GPUs per server"},
    [PCIE] = {"pcie-gbps", 25, 0.01, 1e4, "GB/s per GPU", "assumed: half the measured H200 pinned copy (55 GB/s)"},
    [NET] = {"net-gbps", 50, 0.01, 1e4, "GB/s per machine", "the record: 400 Gb/s per GPU; one NIC's worth"},
    [STORAGE] = {"storage-gbps", 2000, 0.01, 1e6, "GB/s in all", "the record: 2 TB/s sustained (Tectonic)"},
    [DETECT_BASE] = {"detect-baseline-s", 30, 0, 1e5, "s",
                     "assumed: a launcher's agent and rendezvous notice a lost worker or node"},
    [DETECT_CRASH] = {"detect-crash-s", 1, 0, 1e5, "s", "libckpt's agent waits on its ranks: an exit is seen at once"},
    [DETECT_NODE] = {"detect-node-s", 30, 0, 1e5, "s", "CKPT_NODE_TIMEOUT's default: the lease of a node's agent"},
    [WATCHDOG] = {"watchdog-s", 600, 0, 1e6, "s", "PyTorch ProcessGroupNCCL's default timeout, for every strategy"},
    [STOP] = {"stop-s", 5, 0, 1e4, "s", "CKPT_KILL_GRACE's default"},
    [REPLACE] = {"replace-s", 300, 0, 1e6, "s", "assumed: the scheduler drains the machine and starts another"},
    [START] = {"start-s", 120, 0, 1e5, "s", "assumed: processes started, framework imported, model and data loader built"},
    [CONTEXT] = {"context-s", 4.3, 0, 1e4, "s", "measured: a CUDA context with PyTorch on the H200 (docs/gpu-results.md)"},
    [COMM_S] = {"comm-s", 5, 0, 1e5, "s", "assumed: communicator set-up, fixed part"},
    [COMM_PER_GPU_MS] = {"comm-per-gpu-ms", 2, 0, 1e4, "ms per GPU", "assumed: communicator set-up, part per GPU"},
    [HOST_SHARE] = {"host-share", 0.1, 0, 1, "of an iteration",
                    "assumed: the host work of an iteration, which a replay runs again"},
    [OVERHEAD] = {"overhead", 0.014, 0, 0.99, "of each iteration",
                  "measured: libckpt's snapshots on the H200 (native allocator, docs/gpu-results.md)"},
    [MANUAL_H] = {"manual-hours", 4, 0, 1e4, "h each", "assumed: the record's 3 interruptions that needed people"},
};
#define V(i) (in[i].v)

enum strategy { REMOTE, GEMINI, COLD, STANDBY, NSTRATEGIES };
static const char *const strategy_name[NSTRATEGIES] = {
    "remote storage, periodic", "in memory (GEMINI-style)", "libckpt, cold path", "libckpt, standbys + spares"};

enum phase { DETECT, STOPPING, REPLACING, RESTART, HOST_STATE, RETRIEVE, LOST_WORK, NPHASES };
static const char *const phase_name[NPHASES] = {"detect", "stop", "replace", "restart", "host", "retrieve", "lost"};

/* One scale's failures and what each costs. */
struct model {
    double gpus, machines, window_s;
    double failures[NCLASS], manual; /* over the window */
    double mtbf_s;
    double interval[NSTRATEGIES], t_ckpt[NSTRATEGIES], overhead[NSTRATEGIES];
    double cost[NSTRATEGIES][NCLASS][NPHASES];
};

/* The smallest whole number of iterations that lasts at least t seconds (at least one). */
static double whole_iterations(double t)
{
    double k = ceil(t / V(ITER_S) - 1e-9);
    return (k < 1 ? 1 : k) * V(ITER_S);
}

static void build(struct model *m, double gpus)
{
    unsigned unexpected[NCLASS] = {0};
    for (size_t i = 0; i < sizeof(llama3) / sizeof(llama3[0]); i++)
        unexpected[llama3[i].cls] += llama3[i].count;
    unexpected[PLANNED] = RECORD_PLANNED;
    /* The record's rates per GPU-second, at this scale and window. */
    double scale = gpus / RECORD_GPUS * V(DAYS) / RECORD_DAYS, total = 0;
    memset(m, 0, sizeof(*m));
    m->gpus = gpus;
    m->machines = ceil(gpus / V(GPUS_PER_MACHINE));
    m->window_s = V(DAYS) * 86400;
    for (int c = 0; c < NCLASS; c++)
        total += m->failures[c] = unexpected[c] * scale;
    m->manual = RECORD_MANUAL * scale;
    m->mtbf_s = total > 0 ? m->window_s / total : INFINITY;

    double S = V(STATE_GB), G = V(GPUS_PER_MACHINE), stall = S / V(PCIE);
    /* Remote storage: every GPU's state through the shared bandwidth, and
     * each machine's through its NIC; the copy to host memory stalls the
     * step, the upload does not.  The interval is Young's optimum for that
     * stall, no shorter than an upload. */
    double up = fmax(gpus * S / V(STORAGE), G * S / V(NET));
    m->t_ckpt[REMOTE] = up;
    m->interval[REMOTE] = whole_iterations(fmax(up, sqrt(2 * stall * m->mtbf_s)));
    m->overhead[REMOTE] = stall / m->interval[REMOTE];
    /* In memory (GEMINI's model): each GPU's state to host memory and each
     * machine's to one peer, both in the network's idle share. */
    double t_mem = fmax(S / (V(PCIE) * V(IDLE)), G * S / (V(NET) * V(IDLE)));
    for (int s = GEMINI; s < NSTRATEGIES; s++) {
        m->t_ckpt[s] = t_mem;
        m->interval[s] = whole_iterations(t_mem);
        m->overhead[s] = V(OVERHEAD);
    }

    double comm = V(COMM_S) + gpus * V(COMM_PER_GPU_MS) / 1e3;
    double local = S / V(PCIE), peer = G * S / V(NET) + S / V(PCIE);
    for (int s = 0; s < NSTRATEGIES; s++)
        for (int c = 0; c < NCLASS; c++) {
            double *p = m->cost[s][c];
            bool agent = s != REMOTE;
            p[DETECT] = c == HANG ? V(WATCHDOG) : c == PLANNED ? 0
                      : !agent ? V(DETECT_BASE) : c == NODE ? V(DETECT_NODE) : V(DETECT_CRASH);
            p[STOPPING] = V(STOP);
            /* A spare already runs the lost machine's standbys. */
            p[REPLACING] = (c == NODE || c == PLANNED) && s != STANDBY ? V(REPLACE) : 0;
            p[RESTART] = (s == STANDBY ? 0 : V(START)) + V(CONTEXT) + comm;
            /* What the program's host code must rebuild: a framework's own
             * restart does it in its start-up; the cold path replays every
             * iteration so far (the mean age of a failure is half the
             * window); a standby is an interval behind at most. */
            p[HOST_STATE] = s == COLD ? V(HOST_SHARE) * m->window_s / 2
                          : s == STANDBY ? V(HOST_SHARE) * m->interval[s] : 0;
            p[RETRIEVE] = s == REMOTE ? up : c == NODE || c == PLANNED ? peer : local;
            p[LOST_WORK] = c == PLANNED ? 0 : m->t_ckpt[s] + m->interval[s] / 2;
        }
}

static double per_failure(const struct model *m, int s, int c)
{
    double t = 0;
    for (int p = 0; p < NPHASES; p++)
        t += m->cost[s][c][p];
    return t;
}

/* The share of the window that trains: what failures leave, at the steady overhead's pace. */
static double goodput(const struct model *m, int s)
{
    double lost = m->manual * V(MANUAL_H) * 3600;
    for (int c = 0; c < NCLASS; c++)
        lost += m->failures[c] * per_failure(m, s, c);
    return lost >= m->window_s ? 0 : (1 - m->overhead[s]) * (1 - lost / m->window_s);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ckpt-sim goodput [--gpus N[,N...]] [--detail N] [--INPUT VALUE...]\n"
               "  --gpus LIST            scales to model (default 1024,16384,100000)\n"
               "  --detail N             the scale whose downtime is shown by phase (default 16384)\n");
    for (int i = 0; i < NINPUTS; i++)
        fprintf(f, "  --%-20s %g %s (%s)\n", in[i].opt, in[i].v, in[i].unit, in[i].source);
}

static int parse_gpus(const char *s, double *gpus, int *n)
{
    char *end;
    *n = 0;
    do {
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || v < 1 || v > 1e7 || v != floor(v) || *n == 8 || (*end && *end != ','))
            return -EINVAL;
        gpus[(*n)++] = v;
        s = end + 1;
    } while (*end == ',');
    return 0;
}

static void report(const double *gpus, int ngpus, double detail)
{
    struct model m;
    unsigned unexpected = 0;
    for (size_t i = 0; i < sizeof(llama3) / sizeof(llama3[0]); i++)
        unexpected += llama3[i].count;
    printf("goodput over %g days, failures at the Llama 3 405B record's rate per GPU (%u unexpected and %d planned "
           "interruptions in %g days on %d GPUs)\n", V(DAYS), unexpected, RECORD_PLANNED, RECORD_DAYS, RECORD_GPUS);
    printf("%-28s", "");
    for (int k = 0; k < ngpus; k++)
        printf("%14.0f GPUs", gpus[k]);
    printf("\n");
    for (int s = 0; s < NSTRATEGIES; s++) {
        printf("%-28s", strategy_name[s]);
        for (int k = 0; k < ngpus; k++) {
            build(&m, gpus[k]);
            printf("%18.1f%%", 100 * goodput(&m, s));
        }
        printf("\n");
    }

    /* The calibration: the baseline at the record's own scale and window. */
    double days = V(DAYS);
    V(DAYS) = RECORD_DAYS;
    build(&m, RECORD_GPUS);
    double base = goodput(&m, REMOTE);
    V(DAYS) = days;
    bool near = base >= RECORD_EFFECTIVE && base <= RECORD_EFFECTIVE + CALIBRATED_BAND;
    printf("calibration: %s at %d GPUs over %g days: %.1f%%; the record: effective training time above %.0f%%: %s\n",
           strategy_name[REMOTE], RECORD_GPUS, RECORD_DAYS, 100 * base, 100 * RECORD_EFFECTIVE,
           near ? "consistent" : "NOT consistent: these inputs do not describe the record's job, so the figures above "
                                 "are not evidence");

    build(&m, detail);
    printf("\nat %.0f GPUs (%.0f machines) over %g days: failures: ", detail, m.machines, V(DAYS));
    for (int c = 0; c < NCLASS; c++)
        printf("%s %.1f, ", class_name[c], m.failures[c]);
    printf("needing people %.1f; one every %.2f h\n", m.manual, m.mtbf_s / 3600);
    printf("checkpoints: ");
    for (int s = 0; s < NSTRATEGIES; s++)
        printf("%s%s every %.0f s (t_ckpt %.1f s, overhead %.2f%%)", s ? "; " : "", strategy_name[s],
               m.interval[s], m.t_ckpt[s], 100 * m.overhead[s]);
    printf("\ndowntime per failure (s), mean over the classes:\n%-28s", "");
    for (int p = 0; p < NPHASES; p++)
        printf("%10s", phase_name[p]);
    printf("%12s\n", "total");
    double n = 0;
    for (int c = 0; c < NCLASS; c++)
        n += m.failures[c];
    for (int s = 0; s < NSTRATEGIES; s++) {
        double total = 0;
        printf("%-28s", strategy_name[s]);
        for (int p = 0; p < NPHASES; p++) {
            double t = 0;
            for (int c = 0; c < NCLASS; c++)
                t += m.failures[c] * m.cost[s][c][p] / n;
            total += t;
            printf("%10.1f", t);
        }
        printf("%12.1f\n", total);
    }
    /* How old a job may be before its cold replay costs more than the baseline's way back. */
    double extra = 0;
    for (int c = 0; c < NCLASS; c++)
        extra += m.failures[c] / n * (per_failure(&m, REMOTE, c) - per_failure(&m, COLD, c) + m.cost[COLD][c][HOST_STATE]);
    if (V(HOST_SHARE) > 0)
        printf("libckpt's cold path comes back slower than the baseline once a job is %.1f h old (its replay grows "
               "with the job's age; a standby's does not)\n", extra > 0 ? extra / V(HOST_SHARE) / 3600 : 0);

    printf("\ninputs:\n");
    for (int i = 0; i < NINPUTS; i++)
        printf("  --%-20s %-8g %-18s %s\n", in[i].opt, in[i].v, in[i].unit, in[i].source);
    printf("classes: node lost: GPU, network and host causes (a replacement machine; its host memory is gone); "
           "process crash: software bug, dependency; hang: NCCL watchdog timeout; planned: maintenance, no work "
           "lost.\nnot modelled: two machines of one replica group lost within one recovery (ckpt-sim without "
           "goodput gives that probability), slower training after a replacement.\n");
}

int sim_goodput(int argc, char **argv)
{
    struct option opts[NINPUTS + 4];
    double gpus[8] = {1024, 16384, 100000}, detail = RECORD_GPUS;
    int ngpus = 3, o, idx;

    for (int i = 0; i < NINPUTS; i++)
        opts[i] = (struct option){in[i].opt, required_argument, NULL, 0};
    opts[NINPUTS] = (struct option){"gpus", required_argument, NULL, 'g'};
    opts[NINPUTS + 1] = (struct option){"detail", required_argument, NULL, 'd'};
    opts[NINPUTS + 2] = (struct option){"help", no_argument, NULL, 'h'};
    opts[NINPUTS + 3] = (struct option){NULL, 0, NULL, 0};
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        char *end;
        switch (o) {
        case 0: {
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(v >= in[idx].lo && v <= in[idx].hi)) {
                fprintf(stderr, "ckpt-sim goodput: --%s '%s': expected %s in [%g, %g]\n", in[idx].opt, optarg,
                        in[idx].unit, in[idx].lo, in[idx].hi);
                return 2;
            }
            in[idx].v = v;
            break;
        }
        case 'g':
            if (parse_gpus(optarg, gpus, &ngpus) < 0) {
                fprintf(stderr, "ckpt-sim goodput: --gpus '%s': expected up to 8 whole numbers of GPUs, comma-separated\n",
                        optarg);
                return 2;
            }
            break;
        case 'd':
            detail = strtod(optarg, &end);
            if (*end || end == optarg || detail < 1 || detail > 1e7) {
                fprintf(stderr, "ckpt-sim goodput: --detail '%s': expected a number of GPUs\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    report(gpus, ngpus, detail);
    return 0;
}
