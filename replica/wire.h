/*
 * The control channel between node agents: plain TCP carrying
 * length-prefixed messages, each behind a fixed, versioned frame header.
 * It carries the small things (endpoint names, region keys, snapshot
 * headers, verdicts); the bytes of snapshots go over libfabric.  It must
 * never trust a length it has not bounded.
 *
 * A frame, all integers little-endian:
 *     0  char magic[4]   "CKRP"
 *     4  u16  version    CKPT_WIRE_VERSION
 *     6  u16  type       what the payload is (the protocol's business)
 *     8  u32  length     payload bytes that follow, at most CKPT_WIRE_MAX
 *    12  u32  reserved   0, or CKPT_WIRE_SEALED: a 32-byte tag follows the payload
 *    16  payload
 *
 * With a job key (CKPT_JOB_KEY), ckpt_wire_connect and ckpt_wire_accept
 * start each connection with a handshake, and every frame after it is
 * sealed with an HMAC that covers a sequence number (auth.c).  A frame that
 * fails it makes ckpt_wire_recv return -EACCES.
 */
#ifndef CKPT_REPLICA_WIRE_H
#define CKPT_REPLICA_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define CKPT_WIRE_MAGIC "CKRP"
#define CKPT_WIRE_VERSION 6u /* 2: PROGRESS, and RESULT before DONE (replica.h); 3: OFFER's epoch;
                              * 4: replay logs sent from what the receiver holds; 5: the decisions
                              * in the coordinators' JOIN and PLAN (coord.h); 6: each copy a JOIN
                              * lists with its epoch (recovery.h) */
#define CKPT_WIRE_MAX (64u << 20)
/* The frame type of the handshake that starts a connection when a job key
 * is set (auth.h), and the reserved field's value of a frame followed by
 * its tag. */
#define CKPT_WIRE_AUTH 0xfff0u
#define CKPT_WIRE_AUTH_OK 0xfff1u
#define CKPT_WIRE_SEALED 1u

struct ckpt_wire_frame {
    char magic[4];
    uint16_t version;
    uint16_t type;
    uint32_t length;
    uint32_t reserved;
};
_Static_assert(sizeof(struct ckpt_wire_frame) == 16, "control frame layout changed: bump CKPT_WIRE_VERSION");

/* Listens on "HOST:PORT" ("[v6]:PORT" too; port 0 takes a free one) and
 * writes the address it got into bound.  Returns 0 with *fd set, or -errno
 * with why. */
int ckpt_wire_listen(const char *hostport, int *fd, char *bound, size_t boundlen, char *why, size_t whylen);

/* Accepts one connection.  Returns 0 with *fd set, or -errno. */
int ckpt_wire_accept(int lfd, int *fd);

/* Connects to "HOST:PORT".  Returns 0 with *fd set, or -errno with why. */
int ckpt_wire_connect(const char *hostport, int *fd, char *why, size_t whylen);

/* The numeric local address of a connected socket: where a fabric
 * endpoint should be bound so that its bytes take the same interface. */
int ckpt_wire_local_ip(int fd, char *ip, size_t len);

/* Sends one message whose payload is a followed by b (either may be
 * empty).  Returns 0 or -errno. */
int ckpt_wire_send(int fd, uint16_t type, const void *a, size_t alen, const void *b, size_t blen);

/* Receives one message, waiting at most timeout_ms (-1: for ever).  The
 * payload is malloc'ed (NULL when empty) and the caller frees it.  Returns
 * 0; -ECONNRESET when the peer closed the connection; -ETIMEDOUT;
 * -EPROTO for a frame that is not ours; -EPROTONOSUPPORT for another
 * version; -EMSGSIZE for a payload over CKPT_WIRE_MAX; or -errno. */
int ckpt_wire_recv(int fd, int timeout_ms, uint16_t *type, void **payload, size_t *len);

/* What a connection holds of a message that has not come whole yet. */
struct ckpt_wire_rx {
    struct ckpt_wire_frame fr;
    uint8_t tag[CKPT_AUTH_TAG];
    void *payload;
    size_t have; /* bytes of the frame read so far: header, payload, tag */
};

/* One end of a control connection, read by a loop that waits on many:
 * a message is taken only once it has come whole, so a peer whose frame
 * is slow to come (a retransmitted segment, a stranger that stops
 * mid-frame) holds up no other.  The agent's member, its bridge and the
 * coordinator keep each of theirs in one.  fd -1: closed. */
struct ckpt_conn {
    int fd;
    struct ckpt_wire_rx rx;
};
#define CKPT_CONN_CLOSED ((struct ckpt_conn){ .fd = -1 })

/* The next message c has whole, without waiting: 1 with it, as
 * ckpt_wire_recv gives it; 0 when none is whole yet (call again when the
 * descriptor is readable); or -errno as ckpt_wire_recv returns it, after
 * which the connection is of no more use (ckpt_conn_close). */
int ckpt_conn_recv(struct ckpt_conn *c, uint16_t *type, void **payload, size_t *len);

/* Hands each message c has whole to take(arg, type, payload, len), which
 * owns the payload, up to max of them (0: all), while c is open and
 * until take returns false (it has handed the connection on).  Returns
 * how many were taken (0 from a closed connection), or -errno as
 * ckpt_conn_recv when the connection failed: the caller says why and
 * closes it. */
int ckpt_conn_take(struct ckpt_conn *c, int max, bool (*take)(void *arg, uint16_t type, void *payload, size_t len),
                   void *arg);

/* Closes c, if open, and drops what it held of a message. */
void ckpt_conn_close(struct ckpt_conn *c);

#endif
