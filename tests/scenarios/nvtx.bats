#!/usr/bin/env bats
# CKPT_BOUNDARY=nvtx:NAME on a program instrumented with the real NVTX v3
# client (tests/progs/nvtx_train.c): libckpt.so makes itself the program's
# NVTX injection library, and the end of each range NAME, and nothing else,
# ends an iteration.  What needs the NVTX client is skipped where the
# program was built without a toolkit's NVTX headers (it exits 77).

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    PROG=$BUILD/tests/progs/nvtx_train
    TMP=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
    export CKPT_ARENA_DIR=$TMP CKPT_JOB=bats
    unset NVTX_INJECTION64_PATH CKPT_BOUNDARY
}

need_nvtx() {
    run "$PROG" 1 push
    [ "$status" -ne 77 ] || skip "nvtx_train was built without the NVTX headers"
}

teardown() {
    rm -rf "$TMP"
}

iterations() { # stats file: the snapshot iterations, one per line
    sed -E 's/.*"iteration":([0-9]+).*/\1/' "$1"
}

@test "each way of marking train_step takes one snapshot per iteration, numbered 1..N, results unchanged" {
    need_nvtx
    plain=$("$PROG" 6 push 2>/dev/null | grep '^digest ')
    [ -n "$plain" ]
    for mode in push wide ex exwide start startwide startex; do
        rm -f "$TMP/stats"
        run env CKPT_BOUNDARY=nvtx:train_step CKPT_STATS_FILE=$TMP/stats LD_PRELOAD=$LIB "$PROG" 6 "$mode"
        [ "$status" -eq 0 ] || { echo "$mode: exit $status: $output"; false; }
        # The handlers were installed (push/pop levels came back, per thread).
        echo "$output" | grep -q '^levels tracked$' || { echo "$mode: $output"; false; }
        [ "$(echo "$output" | grep '^digest ')" = "$plain" ] || { echo "$mode: results changed"; false; }
        [ "$(iterations "$TMP/stats" | tr '\n' ' ')" = "1 2 3 4 5 6 " ] ||
            { echo "$mode: snapshots at $(iterations "$TMP/stats" | tr '\n' ' ')"; false; }
    done
}

@test "only a range whose whole name is NAME counts: nested, other-thread and start/end ranges do, prefixes and markers do not" {
    need_nvtx
    while read -r name want; do
        rm -f "$TMP/stats"
        run env "CKPT_BOUNDARY=nvtx:$name" CKPT_STATS_FILE=$TMP/stats LD_PRELOAD=$LIB "$PROG" 5 push
        [ "$status" -eq 0 ] || { echo "$name: exit $status: $output"; false; }
        got=0
        [ ! -f "$TMP/stats" ] || got=$(wc -l <"$TMP/stats")
        [ "$got" -eq "$want" ] || { echo "nvtx:$name: $got snapshots, want $want"; false; }
    done <<'CASES'
forward 5
allreduce 5
load 5
prefetch 5
train_step/backward 5
train 0
train_step/ 0
no_such_range 0
CASES
}

@test "CKPT_BOUNDARY=nvtx: with no NAME stops the program before it trains" {
    run env CKPT_BOUNDARY=nvtx: LD_PRELOAD=$LIB "$PROG" 3 push
    [ "$status" -eq 2 ]
    echo "$output" | grep -q "CKPT_BOUNDARY='nvtx:' is not valid: expected nvtx:NAME"
    ! echo "$output" | grep -q '^iterations '
}

@test "NVTX_INJECTION64_PATH naming another library is not overridden: the program stops with a clear error" {
    run env NVTX_INJECTION64_PATH=$BUILD/fake/libnccl.so.2 CKPT_BOUNDARY=nvtx:train_step LD_PRELOAD=$LIB "$PROG" 3 push
    [ "$status" -eq 2 ]
    echo "$output" | grep -q 'NVTX_INJECTION64_PATH names another NVTX injection library, but CKPT_BOUNDARY=nvtx:train_step needs libckpt.so there'
    ! echo "$output" | grep -q '^iterations '
}

@test "libckpt points NVTX_INJECTION64_PATH at itself in nvtx mode only" {
    run env CKPT_BOUNDARY=nvtx:train_step LD_PRELOAD=$LIB sh -c 'echo "$NVTX_INJECTION64_PATH"'
    [ "$status" -eq 0 ]
    [ "$output" = "$(realpath "$LIB")" ]
    run env CKPT_BOUNDARY=every:2 LD_PRELOAD=$LIB sh -c 'echo "${NVTX_INJECTION64_PATH-unset}"'
    [ "$status" -eq 0 ]
    [ "$output" = unset ]
}

@test "libckpt accepts itself in NVTX_INJECTION64_PATH under another path, and leaves another tool alone outside nvtx mode" {
    need_nvtx
    # Without nvtx mode, the other tool keeps the program's NVTX.
    run env NVTX_INJECTION64_PATH=$BUILD/fake/libnccl.so.2 LD_PRELOAD=$LIB "$PROG" 3 push
    [ "$status" -eq 0 ]
    # As a child inherits it from its launcher, relative or not.
    cd "$BUILD"
    run env NVTX_INJECTION64_PATH=lib/../lib/libckpt.so CKPT_BOUNDARY=nvtx:train_step \
        CKPT_STATS_FILE=$TMP/stats LD_PRELOAD=$LIB "$PROG" 4 push
    [ "$status" -eq 0 ]
    [ "$(wc -l <"$TMP/stats")" -eq 4 ]
}
