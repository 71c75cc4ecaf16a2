#!/usr/bin/env bats
# What a snapshot copies, against what the model holds: one model trained
# through PyTorch's two allocators (tests/progs/alloc_train.c).  Under the
# caching allocator (large segments, blocks reused by event query) every
# segment is copied whole, free space included; with one stream-ordered
# allocation per tensor (cudaMallocAsync/cudaFreeAsync), only the tensors
# live at the boundary.  Either way a job killed mid-run resumes bit-exact.

load output

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    LIB=$BUILD/lib/libckpt.so
    PROG=$BUILD/tests/progs/alloc_train
    D=$(mktemp -d /tmp/ckpt-footprint-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_BOUNDARY \
        LD_PRELOAD MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE FID_DIE_ONCE
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=3 CKPT_LOG=info
}

teardown() {
    rm -rf "$D"
}

# copied STATS: the bytes each snapshot copied (the sum over allocation kinds), one per line.
copied() {
    awk 'function f(k) { return match($0, "\"" k "\":[0-9]+") ? substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0 : 0 }
         { print f("plain") + f("async") + f("vmm") + f("managed") }' "$1"
}

# killed MODE K: the plain run into $D/plain, then a job killed after iteration K and resumed.
killed() {
    timeout -k 5 30 "$PROG" "$1" >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    FID_DIE_ONCE=$D/died CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$PROG" "$1" --die-at "$2" >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    [ -e "$D/died" ] || { echo "never killed"; cat "$D/err"; return 1; }
    grep -q '^libckpt\[rank 0\]: restored iteration ' "$D/err" || { echo "nothing restored"; cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain" || { cat "$D/err"; return 1; }
    MODEL=$(sed -n 's/^model \([0-9]*\) bytes$/\1/p' "$D/plain")
    [ -n "$MODEL" ] && [ -s "$D/stats" ]
}

@test "caching allocator (PyTorch's native one): killed and resumed bit-exact; every segment is copied whole, free space and all" {
    killed caching $((12 + RANDOM % 16))
    # The segments hold the model and the activations' blocks, free at the boundary.
    copied "$D/stats" | awk -v m="$MODEL" '$1 <= m { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
    grep -q '"async":0,' "$D/stats"
}

@test "stream-ordered allocator (backend:cudaMallocAsync): killed and resumed bit-exact; a snapshot copies the live tensors and no more" {
    killed async $((12 + RANDOM % 16))
    # The model's tensors and the 4-byte loss: the activations freed in
    # stream order before the boundary are not copied.
    copied "$D/stats" | awk -v m="$MODEL" '$1 < m || $1 > m + 4096 { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
}
