/*
 * The program's connections to its job's rendezvous, MASTER_ADDR:
 * MASTER_PORT, where a rank meets its peers (mlp-train's ranks fetch rank
 * 0's NCCL id there; PyTorch's TCPStore listens there).  Standbys started
 * together meet in a shadow job of their own (ckpt-resume gives them
 * another port).  A standby started alone (CKPT_FOLLOW_ALONE: one that
 * replaces a standby that died) has no one to meet: it is served what its
 * rank received there, from the rank's log.
 *
 * Recording, each connection the program makes to the rendezvous port, or
 * accepts on a socket it bound to that port, has a name (its thread's key
 * and how many such calls the thread made before), and the log holds the
 * result of each connect, bind and accept and the bytes of every read
 * (SOCK records, on the thread that made the call).  Served, those calls
 * never reach the network: a connect or accept that succeeded yields a
 * loopback connection of libckpt's, always readable (a byte waits in it,
 * never read), from which the program reads what the rank read, in the
 * same pieces; what it sends there stays unread.  A bind gets a loopback
 * port: the live rank holds the real one.  Any other replay (a restart, a
 * standby of a shadow job) meets its peers for real and steps over these
 * records.  Only the port is compared: a connection elsewhere to the same
 * port is logged and served too, which is as faithful.
 *
 * Only jobs with standbys (CKPT_STANDBY) log these: a job without them
 * never serves them.
 *
 * A standby alone that still holds such a connection or listener when it
 * is to go live cannot: its peers are not at the other end (PyTorch keeps
 * its store's).  It refuses, and the cold path runs.  A program that meets
 * its peers before its first CUDA call (libckpt has no log open yet)
 * cannot be served: a standby alone stops at that call.  A connection the
 * program reads by a way these hooks do not see (a dup of it, stdio, raw
 * system calls) would take the waiting byte: a served read that finds it
 * gone refuses, as does the takeover.  A standby alone never reaches the
 * rendezvous for real: a call there after its last served one refuses.
 *
 * Costs to a live rank: one byte load per read and close of a descriptor
 * below 65536 (a table of those that are connections at the rendezvous),
 * a lock only for those.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "config.h"
#include "interpose.h"
#include "log.h"
#include "replay.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_SOCKS 256
#define FAST_FDS 65536 /* descriptors below: looked up in `tracked` without a lock */

/* SOCK_LOST: libckpt could not log what a read returned (no memory): a
 * standby alone stops there. */
enum sock_what { SOCK_CONNECT = 1, SOCK_BIND, SOCK_ACCEPT, SOCK_READ, SOCK_LOST };
static const char *const what_name[] = {"?",         "connected to", "listened at", "accepted a connection at",
                                        "read from", "read from"};

static struct sock {
    bool used, listener, served;
    int fd;
    ino_t ino;     /* the socket's: a number closed behind our back and reused is not it */
    uint64_t conn; /* its name in the log */
    int peer;      /* served: libckpt's end of the loopback, or a listener's pending connection; -1: none */
} socks[MAX_SOCKS];
static int nsocks; /* in use */
static int nbig;   /* in use at descriptors of FAST_FDS or more */
static unsigned char tracked[FAST_FDS]; /* 1: the descriptor may be in socks */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool loaded, logs, alone, went_live;
static __thread uint64_t made; /* calls this thread made at the rendezvous */

/* A child the rank forks is no rank (init.c): it tracks nothing, and the
 * lock may have been held by a thread it does not have. */
static void before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void after_fork(void)
{
    pthread_mutex_unlock(&lock);
}

static void in_child(void)
{
    pthread_mutex_init(&lock, NULL);
    memset(socks, 0, sizeof(socks));
    memset(tracked, 0, sizeof(tracked));
    nsocks = nbig = 0;
    logs = alone = false;
}

void ckpt_rendezvous_init(bool follow_alone)
{
    logs = ckpt_cfg_int(CFG_STANDBY);
    alone = follow_alone;
    pthread_atfork(before_fork, after_fork, in_child);
    __atomic_store_n(&loaded, true, __ATOMIC_RELEASE);
}

/* MASTER_PORT in network order, 0: none.  Read at each call: a program
 * may set it itself before it meets its peers. */
static uint16_t master_port(void)
{
    const char *p = getenv("MASTER_PORT");
    char *end;
    unsigned long v = p && *p ? strtoul(p, &end, 10) : 0;
    return v > 0 && v < 65536 && !*end ? htons((uint16_t)v) : 0;
}

static bool program_call(const void *caller)
{
    return !ckpt_self_depth && !ckpt_nccl_depth && !ckpt_thread_internal && !ckpt_caller_is_library(caller);
}

/* A stream socket's address at the rendezvous port. */
static bool at_rendezvous(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE) || (!logs && !alone) || !sa)
        return false;
    uint16_t port = master_port(), at;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in))
        at = ((const struct sockaddr_in *)sa)->sin_port;
    else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
        at = ((const struct sockaddr_in6 *)sa)->sin6_port;
    else
        return false;
    int type = 0, err = errno;
    socklen_t tl = sizeof(type);
    bool stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM;
    errno = err;
    return port && at == port && stream;
}

static bool recording(void)
{
    return logs && ckpt_active && !__atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE) && ckpt_history_recording();
}

/* A standby alone, until it went live: served.  Between its last served
 * call and the end of its replay it may not reach the rendezvous at all. */
static bool serving(void)
{
    if (!alone || !__atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE))
        return false;
    if (__atomic_load_n(&went_live, __ATOMIC_ACQUIRE))
        ckpt_refuse("the program reached its job's rendezvous as the standby, started alone, went live");
    return true;
}

/* A standby alone, before libckpt woke: nothing to serve it from. */
static void too_early(enum sock_what what)
{
    ckpt_log(CKPT_ERROR, "the standby stops: the program %s its job's rendezvous (MASTER_PORT=%u) before its first "
             "CUDA call, where its rank's log is not open yet: a standby started alone cannot be served that",
             what_name[what], (unsigned)ntohs(master_port()));
    _exit(CKPT_EXIT_RESTORE);
}

static uint64_t next_conn(void)
{
    return ckpt_thread_key() * 0x9E3779B97F4A7C15ull + ++made;
}

static int close_real(int fd)
{
    REAL_LIBC(close);
    return real_close_ ? real_close_(fd) : -1;
}

static ino_t ino_of(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* ---- the table (lock held) */

/* Whether fd may be in the table: without a lock. */
static bool maybe_tracked(int fd)
{
    if (fd >= 0 && fd < FAST_FDS)
        return __atomic_load_n(&tracked[fd], __ATOMIC_ACQUIRE);
    return fd >= 0 && __atomic_load_n(&nbig, __ATOMIC_ACQUIRE);
}

static void mark(int fd, int delta)
{
    if (fd < FAST_FDS)
        __atomic_store_n(&tracked[fd], delta > 0, __ATOMIC_RELEASE);
    else
        __atomic_add_fetch(&nbig, delta, __ATOMIC_RELEASE);
}

static void drop(struct sock *s)
{
    if (s->peer >= 0)
        close_real(s->peer);
    s->used = false;
    mark(s->fd, -1);
    __atomic_sub_fetch(&nsocks, 1, __ATOMIC_RELAXED);
}

static struct sock *find(int fd)
{
    for (int i = 0; i < MAX_SOCKS; i++) {
        if (!socks[i].used || socks[i].fd != fd)
            continue;
        if (ino_of(fd) == socks[i].ino)
            return &socks[i];
        drop(&socks[i]);
        return NULL;
    }
    return NULL;
}

static void remember(int fd, uint64_t conn, bool listener, bool served, int peer)
{
    int err = errno;
    pthread_mutex_lock(&lock);
    struct sock *s = find(fd);
    if (s)
        drop(s);
    for (int i = 0; i < MAX_SOCKS; i++) {
        if (socks[i].used)
            continue;
        socks[i] = (struct sock){true, listener, served, fd, ino_of(fd), conn, peer};
        mark(fd, 1);
        __atomic_add_fetch(&nsocks, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&lock);
        errno = err;
        return;
    }
    pthread_mutex_unlock(&lock);
    if (served)
        ckpt_refuse("the program holds more than %d connections to its job's rendezvous", MAX_SOCKS);
    if (peer >= 0)
        close_real(peer);
    static bool said;
    if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
        ckpt_log(CKPT_WARN, "the program holds more than %d connections to its job's rendezvous: what it reads from "
                 "the others is not logged, and a standby started alone for this rank will stop there", MAX_SOCKS);
    errno = err;
}

/* fd, when it is a connection or listener at the rendezvous: a copy of its entry. */
static bool lookup(int fd, struct sock *out)
{
    if (!maybe_tracked(fd))
        return false;
    int err = errno;
    pthread_mutex_lock(&lock);
    struct sock *s = find(fd);
    if (s)
        *out = *s;
    pthread_mutex_unlock(&lock);
    errno = err;
    return s != NULL;
}

/* ---- serving */

/* This thread's next call at the rendezvous in its rank's log, which must
 * be this one. */
static void take(uint64_t conn, enum sock_what what, struct ckpt_rl_rec *rec)
{
    if (!ckpt_history_next(ckpt_thread_key(), CKPT_RL_SOCK, rec))
        ckpt_refuse("the program %s its job's rendezvous as the standby went live", what_name[what]);
    if (rec->b == SOCK_LOST)
        ckpt_refuse("its rank's log lacks what the rank read from its job's rendezvous here (libckpt had no "
                    "memory to log it)");
    if (rec->a != conn || rec->b != (uint64_t)what)
        ckpt_refuse("the program diverged from its recorded run: it %s its job's rendezvous where its rank %s it",
                    what_name[what], what_name[rec->b < SOCK_READ + 1 ? rec->b : 0]);
}

/* A loopback connection of the given family (else IPv4): *client and
 * *server, or -1 with errno. */
static int loopback(int family, int *client, int *server)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int l = -1, c = -1, s = -1;
    for (int f = family == AF_INET6 ? AF_INET6 : AF_INET;; f = AF_INET) {
        memset(&ss, 0, sizeof(ss));
        ss.ss_family = (sa_family_t)f;
        if (f == AF_INET6)
            ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
        else
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = f == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        l = socket(f, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (l >= 0 && bind(l, (struct sockaddr *)&ss, len) == 0 && listen(l, 1) == 0)
            break;
        if (l >= 0)
            close_real(l);
        l = -1;
        if (f == AF_INET)
            return -1;
    }
    len = sizeof(ss);
    if (getsockname(l, (struct sockaddr *)&ss, &len) == 0 && (c = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        connect(c, (struct sockaddr *)&ss, len) == 0)
        s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    int err = errno;
    close_real(l);
    if (s < 0) {
        if (c >= 0)
            close_real(c);
        errno = err;
        return -1;
    }
    *client = c, *server = s;
    return 0;
}

/* A connection to listener l, waiting in its queue: l stays readable. */
static int pend(int l)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int c = getsockname(l, (struct sockaddr *)&ss, &len) == 0 ? socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
    if (c < 0 || connect(c, (struct sockaddr *)&ss, len) < 0)
        ckpt_refuse("cannot serve the job's rendezvous on the loopback: %s", strerror(errno));
    return c;
}

/* Where a served connection is readable: a byte waits in it, never read. */
static void readable(int from)
{
    if (write(from, "", 1) != 1)
        ckpt_refuse("cannot serve the job's rendezvous on the loopback: %s", strerror(errno));
}

/* The byte still waits in fd: the program read it by no way of ours. */
static void still_readable(int fd)
{
    REAL_LIBC(recv);
    char c;
    int err = errno;
    if (real_recv_ && real_recv_(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 1)
        ckpt_refuse("the program read from its connection to its job's rendezvous in a way libckpt does not see "
                    "(a copy of the descriptor, stdio, a system call of its own): it cannot be served that");
    errno = err;
}

/* What the program sent on a served connection, read and let go. */
static void drain(int peer)
{
    REAL_LIBC(recv);
    char sink[4096];
    int err = errno;
    while (peer >= 0 && real_recv_ && real_recv_(peer, sink, sizeof(sink), MSG_DONTWAIT) > 0)
        ;
    errno = err;
}

static int served_connect(int fd, int family)
{
    struct ckpt_rl_rec rec;
    uint64_t conn = next_conn();
    take(conn, SOCK_CONNECT, &rec);
    int64_t r = (int64_t)rec.c;
    if (r < 0 && r != -EINPROGRESS && r != -EINTR) {
        errno = (int)-r;
        return -1;
    }
    int client, server;
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
    if (loopback(family, &client, &server) < 0 || dup2(client, fd) < 0)
        ckpt_refuse("cannot serve the job's rendezvous on the loopback: %s", strerror(errno));
    close_real(client);
    if (fl >= 0 && (fl & O_NONBLOCK))
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (fdfl >= 0 && (fdfl & FD_CLOEXEC))
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    readable(server);
    remember(fd, conn, false, true, server);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

/* A read of a served connection; trunc: MSG_TRUNC, which copies nothing. */
static ssize_t served_read(const struct sock *s, const struct iovec *iov, int n, bool trunc)
{
    struct ckpt_rl_rec rec;
    still_readable(s->fd);
    drain(s->peer);
    take(s->conn, SOCK_READ, &rec);
    int64_t r = (int64_t)rec.c;
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    if (trunc && rec.len == 0)
        return r;
    size_t room = 0;
    for (int i = 0; i < n; i++)
        room += iov[i].iov_len;
    if (rec.len != (uint64_t)r || rec.len > room)
        ckpt_refuse("the program diverged from its recorded run: it read at most %zu bytes from its job's rendezvous "
                    "where its rank read %lld", room, (long long)r);
    const char *p = rec.payload;
    for (int i = 0, left = (int)rec.len; i < n && left > 0; i++) {
        size_t k = iov[i].iov_len < (size_t)left ? iov[i].iov_len : (size_t)left;
        memcpy(iov[i].iov_base, p, k);
        p += k, left -= (int)k;
    }
    return r;
}

/* ---- recording */

static void logged(uint64_t conn, ssize_t r, const struct iovec *iov, int n, bool trunc)
{
    int err = errno;
    if (!recording()) {
        errno = err;
        return;
    }
    if (trunc) /* nothing was copied: the count is all there is */
        n = 0;
    char *copy = NULL;
    const void *bytes = r > 0 && n > 0 ? iov[0].iov_base : NULL;
    if (r > 0 && n > 1 && (size_t)r > iov[0].iov_len && (copy = malloc((size_t)r))) {
        size_t at = 0;
        for (int i = 0; i < n && at < (size_t)r; i++) {
            size_t k = iov[i].iov_len < (size_t)r - at ? iov[i].iov_len : (size_t)r - at;
            memcpy(copy + at, iov[i].iov_base, k);
            at += k;
        }
        bytes = copy;
    }
    if (r > 0 && n > 1 && (size_t)r > iov[0].iov_len && !copy)
        ckpt_history_sock(conn, SOCK_LOST, r, NULL, 0);
    else
        ckpt_history_sock(conn, SOCK_READ, r < 0 ? -err : r, bytes, r > 0 && n > 0 ? (uint32_t)r : 0);
    free(copy);
    errno = err;
}

/* ---- the hooks */

EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    REAL_LIBC(connect);
    if (!real_connect_) {
        errno = ENOSYS;
        return -1;
    }
    if (!at_rendezvous(fd, sa, len) || !program_call(__builtin_return_address(0)))
        return real_connect_(fd, sa, len);
    if (alone && !ckpt_active)
        too_early(SOCK_CONNECT);
    if (serving())
        return served_connect(fd, sa->sa_family);
    if (!recording())
        return real_connect_(fd, sa, len);
    int r = real_connect_(fd, sa, len), err = errno;
    uint64_t conn = next_conn();
    if (r == 0 || err == EINPROGRESS || err == EINTR) /* the last two: it goes on connecting */
        remember(fd, conn, false, false, -1);
    ckpt_history_sock(conn, SOCK_CONNECT, r < 0 ? -err : 0, NULL, 0);
    errno = err;
    return r;
}

EXPORT int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
    REAL_LIBC(bind);
    if (!real_bind_) {
        errno = ENOSYS;
        return -1;
    }
    if (!at_rendezvous(fd, sa, len) || !program_call(__builtin_return_address(0)))
        return real_bind_(fd, sa, len);
    if (alone && !ckpt_active)
        too_early(SOCK_BIND);
    uint64_t conn;
    if (serving()) {
        struct ckpt_rl_rec rec;
        take(conn = next_conn(), SOCK_BIND, &rec);
        if ((int64_t)rec.c < 0) {
            errno = (int)-(int64_t)rec.c;
            return -1;
        }
        struct sockaddr_storage ss = {.ss_family = sa->sa_family};
        if (sa->sa_family == AF_INET6)
            ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
        else
            ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        if (real_bind_(fd, (struct sockaddr *)&ss, sl) < 0)
            ckpt_refuse("cannot serve the job's rendezvous on the loopback: %s", strerror(errno));
        remember(fd, conn, true, true, -1);
        return 0;
    }
    if (!recording())
        return real_bind_(fd, sa, len);
    int r = real_bind_(fd, sa, len), err = errno;
    conn = next_conn();
    if (r == 0)
        remember(fd, conn, true, false, -1);
    ckpt_history_sock(conn, SOCK_BIND, r < 0 ? -err : 0, NULL, 0);
    errno = err;
    return r;
}

EXPORT int listen(int fd, int backlog)
{
    REAL_LIBC(listen);
    if (!real_listen_) {
        errno = ENOSYS;
        return -1;
    }
    int r = real_listen_(fd, backlog);
    struct sock s;
    if (r < 0 || !lookup(fd, &s) || !s.listener || !s.served || s.peer >= 0)
        return r;
    int c = pend(fd);
    pthread_mutex_lock(&lock);
    struct sock *e = find(fd);
    if (e && e->peer < 0)
        e->peer = c, c = -1;
    pthread_mutex_unlock(&lock);
    if (c >= 0)
        close_real(c);
    return r;
}

static int accept_common(int l, struct sockaddr *addr, socklen_t *alen, int flags)
{
    REAL_LIBC(accept4);
    if (!real_accept4_) {
        errno = ENOSYS;
        return -1;
    }
    struct sock s;
    if (!lookup(l, &s) || !s.listener)
        return real_accept4_(l, addr, alen, flags);
    uint64_t conn = next_conn();
    if (s.served) {
        struct ckpt_rl_rec rec;
        take(conn, SOCK_ACCEPT, &rec);
        if ((int64_t)rec.c < 0) {
            errno = (int)-(int64_t)rec.c;
            return -1;
        }
        int fd = real_accept4_(l, NULL, NULL, flags); /* the connection pend() left waiting */
        if (fd < 0)
            ckpt_refuse("cannot serve the job's rendezvous on the loopback (the program took the connection "
                        "waiting at its listener in a way libckpt does not see?): %s", strerror(errno));
        int next = pend(l), client = -1;
        pthread_mutex_lock(&lock);
        struct sock *e = find(l);
        if (e)
            client = e->peer, e->peer = next, next = -1;
        pthread_mutex_unlock(&lock);
        if (next >= 0)
            close_real(next);
        if (client >= 0)
            readable(client);
        remember(fd, conn, false, true, client);
        if (addr && alen) {
            memcpy(addr, rec.payload, rec.len < *alen ? rec.len : *alen);
            *alen = rec.len;
        }
        return fd;
    }
    if (!recording())
        return real_accept4_(l, addr, alen, flags);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = real_accept4_(l, (struct sockaddr *)&ss, &sl, flags), err = errno;
    if (fd >= 0) {
        remember(fd, conn, false, false, -1);
        if (addr && alen) {
            memcpy(addr, &ss, sl < *alen ? sl : *alen);
            *alen = sl;
        }
    }
    ckpt_history_sock(conn, SOCK_ACCEPT, fd < 0 ? -err : 0, fd >= 0 ? &ss : NULL, fd >= 0 ? sl : 0);
    errno = err;
    return fd;
}

EXPORT int accept(int l, struct sockaddr *addr, socklen_t *alen)
{
    return accept_common(l, addr, alen, 0);
}

EXPORT int accept4(int l, struct sockaddr *addr, socklen_t *alen, int flags)
{
    return accept_common(l, addr, alen, flags);
}

/* A read of fd into iov: served, logged, or straight through (real). */
#define READ_HOOK(real, call, fd, iov, n, trunc)                                              \
    do {                                                                                      \
        struct sock s_;                                                                       \
        if (!(real)) {                                                                        \
            errno = ENOSYS;                                                                   \
            return -1;                                                                        \
        }                                                                                     \
        if (!lookup(fd, &s_) || s_.listener)                                                  \
            return call;                                                                      \
        if (s_.served)                                                                        \
            return served_read(&s_, iov, n, trunc);                                           \
        ssize_t r_ = call;                                                                    \
        logged(s_.conn, r_, iov, n, trunc);                                                   \
        return r_;                                                                            \
    } while (0)

EXPORT ssize_t read(int fd, void *buf, size_t n)
{
    REAL_LIBC(read);
    struct iovec v = {buf, n};
    READ_HOOK(real_read_, real_read_(fd, buf, n), fd, &v, 1, false);
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
    REAL_LIBC(readv);
    READ_HOOK(real_readv_, real_readv_(fd, iov, n), fd, iov, n, false);
}

EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    REAL_LIBC(recv);
    struct iovec v = {buf, n};
    READ_HOOK(real_recv_, real_recv_(fd, buf, n, flags), fd, &v, 1, flags & MSG_TRUNC);
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *alen)
{
    REAL_LIBC(recvfrom);
    struct iovec v = {buf, n};
    struct sock s;
    if (addr && alen && lookup(fd, &s) && s.served)
        *alen = 0; /* a stream socket names no sender */
    READ_HOOK(real_recvfrom_, real_recvfrom_(fd, buf, n, flags, addr, alen), fd, &v, 1, flags & MSG_TRUNC);
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    REAL_LIBC(recvmsg);
    struct sock s;
    if (!msg || !lookup(fd, &s))
        return real_recvmsg_ ? real_recvmsg_(fd, msg, flags) : (errno = ENOSYS, -1);
    if (s.served)
        msg->msg_namelen = 0, msg->msg_controllen = 0, msg->msg_flags = 0;
    READ_HOOK(real_recvmsg_, real_recvmsg_(fd, msg, flags), fd, msg->msg_iov, (int)msg->msg_iovlen,
              flags & MSG_TRUNC);
}

/* What a program built with _FORTIFY_SOURCE calls when it knows its
 * buffer's size: the same, after glibc's check. */
extern ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
extern ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
extern ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *addr,
                              socklen_t *alen);

EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    REAL_LIBC(__read_chk);
    struct iovec v = {buf, n};
    READ_HOOK(real___read_chk_, real___read_chk_(fd, buf, n, buflen), fd, &v, 1, false);
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    REAL_LIBC(__recv_chk);
    struct iovec v = {buf, n};
    READ_HOOK(real___recv_chk_, real___recv_chk_(fd, buf, n, buflen, flags), fd, &v, 1, flags & MSG_TRUNC);
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *addr,
                              socklen_t *alen)
{
    REAL_LIBC(__recvfrom_chk);
    struct iovec v = {buf, n};
    struct sock s;
    if (addr && alen && lookup(fd, &s) && s.served)
        *alen = 0;
    READ_HOOK(real___recvfrom_chk_, real___recvfrom_chk_(fd, buf, n, buflen, flags, addr, alen), fd, &v, 1,
              flags & MSG_TRUNC);
}

EXPORT int close(int fd)
{
    REAL_LIBC(close);
    if (maybe_tracked(fd)) {
        int err = errno;
        pthread_mutex_lock(&lock);
        struct sock *s = find(fd);
        if (s)
            drop(s);
        pthread_mutex_unlock(&lock);
        errno = err;
    }
    if (!real_close_) {
        errno = ENOSYS;
        return -1;
    }
    return real_close_(fd);
}

void ckpt_rendezvous_live(void)
{
    if (!alone)
        return;
    const char *held = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_SOCKS && !held; i++)
        if (socks[i].used && socks[i].served && find(socks[i].fd))
            held = socks[i].listener ? "a listener" : "a connection";
    pthread_mutex_unlock(&lock);
    if (held)
        ckpt_refuse("the program still holds %s at its job's rendezvous (MASTER_PORT=%u), which this standby, "
                    "started alone, was served from its rank's log: its peers are not at the other end",
                    held, (unsigned)ntohs(master_port()));
    __atomic_store_n(&went_live, true, __ATOMIC_RELEASE);
}
