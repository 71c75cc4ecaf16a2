#!/usr/bin/env bats
# The replay log on disk (CKPT_REPLAY_LOG_DIR, which ckpt-resume sets from
# CKPT_PERSIST_DIRS): the arena holds one page of each rank's log however
# old the job is, the disk holds it whole, and every way back reads it
# there: the cold path's replay from the start after 30,000 iterations,
# a restore from a generation on disk (after which the log goes back to
# disk), ckpt-inspect verify.  A generation names the log on disk and
# holds none of it.  A directory that is
# not there stops the job before it trains.

load output

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-boundlog-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_FAULT LD_PRELOAD \
        CKPT_REPLAY_LOG_DIR CKPT_REPLAY_LOG_MAX MASTER_ADDR MASTER_PORT
    mkdir -p "$D/ssd"
    export CKPT_STANDBY=0 CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=10 CKPT_KEEP_ARENA=1
    export CKPT_PERSIST_DIRS=$D/ssd CKPT_JOB=boundlog-$$-$RANDOM
    ARENA=$D/arena/$(id -u)-$CKPT_JOB
    DISK=$D/ssd/$(id -u)-$CKPT_JOB
    ARGS="--hidden 4 --layers 1 --batch 2"
}

teardown() {
    rm -rf "$D"
}

# The largest the arena's replay.log of rank 0 was, sampled until the job $1 ends.
watch_arena_log() {
    local max=0 s
    while kill -0 "$1" 2>/dev/null; do
        s=$(stat -c %s "$ARENA/rank0/replay.log" 2>/dev/null || echo 0)
        [ "$s" -gt "$max" ] && max=$s
        sleep 0.5
    done
    echo "$max"
}

# bats test_tags=long
@test "over 30,000 iterations the arena holds one page of the replay log, the disk all of it; a failure at the end is restored from it bit-exact" {
    # The cold path, which replays all 30,000 iterations out of the log on
    # disk (a standby reads the same file: standby.bats, bench/run).
    "$TRAIN" --iters 30020 $ARGS >"$D/plain" 2>/dev/null
    CKPT_PERSIST_EVERY=2000 CKPT_FAULT=kill:rank=0:iter=30000 timeout -k 5 300 "$CKPT" --nproc 1 -- \
        "$TRAIN" --iters 30020 $ARGS >"$D/out" 2>"$D/err" &
    local job=$! max
    max=$(watch_arena_log $job)
    wait $job || { cat "$D/err"; return 1; }
    echo "the arena's replay.log was at most $max bytes"
    [ "$max" -gt 0 ] && [ "$max" -le 4096 ] || { cat "$D/err"; return 1; }
    # The whole log is on disk: at least 100 bytes an iteration for this trainer.
    [ "$(stat -c %s "$DISK/rank0.replay.log")" -gt 3000000 ]
    grep -Eq '^libckpt\[rank 0\]: replaying 29[0-9]{3} iterations to restore generation ' "$D/err" || { cat "$D/err"; return 1; }
    ( ! grep -q "CKPT_REPLAY_LOG_MAX" "$D/err" )
    grep -Eq '^ckpt-resume: done exit=0 restarts=1 \(cold [0-9.]+ s\)$' "$D/err" || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
    [ "$(stat -c %s "$ARENA/rank0/replay.log")" -le 4096 ]
    # Every tool reads the log where it is.
    run "$BUILD/bin/ckpt-inspect" verify
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [[ $output == *"rank0 replay log (arena, kept on disk in $DISK/rank0.replay.log): verified through iteration 30020"* ]] ||
        { echo "$output"; return 1; }
    # A generation names the log beside it, and the part its snapshot
    # needs verifies: its stripes hold the image alone, however long the
    # log has grown.
    run "$BUILD/bin/ckpt-inspect" --tier disk verify all
    echo "$output"
    [ "$status" -eq 0 ] && echo "$output" | grep -Eq '^rank0 replay log \(disk gen-[0-9]+\): verified through iteration [0-9]+$'
    local g bytes
    for g in "$DISK"/gen-*; do
        bytes=$(cat "$g"/stripe-* | wc -c)
        echo "$g: $bytes bytes in its stripes"
        [ "$bytes" -lt 1000000 ] || return 1
    done
}

@test "the cold path replays from the start out of the log on disk, bit-exact, and the log stays there (1 and 2 ranks)" {
    local n
    for n in 1 2; do
        CKPT_PERSIST_DIRS= timeout -k 5 120 "$CKPT" --nproc $n -- "$TRAIN" --iters 1500 $ARGS >"$D/plain.$n" 2>/dev/null
        CKPT_FAULT=kill:rank=$((n - 1)):iter=1200 timeout -k 5 120 "$CKPT" --nproc $n -- "$TRAIN" --iters 1500 $ARGS \
            >"$D/out.$n" 2>"$D/err.$n" || { cat "$D/err.$n"; return 1; }
        grep -Eq "^libckpt\[rank 0\]: replaying 1[12][0-9]{2} iterations to restore generation " "$D/err.$n" ||
            { cat "$D/err.$n"; return 1; }
        diff <(resumed_output "$D/out.$n") "$D/plain.$n"
        for ((r = 0; r < n; r++)); do
            [ "$(stat -c %s "$ARENA/rank$r/replay.log")" -le 4096 ]
            [ "$(stat -c %s "$DISK/rank$r.replay.log")" -gt 100000 ]
        done
        rm -rf "$ARENA" "$DISK"/rank*.replay.log
    done
}

@test "without CKPT_PERSIST_DIRS or CKPT_REPLAY_LOG_DIR the logs go to disk, past CKPT_REPLAY_LOG_MAX: an arena in memory's under /var/tmp, one on disk's beside its ranks; they go with the job, or with gc, with their arena or after it; CKPT_REPLAY_LOG_DIR=arena keeps them in memory, bounded" {
    local logs n=0 shm=/dev/shm/ckpt-boundlog-$$-$RANDOM
    CKPT_PERSIST_DIRS= timeout -k 5 120 "$CKPT" --nproc 1 -- "$TRAIN" --iters 1500 $ARGS >"$D/plain" 2>/dev/null
    # The arena in memory (/dev/shm): a log of about 300 KB against a bound
    # of 16 KiB; the rank is killed near the end and comes back from it.
    CKPT_ARENA_DIR=$shm CKPT_PERSIST_DIRS= CKPT_KEEP_ARENA=0 CKPT_REPLAY_LOG_MAX=16K CKPT_FAULT=kill:rank=0:iter=1400 \
        timeout -k 5 120 "$CKPT" --nproc 1 -- "$TRAIN" --iters 1500 $ARGS >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; rm -rf "$shm"; return 1; }
    rm -rf "$shm"
    case $(stat -f -c %T /var/tmp) in
    tmpfs | ramfs)
        # Where /var/tmp is memory too, the logs stay in the arena, and that is said.
        grep -q "^ckpt-resume: warning: the replay logs stay in the arena, bounded by CKPT_REPLAY_LOG_MAX .*it is in memory" \
            "$D/err" || { cat "$D/err"; return 1; } ;;
    *)
        grep -Eq '^libckpt\[rank 0\]: replaying 1[34][0-9]{2} iterations to restore generation ' "$D/err" ||
            { cat "$D/err"; return 1; }
        ( ! grep -q "CKPT_REPLAY_LOG_MAX" "$D/err" )
        diff <(resumed_output "$D/out") "$D/plain"
        # Gone with the job that succeeded, its directory too.
        for logs in /var/tmp/libckpt-$(id -u)/*-$CKPT_JOB; do [ ! -e "$logs" ] || n=$((n + 1)); done
        [ "$n" -eq 0 ] || { ls -la /var/tmp/libckpt-$(id -u)/; return 1; }
        # Kept with an arena kept after a failure; gc --yes takes both.
        CKPT_ARENA_DIR=$shm CKPT_PERSIST_DIRS= CKPT_MAX_RESTARTS=0 CKPT_FAULT=kill:rank=0:iter=700 \
            timeout -k 5 120 "$CKPT" --nproc 1 -- "$TRAIN" --iters 1500 $ARGS >/dev/null 2>&1 && return 1
        for logs in /var/tmp/libckpt-$(id -u)/*-$CKPT_JOB; do [ -s "$logs/rank0.replay.log" ] || return 1; done
        CKPT_ARENA_DIR=$shm run "$BUILD/bin/ckpt-inspect" gc --yes --min-age 0
        rm -rf "$shm"
        [ "$status" -eq 0 ] && [[ $output == *"removed $CKPT_JOB: "* ]] || { echo "$output"; return 1; }
        [ ! -e "$logs" ] || { ls -la "$logs"; return 1; }
        # Kept again, and the arena removed by hand (or lost with the
        # machine's memory): gc finds the logs by the arena they name.
        CKPT_ARENA_DIR=$shm CKPT_PERSIST_DIRS= CKPT_MAX_RESTARTS=0 CKPT_FAULT=kill:rank=0:iter=700 \
            timeout -k 5 120 "$CKPT" --nproc 1 -- "$TRAIN" --iters 1500 $ARGS >/dev/null 2>&1 && return 1
        for logs in /var/tmp/libckpt-$(id -u)/*-$CKPT_JOB; do [ -s "$logs/rank0.replay.log" ] || return 1; done
        [ "$(cat "$logs/arena")" = "$shm/$(id -u)-$CKPT_JOB" ] || { cat "$logs/arena"; return 1; }
        rm -rf "$shm"
        CKPT_ARENA_DIR=$shm run "$BUILD/bin/ckpt-inspect" gc --min-age 0
        [[ $output == *"dead   $CKPT_JOB (replay logs; its arena $shm/$(id -u)-$CKPT_JOB is gone): $logs, "* ]] ||
            { echo "$output"; return 1; }
        [ -s "$logs/rank0.replay.log" ] || return 1
        CKPT_ARENA_DIR=$shm run "$BUILD/bin/ckpt-inspect" gc --yes --min-age 0
        [ "$status" -eq 0 ] && [[ $output == *"removed $CKPT_JOB (replay logs; "* ]] || { echo "$output"; return 1; }
        [ ! -e "$logs" ] || { ls -la "$logs"; return 1; } ;;
    esac
    # The arena on disk (this test's): the logs beside its rank directories,
    # the arena's replay.log a stub; kept with the arena after a failure.
    CKPT_PERSIST_DIRS= CKPT_MAX_RESTARTS=0 CKPT_FAULT=kill:rank=0:iter=700 timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$TRAIN" --iters 1500 $ARGS >/dev/null 2>"$D/err2" && { cat "$D/err2"; return 1; }
    [ "$(stat -c %s "$ARENA/rank0.replay.log")" -gt 100000 ] && [ "$(stat -c %s "$ARENA/rank0/replay.log")" -le 4096 ]
    grep -q "kept on disk in $ARENA/rank0.replay.log" <("$BUILD/bin/ckpt-inspect" verify) || return 1
    # ... and restored from there, past the bound, then removed with the arena.
    CKPT_PERSIST_DIRS= CKPT_KEEP_ARENA=0 CKPT_REPLAY_LOG_MAX=16K CKPT_RESTORE=700 timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$TRAIN" --iters 1500 $ARGS >"$D/out3" 2>"$D/err3" || { cat "$D/err3"; return 1; }
    [ ! -e "$ARENA" ] || { ls -la "$ARENA"; return 1; }
    # In memory: bounded, and said when full.
    CKPT_PERSIST_DIRS= CKPT_REPLAY_LOG_DIR=arena CKPT_REPLAY_LOG_MAX=16K timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$TRAIN" --iters 300 $ARGS >/dev/null 2>"$D/err4" || { cat "$D/err4"; return 1; }
    grep -q "CKPT_REPLAY_LOG_MAX" "$D/err4" || { cat "$D/err4"; return 1; }
}

@test "a restore from a generation on disk (the arena wiped) goes live with its log back on disk" {
    CKPT_PERSIST_DIRS= timeout -k 5 120 "$CKPT" --nproc 1 -- "$TRAIN" --iters 300 $ARGS >"$D/plain" 2>/dev/null
    # The first launch's arena is wiped when it fails; the restored launch
    # says, once its program ended, how large the arena's replay.log was.
    local wrap='trap : TERM; "$0" "$@"; rc=$?
        [ -n "$CKPT_RESTORE" ] || [ $rc -eq 0 ] || rm -rf "$CKPT_ARENA_DIR"/*/rank*
        [ -z "$CKPT_RESTORE" ] || stat -c %s "$CKPT_ARENA_DIR"/*/rank0/replay.log >"$STUB"; exit $rc'
    STUB=$D/stub CKPT_PERSIST_EVERY=1 CKPT_FAULT=kill:rank=0:iter=250 timeout -k 5 120 "$CKPT" --nproc 1 -- \
        sh -c "$wrap" "$TRAIN" --iters 300 $ARGS >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    grep -Eq "^ckpt-resume: restoring generation [0-9]+ \(iteration [0-9]+\) from disk$" "$D/err" ||
        { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
    [ "$(cat "$D/stub")" -le 4096 ] || { echo "the arena held $(cat "$D/stub") bytes of log"; return 1; }
    [ "$(stat -c %s "$DISK/rank0.replay.log")" -gt 20000 ]
}

@test "after a restore from disk far behind the failure, persisting goes on from the restore point at its interval (CKPT_PERSIST_EVERY counts commits since the last persist, in any launch)" {
    # Generations every 30 snapshots (300 iterations); the job fails at
    # 590 with its arena wiped and comes back from iteration 300 on disk.
    # 30 snapshots have been committed since that persist started (10 of
    # them lost with the failed launch's arena), so the first one of the
    # restored launch is persisted, not the first past iteration 590.
    local wrap='trap : TERM; "$0" "$@"; rc=$?
        [ -n "$CKPT_RESTORE" ] || [ $rc -eq 0 ] || rm -rf "$CKPT_ARENA_DIR"/*/rank*; exit $rc'
    CKPT_LOG=debug CKPT_PERSIST_EVERY=30 CKPT_FAULT=kill:rank=0:iter=590 timeout -k 5 120 "$CKPT" --nproc 1 -- \
        sh -c "$wrap" "$TRAIN" --iters 700 $ARGS >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    grep -Eq "^ckpt-resume: restoring generation [0-9]+ \(iteration 300\) from disk$" "$D/err" ||
        { grep '^ckpt-resume' "$D/err"; return 1; }
    local after
    after=$(sed -n '/restoring generation .* from disk$/,$ s/^ckpt-resume: debug: persisted iteration \([0-9]*\):.*/\1/p' "$D/err" | head -n 1)
    echo "the first persist after the restore: iteration ${after:-none}"
    [ -n "$after" ] && [ "$after" -le 320 ] || { grep '^ckpt-resume' "$D/err"; return 1; }
}

@test "CKPT_REPLAY_LOG_DIR that is not a directory stops the job before it trains, naming it (ckpt-resume and libckpt alone)" {
    local want="CKPT_REPLAY_LOG_DIR=$D/nowhere: not a directory; make it, set it to \"arena\", or unset the variable"
    CKPT_PERSIST_DIRS= CKPT_REPLAY_LOG_DIR=$D/nowhere run -2 --separate-stderr \
        timeout -k 5 60 "$CKPT" --nproc 1 -- "$TRAIN" --iters 50 $ARGS
    [ "$stderr" = "ckpt-resume: error: $want" ] || { echo "$stderr"; return 1; }
    [ -z "$output" ]
    CKPT_REPLAY_LOG_DIR=$D/nowhere LD_PRELOAD=$BUILD/lib/libckpt.so run -2 --separate-stderr \
        timeout -k 5 60 "$TRAIN" --iters 50 $ARGS
    [[ $stderr == *"libckpt[rank 0]: error: $want"* ]] || { echo "$stderr"; return 1; }
    [[ $output != *"iter 1 "* ]] || { echo "it trained: $output"; return 1; }
}
