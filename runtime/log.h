/*
 * The one logging macro of libckpt and its tools.  The level is checked
 * before the arguments are evaluated, errno is preserved, and each message
 * is one write(2) of one line, so lines of many ranks never interleave.
 * Every line starts with the prefix set by ckpt_log_init ("libckpt[rank N]"
 * in the library, "ckpt-resume" in the tool) so users can grep for it.
 */
#ifndef CKPT_LOG_H
#define CKPT_LOG_H

#include <errno.h>

enum ckpt_log_level { CKPT_ERROR, CKPT_WARN, CKPT_INFO, CKPT_DEBUG };

extern int ckpt_log_level;

/* Sets the prefix (copied) and the level (from CKPT_LOG, parsed by the
 * caller through config.h). */
void ckpt_log_init(const char *prefix, int level);
/* Where the lines go from now on (stderr's descriptor until then). */
void ckpt_log_to(int fd);
/* Where the lines go (for a signal handler, which may only write). */
int ckpt_log_fd(void);
void ckpt_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ckpt_log(level, ...)                                                   \
    do {                                                                       \
        int level_ = (level);                                                  \
        if (level_ <= ckpt_log_level) {                                        \
            int saved_errno_ = errno;                                          \
            ckpt_log_write(level_, __VA_ARGS__);                               \
            errno = saved_errno_;                                              \
        }                                                                      \
    } while (0)

/* For hot paths: says it the first time only. */
#define ckpt_log_once(level, ...)                                              \
    do {                                                                       \
        static int said_;                                                      \
        if ((level) <= ckpt_log_level &&                                       \
            !__atomic_exchange_n(&said_, 1, __ATOMIC_RELAXED))                 \
            ckpt_log((level), __VA_ARGS__);                                    \
    } while (0)

#endif
