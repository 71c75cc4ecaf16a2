/*
 * Monotonic time for the test double: timestamps of events and the clocks
 * of bandwidth-limited links.  Never use the wall clock here: a time step
 * would make event timings and throttled copies wrong.
 */
#include <errno.h>
#include <time.h>

#include "fakegpu.h"

uint64_t fg_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void fg_sleep_until_ns(uint64_t t_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(t_ns / 1000000000u),
        .tv_nsec = (long)(t_ns % 1000000000u),
    };

    /* An absolute deadline survives signals: just sleep again. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}
