/*
 * libFuzzer target: replay logs (runtime/replay.c), as a restarted rank
 * meets them after a crash, a torn write or tampering.  Opening the log for
 * any iteration and reading it back record by record must succeed or refuse
 * with a reason, never read outside the file or crash.  So must the scan a
 * persist makes of the part a snapshot needs (ckpt_rlog_scan, going on from
 * one iteration to the next), and a part it summed must check against its
 * sum when a restore reads it back.
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
    char head[64] = "CKPTRLG2";
    head[8] = 2;
    head[16] = 1; /* a lineage */
    if (write(fd, head, sizeof(head)) != (ssize_t)sizeof(head) || write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    close(fd);
    fd = open(path, O_RDONLY);
    struct ckpt_rlog_scan sc = {0};
    for (uint64_t it = 1; fd >= 0 && it <= 3; it++) {
        if (ckpt_rlog_scan(fd, it, &sc, why, sizeof(why)) == 0 &&
            (sc.iteration != it || ckpt_rlog_copy_prefix(fd, -1, sc.bytes, sc.sum, why, sizeof(why)) != 0))
            abort(); /* a part the scan summed does not check */
    }
    ckpt_rlog_scan_free(&sc);
    if (fd >= 0)
        close(fd);
    for (uint64_t it = 1; it <= 3; it++) {
        if (ckpt_rlog_open_replay(dir, NULL, it, 1 << 20, why, sizeof(why)) < 0)
            continue;
        struct ckpt_rl_rec r;
        static const enum ckpt_rl_type order[] = {CKPT_RL_ALLOC, CKPT_RL_D2H,     CKPT_RL_VALUE,
                                                  CKPT_RL_ITER,  CKPT_RL_OBSERVE, CKPT_RL_TAINT};
        uint64_t who;
        for (int k = 0; k < 96; k++) {
            uint64_t thread = (uint64_t)(k % 3) + 1;
            ckpt_rlog_peek(thread, &r);
            int rc = ckpt_rlog_next(thread, order[k % 6], &r, why, sizeof(why));
            if (rc == 0 && r.len) {
                volatile uint8_t sink = ((const uint8_t *)r.payload)[r.len - 1];
                (void)sink;
            }
            ckpt_rlog_left(&who);
        }
        ckpt_rlog_close();
    }
    return 0;
}
