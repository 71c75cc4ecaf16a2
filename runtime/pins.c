/* The pin file (pins.h): its one writer and its one reader. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "pins.h"
#include "util.h"

void ckpt_pins_path(char *out, size_t n, const char *job_dir)
{
    snprintf(out, n, "%s/" CKPT_PINS_FILE, job_dir);
}

int ckpt_pins_write(const char *job_dir, const struct ckpt_pins *p)
{
    char path[PATH_MAX + 32], text[32 * (CKPT_PINS_MAX + 2)];
    size_t k = 0;
    for (unsigned i = 0; i < p->n && i < CKPT_PINS_MAX; i++)
        if (p->keep[i])
            k += (size_t)snprintf(text + k, sizeof(text) - k, "%llu ", (unsigned long long)p->keep[i]);
    k += (size_t)snprintf(text + k, sizeof(text) - k, "from=%llu epoch=%llu\n", (unsigned long long)p->from,
                          (unsigned long long)p->epoch);
    ckpt_pins_path(path, sizeof(path), job_dir);
    return ckpt_write_whole(path, text, k);
}

void ckpt_pins_read(const char *rank_dir, struct ckpt_pins *p)
{
    char dir[PATH_MAX], path[PATH_MAX + 32], text[32 * (CKPT_PINS_MAX + 2)];
    memset(p, 0, sizeof(*p));
    if (ckpt_rank_dir_job(dir, sizeof(dir), rank_dir) < 0)
        return;
    ckpt_pins_path(path, sizeof(path), dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0)
        return;
    text[n] = '\0';
    char *save = NULL;
    for (char *tok = strtok_r(text, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
        if (strncmp(tok, "from=", 5) == 0)
            p->from = strtoull(tok + 5, NULL, 10);
        else if (strncmp(tok, "epoch=", 6) == 0)
            p->epoch = strtoull(tok + 6, NULL, 10);
        else if (p->n < CKPT_PINS_MAX)
            p->keep[p->n++] = strtoull(tok, NULL, 10);
    }
}

void ckpt_pins_remove(const char *job_dir)
{
    char path[PATH_MAX + 32];
    ckpt_pins_path(path, sizeof(path), job_dir);
    unlink(path);
    strcat(path, CKPT_WHOLE_TMP); /* left by an agent killed while it wrote the file */
    unlink(path);
}

bool ckpt_pins_hold(const struct ckpt_pins *p, uint64_t it)
{
    if (!it)
        return false;
    for (unsigned i = 0; i < p->n; i++)
        if (p->keep[i] == it)
            return true;
    return p->from && it >= p->from;
}
