/*
 * Wrappers of the driver entry points libckpt does not follow (hooks.def's
 * UNFOLLOWED rows, docs/entry-points.md): calls that allocate, free, copy,
 * queue, wait or capture in ways the replay log keeps no record of, so a
 * replay could not bring the program back to the state they left.  Each
 * one forwards the call unchanged and, when the call is the program's,
 * marks replay unfaithful from the current iteration on, naming the entry
 * point: restores past that point are refused with the reason, never made
 * into a silently wrong state.  Older snapshots stay restorable, so a call
 * made while a snapshot's copies are pending first waits for them (it may
 * write what they have yet to read: pacer.c).  A wrapper
 * must never change what the call does or returns, and this file holds no
 * per-entry-point code: what one needs beyond the taint is a hook of its
 * own elsewhere.
 */
#include "interpose.h"

#define EXPORT __attribute__((visibility("default")))

/* The program's call, made from caller: libckpt active, and not NCCL's,
 * libckpt's own, a library thread's, or one the driver makes itself. */
static bool programs(const void *caller)
{
    return ckpt_observed() && !ckpt_caller_is_library(caller);
}

/* ckpt_history_taint says it once per process and logs only the first
 * reason; a driver that lacks the entry point fails the call, as a
 * missing symbol would. */
#define UNFOLLOWED(ret, name, params, args)                                    \
    EXPORT ret name params                                                     \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_FOUND);                                 \
        if (programs(__builtin_return_address(0))) {                           \
            ckpt_history_taint(#name ": libckpt does not follow this call, "   \
                               "so replay cannot reproduce what it does");     \
            ckpt_pace_touch_all(NULL, true);                                   \
        }                                                                      \
        ckpt_v_promote(#name); /* a standby's handles are made real first */   \
        return real_##name(CKPT_MAP(CKPT_V_IN, CKPT_ARGS args));               \
    }
#include "hooks.def"
