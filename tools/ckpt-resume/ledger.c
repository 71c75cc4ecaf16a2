/*
 * The restart decisions this node acted under (recovery.h: what they are
 * for), kept beside the copies they describe, so that they live as long as
 * those do: in the arena's job directory and, when the node persists, in
 * the first persist directory's.  Each is the file LEDGER_FILE, text:
 *
 *     libckpt decisions 1
 *     EPOCH RESTORE          one line per decision, oldest first
 *
 * written whole or not at all (ckpt_write_whole).  A node that lost one of
 * the two finds the other; one that lost both knows no decision, and then
 * every copy it still holds belongs to none: any decision of the job
 * replaced those past its restore point (safe, and said by the plan).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "arena.h"
#include "log.h"
#include "persist.h"
#include "resume.h"
#include "util.h"

#define LEDGER_HEAD "libckpt decisions 1\n"

/* The ledger's paths: the arena's and the persist directory's ("" where there is none). */
static void paths(const struct job *job, char arena[PATH_MAX + 32], char disk[PATH_MAX + 32])
{
    char dir[PATH_MAX], why[256];
    arena[0] = disk[0] = '\0';
    if (arena_job_dir(job->opt, dir, sizeof(dir)) == 0)
        snprintf(arena, PATH_MAX + 32, "%s/" LEDGER_FILE, dir);
    if (job->disk.engine && ckpt_persist_job_dir(job->disk.engine, job->opt->job_name, dir, sizeof(dir), why,
                                                 sizeof(why)) == 0)
        snprintf(disk, PATH_MAX + 32, "%s/" LEDGER_FILE, dir);
}

static void load_file(struct ledger *l, const char *path)
{
    FILE *f = *path ? fopen(path, "re") : NULL;
    char line[128];
    if (!f)
        return;
    if (fgets(line, sizeof(line), f) && strcmp(line, LEDGER_HEAD) == 0) {
        struct ckpt_decision dec;
        while (fscanf(f, "%" SCNu64 " %" SCNu64 "\n", &dec.epoch, &dec.restore) == 2)
            ckpt_decision_add(l->d, &l->n, COORD_DECIDED_MAX, dec);
    } else {
        ckpt_log(CKPT_WARN, "%s is not a ledger of decisions: left out", path);
    }
    fclose(f);
}

void ledger_load(const struct job *job, struct ledger *l)
{
    char arena[PATH_MAX + 32], disk[PATH_MAX + 32];
    paths(job, arena, disk);
    l->n = 0;
    load_file(l, arena);
    load_file(l, disk);
}

static void save(const struct job *job, const struct ledger *l)
{
    char arena[PATH_MAX + 32], disk[PATH_MAX + 32], text[sizeof(LEDGER_HEAD) + COORD_DECIDED_MAX * 42];
    size_t len = (size_t)snprintf(text, sizeof(text), LEDGER_HEAD);
    for (unsigned i = 0; i < l->n; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%" PRIu64 " %" PRIu64 "\n", l->d[i].epoch,
                                l->d[i].restore);
    char why[512];
    paths(job, arena, disk);
    /* The arena's job directory, made as libckpt makes it: the first plan of
     * a fresh job comes before any rank. */
    if (*arena && ckpt_arena_usable(job->opt->arena_root, job->opt->job_name, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_WARN, "cannot keep this node's restart decisions in its arena: %s", why);
        arena[0] = '\0';
    }
    const char *where[] = { arena, disk };
    for (int i = 0; i < 2; i++) {
        int rc = *where[i] ? ckpt_write_whole(where[i], text, len) : 0;
        if (rc < 0)
            ckpt_log(CKPT_WARN, "cannot keep this node's restart decisions in %s: %s", where[i], strerror(-rc));
    }
}

uint64_t ledger_take(const struct job *job, struct ledger *l, const struct ckpt_decision *d, unsigned n)
{
    uint64_t after = UINT64_MAX;
    bool added = false;
    for (unsigned i = 0; i < n; i++) {
        if (!ckpt_decision_add(l->d, &l->n, COORD_DECIDED_MAX, d[i]))
            continue;
        added = true;
        after = d[i].restore < after ? d[i].restore : after;
    }
    if (added)
        save(job, l);
    return after;
}

uint64_t ledger_newest(const struct ledger *l)
{
    return l->n ? l->d[l->n - 1].epoch : 0;
}
