/*
 * ckpt-doctor's entry: the command line, which file is the program (PATH
 * as execvp searches it; a Python interpreter or a script for one is a
 * torch check), secure-execution mode, then diagnosis and report.  The
 * exit status is the verdict: 0 protected, 1 protected with limits, 2 not
 * protected; 3 when nothing could be checked (usage, unreadable program,
 * an interpreter that would not answer).  It never executes the program.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "doctor.h"
#include "log.h"



static const char usage_text[] =
    "usage: ckpt-doctor [--json] [-v] PROGRAM [ARGS...]\n"
    "       ckpt-doctor replay-check [--iters N] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Says, without running it, whether libckpt (LD_PRELOAD=libckpt.so) will see\n"
    "PROGRAM's CUDA calls: it follows the libraries the loader would map, finds\n"
    "how the program reaches the CUDA runtime or driver and NCCL, and what would\n"
    "keep LD_PRELOAD out.  PROGRAM is an executable, a shared object, or a Python\n"
    "interpreter (python3 train.py: torch's libraries are checked).\n"
    "\n"
    "options:\n"
    "  --json         one JSON object on stdout instead of the report\n"
    "  -v, --verbose  list every library, where it was found and who needs it\n"
    "  -h, --help     this text\n"
    "\n"
    "exit status: 0 protected, 1 protected with limits, 2 not protected,\n"
    "3 could not check.\n"
    "\n"
    "replay-check runs PROGRAM (give it a short configuration) under ckpt-resume\n"
    "with a snapshot at every iteration, kills it at iteration N (default 5),\n"
    "lets ckpt-resume restore it by replay and checks the restored run against\n"
    "the failed one: it says yes, or no with the reason (a program that seeds\n"
    "from the clock, reads files that changed, ...).  Exit status: 0 yes, 1 no,\n"
    "3 could not tell.\n";

static __attribute__((noreturn)) void out_of_memory(void)
{
    ckpt_log(CKPT_ERROR, "out of memory");
    exit(CANNOT_CHECK);
}

char *xstrdup(const char *s)
{
    char *p = s ? strdup(s) : NULL;
    if (s && !p)
        out_of_memory();
    return p;
}

void *xrealloc(void *p, size_t size)
{
    p = realloc(p, size);
    if (!p)
        out_of_memory();
    return p;
}

/* Capacity is the next power of two, so only a power of two grows it. */
void *xgrow(void *arr, int n, size_t size)
{
    if (n == 0 || (n & (n - 1)) == 0)
        arr = xrealloc(arr, (n ? 2 * (size_t)n : 1) * size);
    return arr;
}

char *xvasprintf(const char *fmt, va_list ap)
{
    char *s;
    if (vasprintf(&s, fmt, ap) < 0)
        out_of_memory();
    return s;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = xvasprintf(fmt, ap);
    va_end(ap);
    return s;
}

/* @name as execvp would find it: a new string, or NULL. */
static char *find_program(const char *name)
{
    const char *path = getenv("PATH"), *p;

    if (strchr(name, '/'))
        return xstrdup(name);
    for (p = path ? path : "/usr/local/bin:/usr/bin:/bin"; p; p = strchr(p, ':') ? strchr(p, ':') + 1 : NULL) {
        size_t len = strcspn(p, ":");
        char *cand = xasprintf("%.*s%s%s", (int)len, p, len ? "/" : "", name);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
            return cand;
        free(cand);
    }
    return NULL;
}

/* The interpreter of a "#!" script, as a new string; NULL when @path is
 * not a script.  "#!/usr/bin/env -S python3 -u" gives "python3". */
static char *shebang(const char *path)
{
    char line[256], *word, *save = NULL;
    const char *base;
    FILE *f = fopen(path, "re");
    bool ok = f && fgets(line, sizeof(line), f) && strncmp(line, "#!", 2) == 0;

    if (f)
        fclose(f);
    if (!ok || !(word = strtok_r(line + 2, " \t\r\n", &save)))
        return NULL;
    base = strrchr(word, '/');
    if (strcmp(base ? base + 1 : word, "env") == 0)
        do
            word = strtok_r(NULL, " \t\r\n", &save);
        while (word && word[0] == '-');
    return xstrdup(word ? word : line + 2);
}

/* set-user-ID, set-group-ID (with group execute) or file capabilities
 * put the process in secure-execution mode (AT_SECURE). */
static bool secure_exec(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0)
        return false;
    if ((st.st_mode & S_ISUID) || ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP)))
        return true;
    return getxattr(path, "security.capability", NULL, 0) >= 0;
}

/* `python3 [opts] script.py`: the script, or NULL for -m/-c/none. */
static const char *python_script(char **args, int n)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(args[i], "-m") == 0 || strcmp(args[i], "-c") == 0)
            return NULL;
        if (args[i][0] != '-')
            return args[i];
    }
    return NULL;
}

static int check_python(struct diagnosis *d, const char *interp, const char *script)
{
    int rc = python_inspect(interp, script, &d->py);

    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "%s would not say where its packages are (%s)", interp, strerror(-rc));
        return rc;
    }
    d->python = true;
    d->kind = "python";
    d->closure.secure = secure_exec(d->py.executable);
    rc = closure_add(&d->closure, d->py.executable, d->py.executable, -1, "program");
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "%s: %s", d->py.executable, strerror(-rc));
        return rc;
    }
    if (d->py.torch_cuda) {
        python_wheel_dirs(&d->py, &d->closure);
        rc = closure_add(&d->closure, d->py.torch_cuda, "libtorch_cuda.so", 0, "import torch");
        if (rc < 0)
            diag_add(d, SEV_PROBLEM, "reinstall torch", "%s cannot be read: %s", d->py.torch_cuda, strerror(-rc));
    } else if (d->py.torch_dir) {
        diag_add(d, SEV_PROBLEM, "install a CUDA build of torch",
                 "torch at %s has no lib/libtorch_cuda.so (a build without CUDA): nothing to check", d->py.torch_dir);
    } else {
        diag_add(d, SEV_PROBLEM, "install torch for this interpreter, or name the interpreter the job uses",
                 "torch not installed for this interpreter (%s): nothing to check", d->py.executable);
    }
    return 0;
}

static int check(struct diagnosis *d, char **argv, int argc)
{
    char *path = find_program(argv[0]), *interp = NULL;
    int rc;

    if (!path) {
        ckpt_log(CKPT_ERROR, "%s: not found on PATH", argv[0]);
        return -ENOENT;
    }
    if (python_is_interpreter(argv[0])) {
        rc = check_python(d, path, python_script(argv + 1, argc - 1));
    } else if ((interp = shebang(path)) && python_is_interpreter(interp)) {
        rc = check_python(d, interp, path);
    } else if (interp) {
        ckpt_log(CKPT_ERROR, "%s is a script for %s: run ckpt-doctor on the program it starts", path, interp);
        rc = -ENOEXEC;
    } else {
        d->closure.secure = secure_exec(path);
        rc = closure_add(&d->closure, path, path, -1, "program");
        if (rc < 0)
            ckpt_log(CKPT_ERROR, "%s: %s", path, rc == -ENOEXEC ? "not an ELF file" : strerror(-rc));
    }
    free(interp);
    free(path);
    return rc;
}

int main(int argc, char **argv)
{
    struct diagnosis d = { .nccl_obj = -1 };
    bool json = false, verbose = false;
    int i, rc;

    ckpt_log_init("ckpt-doctor", CKPT_WARN);
    if (argc > 1 && strcmp(argv[1], "replay-check") == 0)
        return replay_check(argc - 2, argv + 2);
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else {
            ckpt_log(CKPT_ERROR, "unknown option %s", argv[i]);
            fputs("usage: ckpt-doctor [--json] [-v] PROGRAM [ARGS...]  (see --help)\n", stderr);
            return CANNOT_CHECK;
        }
    }
    if (i >= argc) {
        fputs("usage: ckpt-doctor [--json] [-v] PROGRAM [ARGS...]  (see --help)\n", stderr);
        return CANNOT_CHECK;
    }
    d.program = argv[i];
    rc = check(&d, argv + i, argc - i);
    if (rc == 0) {
        diagnose(&d);
        if (json)
            report_json(&d);
        else
            report_text(&d, verbose);
        rc = (int)d.verdict;
    } else {
        rc = CANNOT_CHECK;
    }
    diagnosis_free(&d);
    return rc;
}
