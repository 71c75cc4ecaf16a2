/*
 * `ckpt-doctor python3 script.py`: the interpreter is asked for its
 * sys.executable and sys.path (the one program ckpt-doctor runs, with
 * "-c" and a fixed two-line snippet: never the user's script, which is
 * not even read), then torch is looked for as `import torch` would find
 * it, first match on sys.path, and torch/lib/libtorch_cuda.so is what the
 * loader will map when torch initialises CUDA.  Other frameworks are not
 * looked for.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "doctor.h"

static const char snippet[] = "import sys\nprint(sys.executable)\nfor p in sys.path: print(p)\n";

/* python, python3, python3.11 (any directory). */
bool python_is_interpreter(const char *argv0)
{
    const char *b = strrchr(argv0, '/');

    b = b ? b + 1 : argv0;
    if (strncmp(b, "python", 6) != 0)
        return false;
    return strspn(b + 6, "0123456789.") == strlen(b + 6);
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Runs @interp with the snippet; its stdout in *out (a new string). */
static int ask(const char *interp, char **out)
{
    char chunk[4096], *buf = xstrdup("");
    size_t len = 0;
    int fds[2], status;
    ssize_t n;
    pid_t pid;

    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(buf);
        return -errno;
    }
    if ((pid = fork()) < 0) {
        int rc = -errno;
        close(fds[0]);
        close(fds[1]);
        free(buf);
        return rc;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(127);
        execlp(interp, interp, "-c", snippet, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    while ((n = read(fds[0], chunk, sizeof(chunk))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        buf = xrealloc(buf, len + n + 1);
        memcpy(buf + len, chunk, n);
        buf[len += n] = '\0';
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        free(buf);
        return -ENOEXEC;
    }
    *out = buf;
    return 0;
}

/* "__version__ = '2.3.0+cu121'" from torch/version.py. */
static char *torch_version(const char *torch_dir)
{
    char *path = xasprintf("%s/version.py", torch_dir), line[256], *v = NULL;
    FILE *f = fopen(path, "re");

    free(path);
    while (f && !v && fgets(line, sizeof(line), f)) {
        char *q = strpbrk(line, "'\""), *e;
        if (strncmp(line, "__version__", 11) == 0 && q && (e = strchr(q + 1, *q))) {
            *e = '\0';
            v = xstrdup(q + 1);
        }
    }
    if (f)
        fclose(f);
    return v;
}

/*
 * Fills @py for @interp (a name looked up on PATH, or a path); @script, or
 * NULL, stands in for sys.path[0] as it will when the job runs.  -ENOEXEC
 * when the interpreter would not answer.
 */
int python_inspect(const char *interp, const char *script, struct python *py)
{
    char *out, *line, *save = NULL;
    int rc;

    memset(py, 0, sizeof(*py));
    rc = ask(interp, &out);
    if (rc < 0)
        return rc;
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *dir;
        if (!py->executable) {
            py->executable = xstrdup(line);
            continue;
        }
        if (!*line && script) {
            const char *slash = strrchr(script, '/');
            dir = slash ? xasprintf("%.*s", (int)(slash - script), script) : xstrdup(".");
        } else {
            dir = xstrdup(*line ? line : ".");
        }
        if (!is_dir(dir)) {
            free(dir);
            continue;
        }
        py->site = xgrow(py->site, py->n_site, sizeof(*py->site));
        py->site[py->n_site++] = dir;
        if (!py->torch_dir) {
            char *init = xasprintf("%s/torch/__init__.py", dir);
            if (is_file(init))
                py->torch_dir = xasprintf("%s/torch", dir);
            free(init);
        }
    }
    free(out);
    if (!py->executable || !*py->executable)
        return -ENOEXEC;
    if (py->torch_dir) {
        py->torch_cuda = xasprintf("%s/lib/libtorch_cuda.so", py->torch_dir);
        if (!is_file(py->torch_cuda)) {
            free(py->torch_cuda);
            py->torch_cuda = NULL;
        }
        py->torch_version = torch_version(py->torch_dir);
    }
    return 0;
}

/* torch loads the CUDA wheels (nvidia/<pkg>/lib) by path when the loader
 * would not find them; they are the loader's last resort here. */
void python_wheel_dirs(const struct python *py, struct closure *c)
{
    for (int i = 0; i < py->n_site; i++) {
        char *pattern = xasprintf("%s/nvidia/*/lib", py->site[i]);
        glob_t g;
        if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++) {
                c->extra_dirs = xgrow(c->extra_dirs, c->n_extra, sizeof(*c->extra_dirs));
                c->extra_dirs[c->n_extra++] = xstrdup(g.gl_pathv[k]);
            }
            globfree(&g);
        }
        free(pattern);
    }
    c->extra_via = "site-packages nvidia/*/lib, as torch loads it";
}

void python_free(struct python *py)
{
    for (int i = 0; i < py->n_site; i++)
        free(py->site[i]);
    free(py->site);
    free(py->executable);
    free(py->torch_dir);
    free(py->torch_cuda);
    free(py->torch_version);
    memset(py, 0, sizeof(*py));
}
