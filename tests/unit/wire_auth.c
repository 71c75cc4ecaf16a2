/*
 * The authenticated control channel (replica/auth.c, replica/wire.c): with
 * the same key both ends talk; a peer with another key, or with none, is
 * refused at the handshake; and on a live sealed connection a frame that
 * is altered, replayed or dropped, or one injected without a tag, is
 * refused by the receiver.  Two ends over a loopback TCP connection, one
 * per thread; frames are tampered with by a relay in the middle.  A frame
 * that comes in pieces is taken a piece at a time, never waited for.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "wire.h"
#include "check.h"

static int lfd;
static char bound[128];

/* The server end: accepts one connection, reports the handshake's result and keeps the fd. */
struct server {
    pthread_t t;
    int rc, fd;
};

static void *serve(void *arg)
{
    struct server *s = arg;
    s->rc = ckpt_wire_accept(lfd, &s->fd);
    return NULL;
}

/* Connects a client while a thread accepts; the key is the process's, as both ends share it here. */
static int pair(int *client, int *server, int *server_rc)
{
    struct server s = { .fd = -1 };
    char why[256];
    pthread_create(&s.t, NULL, serve, &s);
    int rc = ckpt_wire_connect(bound, client, why, sizeof(why));
    pthread_join(s.t, NULL);
    *server = s.fd;
    *server_rc = s.rc;
    return rc;
}

/* Reads one raw frame (header, payload, tag when sealed) from fd into buf; returns its size. */
static size_t raw_frame(int fd, char *buf)
{
    struct ckpt_wire_frame fr;
    size_t n = 0;
    while (n < sizeof(fr))
        n += (size_t)read(fd, buf + n, sizeof(fr) - n);
    memcpy(&fr, buf, sizeof(fr));
    size_t total = sizeof(fr) + fr.length + (fr.reserved ? CKPT_AUTH_TAG : 0);
    while (n < total)
        n += (size_t)read(fd, buf + n, total - n);
    return total;
}

int main(void)
{
    char why[256];
    int c, s, src, rc;
    uint16_t type;
    void *msg;
    size_t len;

    if (ckpt_wire_listen("127.0.0.1:0", &lfd, bound, sizeof(bound), why, sizeof(why)) < 0) {
        printf("skip: cannot listen on 127.0.0.1: %s\n", why);
        return 77;
    }
    CHECK(ckpt_auth_set_key("short") == -EINVAL, "a key under %d characters is refused", CKPT_AUTH_KEY_MIN);

    /* Same key on both ends: messages go both ways. */
    ckpt_auth_set_key("correct horse battery staple");
    rc = pair(&c, &s, &src);
    CHECK(rc == 0 && src == 0, "handshake with the same key: client %d server %d", rc, src);
    CHECK(ckpt_wire_send(c, 7, "hello", 5, NULL, 0) == 0, "send");
    CHECK(ckpt_wire_recv(s, 1000, &type, &msg, &len) == 0 && type == 7 && len == 5 && !memcmp(msg, "hello", 5),
          "a sealed frame arrives intact");
    free(msg);
    CHECK(ckpt_wire_send(s, 8, "ok", 2, NULL, 0) == 0 && ckpt_wire_recv(c, 1000, &type, &msg, &len) == 0 &&
              type == 8, "and back");
    free(msg);

    /* Tampering: the client's next two frames are captured raw off the server's socket, then fed
     * back to ckpt_wire_recv through a pipe put in place of that socket (the session goes by the fd). */
    char f1[4096], f2[4096], f3[4096];
    CHECK(ckpt_wire_send(c, 9, "first", 5, NULL, 0) == 0 && ckpt_wire_send(c, 9, "second", 6, NULL, 0) == 0 &&
              ckpt_wire_send(c, 10, "in pieces", 9, NULL, 0) == 0,
          "send");
    size_t n1 = raw_frame(s, f1), n2 = raw_frame(s, f2), n3 = raw_frame(s, f3);
    int relay[2], saved = dup(s);
    CHECK(pipe(relay) == 0, "pipe");
    dup2(relay[0], s);
    /* feed FRAME SIZE EXPECTED WHAT */
#define FEED(frame, size, expected, what)                                                                              \
    do {                                                                                                               \
        CHECK(write(relay[1], frame, size) == (ssize_t)(size), "write");                                               \
        rc = ckpt_wire_recv(s, 1000, &type, &msg, &len);                                                               \
        CHECK(rc == (expected), "%s: got %d, expected %d", what, rc, expected);                                        \
        free(msg);                                                                                                     \
    } while (0)
    FEED(f1, n1, 0, "the first frame as sent");
    FEED(f1, n1, -EACCES, "the first frame replayed");
    f2[sizeof(struct ckpt_wire_frame) + 1] ^= 1;
    FEED(f2, n2, -EACCES, "the second frame altered");
    f2[sizeof(struct ckpt_wire_frame) + 1] ^= 1;
    struct ckpt_wire_frame fr = { .version = CKPT_WIRE_VERSION, .type = 9, .length = 0 };
    memcpy(fr.magic, CKPT_WIRE_MAGIC, sizeof(fr.magic));
    FEED(&fr, sizeof(fr), -EACCES, "a frame injected without a tag");
    FEED(f2, n2, 0, "the second frame as sent, after all that");
    /* In pieces: part of the header, part of the payload, the rest with the tag. */
    struct ckpt_conn conn = { .fd = s };
    size_t cuts[] = { 10, sizeof(struct ckpt_wire_frame) + 4, n3 }, at = 0;
    for (int k = 0; k < 3; k++) {
        CHECK(write(relay[1], f3 + at, cuts[k] - at) == (ssize_t)(cuts[k] - at), "write");
        at = cuts[k];
        rc = ckpt_conn_recv(&conn, &type, &msg, &len);
        CHECK(rc == (k < 2 ? 0 : 1), "a frame in pieces, after piece %d: got %d", k, rc);
        CHECK(rc < 1 || (type == 10 && len == 9 && !memcmp(msg, "in pieces", 9)), "the frame in pieces is whole");
        if (rc == 1)
            free(msg);
    }
    CHECK(ckpt_conn_recv(&conn, &type, &msg, &len) == 0, "nothing more has come");
    dup2(saved, s);
    close(saved), close(relay[0]), close(relay[1]), close(c), close(s);

    /* A message through etcd: its tag binds the key, its name and its content. */
    uint8_t tag[CKPT_AUTH_TAG], other[CKPT_AUTH_TAG];
    const char *name = "/ckpt/j/e7/up/1/1f/0000000000000003";
    ckpt_auth_mac(name, "\x40\x00plan", 6, tag);
    CHECK(ckpt_auth_mac_check(name, "\x40\x00plan", 6, tag) == 0, "a mailbox message's tag verifies");
    CHECK(ckpt_auth_mac_check(name, "\x40\x00plaN", 6, tag) == -EACCES, "an altered message fails its tag");
    CHECK(ckpt_auth_mac_check("/ckpt/j/e7/up/1/1f/0000000000000004", "\x40\x00plan", 6, tag) == -EACCES,
          "a message moved to another name fails its tag");
    CHECK(ckpt_auth_mac_check("/ckpt/j/e7/up/1/1f/000000000000000", "3\x40\x00plan", 7, tag) == -EACCES,
          "a name and a message that trade a byte fail the tag");
    ckpt_auth_set_key("another key, sixteen or more");
    ckpt_auth_mac(name, "\x40\x00plan", 6, other);
    CHECK(memcmp(tag, other, sizeof(tag)) != 0 && ckpt_auth_mac_check(name, "\x40\x00plan", 6, tag) == -EACCES,
          "another key gives another tag");

    /* Without a key a connection carries no tags, and a sealed frame is refused on it. */
    ckpt_auth_set_key(NULL);
    rc = pair(&c, &s, &src);
    CHECK(rc == 0 && src == 0, "plain connection: client %d server %d", rc, src);
    fr.reserved = CKPT_WIRE_SEALED;
    CHECK(write(c, &fr, sizeof(fr)) == (ssize_t)sizeof(fr), "write");
    rc = ckpt_wire_recv(s, 1000, &type, &msg, &len);
    CHECK(rc == -EACCES, "a sealed frame on a plain connection: got %d", rc);
    free(msg);
    close(c), close(s);
    printf("%s\n", failures ? "some checks failed" : "ok");
    return failures ? 1 : 0;
}
