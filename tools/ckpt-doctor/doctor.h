/*
 * ckpt-doctor's internal interface: what one ELF file says about itself
 * (elf.c), the set of objects the dynamic loader would map for a program
 * (loader.c), torch's libraries for a Python interpreter (python.c), the
 * findings and the verdict drawn from them (verdict.c) and their report
 * (report.c).  Nothing here runs the program being checked: every answer
 * comes from reading its files.  Functions return 0 or -errno.
 */
#ifndef CKPT_DOCTOR_H
#define CKPT_DOCTOR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* What an object imports, defines or carries, as far as libckpt cares. */
enum obj_feature {
    F_IMP_DLOPEN = 1u << 0,     /* imports dlopen */
    F_IMP_DLMOPEN = 1u << 1,    /* imports dlmopen */
    F_DEF_DLSYM = 1u << 2,      /* defines dlsym (exported or not) */
    F_DEF_PROCADDR = 1u << 3,   /* defines cuGetProcAddress* (exported or not) */
    F_RT_CODE = 1u << 4,        /* carries the CUDA runtime (elf.c says how) */
    F_NCCL_BANNER = 1u << 5,    /* carries NCCL's "NCCL version X.Y.Z" */
    F_FATBIN = 1u << 6,         /* has an .nv_fatbin section (device code) */
};

/* Names of libraries an object may dlopen, found among its constants. */
enum dl_family { DL_CUDA, DL_CUDART, DL_NCCL, DL_COUNT };

struct elf_obj {
    int elf_class;              /* ELFCLASS32/64 */
    int machine;                /* e_machine */
    int type;                   /* e_type */
    char *interp;               /* PT_INTERP, or NULL */
    bool pie;                   /* DF_1_PIE */
    char **needed;              /* DT_NEEDED, in order */
    int n_needed;
    char *soname, *runpath, *rpath; /* NULL when absent */
    uint64_t flags_1;           /* DT_FLAGS_1 */
    unsigned features;          /* enum obj_feature */
    char *dl_name[DL_COUNT];    /* e.g. "libcuda.so.1", or NULL */
    char nccl_version[32];      /* from "NCCL version X.Y.Z", or "" */
};

/* elf.c.  Reads @path; -ENOEXEC when it is not an ELF file. */
int elf_obj_read(const char *path, struct elf_obj *o);
void elf_obj_free(struct elf_obj *o);
/* Reads only the identification of @path (class and machine); the loader
 * skips candidates of another architecture, as ld.so does. */
int elf_peek(const char *path, int *elf_class, int *machine);
const char *elf_machine_name(int machine);

/* loader.c: one object of the closure, in the order ld.so maps them. */
struct lib {
    char *name;                 /* as requested (DT_NEEDED, dlopen, argv) */
    char *path;                 /* the file it was found as */
    const char *via;            /* how: "RUNPATH", "ld.so.cache", ... */
    int parent;                 /* index of the object that needed it, -1 */
    dev_t dev;                  /* the file's identity: one file is */
    ino_t ino;                  /* mapped once, whatever its names */
    struct elf_obj elf;
};

struct missing {
    char *name;
    int parent;
};

struct closure {
    struct lib *libs;
    int n;
    struct missing *miss;
    int n_miss;
    bool secure;                /* AT_SECURE: LD_LIBRARY_PATH is ignored */
    char **extra_dirs;          /* searched last (python.c: wheel libraries) */
    int n_extra;
    const char *extra_via;
};

/* Adds @path as a root of the closure, needed by @parent (-1 for the
 * program), then everything it needs, breadth first.  The closure keeps
 * copies of its strings. */
int closure_add(struct closure *c, const char *path, const char *name, int parent, const char *via);
/* Where @name would be found if object @from needed or dlopened it: a new
 * string in *path, and how in *via; 1 when it is mapped already, 0 when
 * found, -ENOENT when nowhere.  via_private() tells the program's own
 * places (RPATH, RUNPATH, LD_LIBRARY_PATH) from the system's. */
int closure_find(const struct closure *c, int from, const char *name, char **path, const char **via);
bool via_private(const char *via);
void closure_free(struct closure *c);

/* python.c: what a Python interpreter would load for torch. */
struct python {
    char *executable;           /* sys.executable */
    char **site;                /* sys.path entries that are directories */
    int n_site;
    char *torch_dir;            /* .../torch, or NULL */
    char *torch_cuda;           /* .../torch/lib/libtorch_cuda.so, or NULL */
    char *torch_version;        /* from torch/version.py, or NULL */
};
bool python_is_interpreter(const char *argv0);
int python_inspect(const char *interp, const char *script, struct python *py);
/* Adds site-packages' nvidia/<pkg>/lib directories to the closure's last
 * resort, where torch's own loader looks for them. */
void python_wheel_dirs(const struct python *py, struct closure *c);
void python_free(struct python *py);

/* verdict.c */
enum severity { SEV_PROBLEM, SEV_LIMIT, SEV_NOTE };
/* The values are ckpt-doctor's exit status. */
enum verdict { V_PROTECTED = 0, V_LIMITED = 1, V_UNPROTECTED = 2 };

struct finding {
    enum severity sev;
    char *text;                 /* what is wrong, or what is worth knowing */
    char *fix;                  /* what to change, or NULL */
};

struct reach {
    char *how;                  /* "shared runtime", "static runtime", ... */
    int obj;                    /* closure index */
    char *detail;
};

struct diagnosis {
    const char *program;        /* as the user named it */
    const char *kind;           /* set by diagnose(): "executable", ... */
    struct closure closure;
    struct python py;
    bool python;
    struct reach *reach;
    int n_reach;
    int nccl_obj;               /* libnccl in the closure, or -1 */
    char *nccl_version;         /* or NULL */
    struct finding *found;
    int n_found;
    enum verdict verdict;
};

/* Adds one finding; the strings are formatted copies. */
void diag_add(struct diagnosis *d, enum severity sev, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Draws every finding and the verdict from the closure (and the facts
 * main.c and python.c have added already). */
void diagnose(struct diagnosis *d);
void diagnosis_free(struct diagnosis *d);
const char *verdict_name(enum verdict v);

/* report.c */
void report_text(const struct diagnosis *d, bool verbose);
void report_json(const struct diagnosis *d);

/* main.c: allocation that cannot fail.  Running out of memory ends the
 * program with exit status 3 ("could not check"): a partial answer about
 * protection would be worse than none.  xstrdup(NULL) is NULL; xgrow
 * makes room for element @n of an array that holds @n now. */
char *xstrdup(const char *s);
void *xrealloc(void *p, size_t size);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
void *xgrow(void *arr, int n, size_t size);

/* ckpt-doctor's exit status when it could not check. */
#define CANNOT_CHECK 3

/* ckpt-doctor replay-check ARGS (replay_check.c): runs the program, kills
 * it, restores it; returns 0 yes, 1 no, CANNOT_CHECK. */
int replay_check(int argc, char **argv);

#endif
