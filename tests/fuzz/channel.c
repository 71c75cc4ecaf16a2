/*
 * libFuzzer target: ckpt-resume's end of the agent channel (tools/
 * ckpt-resume/channel.c), as it meets datagrams from a confused or
 * hostile process of the same user: the input is cut into datagrams (a
 * leading byte gives each one's length), sent to a real channel socket
 * and read with channel_read; then the reports are used as ckpt-resume
 * uses them (committed iterations, hang detection, reset).  Nothing may
 * crash, read out of bounds or grow without bound; malformed datagrams
 * change nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "resume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* watch.c's clock, which the channel's hang detection reads. */
double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct channel c = {.fd = -1};
    struct options opt = {.nproc = 4};

    ckpt_log_level = CKPT_ERROR;
    setenv("TMPDIR", "/tmp", 1);
    if (channel_open(&c) < 0)
        abort();
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, c.path, strlen(c.path) + 1);
    int client = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (client < 0 || connect(client, (struct sockaddr *)&addr, sizeof(addr)) < 0)
        abort();
    opt.wrap = size && (data[0] & 1);
    size_t off = size ? 1 : 0;
    while (off < size) {
        size_t n = data[off++];
        /* 0xff: a well-formed header on the next 32 bytes, so the kinds and fields get fuzzed */
        if (n == 0xff && size - off >= 32) {
            struct ckpt_msg m = {.magic = CKPT_MSG_MAGIC, .version = CKPT_MSG_VERSION};
            memcpy((char *)&m + 8, data + off, 32);
            off += 32;
            send(client, &m, sizeof(m), 0);
            continue;
        }
        if (n > size - off)
            n = size - off;
        send(client, data + off, n, 0);
        off += n;
    }
    channel_read(&c, &opt);
    char said[256];
    double next;
    channel_committed(&c, said, sizeof(said));
    if (strlen(said) >= sizeof(said))
        abort();
    channel_hung(&c, 0.0, &next);
    if (c.nreports > RESUME_MAX_RANKS * 2)
        abort();
    channel_reset(&c);
    close(client);
    channel_close(&c);
    return 0;
}
