/*
 * The control channel of wire.h: sockets and framing.  Connections get TCP
 * keepalive, so a peer whose machine vanished is noticed within about half
 * a minute even while nothing is being said; reads are bounded by the
 * caller's timeout.  It must never print and never allocate more than the
 * bounded payload it was told of.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "wire.h"
#include "util.h"

static int resolve(const char *hostport, int passive, struct addrinfo **ai, char *why, size_t whylen)
{
    char host[256];
    const char *port;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};

    if (ckpt_hostport_split(hostport, host, sizeof(host), &port) < 0) {
        snprintf(why, whylen, "'%s' is not HOST:PORT", hostport);
        return -EINVAL;
    }
    int rc = getaddrinfo(*host ? host : NULL, port, &hints, ai);
    if (rc) {
        snprintf(why, whylen, "%s: %s", hostport, gai_strerror(rc));
        return rc == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
    }
    return 0;
}

static void keepalive(int fd)
{
    int on = 1, idle = 10, intvl = 5, cnt = 4;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const void *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        snprintf(out, len, "[%s]:%u", ip, ntohs(s6->sin6_port));
        return;
    }
    const struct sockaddr_in *s4 = (const void *)ss;
    inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
    snprintf(out, len, "%s:%u", ip, ntohs(s4->sin_port));
}

/* How long a new connection may take to show it holds the job's key. */
#define AUTH_TIMEOUT_MS 5000

/*
 * With a job key: both ends send a fresh nonce in an AUTH frame and read
 * the other's, and the connection's session starts (auth.c).  A peer whose
 * first frame is anything else does not use the key: -EACCES.  Without a
 * key, the descriptor's old session, if any, is forgotten.
 */
static int handshake(int fd, bool client)
{
    uint8_t mine[CKPT_AUTH_NONCE], *theirs = NULL;
    uint16_t type;
    size_t len;

    ckpt_auth_forget(fd);
    if (!ckpt_auth_enabled())
        return 0;
    int rc = ckpt_auth_nonce(mine);
    if (rc == 0)
        rc = ckpt_wire_send(fd, CKPT_WIRE_AUTH, mine, sizeof(mine), NULL, 0);
    if (rc == 0)
        rc = ckpt_wire_recv(fd, AUTH_TIMEOUT_MS, &type, (void **)&theirs, &len);
    if (rc == 0 && (type != CKPT_WIRE_AUTH || len != CKPT_AUTH_NONCE))
        rc = -EACCES;
    if (rc == 0)
        rc = ckpt_auth_start(fd, client, mine, theirs);
    free(theirs);
    /* Each end proves it holds the key with a first sealed frame, so a mismatch is found here. */
    void *none = NULL;
    if (rc == 0)
        rc = ckpt_wire_send(fd, CKPT_WIRE_AUTH_OK, NULL, 0, NULL, 0);
    if (rc == 0)
        rc = ckpt_wire_recv(fd, AUTH_TIMEOUT_MS, &type, &none, &len);
    free(none);
    if (rc == 0 && (type != CKPT_WIRE_AUTH_OK || len))
        rc = -EACCES;
    if (rc < 0)
        ckpt_auth_forget(fd);
    return rc;
}

int ckpt_wire_listen(const char *hostport, int *fd, char *bound, size_t boundlen, char *why, size_t whylen)
{
    struct addrinfo *ai;
    int rc = resolve(hostport, 1, &ai, why, whylen), s = -1;
    if (rc < 0)
        return rc;
    rc = -EADDRNOTAVAIL;
    for (struct addrinfo *a = ai; a && s < 0; a = a->ai_next) {
        int on = 1;
        s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0)
            continue;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (bind(s, a->ai_addr, a->ai_addrlen) < 0 || listen(s, 16) < 0) {
            rc = -errno;
            close(s);
            s = -1;
        }
    }
    freeaddrinfo(ai);
    if (s < 0) {
        snprintf(why, whylen, "cannot listen on %s: %s", hostport, strerror(-rc));
        return rc;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(s, (struct sockaddr *)&ss, &sl);
    format_addr(&ss, bound, boundlen);
    *fd = s;
    return 0;
}

int ckpt_wire_connect(const char *hostport, int *fd, char *why, size_t whylen)
{
    struct addrinfo *ai;
    int rc = resolve(hostport, 0, &ai, why, whylen), s = -1;
    if (rc < 0)
        return rc;
    rc = -EHOSTUNREACH;
    for (struct addrinfo *a = ai; a && s < 0; a = a->ai_next) {
        s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s >= 0 && connect(s, a->ai_addr, a->ai_addrlen) < 0) {
            rc = -errno;
            close(s);
            s = -1;
        }
    }
    freeaddrinfo(ai);
    if (s < 0) {
        snprintf(why, whylen, "cannot connect to %s: %s", hostport, strerror(-rc));
        return rc;
    }
    keepalive(s);
    if ((rc = handshake(s, true)) < 0) {
        close(s);
        snprintf(why, whylen, "%s did not authenticate with this job's key (CKPT_JOB_KEY): %s", hostport,
                 strerror(-rc));
        return rc == -ECONNRESET ? -EACCES : rc;
    }
    *fd = s;
    return 0;
}

int ckpt_wire_accept(int lfd, int *fd)
{
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0)
        return -errno;
    keepalive(s);
    int rc = handshake(s, false);
    if (rc < 0) {
        close(s);
        return rc == -ENOMEM ? rc : -EACCES; /* a peer that went away mid-handshake did not authenticate either */
    }
    *fd = s;
    return 0;
}

int ckpt_wire_local_ip(int fd, char *ip, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                             : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    return inet_ntop(ss.ss_family, a, ip, (socklen_t)len) ? 0 : -errno;
}

int ckpt_wire_send(int fd, uint16_t type, const void *a, size_t alen, const void *b, size_t blen)
{
    if (alen + blen > CKPT_WIRE_MAX)
        return -EMSGSIZE;
    struct ckpt_wire_frame fr = {.version = CKPT_WIRE_VERSION, .type = type, .length = (uint32_t)(alen + blen)};
    uint8_t tag[CKPT_AUTH_TAG];
    bool sealed = type != CKPT_WIRE_AUTH && ckpt_auth_on(fd);
    memcpy(fr.magic, CKPT_WIRE_MAGIC, sizeof(fr.magic));
    if (sealed) {
        fr.reserved = CKPT_WIRE_SEALED;
        ckpt_auth_seal(fd, &fr, sizeof(fr), a, alen, b, blen, tag);
    }
    struct iovec iov[4] = {{&fr, sizeof(fr)}, {(void *)a, alen}, {(void *)b, blen}, {tag, sealed ? sizeof(tag) : 0}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 4};
    size_t left = sizeof(fr) + alen + blen + (sealed ? sizeof(tag) : 0);

    while (left) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        left -= (size_t)n;
        while (msg.msg_iovlen && (size_t)n >= msg.msg_iov->iov_len) { /* skip what went out */
            n -= (ssize_t)msg.msg_iov->iov_len;
            msg.msg_iov++;
            msg.msg_iovlen--;
        }
        if (msg.msg_iovlen) {
            msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + n;
            msg.msg_iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

/* Reads what fd has ready, up to n bytes, without waiting: the count, 0
 * when nothing is ready, or -errno (-ECONNRESET at the end).  Works on any
 * fd (the tests put pipes in place of sockets). */
static ssize_t ready(int fd, void *p, size_t n)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    for (;;) {
        int r = poll(&pfd, 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : 0;
        ssize_t k = read(fd, p, n);
        if (k > 0)
            return k;
        if (k == 0)
            return -ECONNRESET;
        if (errno != EINTR && errno != EAGAIN)
            return -errno;
    }
}

/* Whether a frame's header is ours and fits this connection; *sealed says
 * whether a tag follows its payload. */
static int check_frame(int fd, const struct ckpt_wire_frame *fr, bool *sealed)
{
    if (memcmp(fr->magic, CKPT_WIRE_MAGIC, sizeof(fr->magic)) != 0)
        return -EPROTO;
    if (fr->version != CKPT_WIRE_VERSION)
        return -EPROTONOSUPPORT;
    if (fr->length > CKPT_WIRE_MAX)
        return -EMSGSIZE;
    /* Sealed exactly when this connection's session says so; the handshake's own frames never are. */
    *sealed = fr->type != CKPT_WIRE_AUTH && ckpt_auth_on(fd);
    if ((fr->reserved == CKPT_WIRE_SEALED) != *sealed || (fr->type == CKPT_WIRE_AUTH && fr->reserved) ||
        (fr->reserved & ~CKPT_WIRE_SEALED))
        return -EACCES;
    return 0;
}

static void rx_clear(struct ckpt_wire_rx *rx)
{
    free(rx->payload);
    memset(rx, 0, sizeof(*rx));
}

/* Reads what fd has ready of one message into rx, without waiting: 1 with
 * the message whole (rx is empty again), 0 when it is not whole yet, or
 * -errno (rx is emptied). */
static int recv_some(int fd, struct ckpt_wire_rx *rx, uint16_t *type, void **payload, size_t *len)
{
    const size_t head = sizeof(rx->fr);
    bool sealed = false;
    int rc = 0;

    *payload = NULL;
    *len = 0;
    for (;;) {
        size_t total = head;
        if (rx->have >= head) {
            if ((rc = check_frame(fd, &rx->fr, &sealed)) < 0)
                break;
            if (rx->fr.length && !rx->payload && !(rx->payload = malloc(rx->fr.length))) {
                rc = -ENOMEM;
                break;
            }
            total = head + rx->fr.length + (sealed ? CKPT_AUTH_TAG : 0);
            if (rx->have == total)
                break;
        }
        char *at;
        size_t want;
        if (rx->have < head) {
            at = (char *)&rx->fr + rx->have;
            want = head - rx->have;
        } else if (rx->have < head + rx->fr.length) {
            at = (char *)rx->payload + (rx->have - head);
            want = head + rx->fr.length - rx->have;
        } else {
            at = (char *)rx->tag + (rx->have - head - rx->fr.length);
            want = total - rx->have;
        }
        ssize_t k = ready(fd, at, want);
        if (k < 0) {
            rc = (int)k;
            break;
        }
        if (k == 0)
            return 0;
        rx->have += (size_t)k;
    }
    if (rc == 0 && sealed)
        rc = ckpt_auth_check(fd, &rx->fr, sizeof(rx->fr), rx->payload, rx->fr.length, rx->tag);
    if (rc < 0) {
        rx_clear(rx);
        return rc;
    }
    *type = rx->fr.type;
    *len = rx->fr.length;
    *payload = rx->payload;
    rx->payload = NULL;
    rx_clear(rx);
    return 1;
}

int ckpt_conn_recv(struct ckpt_conn *c, uint16_t *type, void **payload, size_t *len)
{
    *payload = NULL;
    *len = 0;
    return c->fd < 0 ? -ENOTCONN : recv_some(c->fd, &c->rx, type, payload, len);
}

int ckpt_conn_take(struct ckpt_conn *c, int max, bool (*take)(void *arg, uint16_t type, void *payload, size_t len),
                   void *arg)
{
    int n = 0;
    while (c->fd >= 0 && (max <= 0 || n < max)) {
        uint16_t type;
        void *msg;
        size_t len;
        int rc = ckpt_conn_recv(c, &type, &msg, &len);
        if (rc <= 0)
            return rc < 0 ? rc : n;
        n++;
        if (!take(arg, type, msg, len))
            break;
    }
    return n;
}

void ckpt_conn_close(struct ckpt_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    rx_clear(&c->rx);
}

int ckpt_wire_recv(int fd, int timeout_ms, uint16_t *type, void **payload, size_t *len)
{
    struct ckpt_wire_rx rx = {0};
    long long deadline = timeout_ms < 0 ? -1 : ckpt_now_ms() + timeout_ms;

    for (;;) {
        int rc = recv_some(fd, &rx, type, payload, len);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = deadline < 0 ? -1 : (int)(deadline - ckpt_now_ms());
        if (deadline >= 0 && ms <= 0)
            rc = -ETIMEDOUT;
        else if ((rc = poll(&pfd, 1, ms)) < 0 && errno == EINTR)
            continue;
        else
            rc = rc < 0 ? -errno : rc == 0 ? -ETIMEDOUT : 0;
        if (rc < 0) {
            rx_clear(&rx);
            return rc;
        }
    }
}
