/*
 * Parsing and checking of the CKPT_* variables declared in config.def.
 * This file owns the table; callers read values through ckpt_cfg_*().  It
 * must never exit or print: errors go back to the caller, who decides
 * whether the process stops (libckpt.so at load, ckpt-resume at start).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "arena.h"
#include "config.h"

enum kind { BOOL, UINT, ENUM, SECONDS, SIZE, STR };

struct var {
    const char *name; /* without the CKPT_ prefix */
    enum kind kind;
    const char *def;
    const char *accepted;
    const char *help;
};

static const struct var vars[CFG_COUNT] = {
#define CKPT_VAR(name, kind, def, accepted, help) {#name, kind, def, accepted, help},
#include "config.def"
#undef CKPT_VAR
};

static union {
    long long i;
    double d;
    const char *s;
} values[CFG_COUNT];

/* A bound, with the suffixes of SIZE. */
static double bytes(const char *s)
{
    char *end;
    double x = strtod(s, &end);
    const char *u = *end ? strchr("KMGT", *end) : NULL;
    return u ? x * (double)(1ULL << (10 * (u - "KMGT" + 1))) : x;
}

/* "min..max" -> bounds.  Parsed by hand: strtod would read "0." of "0..9". */
static void range(const char *accepted, double *lo, double *hi)
{
    const char *dots = accepted ? strstr(accepted, "..") : NULL;
    char low[32];

    *lo = 0;
    *hi = 1e300;
    if (!dots || (size_t)(dots - accepted) >= sizeof(low))
        return;
    memcpy(low, accepted, dots - accepted);
    low[dots - accepted] = '\0';
    *lo = bytes(low);
    if (dots[2])
        *hi = bytes(dots + 2);
}

/* Index of word in "a|b|c", or -1. */
static int choice(const char *choices, const char *word)
{
    int idx = 0;
    size_t n = strlen(word);
    for (const char *p = choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (n && len == n && strncasecmp(p, word, n) == 0)
            return idx;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

/* The NAME of CKPT_BOUNDARY=nvtx:NAME: compared byte for byte with range
 * messages (and widened for wide ones), so only printable ASCII, and short
 * enough for libckpt to keep a fixed copy. */
static bool nvtx_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (name[i] < 0x20 || name[i] > 0x7e)
            return false;
    return true;
}

/* "prefix<digits>": the number, with *p moved past it; -1 if absent. */
static long long field(const char **p, const char *prefix)
{
    size_t n = strlen(prefix);
    char *end;
    if (strncmp(*p, prefix, n) != 0 || (*p)[n] < '0' || (*p)[n] > '9')
        return -1;
    errno = 0;
    unsigned long long x = strtoull(*p + n, &end, 10);
    if (errno || x > (1ULL << 62))
        return -1;
    *p = end;
    return (long long)x;
}

/* io:errno=E or io:delay=MS, then [:op=write|read][:after=N][:times=K], in that order. */
static int io_fault_parse(const char *p, struct ckpt_fault *f)
{
    static const struct {
        const char *name;
        int err;
    } errs[] = {{"EIO", EIO}, {"ENOSPC", ENOSPC}, {"EROFS", EROFS}, {"EDQUOT", EDQUOT}, {"ENODEV", ENODEV}};
    static const char *const ops[] = {"write", "read"};
    size_t n;

    *f = (struct ckpt_fault){.kind = CKPT_FAULT_IO};
    if (strncmp(p, "io:delay=", 9) == 0) {
        p += 2;
        long long ms = field(&p, ":delay=");
        if (ms < 1 || ms > 60000)
            return -EINVAL;
        f->delay_ms = (unsigned)ms;
    } else if (strncmp(p, "io:errno=", 9) == 0) {
        p += 9;
        n = strcspn(p, ":");
        for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
            if (strlen(errs[i].name) == n && strncmp(p, errs[i].name, n) == 0)
                f->err = errs[i].err;
        if (!f->err)
            return -EINVAL;
        p += n;
    } else {
        return -EINVAL;
    }
    if (strncmp(p, ":op=", 4) == 0) {
        p += 4;
        n = strcspn(p, ":");
        for (int i = 0; i < 2; i++)
            if (strlen(ops[i]) == n && strncmp(p, ops[i], n) == 0)
                f->op = i + 1;
        if (!f->op)
            return -EINVAL;
        p += n;
    }
    long long after = 0, times = 0;
    if (strncmp(p, ":after=", 7) == 0 && (after = field(&p, ":after=")) < 0)
        return -EINVAL;
    if (strncmp(p, ":times=", 7) == 0 && (times = field(&p, ":times=")) <= 0)
        return -EINVAL;
    if (*p)
        return -EINVAL;
    f->after = (unsigned long long)after;
    f->times = (unsigned long long)times;
    return 0;
}

int ckpt_fault_parse(const char *text, struct ckpt_fault *out)
{
    static const char *const phases[CKPT_FAULT_PHASES] = {"boundary", "snapshot", "restore",
                                                          "commit",   "replay",   "persist"};
    const char *p = text;
    struct ckpt_fault f = {.phase = 0};

    if (strncmp(text, "io:", 3) == 0) {
        if (io_fault_parse(text, &f) < 0)
            return -EINVAL;
        if (out)
            *out = f;
        return 0;
    }
    long long rank = field(&p, "kill:rank="), iter = rank < 0 ? -1 : field(&p, ":iter=");

    if (rank < 0 || iter <= 0)
        return -EINVAL;
    if (*p) {
        if (strncmp(p, ":phase=", 7) != 0)
            return -EINVAL;
        f.phase = -1;
        for (int i = 0; i < CKPT_FAULT_PHASES; i++)
            if (strcmp(p + 7, phases[i]) == 0)
                f.phase = i;
        if (f.phase < 0)
            return -EINVAL;
    }
    f.rank = (unsigned long long)rank;
    f.iteration = (unsigned long long)iter;
    if (out)
        *out = f;
    return 0;
}

/* The shapes a STR variable may be restricted to (its "accepted"). */
static bool str_ok(const char *accepted, const char *text, char *want, size_t wantlen)
{
    if (strcmp(accepted, "path") == 0 && !*text) {
        snprintf(want, wantlen, "a non-empty path");
        return false;
    }
    if (strcmp(accepted, "name") == 0 && !ckpt_job_name_ok(text)) {
        snprintf(want, wantlen, CKPT_JOB_NAME_RULE);
        return false;
    }
    if (strcmp(accepted, "dirs") == 0 && *text) {
        size_t n = strlen(text);
        if (text[0] == ',' || text[n - 1] == ',' || strstr(text, ",,")) {
            snprintf(want, wantlen, "directories separated by commas, none empty");
            return false;
        }
    }
    if (strcmp(accepted, "fault") == 0 && *text && ckpt_fault_parse(text, NULL) < 0) {
        snprintf(want, wantlen, CKPT_FAULT_SYNTAX);
        return false;
    }
    if (strcmp(accepted, "boundary") == 0 && strcmp(text, "auto") != 0) {
        if (strncmp(text, "nvtx:", 5) == 0) {
            if (!nvtx_name_ok(text + 5)) {
                snprintf(want, wantlen, "nvtx:NAME with NAME 1 to 63 printable ASCII characters");
                return false;
            }
            return true;
        }
        char *end;
        unsigned long n = strncmp(text, "every:", 6) == 0 ? strtoul(text + 6, &end, 10) : 0;
        if (n == 0 || n > 1000000 || *end || text[6] < '0' || text[6] > '9') {
            snprintf(want, wantlen, "auto or every:N with N in 1..1000000, or nvtx:NAME");
            return false;
        }
    }
    return true;
}

/* Parses text as v's kind into *out.  Returns 0 or -EINVAL, with the
 * expectation written to want. */
static int parse(const struct var *v, const char *text, int id, char *want, size_t wantlen)
{
    char *end;
    double lo, hi;

    switch (v->kind) {
    case BOOL: {
        static const char *const yes[] = {"1", "yes", "true", "on"}, *const no[] = {"0", "no", "false", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(text, yes[i]) == 0) return values[id].i = 1, 0;
            if (strcasecmp(text, no[i]) == 0) return values[id].i = 0, 0;
        }
        snprintf(want, wantlen, "0 or 1 (also yes/no, true/false, on/off)");
        return -EINVAL;
    }
    case UINT: {
        range(v->accepted, &lo, &hi);
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (errno || end == text || *end || x < lo || x > hi || text[0] < '0' || text[0] > '9') {
            snprintf(want, wantlen, "an integer in %s", v->accepted);
            return -EINVAL;
        }
        values[id].i = x;
        return 0;
    }
    case ENUM: {
        int idx = choice(v->accepted, text);
        if (idx < 0) {
            snprintf(want, wantlen, "one of %s", v->accepted);
            return -EINVAL;
        }
        values[id].i = idx;
        return 0;
    }
    case SECONDS: {
        range(v->accepted, &lo, &hi);
        errno = 0;
        double x = strtod(text, &end);
        bool decimal = strspn(text, "0123456789.") == strlen(text); /* strtod also reads 0x10 and 1e3 */
        if (errno || end == text || *end || !(x >= lo && x <= hi) || !decimal) {
            snprintf(want, wantlen, "a number of seconds in %s", v->accepted);
            return -EINVAL;
        }
        values[id].d = x;
        return 0;
    }
    case SIZE: {
        range(v->accepted, &lo, &hi);
        errno = 0;
        unsigned long long x = strtoull(text, &end, 10), mult = 1;
        if (*end && !end[1]) {
            const char *u = strchr("KMGT", *end == 'k' ? 'K' : *end);
            mult = u ? 1ULL << (10 * (u - "KMGT" + 1)) : 0;
            end += mult != 0;
        }
        if (errno || end == text || *end || text[0] < '0' || text[0] > '9' || x > ~0ULL / (mult ? mult : 1) ||
            (double)(x * mult) < lo || (double)(x * mult) > hi) {
            snprintf(want, wantlen, "a size in bytes (K, M, G, T suffixes) in %s", v->accepted);
            return -EINVAL;
        }
        values[id].i = (long long)(x * mult);
        return 0;
    }
    case STR:
        if (!str_ok(v->accepted, text, want, wantlen))
            return -EINVAL;
        values[id].s = text;
        return 0;
    }
    return -EINVAL;
}

/* What no one variable's range says: the I/O sizes, which go together. */
static int check_together(char *err, size_t errlen)
{
    long long depth = values[CFG_IO_DEPTH].i, kb = values[CFG_IO_BLOCK_KB].i;

    if (kb % 4) {
        snprintf(err, errlen, "CKPT_IO_BLOCK_KB='%lld' is not valid: expected a multiple of 4 (direct I/O moves "
                 "whole 4 KiB blocks)", kb);
        return -EINVAL;
    }
    if (depth * kb > 1024 * 1024) {
        snprintf(err, errlen, "CKPT_IO_DEPTH=%lld with CKPT_IO_BLOCK_KB=%lld is %lld MiB of I/O buffers per ring: "
                 "expected at most 1024 MiB", depth, kb, depth * kb / 1024);
        return -EINVAL;
    }
    return 0;
}

int ckpt_config_load(char *err, size_t errlen)
{
    char want[320], envname[64];

    for (int id = 0; id < CFG_COUNT; id++) {
        const struct var *v = &vars[id];
        snprintf(envname, sizeof(envname), "CKPT_%s", v->name);
        const char *text = getenv(envname);
        if (!text) {
            if (v->kind == STR && !*v->def)
                values[id].s = NULL;
            else
                parse(v, v->def, id, want, sizeof(want));
            continue;
        }
        if (parse(v, text, id, want, sizeof(want)) < 0) {
            snprintf(err, errlen, "%s='%s' is not valid: expected %s", envname, text, want);
            return -EINVAL;
        }
    }
    return check_together(err, errlen);
}

long long ckpt_cfg_int(enum ckpt_cfg_id id) { return values[id].i; }
double ckpt_cfg_seconds(enum ckpt_cfg_id id) { return values[id].d; }
const char *ckpt_cfg_str(enum ckpt_cfg_id id) { return values[id].s; }

/* Levenshtein distance, for "did you mean"; names are short. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (lb >= 64)
        return lb;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (a[i - 1] != b[j - 1]);
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

void ckpt_config_unknown(void (*warn)(const char *name, const char *suggestion))
{
    extern char **environ;
    char name[64], best_name[64];

    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (strncmp(*e, "CKPT_", 5) != 0 || len >= sizeof(name))
            continue;
        memcpy(name, *e, len);
        name[len] = '\0';
        size_t best = (size_t)-1;
        bool known = false;
        for (int id = 0; id < CFG_COUNT && !known; id++) {
            size_t d = distance(name + 5, vars[id].name);
            known = d == 0;
            if (d < best) {
                best = d;
                snprintf(best_name, sizeof(best_name), "CKPT_%s", vars[id].name);
            }
        }
        if (!known)
            warn(name, best <= 3 ? best_name : NULL);
    }
}

void ckpt_config_describe(FILE *f)
{
    static const char *const kinds[] = {"bool", "integer", "choice", "seconds", "size", "string"};
    for (int id = 0; id < CFG_COUNT; id++) {
        const struct var *v = &vars[id];
        fprintf(f, "CKPT_%s (%s%s%s, default '%s')\n    %s\n", v->name, kinds[v->kind],
                *v->accepted ? ": " : "", v->accepted, v->def, v->help);
    }
}

/* One table cell: a '|' would end the cell, so it is escaped. */
static void md_cell(FILE *f, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            fputc('\\', f);
        fputc(*p, f);
    }
}

/* What a variable accepts, in words: the table's "accepted" is written
 * for the parser. */
static void md_accepted(FILE *f, const struct var *v)
{
    static const struct {
        const char *accepted, *says;
    } shapes[] = {
        {"", "any text"},
        {"path", "a non-empty path"},
        {"name", CKPT_JOB_NAME_RULE},
        {"boundary", "auto, every:N (N in 1..1000000) or nvtx:NAME"},
        {"fault", CKPT_FAULT_SYNTAX},
        {"dirs", "directories separated by commas, none empty"},
    };

    switch (v->kind) {
    case BOOL:
        fputs("0 or 1 (also yes/no, true/false, on/off)", f);
        return;
    case ENUM:
        for (const char *p = v->accepted; *p; p++)
            *p == '|' ? fputs(", ", f) : fputc(*p, f);
        return;
    case SIZE:
        fprintf(f, "%s bytes (K, M, G, T suffixes)", v->accepted);
        return;
    case STR:
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
            if (strcmp(v->accepted, shapes[i].accepted) == 0) {
                md_cell(f, shapes[i].says);
                return;
            }
        }
        md_cell(f, v->accepted);
        return;
    default:
        md_cell(f, v->accepted);
    }
}

void ckpt_config_describe_markdown(FILE *f)
{
    static const char *const kinds[] = {"bool", "integer", "choice", "seconds", "size", "string"};

    fprintf(f, "| Variable | Type | Default | Accepted | Description |\n|---|---|---|---|---|\n");
    for (int id = 0; id < CFG_COUNT; id++) {
        const struct var *v = &vars[id];
        fprintf(f, "| `CKPT_%s` | %s | ", v->name, kinds[v->kind]);
        if (*v->def) {
            fputc('`', f);
            md_cell(f, v->def);
            fputc('`', f);
        } else {
            fputs("(unset)", f);
        }
        fputs(" | ", f);
        md_accepted(f, v);
        fputs(" | ", f);
        md_cell(f, v->help);
        fputs(" |\n", f);
    }
}
