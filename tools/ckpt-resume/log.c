/*
 * ckpt-resume's one way to speak: a line on stderr starting with
 * "ckpt-resume:", so users can grep it among the ranks' output.  Each line
 * goes out in one write() so it never interleaves with a rank's, and
 * logging never changes errno.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "resume.h"

void resume_log(const char *fmt, ...)
{
    int saved = errno;
    char line[1024];
    const char prefix[] = "ckpt-resume: ";
    va_list ap;

    memcpy(line, prefix, sizeof(prefix) - 1);
    size_t n = sizeof(prefix) - 1;
    va_start(ap, fmt);
    int k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (k > 0)
        n += (size_t)k < sizeof(line) - n - 1 ? (size_t)k : sizeof(line) - n - 2;
    line[n++] = '\n';
    while (write(STDERR_FILENO, line, n) < 0 && errno == EINTR)
        ;
    errno = saved;
}
