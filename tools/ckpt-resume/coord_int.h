/*
 * Between the coordinator's connections and decisions (coord.c) and its
 * replication rounds (coord_round.c): the coordinator's state, and how
 * the rounds reach the nodes.
 */
#ifndef CKPT_COORD_INT_H
#define CKPT_COORD_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "coord.h"
#include "resume.h"
#include "wire.h"

#define MAX_PENDING 64
#define HELD_MAX 1024 /* copies a JOIN may list per rank of the job: 2 slots, 2 replicas, CKPT_PERSIST_KEEP (<= 1000) generations */

enum phase {
    GATHER,                 /* waiting for every node to join */
    FETCH,                  /* PLAN sent: waiting for every FETCHED */
    RUN,                    /* LAUNCH sent: the ranks run */
    OVER,                   /* FINISH sent */
};

struct node {
    struct ckpt_conn conn;  /* from its agent (through the leader's bridge), fd -1: not connected */
    bool joined, done, fetched, held_in, replicated, repl_warned;
    int fetch_status, repl_status;
    uint64_t refused;
    uint64_t standby;           /* its JOIN: its standbys replay up to here, 0: it has none ready */
    bool peer_logs;             /* its JOIN: they follow copies of the logs (COORD_JOIN_PEER_LOGS) */
    bool launched;              /* its JOIN: a coordinator launched the job before (perhaps not this one) */
    uint32_t plan_restarts;     /* its JOIN: the job's restarts in the last plan it got */
    uint64_t epoch;             /* its JOIN: the epoch of the last plan it got */
    struct coord_addr addr;
    struct ckpt_held *held;
    uint32_t nheld;
    struct ckpt_decision decided[COORD_DECIDED_MAX]; /* its JOIN: the decisions it acted under */
    uint32_t ndecided;
    struct coord_held h;
    bool unfenced;              /* declared lost with CKPT_FENCE_CMD set: not fenced yet */
    pid_t fence;                /* the fence command running against it, 0: none */
    double fence_due, fence_since; /* when to run it (again), and since when it is wanted */
};

/* A connection that has not joined yet: its JOIN must come whole within
 * CKPT_NODE_TIMEOUT, else the connection is closed. */
struct pending {
    struct ckpt_conn conn;
    double since;
};

struct coord {
    const struct options *opt;
    int lfd, stop[2];
    pthread_t thread;
    bool started;
    unsigned n, nproc, replicas;
    struct node *nodes;
    struct pending pending[MAX_PENDING];
    int npending;
    enum phase phase;
    uint64_t restore, below, durable, target, replicating;
    uint64_t epoch;          /* of the last plan: each is above every plan a node has had */
    coord_decide_fn *decide; /* records each plan's decision in etcd, its revision the epoch (bridge.c) */
    int64_t term;            /* the leader's epoch the decisions are taken under */
    bool decide_said;        /* a decision waits, and that was said */
    int end_code;            /* FINISH's, for a node that joins after the end */
    char end_why[1536];
    bool ever_durable, failed_launch;
    bool takeover_failed;    /* a node's standbys could not take over: the next plan is cold, no new restart */
    char no_room[128]; /* a rank stopped for want of host memory: the job ends, not restarted */
    int early, early_before; /* the exit status of this launch's and the last one's failure before any boundary, -1: none */
    char early_why[128];     /* which rank that was */
    uint64_t lead;           /* iterations a new target lies past the nodes' newest commit, set at each miss */
    uint64_t late_seen;      /* how late the latest node learned a target, at the last miss that was no stall */
    double durable_at;       /* when the nodes were last told the durable iteration and the target */
    double replicate_at;     /* when the round in flight was last asked for */
    uint32_t replicate_value; /* its REPLICATE's value (COORD_AGAIN or 0) */
    int launches, restarts, exit_code, user_signal;
    unsigned rounds, failed_rounds;     /* replication rounds ended, and those some node failed */
    double timeout_s, resume_at, gather_since;
    char master_addr[COORD_ADDR_MAX], master_port[16];
    char standby_port[16];              /* the standbys' rank 0 port: the next takeover's master port */
    char bound[128];                    /* the address listened on */
    struct pollfd *pfd;                 /* one turn's: the stop pipe, the listener, pending, nodes */
};

/* Sends a message (@a then @b) to node @j; a node that cannot take it is lost. */
void coord_tell(struct coord *c, unsigned j, uint16_t type, const void *a, size_t alen, const void *b,
                size_t blen);
/* Sends a message to every node. */
void coord_tell_all(struct coord *c, uint16_t type, const void *a, size_t alen);
/* What a member's negative status says: it came off the wire, so it may be any value. */
const char *coord_status_text(int32_t status);

/* Rounds (coord_round.c).  A HELD arrived: when every node has said what
 * it keeps, replicate it or aim again. */
void coord_held(struct coord *c);
/* A REPLICATED from node @j: when every node has, the iteration is durable. */
void coord_replicated(struct coord *c, unsigned j, const struct coord_status *st);
/* Tells a node that has not answered the round in flight again, while nothing moves. */
void coord_remind(struct coord *c, double now);

#endif
