/*
 * libckpt.so's load-time entry: read and check the configuration, nothing
 * else (CUDA is not touched until the program's own first cuInit).  A bad
 * CKPT_* value stops the process here, before any training starts, with one
 * message naming the variable; unknown CKPT_* names are only warned about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

static void warn_unknown(const char *name, const char *suggestion)
{
    if (suggestion)
        ckpt_log(CKPT_WARN, "%s is not a libckpt variable; did you mean %s?", name, suggestion);
    else
        ckpt_log(CKPT_WARN, "%s is not a libckpt variable (ckpt-resume --help-env lists them)", name);
}

__attribute__((constructor)) static void ckpt_load(void)
{
    char err[256], prefix[48];
    const char *rank = getenv("RANK");

    snprintf(prefix, sizeof(prefix), "libckpt[rank %s]", rank ? rank : "0");
    if (ckpt_config_load(err, sizeof(err)) < 0) {
        ckpt_log_init(prefix, CKPT_ERROR);
        ckpt_log(CKPT_ERROR, "%s", err);
        _exit(2);
    }
    ckpt_log_init(prefix, (int)ckpt_cfg_int(CFG_LOG));
    ckpt_config_unknown(warn_unknown);
}
