/*
 * The unit tests' one assertion: CHECK(cond, printf arguments) says what
 * failed, on a line of its own, and counts it in failures; each test's
 * main returns failures ? 1 : 0.  And slurp(), a whole file into memory.
 */
#ifndef CKPT_TEST_CHECK_H
#define CKPT_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
            failures++;                                                        \
        }                                                                      \
    } while (0)

/* The file at path, malloc'ed (the caller frees it), its size in *len; NULL or a short *len when unreadable. */
static inline char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    *len = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        rewind(f);
        buf = malloc(n > 0 ? (size_t)n : 1);
        *len = buf && n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    }
    if (f)
        fclose(f);
    return buf;
}

#endif
