#!/usr/bin/env bats
# The two demos the README opens with (`make demo`, `make demo-nodes`), as
# a newcomer runs them: each ends with status 0 and says that the resumed
# run's digest matches the uninterrupted one's.

setup() {
    ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    export BUILD=${BUILD:-$ROOT/build}
    [ -x "$BUILD/bin/ckpt-resume" ] || { echo "missing $BUILD/bin/ckpt-resume: build first" >&2; return 1; }
    unset CKPT_JOB CKPT_ARENA_DIR CKPT_PERSIST_DIRS CKPT_COORD LD_PRELOAD
}

@test "make demo: rank 1 killed mid-run, the job ends with the uninterrupted run's digest, status 0" {
    run timeout -k 5 300 "$ROOT/scripts/demo"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    [[ $output == *"matches the uninterrupted run"* ]] || { echo "$output"; false; }
}

# bats test_tags=covered
@test "make demo-nodes: node 0 of three killed and replaced through etcd, the job ends with the uninterrupted run's digest, status 0" {
    run timeout -k 5 300 "$ROOT/scripts/demo-nodes"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    [[ $output == *"recovered from the loss of node 0: digest "*" matches the uninterrupted run"* ]] ||
        { echo "$output"; false; }
}
