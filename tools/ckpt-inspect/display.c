/*
 * What ckpt-inspect shows besides its results: a progress bar on stderr
 * for long reads and exports, drawn only when stderr is a terminal (a
 * script or a log file gets no control characters), redrawn at most ten
 * times a second so drawing never costs more than the work; and sizes and
 * ages in units a person reads at a glance.  It must never write to
 * stdout, which carries the results.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "inspect.h"
#include "util.h"

static void draw(struct progress *p)
{
    char done[32], total[32], bar[31];
    int width = (int)sizeof(bar) - 1;
    int fill = p->total ? (int)((double)p->done / (double)p->total * width) : width;

    if (fill > width)
        fill = width;
    memset(bar, '=', (size_t)fill);
    memset(bar + fill, ' ', (size_t)(width - fill));
    bar[width] = '\0';
    fprintf(stderr, "\r%-40.40s [%s] %3d%% %s / %s\033[K", p->what, bar,
            p->total ? (int)(100.0 * (double)p->done / (double)p->total) : 100,
            human_bytes(p->done, done, sizeof(done)), human_bytes(p->total, total, sizeof(total)));
    fflush(stderr);
    p->last_draw = ckpt_now_s();
}

void progress_start(struct progress *p, const char *what, uint64_t total)
{
    snprintf(p->what, sizeof(p->what), "%s", what);
    p->total = total;
    p->done = 0;
    p->tty = isatty(STDERR_FILENO);
    p->last_draw = 0;
    if (p->tty)
        draw(p);
}

void progress_add(struct progress *p, uint64_t n)
{
    p->done += n;
    if (p->tty && ckpt_now_s() - p->last_draw >= 0.1)
        draw(p);
}

void progress_pause(struct progress *p)
{
    if (p->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        p->last_draw = 0;
    }
}

void progress_end(struct progress *p)
{
    if (p->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
    p->tty = false;
}

const char *human_bytes(uint64_t n, char *out, size_t outlen)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double x = (double)n;
    int u = 0;

    while (x >= 1024 && u < 5) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, outlen, "%llu B", (unsigned long long)n);
    else
        snprintf(out, outlen, "%.1f %s", x, units[u]);
    return out;
}

const char *human_age(uint64_t t_ns, char *out, size_t outlen)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t s = now > t_ns ? (now - t_ns) / 1000000000ull : 0;

    if (s < 60)
        snprintf(out, outlen, "%llus", (unsigned long long)s);
    else if (s < 3600)
        snprintf(out, outlen, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
    else if (s < 86400)
        snprintf(out, outlen, "%lluh%02llum", (unsigned long long)(s / 3600), (unsigned long long)(s % 3600 / 60));
    else
        snprintf(out, outlen, "%llud%02lluh", (unsigned long long)(s / 86400),
                 (unsigned long long)(s % 86400 / 3600));
    return out;
}
