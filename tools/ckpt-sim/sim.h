/*
 * ckpt-sim's commands: without one, GEMINI's checkpoint model of a cluster
 * (main.c); `goodput`, a whole job's goodput under a published failure
 * record (goodput.c).
 */
#ifndef CKPT_SIM_H
#define CKPT_SIM_H

/* ckpt-sim goodput ARGS (argv[0] is "goodput"): the exit status. */
int sim_goodput(int argc, char **argv);

#endif
