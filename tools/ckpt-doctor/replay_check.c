/*
 * ckpt-doctor replay-check: will restore by replay work for this program?
 * Unlike the rest of ckpt-doctor it runs the program: once under
 * ckpt-resume, with a snapshot at every iteration, killed at the boundary
 * of iteration N (CKPT_FAULT), then restored by ckpt-resume as after a real
 * failure, and the restored run checked against the failed one until the
 * failed one's log runs out.  It says yes when that resume verified, and
 * no with libckpt's reason when a restore was refused or diverged.  The
 * run's arena is a private temporary directory, removed at the end.  The
 * user gives a short configuration of the job (a few iterations more than
 * N); whatever the program writes, it writes as it would in a real run.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "doctor.h"
#include "log.h"

/* ckpt-resume beside this program. */
static int resume_path(char *out, size_t n)
{
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (k <= 0)
        return -errno;
    self[k] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -ENOENT;
    *slash = '\0';
    if (snprintf(out, n, "%s/ckpt-resume", self) >= (int)n || access(out, X_OK) != 0)
        return -ENOENT;
    return 0;
}

/* The text after marker on the first line of log that has it, into out. */
static bool said(const char *log, const char *marker, char *out, size_t n)
{
    const char *p = strstr(log, marker);
    if (!p)
        return false;
    p += strlen(marker);
    size_t len = strcspn(p, "\n");
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
    return true;
}

int replay_check(int argc, char **argv)
{
    unsigned iters = 5;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            char *end;
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v < 2 || v > 1000000) {
                ckpt_log(CKPT_ERROR, "--iters takes a number of iterations from 2 to 1000000, not %s", argv[i]);
                return CANNOT_CHECK;
            }
            iters = (unsigned)v;
        } else if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else {
            ckpt_log(CKPT_ERROR, "unknown option %s", argv[i]);
            return CANNOT_CHECK;
        }
    }
    if (i >= argc) {
        fputs("usage: ckpt-doctor replay-check [--iters N] [--] PROGRAM [ARGS...]\n", stderr);
        return CANNOT_CHECK;
    }
    char resume[PATH_MAX], dir[] = "/tmp/ckpt-replay-check-XXXXXX", fault[64], log_path[64];
    if (resume_path(resume, sizeof(resume)) < 0) {
        ckpt_log(CKPT_ERROR, "cannot find ckpt-resume beside ckpt-doctor");
        return CANNOT_CHECK;
    }
    if (!mkdtemp(dir)) {
        ckpt_log(CKPT_ERROR, "cannot make a directory for the check: %s", strerror(errno));
        return CANNOT_CHECK;
    }
    /* While iteration N's snapshot is copied: its log is whole, the snapshot not. */
    snprintf(fault, sizeof(fault), "kill:rank=0:iter=%u:phase=snapshot", iters);
    snprintf(log_path, sizeof(log_path), "%s/log", dir);
    printf("replay-check: running %s with a snapshot at every iteration, killed at iteration %u, then restored\n",
           argv[i], iters);
    fflush(stdout);

    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log_path, "w", stderr);
        if (!f)
            _exit(127);
        setenv("CKPT_ARENA_DIR", dir, 1);
        setenv("CKPT_JOB", "replay-check", 1);
        setenv("CKPT_EVERY", "1", 1);
        setenv("CKPT_FAULT", fault, 1);
        setenv("CKPT_FALLBACK", "stop", 1);
        setenv("CKPT_MAX_RESTARTS", "1", 1);
        setenv("CKPT_RESTART_BACKOFF", "0", 1);
        unsetenv("CKPT_RESTORE");
        unsetenv("CKPT_PERSIST_DIRS");
        char **args = calloc((size_t)(argc - i) + 5, sizeof(*args));
        if (!args)
            _exit(127);
        int k = 0;
        args[k++] = resume;
        args[k++] = "--nproc";
        args[k++] = "1";
        args[k++] = "--";
        for (int a = i; a < argc; a++)
            args[k++] = argv[a];
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execv(resume, args);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        ckpt_log(CKPT_ERROR, "cannot run ckpt-resume: %s", strerror(errno));
        return CANNOT_CHECK;
    }
    FILE *f = fopen(log_path, "r");
    static char log[1 << 20];
    size_t n = f ? fread(log, 1, sizeof(log) - 1, f) : 0;
    log[n] = '\0';
    if (f)
        fclose(f);
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        ckpt_log(CKPT_WARN, "cannot remove %s", dir);

    char why[1024];
    int verdict;
    if (said(log, "the resume is verified: ", why, sizeof(why))) {
        printf("replay-check: yes: this job can be restored by replay (%s)\n", why);
        verdict = 0;
    } else if (said(log, "diverged from the failed run", why, sizeof(why)) ||
               said(log, " refused: ", why, sizeof(why))) {
        printf("replay-check: no: %s\n", why);
        verdict = 1;
    } else if (!strstr(log, "CKPT_FAULT: killing") && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("replay-check: cannot tell: the program ended before iteration %u (give it more iterations, or "
               "--iters fewer)\n", iters);
        verdict = CANNOT_CHECK;
    } else if (strstr(log, "restored iteration")) {
        printf("replay-check: yes, unverified: the restore went through, but the failed run logged nothing after "
               "it to check the resumed run against\n");
        verdict = 0;
    } else {
        printf("replay-check: cannot tell: the job ended with status %d and no restore; its log:\n%s",
               WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), log);
        verdict = CANNOT_CHECK;
    }
    return verdict;
}
