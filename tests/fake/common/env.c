/*
 * Environment knobs of the test double (FAKEGPU_*).  A knob is read where
 * it is used, usually once at initialisation; a value that does not parse
 * is reported and replaced by the default, never half-used.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fakegpu.h"

static void warn_bad(const char *name, const char *val)
{
    fprintf(stderr, "fakegpu: ignoring %s=\"%s\": not a non-negative number\n", name, val);
}

double fg_env_double(const char *name, double def)
{
    const char *val = getenv(name);
    char *end;
    double d;

    if (!val || !*val)
        return def;
    errno = 0;
    d = strtod(val, &end);
    if (errno || *end || !isfinite(d) || d < 0) {
        warn_bad(name, val);
        return def;
    }
    return d;
}

uint64_t fg_env_u64(const char *name, uint64_t def)
{
    const char *val = getenv(name);
    char *end;
    unsigned long long u;

    if (!val || !*val)
        return def;
    errno = 0;
    u = strtoull(val, &end, 10);
    if (errno || *end || *val == '-') {
        warn_bad(name, val);
        return def;
    }
    return u;
}

uint64_t fg_env_knob(const char *name, uint64_t *cache)
{
    uint64_t v = __atomic_load_n(cache, __ATOMIC_RELAXED);

    if (v == UINT64_MAX) {
        v = fg_env_u64(name, 0);
        __atomic_store_n(cache, v, __ATOMIC_RELAXED);
    }
    return v;
}

void fg_sleep_us(uint64_t us)
{
    if (us)
        nanosleep(&(struct timespec){.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000}, NULL);
}
