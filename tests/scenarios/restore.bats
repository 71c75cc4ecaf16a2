#!/usr/bin/env bats
# Restore by deterministic replay, on the unmodified trainer: a rank started
# with CKPT_RESTORE=k re-runs its host code with device work suppressed,
# takes the snapshot of iteration k, and prints on exactly as an
# uninterrupted run from there (what it prints while replaying is held
# back); anything that does not match or verify is
# refused (exit 75) with the reason, never run on.

load output
load bytes

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    TRAIN=$BUILD/examples/mlp-train
    RESUME=$BUILD/bin/ckpt-resume
    ARENA=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
    # ckpt-resume removes the arena of a job that succeeded; these tests
    # restore from it by hand afterwards.
    export CKPT_ARENA_DIR=$ARENA CKPT_JOB=restore CKPT_KEEP_ARENA=1
    ARGS="--iters 24 --hidden 64 --layers 3"
}

teardown() {
    rm -rf "$ARENA"
}

slot_iterations() { # rank: the iterations its two slots hold
    for s in 0 1; do
        od -A n -t u8 -j 96 -N 8 "$ARENA/$(id -u)-restore/rank$1/slot$s" | tr -d ' '
    done
}

@test "a restored run prints exactly what an uninterrupted run prints, 1 and 2 ranks, from either slot" {
    for n in 1 2; do
        plain=$("$RESUME" --nproc $n -- "$TRAIN" $ARGS 2>/dev/null)
        LD_PRELOAD=$LIB "$RESUME" --nproc $n -- "$TRAIN" $ARGS >/dev/null 2>&1
        for k in $(slot_iterations 0); do
            run env CKPT_RESTORE=$k LD_PRELOAD=$LIB "$RESUME" --nproc $n -- "$TRAIN" $ARGS
            [ "$status" -eq 0 ] || { echo "ranks $n, iteration $k: exit $status"; echo "$output"; false; }
            echo "$output" | grep -q "restored iteration $k "
            restored_tail "$plain" "$(echo "$output" | grep -v -e '^libckpt' -e '^ckpt-resume')"
        done
    done
}

@test "a program that no longer matches its recorded run is refused, naming the difference" {
    LD_PRELOAD=$LIB "$TRAIN" $ARGS >/dev/null 2>&1
    k=$(slot_iterations 0 | head -n 1)
    run env CKPT_RESTORE=$k LD_PRELOAD=$LIB "$TRAIN" --iters 24 --hidden 32 --layers 3
    [ "$status" -eq 75 ]
    echo "$output" | grep -q "restore of iteration $k refused: the program diverged from its recorded run: it made allocation"
    ! echo "$output" | grep -q '^digest'
}

@test "a damaged snapshot is never restored: the reason names the chunk" {
    LD_PRELOAD=$LIB "$TRAIN" $ARGS >/dev/null 2>&1
    slot=$ARENA/$(id -u)-restore/rank0/slot0
    k=$(od -A n -t u8 -j 96 -N 8 "$slot" | tr -d ' ')
    # Flip one byte inside the data area (past the 4 KiB-aligned header).
    size=$(stat -c %s "$slot")
    off=$((size - 100000))
    flip "$slot" $off
    run env CKPT_RESTORE=$k LD_PRELOAD=$LIB "$TRAIN" $ARGS
    [ "$status" -eq 75 ]
    echo "$output" | grep -q "slot0: chunk [0-9]* (bytes [0-9]*..) checksum mismatch"
}

@test "a restore whose allocations come back at other addresses is refused, naming the allocation" {
    # By hand with randomisation on: the device addresses move between runs.
    setarch -R env LD_PRELOAD=$LIB "$TRAIN" $ARGS >/dev/null 2>&1
    k=$(slot_iterations 0 | head -n 1)
    run env CKPT_RESTORE=$k LD_PRELOAD=$LIB "$TRAIN" $ARGS
    [ "$status" -eq 75 ]
    echo "$output" | grep -q "refused: allocation [0-9]* ([0-9]* bytes) is at 0x[0-9a-f]* in the replaying run and was at 0x[0-9a-f]* in the recorded run"
    ! echo "$output" | grep -q '^digest'
    # The same restore with randomisation off, as ckpt-resume runs ranks, goes through.
    run setarch -R env CKPT_RESTORE=$k LD_PRELOAD=$LIB "$TRAIN" $ARGS
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "restored iteration $k "
}

@test "a restore that does not land on the device as the snapshot holds it is refused, naming the allocation" {
    setarch -R env LD_PRELOAD=$LIB "$TRAIN" $ARGS >/dev/null 2>&1
    k=$(slot_iterations 0 | head -n 1)
    # The double flips a bit of the restore's second copy back, as a failing HBM row would.
    run setarch -R env FAKEGPU_FLIP_HTOD=2 CKPT_RESTORE=$k LD_PRELOAD=$LIB "$TRAIN" $ARGS
    [ "$status" -eq 75 ] || { echo "$output"; false; }
    [[ $output == *"restore of iteration $k refused: allocation "*" does not hold the snapshot's bytes after the copy back (from offset 0)"* ]] ||
        { echo "$output"; false; }
    ! echo "$output" | grep -q '^digest'
    # Without the fault the same restore goes through.
    run setarch -R env CKPT_RESTORE=$k LD_PRELOAD=$LIB "$TRAIN" $ARGS
    [ "$status" -eq 0 ] && echo "$output" | grep -q "restored iteration $k "
}

@test "an iteration no slot holds is refused" {
    LD_PRELOAD=$LIB "$TRAIN" $ARGS >/dev/null 2>&1
    run env CKPT_RESTORE=3 LD_PRELOAD=$LIB "$TRAIN" $ARGS
    [ "$status" -eq 75 ]
    echo "$output" | grep -q "no verified snapshot of it"
}

@test "when the replay log fills, snapshots stop at the last restorable iteration, which still restores" {
    args="--iters 200 --hidden 32 --layers 2"
    plain=$("$TRAIN" $args 2>/dev/null)
    # Run by hand, not under ckpt-resume: randomisation off as it would be.
    run setarch -R env CKPT_REPLAY_LOG_MAX=4K LD_PRELOAD=$LIB "$TRAIN" $args
    [ "$status" -eq 0 ]
    full=$(echo "$output" | sed -n 's/.*reached CKPT_REPLAY_LOG_MAX (4096 bytes) after iteration \([0-9]*\).*/\1/p')
    [ -n "$full" ]
    newest=0
    for k in $(slot_iterations 0); do
        [ "$k" -le "$full" ] || { echo "slot holds iteration $k, past the full log ($full)"; false; }
        [ "$k" -gt "$newest" ] && newest=$k
    done
    run setarch -R env CKPT_REPLAY_LOG_MAX=4K CKPT_RESTORE=$newest LD_PRELOAD=$LIB "$TRAIN" $args
    [ "$status" -eq 0 ]
    restored_tail "$plain" "$(echo "$output" | grep -v '^libckpt')"
}
