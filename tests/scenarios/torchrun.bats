#!/usr/bin/env bats
# A real torchrun: PyTorch from PyPI in a virtual environment
# (tests/torch-venv, made once and kept).  The guide's torchrun line runs
# the example trainer under ckpt-resume; a worker killed, the job is
# resumed bit-exact, by the cold path and by the standbys a second
# torchrun starts.  These tests need PyPI the first time: when the venv
# cannot be made they fail, saying why; only where the machine has no
# room for it or the package index cannot be reached at all do they skip,
# saying so (and tests/run counts the skips); TEST_SKIP_TAGS=pypi leaves
# them out.  The sanitizer stages
# leave them out (covered): the stand-in of resume.bats and standby.bats
# runs the same paths of ours there.

load output

bats_require_minimum_version 1.5.0

setup_file() {
    VENV_RC=0
    VENV=$("$BATS_TEST_DIRNAME/../torch-venv") || VENV_RC=$?
    export VENV VENV_RC
}

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    [ "$VENV_RC" != 2 ] || skip "no PyTorch: no room for it, or no package index to get it from (tests/torch-venv said which)"
    [ "$VENV_RC" = 0 ] || { echo "no PyTorch: tests/torch-venv could not make one (its reason is above)" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-torchrun-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_FAULT LD_PRELOAD \
        MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE PET_MAX_RESTARTS PET_MASTER_PORT
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=10
    export CKPT_JOB=torchrun-$$-$RANDOM PATH=$VENV/bin:$PATH
}

teardown() {
    rm -rf "$D"
}

ckpt() { timeout -k 5 180 "$CKPT" "$@"; }

# bats test_tags=pypi,covered
@test "a real torchrun (PyTorch from PyPI) runs the guide's line: a worker killed, ckpt-resume restarts the job with torchrun's own restarts at 0, bit-exact" {
    local args="--iters 60"
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $args >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    # The guide's line, a worker killed after its 29th iteration.
    FAKEGPU_CRASH_AT=29 FAKEGPU_CRASH_RANK=1 FAKEGPU_CRASH_ONCE=$D/crashed \
        ckpt -- torchrun --nproc-per-node 2 --no-python "$TRAIN" $args >"$D/out" 2>"$D/err" ||
        { echo "exit $?"; cat "$D/err"; return 1; }
    [ -e "$D/crashed" ]
    ! grep -q "Address already in use\|in use by process" "$D/err" || { cat "$D/err"; return 1; }
    # torchrun gave up at the first failure; ckpt-resume restored the job (from 20, or 10 when 20 was not yet committed).
    grep -q "^ckpt-resume: rank 0 (pid [0-9]*) exited with status 1$" "$D/err" || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: all ranks restored iteration [12]0 (generation [12]) and run on$" "$D/err" ||
        { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]] ||
        { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
}

# bats test_tags=pypi,covered
@test "a real torchrun with CKPT_STANDBY=1: a second torchrun starts the standbys at a port of its own; a worker killed, they take over, bit-exact" {
    local args="--iters 3000 --hidden 32 --layers 2" i pid
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $args >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    CKPT_STANDBY=1 ckpt -- torchrun --nproc-per-node 2 --no-python "$TRAIN" $args >"$D/out" 2>"$D/err" &
    local job=$!
    # Killed once both standbys follow (their Python takes seconds to start).
    for i in $(seq 600); do
        [ "$(grep -c '^libckpt\[rank [01]\]: standing by: following' "$D/err")" -eq 2 ] && break
        sleep 0.1
    done
    pid=$(live_pid 1) || { wait $job; cat "$D/err"; return 1; }
    kill -KILL "$pid"
    wait $job || { echo "exit $?"; cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: started 2 standbys through a second torchrun (pid [0-9]*, its port [0-9]*)$" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: the standbys took over at iteration [0-9]* in [0-9.]* s$" "$D/err" || { cat "$D/err"; return 1; }
    ! grep -q "replaying [0-9]* iterations\|cold path\|Address already in use" "$D/err" || { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(standby\ [0-9]+\.[0-9]{3}\ s\)$ ]] ||
        { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
}
