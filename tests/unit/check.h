/*
 * The unit tests' one assertion: CHECK(cond, printf arguments) says what
 * failed, on a line of its own, and counts it in failures; each test's
 * main returns failures ? 1 : 0.
 */
#ifndef CKPT_TEST_CHECK_H
#define CKPT_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
            failures++;                                                        \
        }                                                                      \
    } while (0)

#endif
