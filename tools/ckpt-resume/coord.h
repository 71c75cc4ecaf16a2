/*
 * The coordination protocol between the node agents of a job on several
 * nodes: the agent etcd elected runs the coordinator (coord.c), and every
 * agent, the leader's included, is a member (member.c); each talks to its
 * own bridge on loopback in replica/wire.h frames, and the bridges carry
 * the messages through etcd (bridge.c).  The coordinator decides; members
 * do.
 *
 *   member                                  coordinator
 *   JOIN {node, shape, replica address,
 *         what it holds, its standbys,
 *         the decisions it acted under} -->  waits for every node, then
 *                                     <---  PLAN {restore point, master,
 *                                                 replica addresses, copies
 *                                                 this member must send,
 *                                                 the standbys' port, whether
 *                                                 they take over, and every
 *                                                 decision the nodes know}
 *   retires what a decision it missed
 *   replaced, sends the copies peers lack,
 *   FETCHED {status}                  --->  once every member fetched:
 *                                     <---  LAUNCH {restore point}, then
 *                                     <---  REPLICATE {restore point, again}
 *                                           (its copies may be in no peer)
 *   runs its ranks; while they run:
 *   HELD {iteration all its ranks keep} --> when every node holds the same:
 *                                     <---  REPLICATE {iteration}
 *   REPLICATED {iteration, status}    --->  when every node replicated it:
 *                                     <---  DURABLE {iteration, next target}
 *   FAILED {rank, exit code}          --->  STOP to every member
 *   DONE (all its ranks succeeded)    --->  FINISH {exit code} when all are
 *   during a takeover by standby:
 *   ID {name, NCCL unique id}         --->  to every member: ID
 *   (a communicator's rank 0 made a new id for the name of the one the
 *   recorded run used; every node leaves it where its standbys look:
 *   CKPT_TAKEOVER_IDS)
 *   after a STOP or a failure: JOIN again, with what it holds now
 *   (a plan by standby: at LAUNCH every node's standbys go live instead
 *   of new ranks; a node whose standbys cannot sends FAILED {TAKEOVER},
 *   and the next plan is cold)
 *
 * A node is in the job while its etcd lease lives (no heartbeats here).
 * A member that loses the coordinator (a new leader, or its own lease
 * ended) stops its ranks and joins again; the coordinator that loses a
 * member stops the job and waits for a node of that rank to join.  All
 * integers little-endian, laid out as the structs below.
 */
#ifndef CKPT_COORD_H
#define CKPT_COORD_H

#include <stdint.h>

#include "format.h"
#include "recovery.h"

/* Above the replica protocol's types (replica.h), so a frame sent to the wrong port is refused. */
enum coord_msg {
    COORD_JOIN = 64,    /* coord_join + ckpt_held[nheld] + ckpt_decision[ndecided] */
    COORD_PLAN,         /* coord_plan + coord_addr[nnodes] + coord_send[nsend] + ckpt_decision[ndecided] */
    COORD_FETCHED,      /* coord_status */
    COORD_LAUNCH,       /* coord_iter */
    COORD_HELD,         /* coord_held */
    COORD_REPLICATE,    /* coord_iter (value: COORD_AGAIN for the restore point) */
    COORD_REPLICATED,   /* coord_status */
    COORD_DURABLE,      /* coord_iter (value: the next target) */
    COORD_FAILED,       /* coord_status (value: rank; status: exit code; flags) */
    COORD_STOP,         /* text: why */
    COORD_DONE,         /* nothing */
    COORD_FINISH,       /* coord_status (status: the job's exit code) + text */
    COORD_ID,           /* coord_id: to the coordinator, which tells every member */
    /* Between the bridges only, through etcd: the connection it stands for
     * (a member's to its bridge, or the leader's bridge's to the
     * coordinator for that member) was closed; the bridge that takes it
     * closes the matching one on its side (to the coordinator, or to the
     * member).  No member or coordinator ever receives it. */
    COORD_CLOSED = 0xffff, /* nothing */
};

#define COORD_ADDR_MAX 64
#define COORD_JOIN_PEER_LOGS 1u /* JOIN: its standbys (a spare's) follow copies of the logs: its ranks' copies may
                                 * come from any node, they are moved into its arena before the takeover */
#define COORD_DECIDED_MAX 64 /* decisions a node keeps and a JOIN or PLAN carries: the newest */
#define COORD_AGAIN 1 /* REPLICATE of what the ranks restored: sent where missing, not persisted again */
#define COORD_NO_ROOM 1u /* FAILED: libckpt stopped the rank, its host cannot hold its arena: no restart would find room */
#define COORD_EARLY 2u   /* FAILED: an exit status, before any rank of the node reached an iteration boundary */
#define COORD_TAKEOVER 4u /* FAILED: the node's standbys could not take over (said there): the cold path, at once */
#define COORD_NODE_GONE 8u /* FAILED: node value's command (CKPT_NODE_LAUNCHER) ended too often: it will not join */

struct coord_addr {
    char hostport[COORD_ADDR_MAX];     /* where the node's agent takes replicas, NUL-terminated */
};

struct coord_join {
    uint32_t node, nnodes, nproc, replicas;
    char job[CKPT_JOB_MAX];
    struct coord_addr replica;
    uint64_t refused;                  /* the restore its ranks refused in the last launch, 0: none */
    uint32_t nheld, placement;
    uint64_t standby;                  /* its standbys all run and replay up to this iteration; 0: none */
    uint32_t launched;                 /* 1: a coordinator of this job has launched it (this one, or one before) */
    uint32_t restarts;                 /* the job's restarts in the last plan it got */
    uint64_t epoch;                    /* the epoch of the last plan it got, 0: none */
    uint32_t ndecided;                 /* the decisions it acted under (recovery.h), oldest first */
    uint32_t flags;                    /* COORD_JOIN_*: how its standbys follow */
};

struct coord_plan {
    uint64_t restore;                  /* iteration, 0: a fresh start */
    uint64_t launch;                   /* launches so far, this one included */
    char master_addr[COORD_ADDR_MAX];
    char master_port[16];
    uint32_t nnodes, nsend;
    char standby_port[16];             /* the standbys' rank 0 port (at master_addr) */
    uint32_t by_standby;               /* 1: the standbys take over at restore, no rank is launched */
    uint32_t restarts;                 /* the job's restarts, this launch's included, whoever coordinated them */
    uint64_t epoch;                    /* the etcd revision of this plan's decision, above every plan any
                                        * node has had: replicas carry it, and a node refuses those of an
                                        * older one (replica.h) */
    uint32_t ndecided;                 /* the decisions before this one that the nodes know, oldest first */
    uint32_t reserved;
};

/* Copy rank's replica of iteration from this member's peer store to node's agent. */
struct coord_send {
    uint32_t rank, node;
    uint64_t iteration;
};

#define COORD_ID_BYTES 128 /* sizeof(ncclUniqueId) */
struct coord_id {
    uint64_t name;                     /* the hash of the id the recorded run used */
    uint8_t id[COORD_ID_BYTES];
};

struct coord_iter {
    uint64_t iteration;
    uint64_t value;
};

/* The iterations every rank of a node keeps (at or past the target), newest first; 0: none. */
struct coord_held {
    uint64_t newest, other;
    uint64_t committed;                /* the newest any of its ranks committed */
};

struct coord_status {
    int32_t status;
    uint32_t flags;                    /* COORD_FAILED: COORD_NO_ROOM, or 0 */
    uint64_t iteration;                /* or the value the message says */
    uint64_t value;
};

_Static_assert(sizeof(struct coord_join) == 16 + CKPT_JOB_MAX + COORD_ADDR_MAX + 48, "join layout");
_Static_assert(sizeof(struct coord_plan) == 16 + COORD_ADDR_MAX + 16 + 8 + 16 + 8 + 8 + 8, "plan layout");
_Static_assert(sizeof(struct coord_send) == 16, "send layout");
_Static_assert(sizeof(struct coord_status) == 24, "status layout");
_Static_assert(sizeof(struct coord_id) == 8 + COORD_ID_BYTES, "id layout");

#endif
