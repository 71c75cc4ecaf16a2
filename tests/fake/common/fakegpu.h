/*
 * Helpers shared by the three libraries of the CPU test double (fake
 * libcuda, libcudart, libnccl): monotonic time, environment knobs, a
 * bandwidth-limited link that models a PCIe or network direction, and a
 * small set of live handles.  Each library links its own private copy; the
 * version scripts keep every fg_* name out of the dynamic symbol table, so
 * nothing here may ever rely on being shared between the libraries.
 */
#ifndef FAKEGPU_COMMON_H
#define FAKEGPU_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- time (clock.c) ------------------------------------------------ */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fg_now_ns(void);
/* Sleeps until CLOCK_MONOTONIC reaches t_ns; returns at once if it has. */
void fg_sleep_until_ns(uint64_t t_ns);

/* ---- environment knobs (env.c) ------------------------------------- */

/*
 * The value of the environment variable name as a non-negative number, or
 * def when it is unset or empty.  A value that does not parse is reported
 * once on stderr (naming the variable) and def is used: a test double that
 * silently ignored a mistyped knob would make tests lie.
 */
double fg_env_double(const char *name, double def);
uint64_t fg_env_u64(const char *name, uint64_t def);
/* fg_env_u64(name, 0), read once into *cache (UINT64_MAX: not yet), from any thread. */
uint64_t fg_env_knob(const char *name, uint64_t *cache);
/* Sleeps us microseconds (0: not at all). */
void fg_sleep_us(uint64_t us);

/* ---- a bandwidth-limited link (link.c) ----------------------------- */

/*
 * One direction of a link (e.g. PCIe host-to-device).  Transfers are
 * serialised on a "busy until" clock shared by every caller: a transfer
 * starts at max(now, busy_until) and lasts bytes / bandwidth.  A link with
 * bandwidth 0 is unlimited.
 */
struct fg_link {
    pthread_mutex_t lock;
    double bytes_per_ns; /* 0: unlimited */
    uint64_t busy_until_ns;
};

/* gbps is decimal gigabytes per second (1 GB/s = 1e9 bytes/s); 0 = unlimited. */
void fg_link_init(struct fg_link *link, double gbps);
/*
 * Books bytes on the link and returns the CLOCK_MONOTONIC time at which the
 * transfer ends (now, for an unlimited link).  The caller moves the data
 * and then sleeps until that time with fg_sleep_until_ns.
 */
uint64_t fg_link_book(struct fg_link *link, size_t bytes);

/* ---- fault injection (crash.c) ------------------------------------- */

/* Kills this process with SIGKILL at the FAKEGPU_CRASH_AT-th call when its
 * RANK is FAKEGPU_CRASH_RANK (once per FAKEGPU_CRASH_ONCE file). */
void fg_maybe_crash(void);

/* ---- a set of live handles (ptrset.c) ------------------------------ */

/*
 * An open-addressing hash set of pointers, used to tell live handles from
 * stale or made-up ones without dereferencing them.  Not locked: the owner
 * serialises access.  Zero-initialised is empty.
 */
struct fg_ptrset {
    void **slots;
    size_t cap;  /* a power of two, or 0 */
    size_t used; /* live entries plus tombstones */
    size_t live;
};

/* Returns 0, or -ENOMEM (the set is unchanged). */
int fg_ptrset_add(struct fg_ptrset *set, void *p);
/* Returns 1 if p was present (and is now removed), else 0. */
int fg_ptrset_del(struct fg_ptrset *set, void *p);
int fg_ptrset_has(const struct fg_ptrset *set, const void *p);
/* Calls fn(p, arg) for every member; fn must not change the set. */
void fg_ptrset_each(const struct fg_ptrset *set, void (*fn)(void *p, void *arg), void *arg);

#endif /* FAKEGPU_COMMON_H */
