/*
 * The rank's side of the agent channel of agent.h: a connected, non-blocking
 * datagram socket.  It must never block, allocate or report an error to the
 * program; messages are small enough to be sent whole or not at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"

static int sock = -1;
static uint32_t my_rank;

int ckpt_agent_connect(const char *path, uint32_t rank)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};

    if (!path || !*path)
        return 0;
    if (strlen(path) >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    sock = fd;
    my_rank = rank;
    return 0;
}

static uint32_t us_of(double ms)
{
    return ms <= 0 ? 0 : ms >= 4294967.0 ? UINT32_MAX : (uint32_t)(ms * 1000.0 + 0.5);
}

void ckpt_agent_report(enum ckpt_msg_kind kind, uint64_t iteration, uint64_t generation, uint64_t bytes,
                       double copy_ms, double held_ms)
{
    if (sock < 0)
        return;
    struct ckpt_msg m = {
        .magic = CKPT_MSG_MAGIC,
        .version = CKPT_MSG_VERSION,
        .kind = (uint32_t)kind,
        .rank = my_rank,
        .iteration = iteration,
        .generation = generation,
        .pid = (int64_t)getpid(),
        .bytes = bytes,
        .copy_us = us_of(copy_ms),
        .held_us = us_of(held_ms),
    };
    int saved = errno;
    ssize_t n = send(sock, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n; /* a lost message is only a lost heartbeat */
    errno = saved;
}

void ckpt_agent_send(enum ckpt_msg_kind kind, uint64_t iteration, uint64_t generation)
{
    ckpt_agent_report(kind, iteration, generation, 0, 0, 0);
}
