#!/usr/bin/env bats
# The fault matrix (tests/matrix/cells): a randomized sample of its cells,
# each a rank killed at a boundary, during a snapshot copy, before a
# commit, while the agent persists, during a restart's replay or restore,
# or ckpt-resume itself killed and rerun by hand, for 1, 2 or 4 ranks; and
# on 2 nodes a rank, a node's agent or a whole node lost while replicas
# travel, while persisting or during a restart.
# Every cell must end bit-exact (or, where its row allows, refuse naming
# what was lost).  The seed is printed: CKPT_TRIAL_SEED=<seed> replays the
# sample, tests/matrix/run --cell <cell seed> one cell; CKPT_TRIALS sets
# the sample's size (default 20).  `make soak` runs 200.

setup() {
    export BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    unset CKPT_RESTORE CKPT_FAULT CKPT_PERSIST_DIRS CKPT_ARENA_DIR CKPT_JOB LD_PRELOAD FAKEGPU_CRASH_AT \
        FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
}

# bats test_tags=covered
@test "a random sample of the fault matrix ends bit-exact (seeds printed)" {
    run "$BATS_TEST_DIRNAME/../matrix/run" --cells "${CKPT_TRIALS:-20}" \
        --seed "${CKPT_TRIAL_SEED:-$(( $(date +%s) % 32768 ))}"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ $output == *"total "*" ${CKPT_TRIALS:-20} "* ]]
}

@test "persisting beside 4 ranks: ranks whose snapshots drifted apart meet again instead of skipping on" {
    # The slot being persisted makes some ranks skip an iteration others
    # took; until they meet again, a rank waits for peers that will never
    # hold its newest iteration, and skips.  That must end at once.  A
    # rank also skips when a peer is merely late (0.2 s, on a loaded
    # machine), so what is counted is the drift's mark: one rank skipping
    # for a peer at boundary after boundary (before the repair, every
    # boundary to the job's end).
    local D=$BATS_TEST_TMPDIR i waits run
    for i in 1 2 3; do
        rm -rf "$D/a" "$D/s0" "$D/s1"
        mkdir -p "$D/s0" "$D/s1"
        CKPT_LOG=debug CKPT_ARENA_DIR=$D/a CKPT_JOB=drift CKPT_PERSIST_DIRS=$D/s0,$D/s1 CKPT_IO_DEPTH=1 \
            CKPT_IO_BLOCK_KB=4 timeout -k 5 60 "$BUILD/bin/ckpt-resume" --nproc 4 -- "$BUILD/examples/mlp-train" \
            --iters 24 --hidden 48 --layers 3 >/dev/null 2>"$D/err"
        waits=$(grep -c 'a peer has not committed iteration' "$D/err" || true)
        # the longest run of one rank's skips for a peer at boundaries in a row
        run=$(sed -n 's/^libckpt\[rank \([0-9]*\)\]: debug: iteration \([0-9]*\): a peer has not committed .*/\1 \2/p' \
            "$D/err" | sort -n -k1,1 -k2,2 |
            awk '$1 != r || $2 != it + 1 { n = 0 } { r = $1; it = $2; n++; if (n > m) m = n } END { print m + 0 }')
        echo "run $i: $waits snapshots skipped waiting for a peer, at most $run in a row on a rank;" \
            "$(grep -c 'a peer skipped iteration' "$D/err" || true) repairs"
        [ "$run" -le 3 ] || { grep -e snapshots -e 'a peer' "$D/err" | tail -n 20; return 1; }
    done
}
