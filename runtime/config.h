/*
 * Configuration: the CKPT_* environment variables of runtime/config.def,
 * parsed and checked once.  A bad value is a configuration error that must
 * stop the job before training starts; an unknown CKPT_* name is only a
 * warning (with a "did you mean").  Nothing here allocates after load.
 */
#ifndef CKPT_CONFIG_H
#define CKPT_CONFIG_H

#include <stdio.h>

enum ckpt_cfg_id {
#define CKPT_VAR(name, kind, def, accepted, help) CFG_##name,
#include "config.def"
#undef CKPT_VAR
    CFG_COUNT
};

/* Reads every CKPT_* variable from the environment.  Returns 0, or -EINVAL
 * with one line in err naming the variable, the value and what is accepted.
 * Safe to call again (tests do); not thread-safe. */
int ckpt_config_load(char *err, size_t errlen);

/* The value of a BOOL, UINT or ENUM variable (for ENUM, the index of the
 * choice); of a SECONDS variable; of a STR variable (NULL when unset and
 * without a default). */
long long ckpt_cfg_int(enum ckpt_cfg_id id);
double ckpt_cfg_seconds(enum ckpt_cfg_id id);
/* CKPT_LAUNCHER's choices, in config.def's order. */
enum ckpt_launcher { CKPT_LAUNCHER_NONE, CKPT_LAUNCHER_TORCHRUN };
const char *ckpt_cfg_str(enum ckpt_cfg_id id);

/* Calls warn(name, suggestion) for each CKPT_* variable in the environment
 * that is not declared; suggestion is the closest declared name, or NULL
 * when none is close. */
void ckpt_config_unknown(void (*warn)(const char *name, const char *suggestion));

/* CKPT_FAULT, parsed: either kill rank at iteration in phase (enum
 * ckpt_fault_phase), or fail the disk I/O of the persistence engine with
 * err (or, with delay_ms, make it that much late): of op (0 both, 1
 * writes, 2 reads), the passes (a generation written, or read back) after
 * the first `after` of them, `times` of them (0: all), every completion of
 * those.  Returns 0 or -EINVAL; out may be NULL. */
enum ckpt_fault_kind { CKPT_FAULT_KILL, CKPT_FAULT_IO };
enum ckpt_fault_phase {
    CKPT_FAULT_BOUNDARY, /* at the iteration boundary */
    CKPT_FAULT_SNAPSHOT, /* while the snapshot's device-to-host copies run */
    CKPT_FAULT_RESTORE,  /* halfway through copying a snapshot back */
    CKPT_FAULT_COMMIT,   /* copies done, checksums and header not yet written */
    CKPT_FAULT_REPLAY,   /* while a restarted run replays its log */
    CKPT_FAULT_PERSIST,  /* while the node agent persists one of its slots */
    CKPT_FAULT_PHASES
};
#define CKPT_FAULT_SYNTAX                                                                                              \
    "kill:rank=R:iter=I[:phase=boundary|snapshot|restore|commit|replay|persist] or "                                   \
    "io:errno=EIO|ENOSPC|EROFS|EDQUOT|ENODEV or io:delay=MS (1..60000), then [:op=write|read][:after=N][:times=K]"
struct ckpt_fault {
    enum ckpt_fault_kind kind;
    unsigned long long rank, iteration;
    int phase;
    int err, op;
    unsigned delay_ms;
    unsigned long long after, times;
};
int ckpt_fault_parse(const char *text, struct ckpt_fault *out);

/* Writes the table (name, default, accepted values, help) to f. */
void ckpt_config_describe(FILE *f);

/* The same table as a Markdown table (docs/configuration.md is this
 * output, so the documentation cannot drift from config.def). */
void ckpt_config_describe_markdown(FILE *f);

#endif
