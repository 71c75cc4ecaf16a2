/*
 * The CKPT_* table: every kind accepts what it documents and refuses the
 * rest with a message naming the variable, the value and what is accepted;
 * unknown names get a "did you mean".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static const struct {
    const char *var, *value;
    int ok;
    const char *says; /* substring of the error, when !ok */
} cases[] = {
    {"CKPT_DISABLE", "1", 1, NULL},
    {"CKPT_DISABLE", "yes", 1, NULL},
    {"CKPT_DISABLE", "Off", 1, NULL},
    {"CKPT_DISABLE", "2", 0, "CKPT_DISABLE='2' is not valid: expected 0 or 1"},
    {"CKPT_DISABLE", "", 0, "CKPT_DISABLE=''"},
    {"CKPT_LOG", "debug", 1, NULL},
    {"CKPT_LOG", "INFO", 1, NULL},
    {"CKPT_LOG", "loud", 0, "expected one of error|warn|info|debug"},
    {"CKPT_LOG", "", 0, "CKPT_LOG=''"},
    {"CKPT_KILL_GRACE", "0.5", 1, NULL},
    {"CKPT_KILL_GRACE", "3600", 1, NULL},
    {"CKPT_KILL_GRACE", "3601", 0, "a number of seconds in 0..3600"},
    {"CKPT_KILL_GRACE", "-1", 0, "CKPT_KILL_GRACE='-1'"},
    {"CKPT_KILL_GRACE", "5s", 0, "CKPT_KILL_GRACE='5s'"},
    {"CKPT_KILL_GRACE", "nan", 0, "CKPT_KILL_GRACE='nan'"},
    {"CKPT_EVERY", "10", 1, NULL},
    {"CKPT_EVERY", "0", 0, "expected an integer in 1..1000000"},
    {"CKPT_EVERY", "1e3", 0, "CKPT_EVERY='1e3'"},
    {"CKPT_EVERY", "-5", 0, "CKPT_EVERY='-5'"},
    {"CKPT_EVERY", "99999999999999999999", 0, "CKPT_EVERY="},
    {"CKPT_BOUNDARY", "every:4", 1, NULL},
    {"CKPT_BOUNDARY", "every:", 0, "auto or every:N"},
    {"CKPT_BOUNDARY", "every:x", 0, "auto or every:N"},
    {"CKPT_BOUNDARY", "sometimes", 0, "CKPT_BOUNDARY='sometimes'"},
    {"CKPT_BOUNDARY", "nvtx:train_step", 1, NULL},
    {"CKPT_BOUNDARY", "nvtx:a", 1, NULL},
    {"CKPT_BOUNDARY", "nvtx:step 1/fwd (x~y)", 1, NULL},
    {"CKPT_BOUNDARY", "nvtx:123456789012345678901234567890123456789012345678901234567890123", 1, NULL},
    {"CKPT_BOUNDARY", "nvtx:1234567890123456789012345678901234567890123456789012345678901234", 0,
     "nvtx:NAME with NAME 1 to 63 printable"},
    {"CKPT_BOUNDARY", "nvtx:", 0, "CKPT_BOUNDARY='nvtx:' is not valid: expected nvtx:NAME"},
    {"CKPT_BOUNDARY", "nvtx:tab\there", 0, "nvtx:NAME with NAME 1 to 63 printable"},
    {"CKPT_BOUNDARY", "nvtx:caf\xc3\xa9", 0, "nvtx:NAME with NAME 1 to 63 printable"},
    {"CKPT_BOUNDARY", "nvtx", 0, "auto or every:N with N in 1..1000000, or nvtx:NAME"},
    {"CKPT_BOUNDARY", "NVTX:train_step", 0, "CKPT_BOUNDARY='NVTX:train_step'"},
    {"CKPT_CONSISTENCY", "strict", 1, NULL},
    {"CKPT_CONSISTENCY", "eventual", 0, "one of overlap|strict"},
    {"CKPT_ARENA_DIR", "", 0, "a non-empty path"},
    {"CKPT_FAULT", "io:errno=EIO", 1, NULL},
    {"CKPT_FAULT", "io:errno=ENOSPC:op=write:after=2:times=1", 1, NULL},
    {"CKPT_FAULT", "io:errno=EIO:op=read:times=3", 1, NULL},
    {"CKPT_FAULT", "io:errno=EBADF", 0, "io:errno=EIO|ENOSPC|EROFS|EDQUOT|ENODEV or io:delay=MS"},
    {"CKPT_FAULT", "io:delay=250", 1, NULL},
    {"CKPT_FAULT", "io:delay=2000:op=read:after=1:times=2", 1, NULL},
    {"CKPT_FAULT", "io:delay=0", 0, "CKPT_FAULT='io:delay=0'"},
    {"CKPT_FAULT", "io:delay=60001", 0, "CKPT_FAULT='io:delay=60001'"},
    {"CKPT_FAULT", "io:delay=5:errno=EIO", 0, "CKPT_FAULT="},
    {"CKPT_FAULT", "io:errno=EIO:op=trim", 0, "CKPT_FAULT='io:errno=EIO:op=trim'"},
    {"CKPT_FAULT", "io:errno=EIO:times=0", 0, "CKPT_FAULT='io:errno=EIO:times=0'"},
    {"CKPT_FAULT", "io:errno=EIO:times=1:after=1", 0, "CKPT_FAULT="},
    {"CKPT_JOB", "train-7.b_2", 1, NULL},
    {"CKPT_JOB", "a/b", 0, "CKPT_JOB='a/b'"},
    {"CKPT_JOB", "..", 0, "not starting with a dot"},
    {"CKPT_REPLAY_LOG_MAX", "64M", 1, NULL},
    {"CKPT_REPLAY_LOG_MAX", "4096", 1, NULL},
    {"CKPT_REPLAY_LOG_MAX", "2K", 0, "a size in bytes (K, M, G, T suffixes) in 4K..1T"},
    {"CKPT_REPLAY_LOG_MAX", "5X", 0, "CKPT_REPLAY_LOG_MAX='5X'"},
    {"CKPT_REPLAY_LOG_MAX", "2T", 0, "CKPT_REPLAY_LOG_MAX='2T'"},
    {"CKPT_RESTORE", "12", 1, NULL},
    {"CKPT_FAULT", "kill:rank=1:iter=7", 1, NULL},
    {"CKPT_FAULT", "kill:rank=0:iter=3:phase=snapshot", 1, NULL},
    {"CKPT_FAULT", "kill:rank=0:iter=3:phase=restore", 1, NULL},
    {"CKPT_FAULT", "kill:rank=2:iter=3:phase=commit", 1, NULL},
    {"CKPT_FAULT", "kill:rank=0:iter=1:phase=replay", 1, NULL},
    {"CKPT_FAULT", "kill:rank=0:iter=5:phase=persist", 1, NULL},
    {"CKPT_FAULT", "kill:rank=0:iter=5:phase=persistx", 0, "CKPT_FAULT="},
    {"CKPT_FAULT", "kill:rank=0:iter=0", 0, "kill:rank=R:iter=I[:phase=boundary|snapshot|restore|commit|replay|persist]"},
    {"CKPT_FAULT", "kill:rank=a:iter=3", 0, "CKPT_FAULT='kill:rank=a:iter=3'"},
    {"CKPT_FAULT", "kill:rank=0:iter=3:phase=later", 0, "CKPT_FAULT="},
    {"CKPT_FAULT", "kill:rank=0:iter=3:", 0, "CKPT_FAULT="},
    {"CKPT_FAULT", "stop:rank=0:iter=3", 0, "CKPT_FAULT="},
    {"CKPT_RESTORE", "x", 0, "CKPT_RESTORE='x'"},
    {"CKPT_EVERY", " 5", 0, "CKPT_EVERY=' 5'"},
    {"CKPT_KILL_GRACE", " 5", 0, "CKPT_KILL_GRACE=' 5'"},
    {"CKPT_KILL_GRACE", "+5", 0, "CKPT_KILL_GRACE='+5'"},
    {"CKPT_KILL_GRACE", ".5", 1, NULL},
    {"CKPT_REPLAY_LOG_MAX", " 64M", 0, "CKPT_REPLAY_LOG_MAX=' 64M'"},
    {"CKPT_KILL_GRACE", "0x10", 0, "CKPT_KILL_GRACE='0x10'"},
    {"CKPT_KILL_GRACE", "1e3", 0, "CKPT_KILL_GRACE='1e3'"},
    {"CKPT_IO_BLOCK_KB", "64", 1, NULL},
    {"CKPT_IO_BLOCK_KB", "6", 0, "CKPT_IO_BLOCK_KB='6' is not valid: expected a multiple of 4"},
    {"CKPT_IO_BLOCK_KB", "65536", 1, NULL},
    {"CKPT_IO_DEPTH", "1024", 1, NULL},
    {"CKPT_IO_DEPTH", "1025", 0, "CKPT_IO_DEPTH=1025 with CKPT_IO_BLOCK_KB=1024 is 1025 MiB of I/O buffers per ring: "
                                 "expected at most 1024 MiB"},
    {"CKPT_PERSIST_DIRS", "/a,/b", 1, NULL},
    {"CKPT_PERSIST_DIRS", ",", 0, "CKPT_PERSIST_DIRS=',' is not valid: expected directories separated by commas, none empty"},
    {"CKPT_PERSIST_DIRS", "/a,,/b", 0, "CKPT_PERSIST_DIRS='/a,,/b'"},
    {"CKPT_PERSIST_DIRS", "/a,", 0, "CKPT_PERSIST_DIRS='/a,'"},
};

static int unknown_calls;
static char unknown_name[64], unknown_hint[64];

static void on_unknown(const char *name, const char *suggestion)
{
    unknown_calls++;
    snprintf(unknown_name, sizeof(unknown_name), "%s", name);
    snprintf(unknown_hint, sizeof(unknown_hint), "%s", suggestion ? suggestion : "(none)");
}

int main(void)
{
    char err[512];
    int failures = 0;

    if (ckpt_config_load(err, sizeof(err)) != 0 || ckpt_cfg_int(CFG_LOG) != 2 ||
        ckpt_cfg_int(CFG_DISABLE) != 0 || ckpt_cfg_seconds(CFG_KILL_GRACE) != 5.0) {
        printf("defaults: wrong (%s)\n", err);
        failures++;
    }

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv(cases[i].var, cases[i].value, 1);
        err[0] = '\0';
        int rc = ckpt_config_load(err, sizeof(err));
        unsetenv(cases[i].var);
        if ((rc == 0) != cases[i].ok || (!cases[i].ok && !strstr(err, cases[i].says))) {
            printf("%s='%s': rc %d, message '%s'\n", cases[i].var, cases[i].value, rc, err);
            failures++;
        }
    }

    setenv("CKPT_REPLAY_LOG_MAX", "64M", 1);
    ckpt_config_load(err, sizeof(err));
    if (ckpt_cfg_int(CFG_REPLAY_LOG_MAX) != 64LL << 20) {
        printf("CKPT_REPLAY_LOG_MAX=64M gives %lld\n", ckpt_cfg_int(CFG_REPLAY_LOG_MAX));
        failures++;
    }
    unsetenv("CKPT_REPLAY_LOG_MAX");

    setenv("CKPT_LOG", "debug", 1);
    ckpt_config_load(err, sizeof(err));
    if (ckpt_cfg_int(CFG_LOG) != 3) {
        printf("CKPT_LOG=debug gives index %lld\n", ckpt_cfg_int(CFG_LOG));
        failures++;
    }

    setenv("CKPT_KILL_GRAC", "1", 1);
    ckpt_config_unknown(on_unknown);
    if (unknown_calls != 1 || strcmp(unknown_name, "CKPT_KILL_GRAC") || strcmp(unknown_hint, "CKPT_KILL_GRACE")) {
        printf("did you mean: %d calls, %s -> %s\n", unknown_calls, unknown_name, unknown_hint);
        failures++;
    }
    unsetenv("CKPT_KILL_GRAC");
    setenv("CKPT_ZZZZZZZZZZZZ", "1", 1);
    unknown_calls = 0;
    ckpt_config_unknown(on_unknown);
    if (unknown_calls != 1 || strcmp(unknown_hint, "(none)")) {
        printf("far name: %d calls, hint %s\n", unknown_calls, unknown_hint);
        failures++;
    }
    return failures ? 1 : 0;
}
