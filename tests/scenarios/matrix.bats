#!/usr/bin/env bats
# The fault matrix (tests/matrix/cells): a randomized sample of its cells,
# each a rank killed at a boundary, during a snapshot copy, before a
# commit, while the agent persists, during a restart's replay or restore,
# or ckpt-resume itself killed and rerun by hand, for 1, 2 or 4 ranks.
# Every cell must end bit-exact (or, where its row allows, refuse naming
# what was lost).  The seed is printed: CKPT_TRIAL_SEED=<seed> replays the
# sample, tests/matrix/run --cell <cell seed> one cell; CKPT_TRIALS sets
# the sample's size (default 20).  `make soak` runs 200.

setup() {
    export BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    unset CKPT_RESTORE CKPT_FAULT CKPT_PERSIST_DIRS CKPT_ARENA_DIR CKPT_JOB LD_PRELOAD FAKEGPU_CRASH_AT \
        FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
}

@test "a random sample of the fault matrix ends bit-exact (seeds printed)" {
    run "$BATS_TEST_DIRNAME/../matrix/run" --cells "${CKPT_TRIALS:-20}" \
        --seed "${CKPT_TRIAL_SEED:-$(( $(date +%s) % 32768 ))}"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ $output == *"total "*" ${CKPT_TRIALS:-20} "* ]]
}
