/*
 * The node agent's lanes of a rank's timeline: its network sends
 * (replicas) and disk writes (persisted generations), kept in
 * <arena rank dir>/timeline.agent in the timeline's own format
 * (timeline.h), the newest CKPT_TL_CAP events.  Events carry no iteration
 * (0): ckpt-inspect places them by time among the rank's boundaries.
 * Several agent threads or processes may add at once: a lock on the rank
 * directory serialises them, and a reader only ever sees a whole file.  It
 * must never touch the rank's own timeline file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "timeline.h"
#include "util.h"

int ckpt_tl_agent_add(const char *rankdir, const struct ckpt_tl_event *e)
{
    char path[4096], why[128];
    size_t cap = sizeof(struct ckpt_tl_header) + (CKPT_TL_CAP + 1) * sizeof(struct ckpt_tl_event);
    struct ckpt_tl_header h;
    int rc = 0;

    if (snprintf(path, sizeof(path), "%s/%s", rankdir, CKPT_TL_AGENT_FILE) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    int dfd = open(rankdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    char *buf = malloc(cap);
    if (!buf) {
        close(dfd);
        return -ENOMEM;
    }
    flock(dfd, LOCK_EX);
    size_t n = 0;
    struct ckpt_tl_event *ev = (struct ckpt_tl_event *)(buf + sizeof(h));
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) { /* a damaged or foreign file is started over */
        ssize_t len = read(fd, buf, cap);
        if (len > 0 && ckpt_tl_decode(buf, (size_t)len, &h, why, sizeof(why)) == 0)
            n = h.nevents;
        close(fd);
    }
    if (n >= CKPT_TL_CAP) {
        memmove(ev, ev + (n - CKPT_TL_CAP + 1), (CKPT_TL_CAP - 1) * sizeof(*ev));
        n = CKPT_TL_CAP - 1;
    }
    ev[n++] = *e;
    size_t len = ckpt_tl_encode(buf, 0, ev, n, 0);
    rc = ckpt_write_whole(path, buf, len);
    flock(dfd, LOCK_UN);
    close(dfd);
    free(buf);
    return rc;
}
