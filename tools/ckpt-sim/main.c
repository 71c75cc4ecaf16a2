/*
 * ckpt-sim: what a recorded iteration (a rank's timeline file) means for a
 * cluster.  From the timeline it takes the iteration time and the share of
 * it the link is idle (the gap profile, runtime/schedule.h); from the
 * command line the cluster.  It reports GEMINI's (SOSP '23) model for
 * in-memory checkpoints to m-1 peers sent in the idle gaps, and for remote
 * persistent storage: the checkpoint time, the achievable interval, the
 * wasted time per failure T = t_ckpt + 1/(2f) + t_retrieve, the wasted time
 * per day, and the probability that k simultaneous machine failures leave
 * every checkpoint recoverable from memory (runtime/placement.h, exact).
 * It only reads the timeline; it never touches an arena.  `ckpt-sim
 * goodput` models a whole job's goodput instead (goodput.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "placement.h"
#include "schedule.h"
#include "sim.h"
#include "timeline.h"

struct cluster {
    unsigned machines, gpus, replicas, failed;
    double state_gb;      /* model states per machine, decimal GB */
    double net_gbps;      /* per machine, GB/s */
    double pcie_gbps;     /* per GPU, GB/s */
    double storage_gbps;  /* remote storage, aggregate GB/s */
    double failures_day;  /* per machine per day */
    enum ckpt_placement placement;
    double iter_s, idle;  /* iteration time, idle share of the link */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ckpt-sim (--timeline FILE | --iteration-ms MS --idle-fraction F) [options]\n"
            "       ckpt-sim goodput [options]   a whole job's goodput under a published failure record\n"
            "  --timeline FILE        a rank's timeline (arena rank dir/timeline): iteration time and idle gaps\n"
            "  --iteration-ms MS      the iteration time instead of a timeline\n"
            "  --idle-fraction F      the share of an iteration the link is idle (0..1) instead of a timeline\n"
            "  --machines N           machines in the job (default 16)\n"
            "  --gpus G               GPUs per machine (default 8)\n"
            "  --state-gb S           model states per machine, GB (default 75)\n"
            "  --net-gbps B           network bandwidth per machine, GB/s (default 50)\n"
            "  --pcie-gbps P          device-to-host bandwidth per GPU, GB/s (default 25)\n"
            "  --storage-gbps R       remote storage bandwidth, aggregate GB/s (default 2.5)\n"
            "  --failure-rate F       failures per machine per day (default 0.01)\n"
            "  --replicas M           in-memory copies of each machine's checkpoint, its own included (default 2)\n"
            "  --placement P          auto, group, ring or mixed (default auto)\n"
            "  --failed K             machines failing at once for the recovery probability (default M)\n"
            "  --help                 this text\n");
}

static int num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "ckpt-sim: %s '%s': expected a number in [%g, %g]\n", opt, s, lo, hi);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

/* The iteration time (s) and idle share from a timeline's last iterations.
 * Returns 0 or -errno after saying why. */
static int from_timeline(const char *path, struct cluster *c)
{
    struct stat st;
    struct ckpt_tl_header h;
    struct ckpt_sched_profile p;
    char why[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "ckpt-sim: %s: %s\n", path, strerror(errno));
        return -errno;
    }
    char *buf = st.st_size > 0 ? malloc((size_t)st.st_size) : NULL;
    int rc = buf && read(fd, buf, (size_t)st.st_size) == st.st_size ? 0 : -EIO;
    close(fd);
    if (rc == 0 && ckpt_tl_decode(buf, (size_t)st.st_size, &h, why, sizeof(why)) < 0) {
        fprintf(stderr, "ckpt-sim: %s: %s\n", path, why);
        rc = -EINVAL;
    }
    if (rc == 0) {
        const struct ckpt_tl_event *ev = (const struct ckpt_tl_event *)(buf + h.header_bytes);
        uint64_t last = 0;
        for (size_t i = 0; i < h.nevents; i++)
            if (ev[i].kind == CKPT_TL_BOUNDARY && ev[i].iteration > last)
                last = ev[i].iteration;
        uint64_t from = last > 8 ? last - 7 : 2;
        if (ckpt_sched_build(ev, h.nevents, from, last, &p) < 0) {
            fprintf(stderr, "ckpt-sim: %s: fewer than two complete iterations with one collective pattern\n", path);
            rc = -EINVAL;
        } else {
            uint64_t idle = p.nspans ? 0 : p.period_ns;
            for (uint32_t k = 0; k < p.nspans; k++)
                idle += p.gap_ns[k];
            if (p.nspans) /* after the last collective, to the period's end */
                idle += p.period_ns > p.span[p.nspans - 1].end_ns ? p.period_ns - p.span[p.nspans - 1].end_ns : 0;
            c->iter_s = p.period_ns / 1e9;
            c->idle = (double)idle / (double)p.period_ns;
        }
    }
    free(buf);
    return rc;
}

/* The smallest whole number of iterations that lasts at least t seconds
 * (at least one), in seconds: a checkpoint is taken at a boundary. */
static double whole_iterations(double t, double iter_s)
{
    double k = (double)(unsigned long long)(t / iter_s);
    if (k * iter_s < t)
        k += 1;
    return (k < 1 ? 1 : k) * iter_s;
}

static void report(const struct cluster *c)
{
    double S = c->state_gb, n = c->machines, m = c->replicas;
    double idle = c->idle > 0 ? c->idle : 1e-9;
    /* In memory: each machine's GPUs copy S/G each to host memory, and the
     * machine sends S to each of m-1 peers, both in the idle gaps only. */
    double t_d2h = S / c->gpus / (c->pcie_gbps * idle);
    double t_net = m > 1 ? S * (m - 1) / (c->net_gbps * idle) : 0;
    double t_mem = t_d2h > t_net ? t_d2h : t_net;
    double int_mem = whole_iterations(t_mem, c->iter_s);
    double rtv_mem = S / c->net_gbps; /* a replacement machine fetches from a peer */
    /* Remote storage: every machine's states through the shared bandwidth. */
    double t_rem = n * S / c->storage_gbps;
    double int_rem = whole_iterations(t_rem, c->iter_s);
    double rtv_rem = n * S / c->storage_gbps;
    double per_day = n * c->failures_day;
    double w_mem = t_mem + int_mem / 2 + rtv_mem, w_rem = t_rem + int_rem / 2 + rtv_rem;
    enum ckpt_placement pl = ckpt_placement_choose(c->placement, c->machines, c->replicas);
    double pr = ckpt_placement_recovery(pl, c->machines, c->replicas, c->failed);

    printf("iteration: %.3f s, link idle %.1f%% of it\n", c->iter_s, 100 * c->idle);
    printf("cluster: %u machines x %u GPUs, %.1f GB of states per machine, network %.1f GB/s, PCIe %.1f GB/s per GPU, "
           "storage %.1f GB/s, %.4g failures per machine per day\n", c->machines, c->gpus, S, c->net_gbps,
           c->pcie_gbps, c->storage_gbps, c->failures_day);
    printf("in-memory (m=%u, %s): t_ckpt %.3f s, interval %.3f s (%.0f iterations), t_retrieve %.3f s, "
           "wasted per failure %.3f s\n", c->replicas, ckpt_placement_name(pl), t_mem, int_mem, int_mem / c->iter_s,
           rtv_mem, w_mem);
    printf("remote storage: t_ckpt %.3f s, interval %.3f s (%.0f iterations), t_retrieve %.3f s, "
           "wasted per failure %.3f s\n", t_rem, int_rem, int_rem / c->iter_s, rtv_rem, w_rem);
    printf("failures per day: %.4g; wasted per day: in-memory %.1f s, remote storage %.1f s (%.1fx)\n", per_day,
           per_day * w_mem, per_day * w_rem, w_mem > 0 ? w_rem / w_mem : 0);
    /* The model holds while checkpoints come more often than failures. */
    double mtbf = per_day > 0 ? 86400 / per_day : 0;
    if (per_day > 0 && (int_rem + rtv_rem >= mtbf || int_mem + rtv_mem >= mtbf))
        printf("warning: a failure comes every %.0f s on average, before %s checkpoints and restores once: that "
               "job makes no progress\n", mtbf, int_mem + rtv_mem >= mtbf ? "in-memory" : "remote-storage");
    if (pr < 0)
        printf("recovery from memory with %u machines failed at once: placement does not fit\n", c->failed);
    else
        printf("recovery from memory with %u machines failed at once: %.6f\n", c->failed, pr);
}

int main(int argc, char **argv)
{
    static const char *const placements[] = {"auto", "group", "ring", "mixed"};
    static const struct option opts[] = {
        {"timeline", required_argument, NULL, 't'}, {"iteration-ms", required_argument, NULL, 'i'},
        {"idle-fraction", required_argument, NULL, 'I'}, {"machines", required_argument, NULL, 'N'},
        {"gpus", required_argument, NULL, 'G'}, {"state-gb", required_argument, NULL, 'S'},
        {"net-gbps", required_argument, NULL, 'B'}, {"pcie-gbps", required_argument, NULL, 'P'},
        {"storage-gbps", required_argument, NULL, 'R'}, {"failure-rate", required_argument, NULL, 'F'},
        {"replicas", required_argument, NULL, 'm'}, {"placement", required_argument, NULL, 'p'},
        {"failed", required_argument, NULL, 'k'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    struct cluster c = {.machines = 16, .gpus = 8, .replicas = 2, .state_gb = 75, .net_gbps = 50,
                        .pcie_gbps = 25, .storage_gbps = 2.5, .failures_day = 0.01, .idle = -1};
    const char *timeline = NULL;
    double v, iter_ms = 0, failed = 0;
    int o;

    if (argc > 1 && strcmp(argv[1], "goodput") == 0)
        return sim_goodput(argc - 1, argv + 1);
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int rc = 0;
        switch (o) {
        case 't': timeline = optarg; break;
        case 'i': rc = num("--iteration-ms", optarg, 1e-3, 1e9, &iter_ms); break;
        case 'I': rc = num("--idle-fraction", optarg, 0, 1, &c.idle); break;
        case 'N': rc = num("--machines", optarg, 1, 65536, &v); c.machines = (unsigned)v; break;
        case 'G': rc = num("--gpus", optarg, 1, 1024, &v); c.gpus = (unsigned)v; break;
        case 'S': rc = num("--state-gb", optarg, 1e-9, 1e9, &c.state_gb); break;
        case 'B': rc = num("--net-gbps", optarg, 1e-6, 1e6, &c.net_gbps); break;
        case 'P': rc = num("--pcie-gbps", optarg, 1e-6, 1e6, &c.pcie_gbps); break;
        case 'R': rc = num("--storage-gbps", optarg, 1e-6, 1e6, &c.storage_gbps); break;
        case 'F': rc = num("--failure-rate", optarg, 0, 1e6, &c.failures_day); break;
        case 'm': rc = num("--replicas", optarg, 1, 64, &v); c.replicas = (unsigned)v; break;
        case 'k': rc = num("--failed", optarg, 0, 65536, &failed); break;
        case 'p':
            for (c.placement = 3; (int)c.placement >= 0 && strcmp(placements[c.placement], optarg); c.placement--)
                ;
            if ((int)c.placement < 0) {
                fprintf(stderr, "ckpt-sim: --placement '%s': expected auto, group, ring or mixed\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc < 0)
            return 2;
    }
    if (optind < argc || (!timeline && (iter_ms <= 0 || c.idle < 0)) || (timeline && (iter_ms > 0 || c.idle >= 0))) {
        usage(stderr);
        return 2;
    }
    c.failed = failed > 0 ? (unsigned)failed : c.replicas;
    char why[256];
    if (ckpt_placement_check(ckpt_placement_choose(c.placement, c.machines, c.replicas), c.machines, c.replicas, why,
                             sizeof(why)) < 0) {
        fprintf(stderr, "ckpt-sim: %s\n", why);
        return 2;
    }
    if (timeline) {
        if (from_timeline(timeline, &c) < 0)
            return 1;
    } else {
        c.iter_s = iter_ms / 1e3;
    }
    report(&c);
    return 0;
}
