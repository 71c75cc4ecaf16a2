#!/usr/bin/env bats
# The example trainer, examples/mlp/mlp-train, on the CPU double: it is
# repeatable bit for bit (the same loss lines and digest for the same
# arguments and rank count), it really learns, its seed matters, it refuses
# bad flags, and a rank survives no peer's death by hanging.  Ranks are
# started here with the torchrun variables, or by ckpt-resume --nproc.

load output

bats_require_minimum_version 1.5.0

BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
TRAIN=$BUILD/examples/mlp-train

setup() {
    [ -x "$TRAIN" ] || { echo "missing $TRAIN: build first" >&2; return 1; }
    D=$BATS_TEST_TMPDIR
    unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
}

# Ends ranks a failed test left running (their pids are in $D/pids).
teardown() {
    local pid
    [ -f "$D/pids" ] || return 0
    for pid in $(cat "$D/pids"); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# A TCP port on 127.0.0.1 that no socket uses now.

# ranks N NAME ARGS...: starts N ranks of the trainer on a fresh port, each
# under a timeout, writing $D/NAME.out.R and $D/NAME.err.R.  Waits for all
# of them; fails when any does.
ranks() {
    local n=$1 name=$2 port r rc=0
    shift 2
    port=$(free_port)
    local pids=()
    for ((r = 0; r < n; r++)); do
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 60 "$TRAIN" "$@" >"$D/$name.out.$r" 2>"$D/$name.err.$r" &
        pids+=($!)
    done
    for r in "${!pids[@]}"; do
        wait "${pids[$r]}" || { rc=1; echo "rank $r failed:" >&2; cat "$D/$name.err.$r" >&2; }
    done
    return $rc
}

digest_of() { sed -n 's/^digest \([0-9a-f]\{16\}\)$/\1/p' "$1"; }

@test "one rank: two runs print the same loss lines and digest" {
    "$TRAIN" --iters 20 >"$D/a"
    "$TRAIN" --iters 20 >"$D/b"
    [ "$(grep -c '^iter [0-9]* loss ' "$D/a")" -eq 20 ]
    [ -n "$(digest_of "$D/a")" ]
    diff "$D/a" "$D/b"
}

@test "the loss falls over 50 iterations with the defaults" {
    "$TRAIN" --iters 50 >"$D/out"
    # Mean of the last five losses below half the mean of the first five.
    awk '/^iter/ { loss[$2] = $4 }
         END {
             for (i = 1; i <= 5; i++) { first += loss[i]; last += loss[45 + i] }
             printf "first five %.4f, last five %.4f\n", first / 5, last / 5
             exit !(last < first / 2)
         }' "$D/out"
}

@test "two ranks: two runs give the same loss lines and digest" {
    ranks 2 a --iters 20
    ranks 2 b --iters 20
    [ -n "$(digest_of "$D/a.out.0")" ]
    diff "$D/a.out.0" "$D/b.out.0"
    [ ! -s "$D/a.out.1" ] # only rank 0 prints
}

@test "four ranks: two runs give the same digest" {
    ranks 4 a --iters 10
    ranks 4 b --iters 10
    [ -n "$(digest_of "$D/a.out.0")" ]
    [ "$(digest_of "$D/a.out.0")" = "$(digest_of "$D/b.out.0")" ]
}

@test "the seed, the optimizer and the activation each change the digest" {
    local args
    for args in "--seed 1" "--seed 2" "--optimizer sgd" "--activation tanh"; do
        # shellcheck disable=SC2086
        "$TRAIN" --iters 5 --hidden 64 $args | digest_of /dev/stdin >>"$D/digests"
    done
    cat "$D/digests"
    [ "$(wc -l <"$D/digests")" -eq 4 ]
    [ "$(sort -u "$D/digests" | wc -l)" -eq 4 ]
}

@test "bad flags and variables exit 2 with a message naming them" {
    local env flags word
    # environment | flags | a word the message must contain
    while IFS='|' read -r env flags word; do
        word=${word//[[:space:]]/}
        # shellcheck disable=SC2086
        run --separate-stderr env $env "$TRAIN" $flags
        echo "[$env] [$flags]: status $status: $stderr"
        [ "$status" -eq 2 ]
        [[ $stderr == *"mlp-train: "*"$word"* ]]
        [ -z "$output" ]
    done <<'EOF'
 | --iters 0 | --iters
 | --iters ten | --iters
 | --layers -1 | --layers
 | --hidden 0 | --hidden
 | --batch 0 | --batch
 | --seed -3 | --seed
 | --optimizer rmsprop | --optimizer
 | --activation gelu | --activation
 | --lr 0 | --lr
 | --lr fast | --lr
 | --frobnicate | --frobnicate
 | --iters | --iters
 | --iters 5 extra | extra
WORLD_SIZE=3 | --batch 32 | --batch
WORLD_SIZE=2 RANK=2 | | RANK
WORLD_SIZE=zero | | WORLD_SIZE
EOF
}

@test "--help prints the options and exits 0" {
    run "$TRAIN" --help
    [ "$status" -eq 0 ]
    [[ $output == *"--optimizer"* ]]
    [[ $output == *"WORLD_SIZE"* ]]
}

@test "a rank killed mid-run makes its peer exit non-zero, not hang" {
    local victim survivor port r rc start elapsed
    for victim in 1 0; do
        survivor=$((1 - victim))
        port=$(free_port)
        local pids=()
        for r in 0 1; do
            (
                export RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
                exec "$TRAIN" --iters 100000 >"$D/out.$victim.$r" 2>"$D/err.$victim.$r"
            ) &
            pids+=($!)
        done
        echo "${pids[@]}" >"$D/pids"
        # Let training start (rank 0 has printed a few iterations), then kill.
        for _ in $(seq 600); do
            grep -q '^iter 3 ' "$D/out.$victim.0" && break
            sleep 0.05
        done
        grep -q '^iter 3 ' "$D/out.$victim.0"
        start=$(date +%s%N)
        kill -KILL "${pids[$victim]}"
        wait "${pids[$victim]}" || true
        for _ in $(seq 100); do
            kill -0 "${pids[$survivor]}" 2>/dev/null || break
            sleep 0.1
        done
        elapsed=$((($(date +%s%N) - start) / 1000000))
        if kill -0 "${pids[$survivor]}" 2>/dev/null; then
            echo "rank $survivor still runs $elapsed ms after rank $victim was killed"
            return 1
        fi
        rc=0
        wait "${pids[$survivor]}" || rc=$?
        : >"$D/pids"
        echo "rank $victim killed: rank $survivor exited $rc after $elapsed ms:"
        cat "$D/err.$victim.$survivor"
        [ "$rc" -ne 0 ]
        grep -q "^mlp-train\[rank $survivor\]: .*a peer rank failed" "$D/err.$victim.$survivor"
    done
}

@test "under ckpt-resume --nproc 2 the digest matches two ranks started by hand" {
    [ -x "$BUILD/bin/ckpt-resume" ] || skip "no $BUILD/bin/ckpt-resume"
    ranks 2 hand --iters 10
    timeout 60 "$BUILD/bin/ckpt-resume" --nproc 2 -- "$TRAIN" --iters 10 >"$D/launched"
    [ -n "$(digest_of "$D/hand.out.0")" ]
    [ "$(digest_of "$D/launched")" = "$(digest_of "$D/hand.out.0")" ]
}
