/*
 * How mlp-train's ranks find each other: rank 0's NCCL unique id travels
 * over TCP, as the store of a torchrun program carries it.  Rank 0 listens
 * on MASTER_ADDR:MASTER_PORT and sends the id to every rank that connects;
 * the others connect, retrying while rank 0 is not listening yet.  Both
 * sides give up after RENDEZVOUS_TIMEOUT_S, so a job whose ranks never meet
 * ends with a message instead of hanging.  Failures here exit with status 1.
 * Included by mlp_train.cu (nvcc builds the trainer from that source) and
 * by the multi-rank test and bench programs.
 */
#ifndef MLP_RENDEZVOUS_H
#define MLP_RENDEZVOUS_H

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#define RENDEZVOUS_TIMEOUT_S 60

typedef struct {
    const char *addr, *port; /* MASTER_ADDR, MASTER_PORT */
    int rank, world;
} rendezvous;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noreturn)) static void rendezvous_fail(const rendezvous *rv, const char *why)
{
    fprintf(stderr, "%s[rank %d]: rendezvous at %s:%s: %s\n", program_invocation_short_name, rv->rank,
            rv->addr ? rv->addr : "(MASTER_ADDR unset)", rv->port ? rv->port : "(MASTER_PORT unset)", why);
    exit(1);
}

static struct addrinfo *rendezvous_address(const rendezvous *rv)
{
    struct addrinfo hints, *ai;
    int err;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    err = getaddrinfo(rv->addr, rv->port, &hints, &ai);
    if (err)
        rendezvous_fail(rv, gai_strerror(err));
    return ai;
}

/* Rank 0: hands the id to each of the other ranks as they connect. */
static void rendezvous_serve(const rendezvous *rv, const ncclUniqueId *id)
{
    struct addrinfo *ai = rendezvous_address(rv);
    double deadline = now_s() + RENDEZVOUS_TIMEOUT_S;
    int one = 1, fd = socket(ai->ai_family, ai->ai_socktype, 0);

    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128))
        rendezvous_fail(rv, strerror(errno));
    freeaddrinfo(ai);

    for (int served = 0; served < rv->world - 1;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left_ms = (int)((deadline - now_s()) * 1000);
        if (left_ms <= 0)
            rendezvous_fail(rv, "not every rank connected in time");
        if (poll(&p, 1, left_ms) <= 0)
            continue;
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        if (send(c, id, sizeof(*id), MSG_NOSIGNAL) == (ssize_t)sizeof(*id))
            served++;
        close(c);
    }
    close(fd);
}

/* The other ranks: fetch the id from rank 0. */
static void rendezvous_fetch(const rendezvous *rv, ncclUniqueId *id)
{
    struct addrinfo *ai = rendezvous_address(rv);
    double deadline = now_s() + RENDEZVOUS_TIMEOUT_S;
    struct timeval tv = {RENDEZVOUS_TIMEOUT_S, 0};
    size_t got = 0;
    int fd;

    for (;;) {
        fd = socket(ai->ai_family, ai->ai_socktype, 0);
        if (fd < 0)
            rendezvous_fail(rv, strerror(errno));
        if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
            break;
        close(fd);
        if (now_s() > deadline)
            rendezvous_fail(rv, "rank 0 did not answer in time");
        usleep(100 * 1000);
    }
    freeaddrinfo(ai);

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (got < sizeof(*id)) {
        ssize_t n = recv(fd, (char *)id + got, sizeof(*id) - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0)
            rendezvous_fail(rv, "rank 0 closed the connection early");
        else if (errno != EINTR)
            rendezvous_fail(rv, strerror(errno));
    }
    close(fd);
}

/* Rank 0's id (made before this) to every rank; one rank: nothing to do.
 * Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT is
 * torchrun's own store, whose protocol this exchange does not speak: it
 * meets on the port after it. */
static void rendezvous_share(const rendezvous *rv, ncclUniqueId *id)
{
    rendezvous at = *rv;
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    char port[24];

    if (rv->world < 2)
        return;
    if (!rv->addr || !rv->port)
        rendezvous_fail(rv, "MASTER_ADDR and MASTER_PORT must be set");
    if (agent && strcmp(agent, "True") == 0) {
        snprintf(port, sizeof(port), "%ld", strtol(rv->port, NULL, 10) + 1);
        at.port = port;
    }
    if (at.rank == 0)
        rendezvous_serve(&at, id);
    else
        rendezvous_fetch(&at, id);
}

#endif /* MLP_RENDEZVOUS_H */
