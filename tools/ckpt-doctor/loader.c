/*
 * The dynamic loader's search, done on paper: which file each DT_NEEDED
 * name (or a dlopen'ed name) becomes, in glibc's order — the RPATH of the
 * requesting object and of the objects that loaded it (unless it has a
 * RUNPATH), LD_LIBRARY_PATH (not for a secure-execution program), its
 * RUNPATH, /etc/ld.so.cache, the system directories — with $ORIGIN, $LIB
 * and $PLATFORM expanded, candidates of another ELF class or machine
 * skipped, and a file mapped once whatever names lead to it.  It must
 * never guess: a name that is not found is reported missing, not matched
 * loosely.  (glibc-hwcaps subdirectories are not searched.)
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor.h"

#if defined(__x86_64__)
#define TRIPLET "x86_64-linux-gnu"
#define PLATFORM "x86_64"
#elif defined(__aarch64__)
#define TRIPLET "aarch64-linux-gnu"
#define PLATFORM "aarch64"
#else
#define TRIPLET "linux-gnu"
#define PLATFORM "unknown"
#endif

/* The system directories: Debian's multiarch ones, then those of other
 * distributions; a directory that does not exist costs nothing. */
static const char *const system_dirs[] = {
    "/lib/" TRIPLET, "/usr/lib/" TRIPLET, "/lib64", "/usr/lib64", "/lib", "/usr/lib",
};
#define N_SYSTEM_DIRS (sizeof(system_dirs) / sizeof(system_dirs[0]))

/* ld.so.cache, new format (glibc >= 2.32 writes only this one; older ones
 * put it after the old table): a header, fixed entries, then strings whose
 * offsets count from the header. */
#define CACHE_OLD "ld.so-1.7.0"
#define CACHE_NEW "glibc-ld.so.cache1.1"
#define CACHE_NEW_HDR 48
#define CACHE_NEW_ENTRY 24

static struct {
    bool loaded;
    char *buf;
    size_t size;
    size_t base;                /* offset of the new header */
    uint32_t n;
} cache;

static uint32_t get32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Loads /etc/ld.so.cache once; a cache that is missing or in a format not
 * understood leaves the cache empty (the loader would skip it too). */
static void cache_load(void)
{
    FILE *f;
    long len;

    if (cache.loaded)
        return;
    cache.loaded = true;
    if (!(f = fopen("/etc/ld.so.cache", "rbe")))
        return;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > CACHE_NEW_HDR && fseek(f, 0, SEEK_SET) == 0) {
        cache.buf = malloc(len);
        if (cache.buf && fread(cache.buf, 1, len, f) == (size_t)len)
            cache.size = len;
    }
    fclose(f);
    if (cache.size > 16 && memcmp(cache.buf, CACHE_OLD, sizeof(CACHE_OLD) - 1) == 0)
        cache.base = ((size_t)16 + (size_t)get32(cache.buf + 12) * 12 + 7) & ~(size_t)7;
    if (cache.base + CACHE_NEW_HDR > cache.size ||
        memcmp(cache.buf + cache.base, CACHE_NEW, sizeof(CACHE_NEW) - 1) != 0) {
        cache.size = 0;
        return;
    }
    cache.n = get32(cache.buf + cache.base + 20);
    if (cache.n > (cache.size - cache.base - CACHE_NEW_HDR) / CACHE_NEW_ENTRY)
        cache.size = 0;
}

/* A string of the cache at @off, or NULL when it would run off the end. */
static const char *cache_str(uint32_t off)
{
    size_t at = cache.base + off;
    if (at >= cache.size || !memchr(cache.buf + at, '\0', cache.size - at))
        return NULL;
    return cache.buf + at;
}

/* Does @path exist as a file of the program's class and machine? */
static bool usable(const struct closure *c, const char *path)
{
    struct stat st;
    int cls, mach;

    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || elf_peek(path, &cls, &mach) != 0)
        return false;
    return c->n == 0 || (cls == c->libs[0].elf.elf_class && mach == c->libs[0].elf.machine);
}

static char *cache_find(const struct closure *c, const char *name)
{
    cache_load();
    for (uint32_t i = 0; cache.size && i < cache.n; i++) {
        const char *e = cache.buf + cache.base + CACHE_NEW_HDR + (size_t)i * CACHE_NEW_ENTRY;
        const char *key = cache_str(get32(e + 4)), *value = cache_str(get32(e + 8));
        if (key && value && strcmp(key, name) == 0 && usable(c, value))
            return xstrdup(value);
    }
    return NULL;
}

/* $ORIGIN of object @i: the directory of the program's real path; for a
 * library, of the path it was opened under (glibc does not resolve it). */
static char *origin_of(const struct closure *c, int i)
{
    const struct lib *l = &c->libs[i];
    char *p = l->parent < 0 ? realpath(l->path, NULL) : xstrdup(l->path);
    char *slash;

    if (!p)
        p = xstrdup(l->path);
    slash = strrchr(p, '/');
    if (!slash) {
        free(p);
        return xstrdup(".");
    }
    *(slash == p ? slash + 1 : slash) = '\0';
    return p;
}

/* Expands the dynamic string tokens of one search directory; NULL when one
 * cannot be expanded, and ld.so then drops the directory. */
static char *expand(const struct closure *c, int obj, const char *dir, size_t len)
{
    static const struct { const char *token; const char *value; } fixed[] = {
        {"LIB", "lib/" TRIPLET}, {"PLATFORM", PLATFORM},
    };
    char *out = xstrdup(""), *origin = NULL;
    const char *p = dir, *end = dir + len;

    while (p < end) {
        const char *dollar = memchr(p, '$', end - p), *tok, *value = NULL;
        size_t tl = 0;
        char *next;
        if (!dollar) {
            next = xasprintf("%s%.*s", out, (int)(end - p), p);
            free(out);
            out = next;
            break;
        }
        tok = dollar + 1;
        bool braces = tok < end && *tok == '{';
        tok += braces;
        while (tok + tl < end && (tok[tl] == '_' || (tok[tl] >= 'A' && tok[tl] <= 'Z')))
            tl++;
        if (tl == 6 && strncmp(tok, "ORIGIN", 6) == 0)
            value = origin ? origin : (origin = origin_of(c, obj));
        for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++)
            if (strlen(fixed[k].token) == tl && strncmp(tok, fixed[k].token, tl) == 0)
                value = fixed[k].value;
        if (!value || (braces && (tok + tl >= end || tok[tl] != '}'))) {
            free(out);
            free(origin);
            return NULL;
        }
        next = xasprintf("%s%.*s%s", out, (int)(dollar - p), p, value);
        free(out);
        out = next;
        p = tok + tl + braces;
    }
    free(origin);
    return out;
}

/* Tries @name in each directory of the list @dirs (separated by one of
 * @seps, tokens expanded for object @obj); the first usable one wins. */
static char *search_list(const struct closure *c, int obj, const char *dirs, const char *seps, const char *name)
{
    const char *p = dirs;

    while (p) {
        size_t len = strcspn(p, seps);
        char *dir = expand(c, obj, p, len), *path = NULL;
        if (dir) {
            path = xasprintf("%s%s%s", dir, *dir && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
            free(dir);
            if (usable(c, path))
                return path;
            free(path);
        }
        p = p[len] ? p + len + 1 : NULL;
    }
    return NULL;
}

/* Is @name already one of the closure's objects (by the name it was asked
 * for or its SONAME, as ld.so matches)? Its index, or -1. */
static int loaded_as(const struct closure *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->libs[i].name, name) == 0 ||
            (c->libs[i].elf.soname && strcmp(c->libs[i].elf.soname, name) == 0))
            return i;
    return -1;
}

/* How a library was found; the system's own places are the last two. */
static const char via_loaded[] = "already loaded", via_cache[] = "ld.so.cache", via_system[] = "system directory";

/* Was it found in the program's own places (RPATH, RUNPATH, a path,
 * LD_LIBRARY_PATH) rather than the system's? */
bool via_private(const char *via)
{
    return via != via_cache && via != via_system && via != via_loaded;
}

/*
 * Where @name would come from if object @from needed it (or dlopened it):
 * 1 when it is one of the closure's objects already, 0 when found, with a
 * new string in *path and the rule that found it in *via; -ENOENT.
 */
int closure_find(const struct closure *c, int from, const char *name, char **path, const char **via)
{
    const struct lib *req = &c->libs[from];
    const char *llp = getenv("LD_LIBRARY_PATH");
    bool nodeflib = req->elf.flags_1 & DF_1_NODEFLIB;
    int i = loaded_as(c, name);

    *path = NULL;
    if (i >= 0) {
        *path = xstrdup(c->libs[i].path);
        *via = via_loaded;
        return 1;
    }
    if (strchr(name, '/')) {
        *via = "path";
        *path = usable(c, name) ? xstrdup(name) : NULL;
        return *path ? 0 : -ENOENT;
    }
    if (!req->elf.runpath) {
        for (i = from; i >= 0 && !*path; i = c->libs[i].parent)
            if (c->libs[i].elf.rpath && !c->libs[i].elf.runpath)
                *path = search_list(c, i, c->libs[i].elf.rpath, ":", name);
        *via = "RPATH";
    }
    if (!*path && llp && !c->secure) {
        *path = search_list(c, 0, llp, ":;", name);
        *via = "LD_LIBRARY_PATH";
    }
    if (!*path && req->elf.runpath) {
        *path = search_list(c, from, req->elf.runpath, ":", name);
        *via = "RUNPATH";
    }
    if (!*path && !nodeflib) {
        *path = cache_find(c, name);
        *via = via_cache;
    }
    for (size_t k = 0; !*path && !nodeflib && k < N_SYSTEM_DIRS; k++) {
        *path = search_list(c, from, system_dirs[k], "", name);
        *via = via_system;
    }
    for (int k = 0; !*path && k < c->n_extra; k++) {
        *path = search_list(c, from, c->extra_dirs[k], "", name);
        *via = c->extra_via;
    }
    return *path ? 0 : -ENOENT;
}

static void add_missing(struct closure *c, const char *name, int parent)
{
    for (int i = 0; i < c->n_miss; i++)
        if (strcmp(c->miss[i].name, name) == 0)
            return;
    c->miss = xgrow(c->miss, c->n_miss, sizeof(*c->miss));
    c->miss[c->n_miss++] = (struct missing){ .name = xstrdup(name), .parent = parent };
}

/* Maps one file (unless that file is mapped already); its index, or
 * -errno when it cannot be read. */
static int map_one(struct closure *c, const char *path, const char *name, int parent, const char *via)
{
    struct stat st;
    struct lib *l;
    int rc;

    if (stat(path, &st) != 0)
        return -errno;
    for (int i = 0; i < c->n; i++)
        if (c->libs[i].dev == st.st_dev && c->libs[i].ino == st.st_ino)
            return i;
    c->libs = xgrow(c->libs, c->n, sizeof(*c->libs));
    l = &c->libs[c->n];
    *l = (struct lib){ .name = xstrdup(name), .path = xstrdup(path), .via = via, .parent = parent,
                       .dev = st.st_dev, .ino = st.st_ino };
    rc = elf_obj_read(path, &l->elf);
    if (rc < 0) {
        elf_obj_free(&l->elf);
        free(l->name);
        free(l->path);
        return rc;
    }
    return c->n++;
}

/*
 * Adds @path and, breadth first as ld.so maps them, everything it needs.
 * Only an unreadable root is an error (its -errno); a dependency that
 * cannot be found or read is recorded in c->miss.
 */
int closure_add(struct closure *c, const char *path, const char *name, int parent, const char *via)
{
    int first = map_one(c, path, name, parent, via);

    /* The interpreter is mapped before anything is searched for: a
     * DT_NEEDED ld-linux-*.so.2 finds it by its SONAME. */
    if (first >= 0 && parent < 0 && c->libs[first].elf.interp) {
        char *interp = xstrdup(c->libs[first].elf.interp);
        if (map_one(c, interp, interp, first, "PT_INTERP") < 0)
            add_missing(c, interp, first);
        free(interp);
    }

    for (int i = first; i >= 0 && i < c->n; i++) {
        for (int k = 0; k < c->libs[i].elf.n_needed; k++) {
            const char *need = c->libs[i].elf.needed[k], *how;
            char *found;
            if (loaded_as(c, need) >= 0)
                continue;
            if (closure_find(c, i, need, &found, &how) < 0 || map_one(c, found, need, i, how) < 0)
                add_missing(c, need, i);
            free(found);
        }
    }
    return first < 0 ? first : 0;
}

void closure_free(struct closure *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->libs[i].name);
        free(c->libs[i].path);
        elf_obj_free(&c->libs[i].elf);
    }
    for (int i = 0; i < c->n_miss; i++)
        free(c->miss[i].name);
    for (int i = 0; i < c->n_extra; i++)
        free(c->extra_dirs[i]);
    free(c->libs);
    free(c->miss);
    free(c->extra_dirs);
    memset(c, 0, sizeof(*c));
}
