/*
 * ckpt-replica: the replication building blocks of the node agent
 * (replica/) and the placement arithmetic (runtime/placement.h) from the
 * command line, for tests, benchmarks and by-hand checks.  It calls
 * exactly what the agent calls and adds option parsing and printing: one
 * result line on stdout per transfer, reasons on stderr.  The test options
 * (--flip-byte, --pause-after) never touch the image file: the sender
 * flips its private copy, and pausing only stops sending.
 *
 *   ckpt-replica serve --listen HOST:PORT --dir DIR [--once] [--epoch E]
 *   ckpt-replica send --to HOST:PORT --image SLOT|- [--image ...] [--flip-byte N] [--pause-after BYTES] [--epoch E]
 *     (several images go over one connection, as the agent sends its generations;
 *     "-" reads paths from stdin, one a line, each sent as it is read)
 *                     [--sched-profile RANKDIR]   (send in that rank's idle gaps; record the send there)
 *   ckpt-replica verify SLOT...
 *   ckpt-replica probe [--node IP]
 *   ckpt-replica placement [--nodes N] [--replicas M] [--placement P]
 * serve, send, probe: [--provider P] (default CKPT_FABRIC_PROVIDER); the data
 * path (RMA writes or tagged messages) is CKPT_FABRIC_DATA's.  --epoch: the
 * plan the node acts under (default 0): serve refuses offers of an older one.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "image.h"
#include "log.h"
#include "placement.h"
#include "replica.h"
#include "schedule.h"
#include "timeline.h"
#include "wire.h"
#include "util.h"

struct args {
    const char *listen, *dir, *to, *node, *provider, *sched_dir;
    const char *images[64];               /* --image, in order */
    int nimages;
    int once;
    unsigned long long flip, pause_after;
    int flip_set, pause_set;
    unsigned long long nodes, replicas;
    int placement;
    unsigned long long epoch;             /* --epoch */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: ckpt-replica serve --listen HOST:PORT --dir DIR [--once] [--provider P] [--epoch E]\n"
               "       ckpt-replica send --to HOST:PORT --image SLOT|- [--image ...] [--provider P] "
               "[--flip-byte N] [--pause-after BYTES] [--sched-profile RANKDIR] [--epoch E]\n"
               "       ckpt-replica verify SLOT...\n"
               "       ckpt-replica probe [--node IP] [--provider P]\n"
               "       ckpt-replica placement [--nodes N] [--replicas M] [--placement auto|group|ring|mixed]\n"
               "defaults: CKPT_FABRIC_PROVIDER, CKPT_FABRIC_DATA, CKPT_NNODES, CKPT_REPLICAS, CKPT_PLACEMENT\n");
}

static int number(const char *opt, const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (errno || !*s || *end || *s == '-' || *out > max) {
        fprintf(stderr, "ckpt-replica: %s '%s': expected an integer up to %llu\n", opt, s, max);
        return -1;
    }
    return 0;
}

static int open_fabric(const char *node, const char *provider, struct ckpt_fab **f)
{
    char why[512];
    int rc = ckpt_fab_open(f, node, provider, (int)ckpt_cfg_int(CFG_FABRIC_DATA), why, sizeof(why));
    if (rc < 0)
        ckpt_log(CKPT_ERROR, "%s", why);
    return rc;
}

static void report(void *arg, const struct ckpt_replica_stats *st)
{
    (void)arg;
    if (st->status < 0)
        ckpt_log(CKPT_ERROR, "replica of job %s rank %u generation %llu not kept: %s", st->job, st->rank,
                 (unsigned long long)st->generation, st->why);
    else
        ckpt_log(CKPT_INFO, "replica of job %s rank %u generation %llu iteration %llu committed in slot %u: "
                 "%llu of %llu chunks received, %llu bytes, %.3f s", st->job, st->rank,
                 (unsigned long long)st->generation, (unsigned long long)st->iteration, st->slot,
                 (unsigned long long)st->sent_chunks, (unsigned long long)st->chunks,
                 (unsigned long long)st->bytes_sent, st->seconds);
}

static int serve(const struct args *a)
{
    char bound[128], why[512], ip[64];
    struct ckpt_fab *f;
    struct ckpt_store *store;
    uint64_t epoch = a->epoch;
    int lfd, rc;

    if (!a->listen || !a->dir) {
        usage(stderr);
        return 2;
    }
    if ((rc = ckpt_wire_listen(a->listen, &lfd, bound, sizeof(bound), why, sizeof(why))) < 0) {
        ckpt_log(CKPT_ERROR, "%s", why);
        return 1;
    }
    /* The endpoint goes on the interface peers reach us by. */
    int any = ckpt_wire_local_ip(lfd, ip, sizeof(ip)) < 0 || !strcmp(ip, "0.0.0.0") || !strcmp(ip, "::");
    if (open_fabric(any ? NULL : ip, a->provider, &f) < 0)
        return 1;
    if ((rc = ckpt_store_open(&store, a->dir, f, why, sizeof(why))) < 0) {
        ckpt_log(CKPT_ERROR, "%s", why);
        ckpt_fab_close(f);
        return 1;
    }
    printf("listening on %s, provider %s, data %s, replicas in %s\n", bound, ckpt_fab_provider(f),
           ckpt_fab_data(f) == CKPT_FAB_DATA_TAGGED ? "tagged" : "rma", a->dir);
    fflush(stdout);
    do {
        int ctl;
        uint64_t peer;
        if ((rc = ckpt_wire_accept(lfd, &ctl)) < 0) {
            ckpt_log(CKPT_ERROR, "accept: %s", strerror(-rc));
            break;
        }
        if ((rc = ckpt_replica_hello(f, ctl, &peer, why, sizeof(why))) < 0)
            ckpt_log(CKPT_ERROR, "%s", why);
        else if ((rc = ckpt_replica_serve(f, ctl, store, &epoch, report, NULL)) < 0)
            ckpt_log(CKPT_ERROR, "connection ended: %s", strerror(-rc));
        close(ctl);
    } while (!a->once);
    ckpt_store_close(store);
    ckpt_fab_close(f);
    close(lfd);
    return rc < 0;
}

struct pacing {
    struct ckpt_fab *f;
    unsigned long long after;
    struct ckpt_sched_reader *sched; /* --sched-profile: send in the rank's idle gaps */
    uint64_t chunk_bytes, t0;
};

/* --sched-profile: each chunk waits for an idle gap of the rank, as the
 * node agent's do.  --pause-after: once that many bytes are in the
 * receiver's memory, stop sending and wait to be killed (the tests cut a
 * transfer here). */
static int pace(void *arg, uint64_t chunk, uint64_t sent)
{
    struct pacing *p = arg;
    (void)chunk;
    if (p->sched) {
        /* The rate so far (1 GB/s before any): how long the chunk will hold the link. */
        uint64_t dt = ckpt_now_ns() - p->t0, rate = sent && dt ? (uint64_t)(sent * 1e9 / dt) : 1000000000ULL;
        int rc = ckpt_sched_wait(p->sched, p->chunk_bytes, rate, 1000);
        if (rc == -E2BIG)
            ckpt_log_once(CKPT_WARN, "a %llu-byte chunk fits in no idle gap of %s: sent as it comes",
                          (unsigned long long)p->chunk_bytes, p->sched->dir);
    }
    if (!p->after || sent < p->after)
        return 0;
    int rc = ckpt_fab_drain(p->f, 30000);
    ckpt_log(CKPT_INFO, "paused after %llu bytes (%s)", (unsigned long long)sent, rc ? strerror(-rc) : "delivered");
    for (;;)
        pause();
}

/* Sends one image over an established connection and prints its line.
 * Returns 0 once the receiver committed it, else 1. */
static int send_one(const struct args *a, const char *path, struct ckpt_fab *f, int ctl, uint64_t peer)
{
    char why[512];
    struct ckpt_fab_region *src = NULL;
    struct ckpt_replica_stats st;
    struct ckpt_header h;
    struct stat sb;
    void *image = MAP_FAILED;
    int rc = 1;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    /* A flipped byte goes into a private copy, never into the file.  The
     * mapping is populated at once, as the agent's long-lived mapping of an
     * arena slot is: faults under the writes are no part of the transfer. */
    if (sb.st_size > 0)
        image = mmap(NULL, sb.st_size, PROT_READ | (a->flip_set ? PROT_WRITE : 0),
                     (a->flip_set ? MAP_PRIVATE : MAP_SHARED) | MAP_POPULATE, fd, 0);
    close(fd);
    if (image == MAP_FAILED || ckpt_image_verify_header(image, sb.st_size, &h, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", path, image == MAP_FAILED ? "empty or unreadable" : why);
        goto out;
    }
    if (a->flip_set) {
        if (a->flip >= h.data_bytes) {
            ckpt_log(CKPT_ERROR, "--flip-byte %llu: the data area has %llu bytes", a->flip,
                     (unsigned long long)h.data_bytes);
            goto out;
        }
        ((unsigned char *)image)[h.data_offset + a->flip] ^= 0x01;
    }
    if (ckpt_fab_register(f, image, sb.st_size, 0, &src) < 0) {
        ckpt_log(CKPT_ERROR, "%s", ckpt_fab_error(f));
        goto out;
    }
    struct ckpt_sched_reader sched;
    struct pacing p = {f, a->pause_set ? a->pause_after : 0, NULL, h.chunk_bytes, ckpt_now_ns()};
    if (a->sched_dir && ckpt_sched_reader_open(&sched, a->sched_dir) == 0)
        p.sched = &sched;
    uint64_t t0 = ckpt_now_ns();
    if (ckpt_replica_send(f, ctl, peer, a->epoch, image, sb.st_size, src, a->pause_set || p.sched ? pace : NULL, &p,
                          &st) <
        0) {
        ckpt_log(CKPT_ERROR, "job %s rank %u generation %llu to %s: %s", st.job, st.rank,
                 (unsigned long long)st.generation, a->to, st.why);
        goto out;
    }
    if (a->sched_dir) { /* the send on the rank's timeline, as the node agent records it */
        struct ckpt_tl_event e = {.start_ns = t0, .end_ns = ckpt_now_ns(), .arg = st.bytes_sent,
                                  .kind = CKPT_TL_NET, .detail = (uint32_t)st.iteration};
        int trc = ckpt_tl_agent_add(a->sched_dir, &e);
        if (trc < 0)
            ckpt_log(CKPT_WARN, "cannot record the send in %s: %s", a->sched_dir, strerror(-trc));
    }
    printf("sent job %s rank %u generation %llu iteration %llu to %s over %s: %llu of %llu chunks, "
           "%llu bytes sent, %llu bytes of data, slot %u, %.3f s (%.3f s after the last write), %.2f GB/s\n",
           st.job, st.rank, (unsigned long long)st.generation, (unsigned long long)st.iteration, a->to,
           ckpt_fab_provider(f), (unsigned long long)st.sent_chunks, (unsigned long long)st.chunks,
           (unsigned long long)st.bytes_sent, (unsigned long long)st.data_bytes, st.slot, st.seconds, st.tail_seconds,
           st.seconds > 0 ? st.bytes_sent / st.seconds / 1e9 : 0.0);
    fflush(stdout);
    rc = 0;
out:
    ckpt_fab_unregister(src);
    if (image != MAP_FAILED)
        munmap(image, sb.st_size);
    return rc;
}

/* send: one connection, one fabric endpoint, then each --image in turn
 * ("-": the paths read from stdin, one a line, each sent as it is read).
 * Stops at the first image that is not committed. */
static int send_images(const struct args *a)
{
    char why[512], ip[64], line[PATH_MAX + 2];
    struct ckpt_fab *f = NULL;
    uint64_t peer;
    int ctl = -1, rc = 1;

    if (!a->to || !a->nimages) {
        usage(stderr);
        return 2;
    }
    if (ckpt_wire_connect(a->to, &ctl, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s", why);
        goto out;
    }
    if (ckpt_wire_local_ip(ctl, ip, sizeof(ip)) < 0 || open_fabric(ip, a->provider, &f) < 0)
        goto out;
    if (ckpt_replica_hello(f, ctl, &peer, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s", why);
        goto out;
    }
    rc = 0;
    for (int i = 0; i < a->nimages && !rc; i++) {
        if (strcmp(a->images[i], "-") != 0) {
            rc = send_one(a, a->images[i], f, ctl, peer);
            continue;
        }
        while (!rc && fgets(line, sizeof(line), stdin)) {
            line[strcspn(line, "\n")] = '\0';
            if (*line)
                rc = send_one(a, line, f, ctl, peer);
        }
    }
out:
    ckpt_fab_close(f);
    if (ctl >= 0)
        close(ctl);
    return rc;
}

/* Checks slot files as every reader does (runtime/image.c). */
static int verify(int argc, char **argv)
{
    int bad = 0;
    for (int i = 0; i < argc; i++) {
        char why[256] = "";
        struct ckpt_header h;
        struct stat sb;
        int fd = open(argv[i], O_RDONLY | O_CLOEXEC), rc = -errno;
        void *p = MAP_FAILED;
        if (fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size > 0)
            p = mmap(NULL, sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (fd >= 0)
            close(fd);
        if (p == MAP_FAILED)
            snprintf(why, sizeof(why), "%s", fd < 0 ? strerror(-rc) : "empty or unreadable");
        else if ((rc = ckpt_image_verify(p, sb.st_size, &h, why, sizeof(why))) == 0)
            printf("%s: job %s rank %u generation %llu iteration %llu, %llu chunks: ok\n", argv[i], h.job, h.rank,
                   (unsigned long long)h.generation, (unsigned long long)h.iteration,
                   (unsigned long long)h.nchunks);
        if (p != MAP_FAILED)
            munmap(p, sb.st_size);
        if (*why) {
            printf("%s: not valid: %s\n", argv[i], why);
            bad = 1;
        }
    }
    return bad;
}

static int probe(const struct args *a)
{
    struct ckpt_fab *f;
    if (open_fabric(a->node, a->provider, &f) < 0)
        return 1;
    printf("provider %s, data %s\n", ckpt_fab_provider(f), ckpt_fab_data(f) == CKPT_FAB_DATA_TAGGED ? "tagged" : "rma");
    ckpt_fab_close(f);
    return 0;
}

static int placement(const struct args *a)
{
    char why[256];
    if (ckpt_placement_check(a->placement, a->nodes, a->replicas, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_ERROR, "%s", why);
        return 2;
    }
    ckpt_placement_describe(stdout, a->placement, a->nodes, a->replicas);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},   {"dir", required_argument, NULL, 'd'},
        {"once", no_argument, NULL, '1'},           {"to", required_argument, NULL, 't'},
        {"image", required_argument, NULL, 'i'},    {"flip-byte", required_argument, NULL, 'f'},
        {"pause-after", required_argument, NULL, 'p'}, {"sched-profile", required_argument, NULL, 'S'},
        {"node", required_argument, NULL, 'n'},     {"epoch", required_argument, NULL, 'e'},
        {"provider", required_argument, NULL, 'P'}, {"nodes", required_argument, NULL, 'N'},
        {"replicas", required_argument, NULL, 'm'}, {"placement", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    static const char *const placements[] = {"auto", "group", "ring", "mixed"};
    char err[512];
    struct args a = {0};
    int c;

    if (ckpt_config_load(err, sizeof(err)) < 0) {
        fprintf(stderr, "ckpt-replica: error: %s\n", err);
        return 2;
    }
    ckpt_log_init("ckpt-replica", (int)ckpt_cfg_int(CFG_LOG));
    if (ckpt_auth_set_key(ckpt_cfg_str(CFG_JOB_KEY)) < 0) {
        fprintf(stderr, "ckpt-replica: error: CKPT_JOB_KEY is too short: it must have at least %d characters\n",
                CKPT_AUTH_KEY_MIN);
        return 2;
    }
    a.provider = ckpt_cfg_str(CFG_FABRIC_PROVIDER);
    a.nodes = (unsigned long long)ckpt_cfg_int(CFG_NNODES);
    a.replicas = (unsigned long long)ckpt_cfg_int(CFG_REPLICAS);
    a.placement = (int)ckpt_cfg_int(CFG_PLACEMENT);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': a.listen = optarg; break;
        case 'd': a.dir = optarg; break;
        case '1': a.once = 1; break;
        case 't': a.to = optarg; break;
        case 'i':
            if (a.nimages == (int)(sizeof(a.images) / sizeof(a.images[0]))) {
                fprintf(stderr, "ckpt-replica: more than %d --image options: use --image - and stdin\n", a.nimages);
                return 2;
            }
            a.images[a.nimages++] = optarg;
            break;
        case 'n': a.node = optarg; break;
        case 'P': a.provider = optarg; break;
        case 'f': if (number("--flip-byte", optarg, ~0ull, &a.flip) < 0) return 2; a.flip_set = 1; break;
        case 'p': if (number("--pause-after", optarg, ~0ull, &a.pause_after) < 0) return 2; a.pause_set = 1; break;
        case 'S': a.sched_dir = optarg; break;
        case 'e': if (number("--epoch", optarg, ~0ull, &a.epoch) < 0) return 2; break;
        case 'N': if (number("--nodes", optarg, 65536, &a.nodes) < 0) return 2; break;
        case 'm': if (number("--replicas", optarg, 64, &a.replicas) < 0) return 2; break;
        case 'k':
            for (a.placement = 3; a.placement >= 0 && strcmp(placements[a.placement], optarg); a.placement--)
                ;
            if (a.placement < 0) {
                fprintf(stderr, "ckpt-replica: --placement '%s': expected auto, group, ring or mixed\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (strcmp(cmd, "verify") == 0)
        return optind < argc ? verify(argc - optind, argv + optind) : (usage(stderr), 2);
    if (optind != argc) {
        fprintf(stderr, "ckpt-replica: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (strcmp(cmd, "serve") == 0)
        return serve(&a);
    if (strcmp(cmd, "send") == 0)
        return send_images(&a);
    if (strcmp(cmd, "probe") == 0)
        return probe(&a);
    if (strcmp(cmd, "placement") == 0)
        return placement(&a);
    fprintf(stderr, "ckpt-replica: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
