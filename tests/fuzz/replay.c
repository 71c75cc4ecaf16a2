/*
 * libFuzzer target: replay logs (runtime/replay.c), as a restarted rank
 * meets them after a crash, a torn write or tampering.  Opening the log for
 * any iteration and reading it back record by record must succeed or refuse
 * with a reason, never read outside the file or crash.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[128], why[256];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/ckpt-fuzz-replay-%d", (int)getpid());
        mkdir(dir, 0700);
    }
    snprintf(path, sizeof(path), "%s/replay.log", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 0;
    /* A valid file header first, so the records are what gets fuzzed. */
    char head[64] = "CKPTRLG1";
    head[8] = 1;
    if (write(fd, head, sizeof(head)) != (ssize_t)sizeof(head) || write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    close(fd);
    for (uint64_t it = 1; it <= 3; it++) {
        if (ckpt_rlog_open_replay(dir, it, 1 << 20, why, sizeof(why)) < 0)
            continue;
        uint64_t a, b;
        const void *p;
        uint32_t len;
        static const enum ckpt_rl_type order[] = {CKPT_RL_ALLOC, CKPT_RL_D2H, CKPT_RL_VALUE, CKPT_RL_ITER};
        for (int k = 0; k < 64; k++) {
            int rc = ckpt_rlog_next(order[k % 4], &a, &b, &p, &len, why, sizeof(why));
            if (rc == 0 && len) {
                volatile uint8_t sink = ((const uint8_t *)p)[len - 1];
                (void)sink;
            }
        }
        ckpt_rlog_close();
    }
    return 0;
}
