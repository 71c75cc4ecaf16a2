#!/usr/bin/env bats
# What a snapshot copies, against what the model holds: one model trained
# through PyTorch's two allocators (tests/progs/alloc_train.c).  Under the
# caching allocator (large segments, blocks reused by event query) every
# segment is copied whole, free space included, unless the program tells
# libckpt which blocks are free (include/libckpt.h); with one stream-ordered
# allocation per tensor (cudaMallocAsync/cudaFreeAsync), only the tensors
# live at the boundary.  Either way a job killed mid-run resumes bit-exact.

load output

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    LIB=$BUILD/lib/libckpt.so
    PROG=$BUILD/tests/progs/alloc_train
    PROGS=$BATS_TEST_DIRNAME/../progs
    D=$(mktemp -d /tmp/ckpt-footprint-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_BOUNDARY \
        CKPT_TORCH_HELPER LD_PRELOAD MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE FID_DIE_ONCE
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=3 CKPT_LOG=info
}

teardown() {
    rm -rf "$D"
}

# copied STATS: the bytes each snapshot copied (the sum over allocation kinds), one per line.
copied() {
    awk 'function f(k) { return match($0, "\"" k "\":[0-9]+") ? substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0 : 0 }
         { print f("plain") + f("async") + f("vmm") + f("managed") + f("pitch") + f("global") }' "$1"
}

# killed K PROGRAM ARGS...: the plain run into $D/plain, then a job killed
# after iteration K and resumed; MODEL is what the program says it holds.
killed() {
    local k=$1
    shift
    timeout -k 5 30 "$@" >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    FID_DIE_ONCE=$D/died CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$@" --die-at "$k" >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    [ -e "$D/died" ] || { echo "never killed"; cat "$D/err"; return 1; }
    grep -q '^libckpt\[rank 0\]: restored iteration ' "$D/err" || { echo "nothing restored"; cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain" || { cat "$D/err"; return 1; }
    MODEL=$(sed -n 's/^\(model\|state\) \([0-9]*\) bytes$/\2/p' "$D/plain")
    [ -n "$MODEL" ] && [ -s "$D/stats" ]
}

@test "caching allocator (PyTorch's native one): killed and resumed bit-exact; every segment is copied whole, free space and all" {
    killed $((12 + RANDOM % 16)) "$PROG" caching
    # The segments hold the model and the activations' blocks, free at the boundary.
    copied "$D/stats" | awk -v m="$MODEL" '$1 <= m { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
    grep -q '"async":0,' "$D/stats"
}

@test "caching allocator telling libckpt its free blocks (ckpt_declare_free/live): killed and resumed bit-exact; a snapshot copies the live tensors and no more" {
    killed $((12 + RANDOM % 16)) "$PROG" caching --declare
    # The model's tensors and the 4-byte loss: the segments' free blocks
    # (the activations' and what was never handed out) are not copied,
    # but for the three scratch blocks between tensors shorter than a
    # skipped copy is worth (16, 4 and 32 KiB: copied through).
    copied "$D/stats" | awk -v m="$MODEL" '$1 != m + 4 + 53248 { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
    # The segments are still there, whole (2 MiB or more each), and hold
    # more than twice the model.
    grep -o '"allocated_bytes":[0-9]*' "$D/stats" | awk -F: -v m="$MODEL" '$2 < 2 * m { print "allocated " $2; bad = 1 } END { exit bad }'
    grep -q 'the program declares which blocks of its allocations are free' "$D/err"
}

@test "caching allocator answering at each snapshot from a thread of its own (ckpt_declare_wait/answer): killed and resumed bit-exact; a snapshot copies the live tensors and no more" {
    killed $((12 + RANDOM % 16)) "$PROG" caching --answer
    copied "$D/stats" | awk -v m="$MODEL" '$1 != m + 4 + 53248 { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
    grep -q 'the program answers at each snapshot which blocks of its allocations are free' "$D/err"
    ( ! grep -q 'copies whole allocations' "$D/err" )
}

@test "stream-ordered allocator (backend:cudaMallocAsync): killed and resumed bit-exact; a snapshot copies the live tensors and no more" {
    killed $((12 + RANDOM % 16)) "$PROG" async
    # The model's tensors and the 4-byte loss: the activations freed in
    # stream order before the boundary are not copied.
    copied "$D/stats" | awk -v m="$MODEL" '$1 < m || $1 > m + 4096 { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
}

@test "state that moves every iteration across three streams and two pools (freed in stream order on another stream, pools trimmed): a snapshot holds the live buffers and nothing else; resumed bit-exact or refused, never wrong" {
    local prog=$BUILD/tests/progs/poolmix rc=0
    timeout -k 5 30 "$prog" >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    FID_DIE_ONCE=$D/died CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$prog" --die-at $((12 + RANDOM % 16)) >"$D/out" 2>"$D/err" || rc=$?
    [ -e "$D/died" ] && [ -s "$D/stats" ] || { cat "$D/err"; return 1; }
    # A pool places a block where stream order lets it, and replay runs no
    # device work: a live buffer may come back at another address, and then
    # the restore is refused, naming it (a program keeps the pointers).
    if [ "$rc" -eq 0 ]; then
        diff <(resumed_output "$D/out") "$D/plain" || { echo "WRONG STATE: exit 0 with other output"; cat "$D/err"; return 1; }
    else
        grep -q "refused: allocation [0-9]* ([0-9]* bytes) is at 0x[0-9a-f]* in the replaying run and was at 0x[0-9a-f]* in the recorded run" "$D/err" ||
            { cat "$D/err"; return 1; }
    fi
    MODEL=$(sed -n 's/^state \([0-9]*\) bytes$/\1/p' "$D/plain")
    # The four state buffers and the 4-byte loss, exactly: no scratch, no
    # buffer freed before the boundary.
    copied "$D/stats" | awk -v m="$MODEL" '$1 != m + 4 { print "a snapshot of " $1 " bytes, the live state is " m " + 4"; bad = 1 } END { exit bad }'
}

# torch JOB-ARGS...: tests/progs/torch_train.py on the double of PyTorch
# (tests/fake/torch), killed after iteration K and resumed under
# ckpt-resume, with a sitecustomize of the user's own on PYTHONPATH that
# notes what PYTHONPATH the program got.
torch_job() {
    local k=$((12 + RANDOM % 16))
    # python3 is not built with the sanitizer a TEST_UNDER_TSAN libckpt.so
    # brings; the C programs above cover the same code there.
    [ -z "${TEST_UNDER_TSAN:-}" ] || skip "python3 under ThreadSanitizer"
    mkdir -p "$D/site"
    printf 'import os\nopen(os.environ["SITE_NOTE"], "a").write(os.environ.get("PYTHONPATH", "") + "\\n")\n' >"$D/site/sitecustomize.py"
    export PYTHONPATH=$D/site:$BUILD/fake/torch SITE_NOTE=$D/site.note
    unset PYTHONUNBUFFERED
    python3 "$PROGS/torch_train.py" >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    rm -f "$D/site.note"
    FID_DIE_ONCE=$D/died CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        python3 "$PROGS/torch_train.py" --die-at "$k" >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    [ -e "$D/died" ] && grep -q '^libckpt\[rank 0\]: restored iteration ' "$D/err" || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain" || { cat "$D/err"; return 1; }
    MODEL=$(sed -n 's/^model \([0-9]*\) bytes$/\1/p' "$D/plain")
    [ -n "$MODEL" ] && [ -s "$D/stats" ] && [ -s "$D/site.note" ]
}

@test "stream-ordered allocation inside a capture (a graph's memory nodes): never copied, whether the graph frees it or the program does; killed and resumed bit-exact" {
    killed $((12 + RANDOM % 16)) "$BUILD/tests/progs/fid_graphmem"
    copied "$D/stats" | awk -v m="$MODEL" '$1 != m { print "a snapshot of " $1 " bytes, the state is " m; bad = 1 } END { exit bad }'
}

@test "a PyTorch program (torch's caching allocator) under ckpt-resume: the helper it injects declares the free blocks, killed and resumed bit-exact, a snapshot copies the tensors; the user's PYTHONPATH and sitecustomize kept" {
    torch_job
    # The model's tensors and the block of the loss being read: not the
    # activations' blocks, not the rest of the segments.
    copied "$D/stats" | awk -v m="$MODEL" '$1 < m || $1 > m + 1024 { print "a snapshot of " $1 " bytes, the model has " m; bad = 1 } END { exit bad }'
    grep -o '"allocated_bytes":[0-9]*' "$D/stats" | awk -F: -v m="$MODEL" '$2 < 2 * m { print "allocated " $2; bad = 1 } END { exit bad }'
    grep -q 'the program answers at each snapshot which blocks of its allocations are free' "$D/err"
    ( ! grep -q 'copies whole allocations' "$D/err" )
    # Every launch: the helper first, then the user's path as it was; the
    # user's own sitecustomize ran.
    [ "$(sort -u "$D/site.note")" = "$(cd "$BUILD/lib" && pwd -P)/libckpt-python:$D/site:$BUILD/fake/torch" ] || { cat "$D/site.note"; false; }
}

@test "CKPT_TORCH_HELPER=0: PYTHONPATH as the user set it, the segments copied whole, killed and resumed bit-exact" {
    CKPT_TORCH_HELPER=0 torch_job
    copied "$D/stats" | awk -v m="$MODEL" '$1 < 2 * m { print "a snapshot of " $1 " bytes: not whole segments"; bad = 1 } END { exit bad }'
    [ "$(sort -u "$D/site.note")" = "$D/site:$BUILD/fake/torch" ] || { cat "$D/site.note"; false; }
    ( ! grep -q 'answers at each snapshot' "$D/err" )
    grep -q "PyTorch's caching allocator is in this process and nothing declares its free blocks" "$D/err"
}

@test "a PyTorch program whose boundary's wait holds Python's lock: the helper cannot answer then, and those snapshots copy whole segments without waiting (resumed bit-exact)" {
    FAKETORCH_ITEM_HOLDS_LOCK=1 CKPT_DECLARE_WAIT=10 torch_job
    grep -q "the program was asked which blocks are free, but this thread holds what the answer needs; this snapshot copies whole allocations" "$D/err"
    grep -Eq "the program was asked which blocks are free at [1-9][0-9]* snapshots; [1-9][0-9]* of them copied whole allocations for want of an answer" "$D/err"
    copied "$D/stats" | awk -v m="$MODEL" '$1 < 2 * m { print "a snapshot of " $1 " bytes: not whole segments"; bad = 1 } END { exit bad }'
    # Never waited for: the 10 s would show.
    grep -o '"held_ms":[0-9.]*' "$D/stats" | awk -F: '$2 > 1000 { print "held " $2 " ms"; bad = 1 } END { exit bad }'
}
