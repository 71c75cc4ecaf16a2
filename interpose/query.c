/*
 * Queries whose answer is values the host reads: a context's or a
 * stream's properties (flags, priority, limits, id), a function's
 * attributes and occupancy (hooks.def's QUERY rows).  The call's result
 * and every value it writes go in the log, under the entry point and the
 * argument's position, and replay serves them: a restarted rank sees what
 * the recorded run saw (a context's or a stream's id included), and a
 * standby answers them with no context at all.  A standby whose log has
 * no answer where its program asks makes its objects real first
 * (virtual.c), naming the call, and asks the driver.
 */
#include <string.h>

#include "interpose.h"

#define EXPORT __attribute__((visibility("default")))

/* What a logged value is: the entry point, and the argument's position
 * (0 for the call's result). */
static uint64_t what(int hook, unsigned pos)
{
    return CKPT_VALUE_QUERY + (uint64_t)hook * 16 + pos;
}

/* The call's result: recorded, or served (true). */
static bool result(int hook, CUresult *r)
{
    uint64_t v = (uint64_t)*r;
    bool served = ckpt_history_value(what(hook, 0), &v);
    *r = (CUresult)v;
    return served;
}

/* A value the call wrote at p (size bytes, at most 8): recorded, or
 * replaced by the recorded one. */
static void value(int hook, unsigned pos, void *p, size_t size)
{
    uint64_t v = 0;
    if (!p)
        return;
    memcpy(&v, p, size);
    ckpt_history_value(what(hook, pos), &v);
    memcpy(p, &v, size);
}

static void q_int(int hook, unsigned pos, int *p)
{
    value(hook, pos, p, sizeof(*p));
}

static void q_uint(int hook, unsigned pos, unsigned int *p)
{
    value(hook, pos, p, sizeof(*p));
}

static void q_size(int hook, unsigned pos, size_t *p)
{
    value(hook, pos, p, sizeof(*p));
}

static void q_ull(int hook, unsigned pos, unsigned long long *p)
{
    value(hook, pos, p, sizeof(*p));
}

static void q_none(int hook, unsigned pos, ...)
{
    (void)hook, (void)pos;
}

/* Each argument the call writes a value through; the others are inputs.
 * (An enum such as CUfunc_cache is an unsigned int here.) */
#define Q_OUT(x)                                                               \
    _Generic((x), int *: q_int, unsigned int *: q_uint, size_t *: q_size, unsigned long long *: q_ull, \
             default: q_none)(hook_, ++pos_, x)

#define QUERY(ret, name, params, args)                                         \
    EXPORT ret name params                                                     \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        if (!ckpt_observed())                                                  \
            return real_##name(CKPT_MAP(CKPT_V_IN, CKPT_ARGS args));           \
        int hook_ = CKPT_HOOK_##name;                                          \
        unsigned pos_ = 0;                                                     \
        bool virtual_ = ckpt_v_on() && ckpt_is_replaying();                    \
        ret r = virtual_ ? CUDA_SUCCESS : real_##name(CKPT_MAP(CKPT_V_IN, CKPT_ARGS args)); \
        if (!result(hook_, &r) && virtual_) { /* the log has no answer */     \
            ckpt_v_promote(#name);                                             \
            return real_##name(CKPT_MAP(CKPT_V_IN, CKPT_ARGS args));           \
        }                                                                      \
        if (r == CUDA_SUCCESS)                                                 \
            CKPT_MAP_STMT(Q_OUT, CKPT_ARGS args);                              \
        return r;                                                              \
    }
#include "hooks.def"
