/*
 * From the files to an answer: how the program reaches CUDA (each way is
 * one libckpt hooks: exported symbols, its dlsym, cuGetProcAddress), where
 * NCCL comes from, what keeps LD_PRELOAD out entirely (a problem: not
 * protected), what lets some calls pass beside libckpt (a limit), and
 * what is only worth knowing (a note).  It must only claim what the files
 * show: a flag decided at run time (RTLD_DEEPBIND, a computed dlopen
 * name) is said to be out of reach, never guessed.
 */
#include <elf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "arena.h"
#include "config.h"
#include "doctor.h"

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#endif

/* A finding said twice (the same driver seen from two objects) is kept once. */
void diag_add(struct diagnosis *d, enum severity sev, const char *fix, const char *fmt, ...)
{
    va_list ap;
    char *text;

    va_start(ap, fmt);
    text = xvasprintf(fmt, ap);
    va_end(ap);
    for (int i = 0; i < d->n_found; i++)
        if (d->found[i].sev == sev && strcmp(d->found[i].text, text) == 0) {
            free(text);
            return;
        }
    d->found = xgrow(d->found, d->n_found, sizeof(*d->found));
    d->found[d->n_found++] = (struct finding){ .sev = sev, .text = text, .fix = xstrdup(fix) };
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Is object @l of the family @stem ("libcudart.so"), by SONAME or name? */
static bool is(const struct lib *l, const char *stem)
{
    size_t n = strlen(stem);
    return strncmp(base_name(l->name), stem, n) == 0 || (l->elf.soname && strncmp(l->elf.soname, stem, n) == 0);
}

/* The C library and the loader define dlsym and dlmopen by right. */
static bool is_system(const struct lib *l)
{
    return is(l, "libc.so.") || is(l, "libdl.so.") || is(l, "ld-linux") || is(l, "libckpt.so");
}

static const char *label(const struct diagnosis *d, int i)
{
    return base_name(d->closure.libs[i].name);
}

static void add_reach(struct diagnosis *d, const char *how, int obj, char *detail)
{
    d->reach = xgrow(d->reach, d->n_reach, sizeof(*d->reach));
    d->reach[d->n_reach++] = (struct reach){ .how = xstrdup(how), .obj = obj, .detail = detail };
}

/* Where the driver that object @i opens would come from: a note when it is
 * not here (normal on a machine without a GPU) or a private copy. */
static void driver_source(struct diagnosis *d, int i, const char *name)
{
    char *path;
    const char *via;

    if (closure_find(&d->closure, i, name, &path, &via) < 0) {
        diag_add(d, SEV_NOTE, NULL, "%s (the driver) is not installed on this machine: the GPU nodes provide it",
                 name);
        return;
    }
    if (via_private(via))
        diag_add(d, SEV_NOTE, "make sure it matches the kernel driver of the GPU nodes",
                 "%s would be opened from %s (found through %s), not from the system's driver installation: "
                 "libckpt hooks whichever copy is loaded", name, path, via);
    free(path);
}

/* How the program reaches CUDA, object by object. */
static void find_reach(struct diagnosis *d)
{
    const struct closure *c = &d->closure;

    for (int i = 0; i < c->n; i++) {
        const struct lib *l = &c->libs[i];
        const char *drv = l->elf.dl_name[DL_CUDA], *rt = l->elf.dl_name[DL_CUDART];
        if (is(l, "libcudart.so")) {
            add_reach(d, "shared runtime", i,
                      xasprintf("its driver calls go through cuGetProcAddress, which libckpt answers"));
            driver_source(d, i, drv ? drv : "libcuda.so.1");
        } else if (is(l, "libcuda.so")) {
            add_reach(d, "driver linked", i,
                      xasprintf("needed by %s: libckpt's cu* functions come first", label(d, l->parent)));
        } else if ((l->elf.features & F_RT_CODE) && drv) {
            add_reach(d, "static runtime", i,
                      xasprintf("carries the CUDA runtime, which opens %s and takes every driver function "
                                "through dlsym and cuGetProcAddress: libckpt answers both", drv));
            driver_source(d, i, drv);
        } else if ((l->elf.features & F_IMP_DLOPEN) && drv) {
            add_reach(d, "driver through dlopen", i,
                      xasprintf("opens %s itself; libckpt's dlsym answers its cu* lookups", drv));
            driver_source(d, i, drv);
        }
        if ((l->elf.features & F_IMP_DLOPEN) && rt && !is(l, "libcudart.so")) {
            char *path;
            const char *via;
            int found = closure_find(c, i, rt, &path, &via);
            if (found != 1)
                add_reach(d, "runtime loaded later", i,
                          xasprintf("may dlopen %s at run time (%s)", rt, found == 0 ? path : "not found here"));
            free(path);
        }
    }
}

/* A version from a file name: libnccl.so.2.28.9 -> "2.28.9". */
static char *version_from_name(const char *path)
{
    char *real = realpath(path, NULL), *v = NULL;
    const char *b = base_name(real ? real : path), *so = strstr(b, ".so.");

    if (so && so[4])
        v = xasprintf("%s (from the file name)", so + 4);
    free(real);
    return v;
}

static void find_nccl(struct diagnosis *d)
{
    const struct closure *c = &d->closure;

    d->nccl_obj = -1;
    for (int i = 0; i < c->n && d->nccl_obj < 0; i++)
        if (is(&c->libs[i], "libnccl.so")) {
            d->nccl_obj = i;
            d->nccl_version = c->libs[i].elf.nccl_version[0] ? xstrdup(c->libs[i].elf.nccl_version)
                                                              : version_from_name(c->libs[i].path);
        }
    for (int i = 0; i < c->n; i++) {
        const struct lib *l = &c->libs[i];
        if ((l->elf.features & F_NCCL_BANNER) && !is(l, "libnccl.so"))
            diag_add(d, SEV_LIMIT, "link NCCL dynamically (libnccl.so.2) so that libckpt sees its API",
                     "%s carries its own copy of NCCL %s, linked in statically: libckpt cannot see its "
                     "collectives, nor keep its communicator buffers out of snapshots",
                     label(d, i), l->elf.nccl_version);
        else if (d->nccl_obj < 0 && (l->elf.features & F_IMP_DLOPEN) && l->elf.dl_name[DL_NCCL])
            diag_add(d, SEV_NOTE, NULL,
                     "NCCL is not linked, but %s may dlopen %s at run time: libckpt wraps it then too", label(d, i),
                     l->elf.dl_name[DL_NCCL]);
    }
}

/* What lets calls pass beside libckpt, object by object. */
static void find_limits(struct diagnosis *d)
{
    const struct closure *c = &d->closure;
    char *loaders = NULL;

    for (int i = 0; i < c->n; i++) {
        const struct lib *l = &c->libs[i];
        unsigned f = l->elf.features;
        bool runtime = is(l, "libcudart.so") || is(l, "libcuda.so") || (f & F_RT_CODE);
        if (is_system(l) || is(l, "libcuda.so"))
            continue;
        if (f & F_DEF_DLSYM)
            diag_add(d, SEV_LIMIT, "rename it, or let it forward to the real dlsym (RTLD_NEXT)",
                     "%s defines its own dlsym: %s", label(d, i),
                     i == 0 && strcmp(d->kind, "shared object") != 0
                         ? "it comes before libckpt's, so driver functions it looks up by name bypass libckpt"
                         : "its own lookups of driver functions may bypass libckpt");
        if (f & F_DEF_PROCADDR)
            diag_add(d, SEV_LIMIT, "let it forward to the driver's cuGetProcAddress",
                     "%s defines its own cuGetProcAddress: driver functions it hands out do not come from libckpt",
                     label(d, i));
        if (l->elf.flags_1 & DF_1_GROUP)
            diag_add(d, SEV_NOTE, "relink it without -Bgroup before it runs under another loader",
                     "%s is linked with -Bgroup (DF_1_GROUP), which asks that its symbols be looked up within its "
                     "own group only: glibc ignores the flag, so libckpt still comes first; a loader that honours "
                     "it would keep libckpt out", label(d, i));
        if ((f & F_IMP_DLMOPEN) && !runtime)
            diag_add(d, SEV_LIMIT, "load them with dlopen",
                     "%s calls dlmopen: libraries it loads into another namespace do not get LD_PRELOAD, "
                     "so CUDA calls made there bypass libckpt", label(d, i));
        if ((f & F_IMP_DLOPEN) && !runtime && !is(l, "libnccl.so")) {
            char *next = xasprintf("%s%s%s", loaders ? loaders : "", loaders ? ", " : "", label(d, i));
            free(loaders);
            loaders = next;
        }
    }
    if (loaders)
        diag_add(d, SEV_NOTE, NULL,
                 "out of reach: libraries opened at run time by %s; one opened with RTLD_DEEPBIND would prefer "
                 "its own symbols to libckpt's, and that flag is only known when the program runs", loaders);
    free(loaders);
}

static struct diagnosis *unknown_sink;

static void unknown_var(const char *name, const char *suggestion)
{
    diag_add(unknown_sink, SEV_NOTE, NULL, "%s is not a libckpt variable%s%s%s", name,
             suggestion ? " (did you mean " : "", suggestion ? suggestion : "", suggestion ? "?)" : "");
}

/* The job's CKPT_* variables as libckpt would read them. */
static void check_config(struct diagnosis *d)
{
    char err[512];

    if (ckpt_config_load(err, sizeof(err)) < 0) {
        diag_add(d, SEV_PROBLEM, "correct the variable", "libckpt would stop the job before training: %s", err);
        return;
    }
    if (ckpt_cfg_int(CFG_DISABLE))
        diag_add(d, SEV_PROBLEM, "unset CKPT_DISABLE",
                 "CKPT_DISABLE is set: libckpt passes every call through and saves nothing");
    unknown_sink = d;
    ckpt_config_unknown(unknown_var);
}

/* What this host gives the arena: the snapshot slots live in
 * CKPT_ARENA_DIR (a tmpfs, /dev/shm by default: 64 MiB in a container
 * unless asked for more), pinned with the memlock limit, and counted
 * against the job's cgroup.  Said as notes: how much a job needs depends
 * on its state, which only the running job knows. */
static void check_host(struct diagnosis *d)
{
    const char *dir = ckpt_cfg_str(CFG_ARENA_DIR);
    uint64_t room, size;
    struct rlimit rl;
    char limit[64];

    long long slots = ckpt_cfg_int(CFG_SLOTS);
    uint64_t each = (uint64_t)ckpt_cfg_int(CFG_HOST_MEM);
    if (ckpt_arena_room(dir, &room, &size) < 0)
        diag_add(d, SEV_NOTE, "create it, or set CKPT_ARENA_DIR", "CKPT_ARENA_DIR=%s cannot be looked at", dir);
    else if (each && slots * each > room)
        diag_add(d, SEV_PROBLEM, CKPT_ARENA_ROOM_FIX,
                 "CKPT_ARENA_DIR=%s has %.1f MiB free: not even one rank's %lld slot%s of CKPT_HOST_MEM=%.1f MiB "
                 "fit; under ckpt-resume the job would not start", dir, room / 1048576.0, slots,
                 slots == 1 ? "" : "s", each / 1048576.0);
    else if (each)
        diag_add(d, SEV_NOTE, NULL,
                 "CKPT_ARENA_DIR=%s has room for %llu rank%s of %lld slot%s of CKPT_HOST_MEM=%.1f MiB (%.1f MiB "
                 "free of %.1f MiB)", dir, (unsigned long long)(room / (slots * each)),
                 room / (slots * each) == 1 ? "" : "s", slots, slots == 1 ? "" : "s", each / 1048576.0,
                 room / 1048576.0, size / 1048576.0);
    else if (size < (1ull << 30))
        diag_add(d, SEV_NOTE, CKPT_ARENA_ROOM_FIX,
                 "CKPT_ARENA_DIR=%s is on a filesystem of %.1f MiB (%.1f MiB free): every rank of a node needs "
                 "CKPT_SLOTS=%lld snapshot slot%s the size of its device state there (CKPT_HOST_MEM names that "
                 "size, to check it before the job starts)", dir, size / 1048576.0, room / 1048576.0, slots,
                 slots == 1 ? "" : "s");
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (64ull << 20))
        diag_add(d, SEV_NOTE, "raise it (ulimit -l unlimited; Docker: --ulimit memlock=-1)",
                 "the memlock limit is %llu KiB: libckpt may not pin its arena, and snapshots then copy through "
                 "pageable memory, more slowly", (unsigned long long)(rl.rlim_cur >> 10));
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        if (fgets(limit, sizeof(limit), f) && strncmp(limit, "max", 3) != 0) {
            limit[strcspn(limit, "\n")] = '\0';
            diag_add(d, SEV_NOTE, NULL,
                     "this cgroup may use at most %.1f GiB of memory (memory.max): the arena's slots, in tmpfs, "
                     "count against it", strtoull(limit, NULL, 10) / 1073741824.0);
        }
        fclose(f);
    }
}

/* What keeps LD_PRELOAD out of the process altogether. */
static bool check_program(struct diagnosis *d)
{
    const struct lib *p = &d->closure.libs[0];
    bool exec = p->elf.interp || p->elf.type == ET_EXEC || (p->elf.type == ET_DYN && p->elf.pie);

    if (!d->kind)
        d->kind = exec ? "executable" : "shared object";
#ifdef HOST_MACHINE
    if (p->elf.machine != HOST_MACHINE || p->elf.elf_class != ELFCLASS64) {
        diag_add(d, SEV_PROBLEM, "build libckpt for that architecture",
                 "%s is a %d-bit %s program: libckpt.so is a 64-bit %s library, and the loader would skip it",
                 label(d, 0), p->elf.elf_class == ELFCLASS64 ? 64 : 32, elf_machine_name(p->elf.machine),
                 elf_machine_name(HOST_MACHINE));
        return false;
    }
#endif
    if (exec && !p->elf.interp) {
        diag_add(d, SEV_PROBLEM, "link it dynamically (without -static)",
                 "%s is statically linked: it has no dynamic loader, so LD_PRELOAD cannot work", label(d, 0));
        return false;
    }
    if (d->closure.secure)
        diag_add(d, SEV_PROBLEM, "run it without the set-user-ID/set-group-ID bits or file capabilities",
                 "%s runs in secure-execution mode (set-user-ID, set-group-ID or file capabilities): the loader "
                 "ignores LD_PRELOAD paths and LD_LIBRARY_PATH", label(d, 0));
    return true;
}

/* Fills the diagnosis from d->closure (and d->py for Python): reach, NCCL,
 * findings, verdict. */
void diagnose(struct diagnosis *d)
{
    const struct closure *c = &d->closure;
    bool torchless = d->python && !d->py.torch_cuda;

    d->nccl_obj = -1;
    check_config(d);
    check_host(d);
    if (check_program(d)) {
        for (int i = 0; i < c->n_miss; i++) {
            const char *n = c->miss[i].name, *by = label(d, c->miss[i].parent);
            if (strncmp(n, "libcuda.so", 10) == 0)
                diag_add(d, SEV_NOTE, NULL, "%s (the driver, needed by %s) is not installed on this machine: "
                         "the GPU nodes provide it", n, by);
            else
                diag_add(d, SEV_PROBLEM, "install it, or add its directory to LD_LIBRARY_PATH, and run "
                         "ckpt-doctor in the environment the job will have",
                         "%s (needed by %s) is not found: the program would not start", n, by);
        }
        if (!torchless) {
            find_reach(d);
            find_nccl(d);
            find_limits(d);
            if (d->n_reach == 0)
                diag_add(d, SEV_PROBLEM, "nothing to protect; if it loads CUDA through a plugin, check the plugin",
                         "no CUDA: nothing in %s%s links or opens the CUDA runtime or driver", label(d, 0),
                         c->n > 1 ? " or the libraries it needs" : "");
        }
    }
    d->verdict = V_PROTECTED;
    for (int i = 0; i < d->n_found; i++) {
        if (d->found[i].sev == SEV_PROBLEM)
            d->verdict = V_UNPROTECTED;
        else if (d->found[i].sev == SEV_LIMIT && d->verdict == V_PROTECTED)
            d->verdict = V_LIMITED;
    }
}

const char *verdict_name(enum verdict v)
{
    return v == V_PROTECTED ? "protected" : v == V_LIMITED ? "protected with limits" : "not protected";
}

void diagnosis_free(struct diagnosis *d)
{
    for (int i = 0; i < d->n_reach; i++) {
        free(d->reach[i].how);
        free(d->reach[i].detail);
    }
    for (int i = 0; i < d->n_found; i++) {
        free(d->found[i].text);
        free(d->found[i].fix);
    }
    free(d->reach);
    free(d->found);
    free(d->nccl_version);
    closure_free(&d->closure);
    python_free(&d->py);
}
