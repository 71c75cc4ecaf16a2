/*
 * Between the bridge (bridge.c: the agents' messages through etcd, the
 * lease, the leadership) and its spares' side (bridge_spare.c: the keys
 * spare/ and plan, a spare's wait): the bridge's state, one per agent.
 */
#ifndef CKPT_BRIDGE_INT_H
#define CKPT_BRIDGE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "coord.h"
#include "resume.h"
#include "wire.h"

struct link {
    struct ckpt_conn conn;  /* fd -1: none */
    int64_t lease;          /* on the leader: the lease of the agent that is the node, 0: none */
    uint64_t seq;           /* the next message this side puts */
    uint64_t taken;         /* the next one it takes */
    bool refused;           /* on the leader: its agent's messages failed the job key's tag */
    double gone;            /* on the leader: when its agent's lease was seen ended, 0: it lives */
};

/* A message that etcd did not take yet: put again, in order, next turn.
 * It is put only while its guard holds: the key guard was created at
 * revision rev (the leader key of the epoch a leader speaks for, or the
 * node key a member's agent claimed), so that an agent that lost its
 * lease, and may not know it yet, writes no message and no decision. */
struct outgoing {
    char key[400];
    char guard[300];
    int64_t rev;
    char *value;
    size_t len;
};

struct bridge {
    struct etcd *e;
    struct etcd *decider;       /* the coordinator's, on its thread: its decisions (decide) */
    struct etcd_watch *watch;   /* on the job's keys, NULL: polling alone */
    struct spawn *spawn;        /* the nodes this agent starts (CKPT_NODE_LAUNCHER), NULL: none */
    bool spawn_given_up;        /* it gave up starting a node */
    unsigned spawn_failed;      /* that node, when no spare takes its place (atomic: the member reads it), 0: none */
    int watch_fd;
    struct options *opt;
    struct options copt;    /* the coordinator's: it listens on loopback */
    char prefix[256];
    int64_t lease;
    int64_t claimed;            /* the revision this agent's node key was created at */
    struct lease *keeper;       /* renews the lease */
    double ttl_s;
    bool fenced;
    unsigned node, n;
    char ip[64];            /* this machine's address towards etcd */
    int lfd;                /* where the member connects */
    char local[64];
    struct link member;
    int64_t epoch;          /* the leader key's create revision, 0: none */
    int64_t leading;        /* the epoch this agent leads, 0: none */
    struct coord *coord;
    struct link *nodes;     /* on the leader: a connection to the coordinator per node */
    int64_t *heard;         /* on the leader, per node: the lease of the agent whose messages the coordinator
                             * has on that connection, 0: none (read by decide(), on the coordinator's thread) */
    pthread_t thread;
    int stop[2];
    bool running;
    unsigned moved;         /* messages taken or put, for the pace of the turns */
    struct outgoing *out;   /* messages etcd did not take yet, in the order they were posted */
    size_t nout, capout;
    bool paused;            /* etcd has no quorum: nothing moves, and nobody is fenced for it */
    bool failure_held;      /* a rank's failure waits for etcd, said */
    bool finished;          /* the coordinator ended the job: no more campaigns */
    bool end_put;           /* on the leader: the job's end key is in etcd */
    int leader_node;        /* the node whose agent leads (B.epoch), -1: none */
    char leader_ip[64];     /* its address (its node key's value) */
    bool leaderless;        /* the job's leader is gone and none is elected yet: the next one is said */
    bool late;              /* it waited for a node rank: the job may have run without a leader */
    double leader_gone;     /* when the leader key was seen gone, 0: a leader is known (or none was yet) */
    int lost_leader;        /* a leader whose lease ended while the job ran, -1: none; whoever leads
                             * next fences it (CKPT_FENCE_CMD): it may be frozen, not gone */
    char lost_leader_ip[64];
    bool led;               /* this agent has led the job: a lost leader of its node rank was itself, fenced
                             * already (a replacement of that rank fences it) */
    pthread_mutex_t spares_lock;
    struct coord_addr *spares;  /* the spares' receivers, in their keys' order (spares_lock) */
    unsigned nspares;
    double spares_read_s;       /* when spare/ was read last */
    double claimed_s;           /* a spare: when it took a lost node's place */
    unsigned spares_said;       /* on the leader: the spares it said the job has */
};

extern struct bridge B;

/* Claims node rank @want, or with -1 the first free one: 1 when claimed,
 * 0 when taken, -errno. */
int bridge_claim(int want, char *why, size_t whylen);
/* Whether the job has a leader now. */
bool bridge_led(void);
/* Notes who leads, for an agent waiting for a node rank (it is late). */
void bridge_note_leader(void);

/* bridge_decide.c: a decision of the coordinator, on its thread, by the
 * leader of @term: 1 with *@epoch its revision, 0 when another leads,
 * -errno (-ESTALE: a node's agent is not the one the plan heard). */
int bridge_decide(int64_t term, uint64_t restore, uint64_t *epoch, char *why, size_t whylen);

/* bridge_spare.c */
void bridge_put_plan(const void *msg, size_t len);
void bridge_spares_turn(double now);
int bridge_spare_wait(char *why, size_t whylen);

#endif
