#!/usr/bin/env bats
# Standbys (CKPT_STANDBY=1): beside each rank ckpt-resume runs the same
# command following the rank's replay log; a failed job comes back by a
# takeover at the newest snapshot every rank holds, without a replay from
# the start, and ends exactly as an uninterrupted run.  A standby that
# dies, before or during the takeover, leaves the cold path, said with
# why, and the job still ends bit-exact.  The standbys never touch the live
# job's output, files or rendezvous.

load output

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-standby-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_FAULT LD_PRELOAD \
        MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=10 CKPT_STANDBY=1
    ARGS="--iters 40 --hidden 64 --layers 3"
}

teardown() {
    rm -rf "$D"
}

ckpt() { timeout -k 5 60 "$CKPT" "$@"; }

# Rank $1 is SIGKILLed at the end of iteration ${3:-29} - 1, once per file $2.
crash() { export FAKEGPU_CRASH_AT=${3:-29} FAKEGPU_CRASH_RANK=$1 FAKEGPU_CRASH_ONCE=$2; }

@test "a rank killed mid-run: the standbys take over at the newest common snapshot, no replay from the start, output as uninterrupted (1, 2, 4 ranks)" {
    for n in 1 2 4; do
        CKPT_STANDBY=0 ckpt --nproc $n -- "$TRAIN" $ARGS >"$D/plain.$n" 2>"$D/plain.$n.err" ||
            { cat "$D/plain.$n.err"; return 1; }
        (crash $((n - 1)) "$D/crashed.$n" && ckpt --nproc $n -- "$TRAIN" $ARGS >"$D/out.$n" 2>"$D/err.$n") ||
            { echo "ranks $n: exit $?"; cat "$D/err.$n"; return 1; }
        [ -e "$D/crashed.$n" ]
        grep -q "^ckpt-resume: started $n standbys\? (process group [0-9]*, master 127.0.0.1:[0-9]*)$" "$D/err.$n"
        grep -q "^ckpt-resume: the standbys\? took over at iteration 20 in [0-9.]* s$" "$D/err.$n" ||
            { cat "$D/err.$n"; return 1; }
        [ "$(grep -c '^libckpt\[rank [0-9]*\]: taking over at iteration 20 ' "$D/err.$n")" -eq $n ]
        [ "$(grep -c '^libckpt\[rank [0-9]*\]: restored iteration 20 ' "$D/err.$n")" -eq $n ]
        ! grep -q "replaying [0-9]* iterations\|cold path" "$D/err.$n"
        [ "$(tail -n 1 "$D/err.$n")" = "ckpt-resume: done exit=0 restarts=1" ]
        diff <(resumed_output "$D/out.$n") "$D/plain.$n"
        [ ! -e "$CKPT_ARENA_DIR" ] || [ -z "$(ls "$CKPT_ARENA_DIR")" ] || { ls -R "$CKPT_ARENA_DIR"; return 1; }
    done
}

@test "a standby that dies leaves the cold path, said with why; the job still ends bit-exact" {
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    # Rank 1's standby is killed at its fifth replayed boundary; rank 0 later.
    (crash 0 "$D/crashed" && CKPT_FAULT=kill:rank=1:iter=5:phase=replay ckpt --nproc 2 -- "$TRAIN" $ARGS \
        >"$D/out" 2>"$D/err") || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: warning: the standby of rank 1 (pid [0-9]*) was killed by SIGKILL: a failure now recovers by replaying from the start$" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: no takeover: the standby of rank 1 " "$D/err"
    grep -q "^ckpt-resume: recovering by the cold path" "$D/err"
    [ "$(grep -c '^libckpt\[rank [0-9]*\]: restored iteration 20 ' "$D/err")" -eq 2 ]
    [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=0 restarts=1" ]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "a standby killed during its takeover: the cold path restores the same iteration, bit-exact" {
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    (crash 1 "$D/crashed" && CKPT_FAULT=kill:rank=0:iter=20:phase=restore ckpt --nproc 2 -- "$TRAIN" $ARGS \
        >"$D/out" 2>"$D/err") || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: the standbys take over at iteration 20$" "$D/err"
    grep -q "^ckpt-resume: stopping the standbys: the standby of rank 0 (pid [0-9]*) was killed by SIGKILL$" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: recovering by the cold path" "$D/err"
    [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=0 restarts=1" ]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "standbys stay out of the live job's way: its log, history and checkpoint files and its output are its own, with a failure and without" {
    # fid_files appends to a log it opened before CUDA, appends to a history
    # it opens each time, and writes its own checkpoint whole every
    # iteration; its standby replays all of that a few iterations behind.
    local bin=$BUILD/tests/progs/fid_files k=$((15 + RANDOM % 10))
    mkdir -p "$D/plain" "$D/calm" "$D/job"
    FID_FILES_DIR=$D/plain timeout -k 5 30 "$bin" >"$D/plain/out" 2>"$D/plain/err" || { cat "$D/plain/err"; return 1; }
    export CKPT_EVERY=1
    FID_FILES_DIR=$D/calm ckpt --nproc 1 -- "$bin" >"$D/calm/out" 2>"$D/calm/err" || { cat "$D/calm/err"; return 1; }
    grep -q "^ckpt-resume: started 1 standby " "$D/calm/err" || { cat "$D/calm/err"; return 1; }
    FID_FILES_DIR=$D/job FID_DIE_ONCE=$D/died ckpt --nproc 1 -- "$bin" --die-at $k >"$D/job/out" 2>"$D/job/err" ||
        { cat "$D/job/err"; return 1; }
    echo "killed after iteration $k"
    grep -q "^ckpt-resume: the standby took over at iteration " "$D/job/err" || { cat "$D/job/err"; return 1; }
    for f in train.log history model.ckpt; do
        diff "$D/plain/$f" "$D/calm/$f" || { echo "$f differs with a standby beside the run"; return 1; }
        diff "$D/plain/$f" "$D/job/$f" || { echo "$f differs after the takeover"; return 1; }
    done
    diff "$D/plain/out" "$D/calm/out"
    diff <(resumed_output "$D/job/out") "$D/plain/out"
    [ "$(grep -c '^progress 1$' "$D/calm/err")" -eq 1 ] && [ "$(grep -c '^progress 1$' "$D/job/err")" -eq 1 ]
}
