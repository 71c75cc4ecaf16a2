#!/usr/bin/env bats
# Randomized failure trials: the trainer with 1, 2 or 4 ranks under
# ckpt-resume, one rank killed at a random iteration (at a boundary, in the
# middle of a snapshot copy, or in the middle of a restore after a first
# failure), must finish with exactly the output of an uninterrupted run.
# The seed is printed; CKPT_TRIAL_SEED=<seed> replays a failing sample, and
# CKPT_TRIALS sets how many (default 21).

setup_file() {
    export BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    export TRAIN=$BUILD/examples/mlp-train RESUME=$BUILD/bin/ckpt-resume
    export ARGS="--iters 16 --hidden 48 --layers 3"
    export REF=$BATS_FILE_TMPDIR/ref
    mkdir -p "$REF"
    for n in 1 2 4; do
        "$RESUME" --nproc $n -- "$TRAIN" $ARGS >"$REF/$n" 2>/dev/null
    done
}

# trial SEED: one randomized failure; prints what it did.
trial() {
    RANDOM=$1
    local nranks=(1 2 4) n rank iter phase arena out extra=()
    n=${nranks[$((RANDOM % 3))]}
    rank=$((RANDOM % n))
    iter=$((4 + RANDOM % 10))
    phase=$(( RANDOM % 3 ))
    arena=$(mktemp -d "$BATS_TEST_TMPDIR/trial-XXXXXX")
    case $phase in
    0) extra=(CKPT_FAULT=kill:rank=$rank:iter=$iter:phase=boundary) ;;
    1) extra=(CKPT_FAULT=kill:rank=$rank:iter=$iter:phase=snapshot) ;;
    2) # a first death from the test double, then one during the restore
       extra=(FAKEGPU_CRASH_AT=$iter FAKEGPU_CRASH_RANK=$rank FAKEGPU_CRASH_ONCE=$arena/crashed
              CKPT_FAULT=kill:rank=$(( (rank + 1) % n )):iter=1:phase=restore) ;;
    esac
    echo "trial seed=$1: $n ranks, ${extra[*]}"
    out=$(env "${extra[@]}" CKPT_ARENA_DIR=$arena CKPT_RESTART_BACKOFF=0 CKPT_MAX_RESTARTS=4 \
        timeout 120 "$RESUME" --nproc $n -- "$TRAIN" $ARGS 2>"$arena/err")
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "  exit $rc"; tail -n 20 "$arena/err"; return 1
    fi
    grep -q 'restarting from' "$arena/err" || { echo "  no restart happened"; cat "$arena/err"; return 1; }
    # The last run prints every iteration again (replayed) and the digest.
    local lines
    lines=$(wc -l <"$REF/$n")
    if [ "$(echo "$out" | tail -n "$lines")" != "$(cat "$REF/$n")" ]; then
        echo "  output differs from the uninterrupted run"
        diff <(echo "$out" | tail -n "$lines") "$REF/$n" | head -n 10
        tail -n 20 "$arena/err"
        return 1
    fi
    rm -rf "$arena"
}

@test "randomized failure trials end bit-exact (seed printed)" {
    local seed=${CKPT_TRIAL_SEED:-$(( $(date +%s) % 32768 ))} count=${CKPT_TRIALS:-21} i failed=0
    echo "seed $seed"
    RANDOM=$seed
    local seeds=()
    for i in $(seq "$count"); do seeds+=($RANDOM); done
    for s in "${seeds[@]}"; do
        trial "$s" || failed=$((failed + 1))
    done
    [ "$failed" -eq 0 ]
}
