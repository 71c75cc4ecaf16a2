/*
 * torchrun as ckpt-resume's command (tools/ckpt-resume/torchrun.c): the
 * command of the standbys' torchrun has the standbys' port wherever the
 * job's names torchrun's (--master-port, --rdzv-endpoint, either spelling,
 * the value apart or after '='), and nowhere else: not in the training
 * program's own arguments; PET_MASTER_PORT and PET_RDZV_ENDPOINT follow.
 * A torchrun of several nodes is refused (--nnodes, PET_NNODES), and one
 * asked for restarts of its own (--max-restarts, PET_MAX_RESTARTS), and
 * standbys through a launcher that is not torchrun.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "resume.h"

/* The standbys' command for @cmd at port 4242, joined with spaces. */
static const char *shadow(char *const *cmd)
{
    static char line[512];
    char **v = NULL;
    line[0] = '\0';
    if (torchrun_shadow(&v, cmd, "4242") < 0)
        return "(failed)";
    for (size_t i = 0; v[i]; i++)
        snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s%s", i ? " " : "", v[i]);
    torchrun_shadow_free(v);
    return line;
}

#define SHADOW(want, ...)                                                                  \
    do {                                                                                   \
        char *cmd[] = {__VA_ARGS__, NULL};                                                 \
        const char *got = shadow(cmd);                                                     \
        CHECK(strcmp(got, want) == 0, "shadow of %s: got '%s', want '%s'", cmd[0], got, want); \
    } while (0)

int main(void)
{
    unsetenv("PET_NNODES");
    unsetenv("PET_RDZV_ENDPOINT");
    SHADOW("torchrun --nproc-per-node 2 --master-port 4242 --no-python train --master-port 1", "torchrun",
           "--nproc-per-node", "2", "--master-port", "29500", "--no-python", "train", "--master-port", "1");
    SHADOW("/venv/bin/torchrun --master_port=4242 train.py", "/venv/bin/torchrun", "--master_port=29500", "train.py");
    SHADOW("torchrun --rdzv-endpoint node7:4242 --rdzv_endpoint=localhost:4242 --rdzv-endpoint [::1]:4242 x",
           "torchrun", "--rdzv-endpoint", "node7:29400", "--rdzv_endpoint=localhost", "--rdzv-endpoint", "[::1]", "x");
    SHADOW("python3 -m torch.distributed.run --standalone --master-port 4242 t.py", "python3", "-m",
           "torch.distributed.run", "--standalone", "--master-port", "1", "t.py");
    SHADOW("torchrun --nproc-per-node 8 t.py", "torchrun", "--nproc-per-node", "8", "t.py");
    SHADOW("torchrun --master-port", "torchrun", "--master-port");

    char *master = NULL, *rdzv = NULL;
    CHECK(torchrun_shadow_vars(&master, &rdzv, "4242") == 0 && master && !strcmp(master, "PET_MASTER_PORT=4242") &&
              !rdzv, "PET_MASTER_PORT alone: %s %s", master, rdzv);
    setenv("PET_RDZV_ENDPOINT", "head:29400", 1);
    CHECK(torchrun_shadow_vars(&master, &rdzv, "4243") == 0 && !strcmp(master, "PET_MASTER_PORT=4243") && rdzv &&
              !strcmp(rdzv, "PET_RDZV_ENDPOINT=head:4243"), "with PET_RDZV_ENDPOINT: %s %s", master, rdzv);
    free(master);
    free(rdzv);
    unsetenv("PET_RDZV_ENDPOINT");

    unsetenv("PET_MAX_RESTARTS");
    char *one[] = {"torchrun", "--nnodes", "1", "--nproc-per-node", "2", "t.py", "--nnodes", "4", NULL};
    char *one_range[] = {"torchrun", "--nnodes=1:1", "t.py", NULL};
    char *two[] = {"torchrun", "--nnodes=2", "t.py", NULL};
    char *elastic[] = {"python3", "-m", "torch.distributed.run", "--nnodes", "1:4", "t.py", NULL};
    char *sh[] = {"sh", "-c", "torchrun --nnodes 2 t.py", NULL};
    CHECK(torchrun_check(one) == 0, "one node (the program's own --nnodes 4 is its own)");
    CHECK(torchrun_check(one_range) == 0, "--nnodes=1:1");
    CHECK(torchrun_check(two) < 0, "--nnodes=2 accepted");
    CHECK(torchrun_check(elastic) < 0, "--nnodes 1:4 accepted");
    CHECK(torchrun_check(sh) == 0, "sh taken for torchrun");
    CHECK(torchrun_standby_check(sh) < 0, "standbys through sh accepted");
    CHECK(torchrun_standby_check(two) == 0, "standbys through torchrun refused");
    setenv("PET_NNODES", "1:2", 1);
    CHECK(torchrun_check(one_range) == 0, "--nnodes on the command line wins over PET_NNODES");
    char *plain[] = {"torchrun", "t.py", NULL};
    CHECK(torchrun_check(plain) < 0, "PET_NNODES=1:2 accepted");
    unsetenv("PET_NNODES");

    /* Restarts: the command line's, else PET_MAX_RESTARTS, as torchrun reads them. */
    char *zero[] = {"torchrun", "--max-restarts", "0", "t.py", "--max-restarts", "3", NULL};
    char *one_more[] = {"torchrun", "--max_restarts=1", "t.py", NULL};
    CHECK(torchrun_check(zero) == 0, "--max-restarts 0 refused (the program's own --max-restarts 3 is its own)");
    CHECK(torchrun_check(one_more) < 0, "--max_restarts=1 accepted");
    setenv("PET_MAX_RESTARTS", "2", 1);
    CHECK(torchrun_check(zero) == 0, "--max-restarts 0 does not win over PET_MAX_RESTARTS=2");
    CHECK(torchrun_check(plain) < 0, "PET_MAX_RESTARTS=2 accepted");
    return failures ? 1 : 0;
}
