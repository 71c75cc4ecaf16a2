#!/usr/bin/env bats
# CKPT_SCHED=gap on a training-shaped program (statewriter --nccl: compute,
# AllReduce, compute, AllReduce, update, per iteration) with more state than
# the gaps carry, and the trainer on 2 ranks: every rank publishes its
# schedule, its snapshots put copies into the gaps and spill the rest to
# the update, and on the recorded timeline no copy placed in a gap starts
# inside a collective or before the one it waits for.  ckpt-replica send
# --sched-profile paces by that schedule and puts its send on the rank's
# timeline, ckpt-resume's persists become its disk writes, and the SVG
# draws them with every lane.

load output

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    SW=$BUILD/tests/progs/statewriter
    TRAIN=$BUILD/examples/mlp-train
    RESUME=$BUILD/bin/ckpt-resume
    INSPECT=$BUILD/bin/ckpt-inspect
    REP=$BUILD/bin/ckpt-replica
    D=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
    export CKPT_ARENA_DIR=$D/arena CKPT_JOB=sch CKPT_KEEP_ARENA=1 CKPT_SCHED=gap FAKEGPU_COPY_GBPS=0.5
    PIDS=()
}

teardown() {
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    rm -rf "$D"
}

run_ranks() { # n: statewriter alone (1), or the trainer's ranks under ckpt-resume
    if [ "$1" = 1 ]; then
        CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB timeout 120 "$SW" --iters 16 --mib 24 --nccl 10 >/dev/null 2>"$D/err"
    else
        CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB FAKEGPU_NET_GBPS=0.05 timeout 120 "$RESUME" --nproc "$1" -- \
            "$TRAIN" --iters 16 --hidden 512 --layers 4 --batch 32 >/dev/null 2>"$D/err"
    fi || { cat "$D/err"; return 1; }
}

# gated r: on rank r's timeline, each copy placed in a gap after the first
# of its snapshot starts after a collective ended (the one it was gated
# on), and one that starts promptly after that (within 1 ms) does not start
# inside a collective of its iteration; 0.05 ms for the clocks.  A copy
# that starts later than that was held up by the double's copy thread (a
# host thread on a loaded machine), not placed there: the placement itself
# is checked by tests/unit/schedule.c.  At least one such copy exists.
gated() {
    "$INSPECT" timeline --rank "$1" --iters 1..16 | awk '
        $2 == "collective" { cs[$1, ++nc[$1]] = $3; ce[$1, nc[$1]] = $4 }
        $2 == "copy" && $7 == "gap" { ps[++np] = $3; pi[np] = $1 }
        END {
            for (i = 1; i <= np; i++) {
                it = pi[i]; after = 0; gate = -1
                for (k = 1; k <= nc[it]; k++)
                    if (ce[it, k] <= ps[i] + 0.05 && ce[it, k] > gate) gate = ce[it, k]
                if (gate >= 0) after = 1
                for (k = 1; k <= nc[it] && gate >= 0 && ps[i] - gate <= 1.0; k++) {
                    if (ps[i] > cs[it, k] + 0.05 && ps[i] < ce[it, k] - 0.05) {
                        printf "iteration %s: a copy starts at %s inside collective [%s, %s]\n", it, ps[i], cs[it, k], ce[it, k]
                        bad = 1
                    }
                }
                if (i > 1 && pi[i - 1] == it && !after) {
                    printf "iteration %s: a copy at %s follows no collective\n", it, ps[i]; bad = 1
                }
            }
            if (np == 0) { print "no copy in a gap"; bad = 1 }
            exit bad
        }'
}

@test "1 and 2 ranks: schedules published, copies in the gaps, gated on the collectives, the rest spilled" {
    for n in 1 2; do
        rm -rf "$D/arena" "$D/stats"
        run_ranks "$n"
        for ((r = 0; r < n; r++)); do
            [ -f "$D/arena/$(id -u)-sch/rank$r/schedule" ] || { echo "rank $r: no schedule"; false; }
            grep "\"rank\":$r," "$D/stats" | grep -q '"paced":true,"boundary_bytes":0,"gap_bytes":[1-9][0-9]*,' ||
                { echo "rank $r: no snapshot with copies in the gaps"; cat "$D/stats"; false; }
            gated "$r"
        done
        # 24 MiB at 0.5 GB/s is more than the gaps of 10 ms compute carry,
        # however slow the machine; the trainer's state may fit its gaps.
        [ "$n" = 2 ] || grep -q '"paced":true,.*"spill_bytes":[1-9]' "$D/stats" ||
            { echo "nothing spilled"; cat "$D/stats"; false; }
    done
}

@test "a snapshot the gaps can carry is copied in them whole, the first gap's share too: nothing waits for the update" {
    # 6 MiB at 0.5 GB/s: more than half the first 20 ms gap carries, far
    # less than both gaps; what the first gap cannot take goes to the second.
    CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB timeout 120 "$SW" --iters 16 --mib 6 --nccl 20 >/dev/null 2>"$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q '"paced":true,"boundary_bytes":0,"gap_bytes":[1-9][0-9]*,"spill_bytes":0,' "$D/stats" ||
        { echo "every paced snapshot spilled"; cat "$D/stats"; false; }
}

@test "state written between collectives is copied before it is written: a ZeRO-sharded step and a logging all-reduce after it, killed and resumed, bit-exact every time (gap, eager, paced, standbys, through a device shadow)" {
    # zerostep steps its optimizer shard (a kernel) and all-gathers the
    # parameters (a collective) before the iteration's last collective.
    # With a 64 KiB shard every copy is queued at the boundary; with 1 MiB
    # at 0.5 GB/s the copies are paced.  Before the copies were made to
    # run ahead of the writes, about 8 resumes in 10 came back wrong, with
    # exit 0.  With CKPT_SHADOW_MB the copies go device to device first,
    # and a standby holds the shadow's place.
    local prog=$BUILD/tests/progs/zerostep cfg sched kib standby shadow i k reps=4
    # ThreadSanitizer looks at every interleaving it sees, not at the
    # state: one resume of each kind is enough there.
    [ -z "${TEST_UNDER_TSAN:-}" ] || reps=1
    for cfg in "gap 64 0 0" "eager 64 0 0" "gap 1024 0 0" "gap 64 1 0" "gap 1024 0 16" "gap 1024 1 16"; do
        read -r sched kib standby shadow <<<"$cfg"
        rm -f "$D/zstats"
        CKPT_JOB=zplain-$kib CKPT_SCHED=$sched CKPT_STANDBY=0 timeout 120 "$RESUME" --nproc 2 -- "$prog" --iters 120 \
            --shard-kib "$kib" >"$D/zplain" 2>"$D/zerr" || { cat "$D/zerr"; false; }
        for i in $(seq "$reps"); do
            k=$((20 + RANDOM % 80))
            CKPT_JOB=z-$sched-$kib-$standby-$shadow-$i CKPT_SCHED=$sched CKPT_STANDBY=$standby CKPT_EVERY=5 \
                CKPT_SHADOW_MB=$shadow \
                CKPT_STATS_FILE=$D/zstats CKPT_FAULT=kill:rank=1:iter=$k timeout 120 "$RESUME" --nproc 2 -- "$prog" \
                --iters 120 --shard-kib "$kib" >"$D/zout" 2>"$D/zerr" || { cat "$D/zerr"; false; }
            grep -q '^ckpt-resume: done exit=0 restarts=1 ' "$D/zerr" || { cat "$D/zerr"; false; }
            diff <(resumed_output "$D/zout" | sort) <(sort "$D/zplain") ||
                { echo "$cfg: rank 1 killed at iteration $k: the job resumed on a wrong state"; cat "$D/zerr"; false; }
        done
        if [ "$kib" = 1024 ] && [ "$shadow" = 0 ]; then
            # Paced, and the copies of what the step writes ran ahead of it,
            # on the timeline as such.
            grep -q '"paced":true,.*"touch_bytes":[1-9]' "$D/zstats" || { cat "$D/zstats"; false; }
            "$INSPECT" --job "z-$sched-$kib-$standby-$shadow-$reps" timeline --rank 0 --iters 1..120 |
                grep -q '^[0-9]* copy .* touch$' ||
                { "$INSPECT" --job "z-$sched-$kib-$standby-$shadow-$reps" timeline --rank 0 --iters 1..120; false; }
        elif [ "$shadow" != 0 ]; then
            # Through the shadow, none of it waiting for the host.
            grep -q '"touch_bytes":0,"shadow_bytes":[1-9]' "$D/zstats" || { cat "$D/zstats"; false; }
        fi
    done
}

@test "CKPT_SCHED=eager and off queue every copy at the boundary; a bad value is a usage error" {
    for m in eager off; do
        rm -rf "$D/arena" "$D/stats"
        CKPT_SCHED=$m run_ranks 1
        grep -q '"paced":false' "$D/stats"
        ( ! grep -q '"paced":true' "$D/stats" )
        grep -q "\"sched\":\"$m\",\"paced\":false,\"boundary_bytes\":[1-9]" "$D/stats"
    done
    run env CKPT_SCHED=sometimes LD_PRELOAD=$LIB "$SW" --iters 2
    [ "$status" -eq 2 ]
    [[ $output == *"CKPT_SCHED='sometimes'"* ]]
}

@test "ckpt-replica send --sched-profile paces by the schedule; the SVG has every lane, well-formed" {
    if ! "$REP" probe --node 127.0.0.1 >/dev/null 2>&1; then
        skip "no RMA-capable libfabric provider on 127.0.0.1"
    fi
    run_ranks 1
    rankdir=$D/arena/$(id -u)-sch/rank0
    mkdir -p "$D/rep"
    "$REP" serve --listen 127.0.0.1:0 --dir "$D/rep" >"$D/serve.out" 2>"$D/serve.err" 3>&- &
    PIDS+=($!)
    for _ in $(seq 400); do
        PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$D/serve.out")
        [ -n "$PORT" ] && break
        sleep 0.05
    done
    run "$REP" send --to "127.0.0.1:$PORT" --image "$rankdir/slot0" --sched-profile "$rankdir"
    [ "$status" -eq 0 ] || { echo "$output"; cat "$D/serve.err"; false; }
    [ -f "$rankdir/timeline.agent" ]
    "$INSPECT" timeline --iters 1..17 | grep -q '^[0-9]* send '
    run "$INSPECT" timeline --iters 10..17 -o "$D/x.svg"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    svg=$(cat "$D/x.svg")
    for lane in compute collectives "device-to-host copies" "network sends" "disk writes" "time (ms)" 'id="legend"'; do
        [[ $svg == *"$lane"* ]] || { echo "missing: $lane"; false; }
    done
    [ "$(grep -c 'not recorded yet' "$D/x.svg")" = 2 ] # disk writes and the standby: no persist, no standby in this test
    [[ $svg == *"<title>replica send, iteration"* ]]
    if command -v xmllint >/dev/null; then xmllint --noout "$D/x.svg"; fi
}

@test "ckpt-resume's persists are the disk-writes lane of every rank's timeline" {
    if "$BUILD/bin/ckpt-persist" list --dirs "$D" 2>&1 | grep -q "io_uring is not available"; then
        skip "io_uring is not available here"
    fi
    mkdir -p "$D/ssd"
    CKPT_PERSIST_DIRS=$D/ssd CKPT_PERSIST_EVERY=1 timeout 120 "$RESUME" --nproc 2 -- "$SW" --iters 12 --mib 4 \
        >/dev/null 2>"$D/err" || { cat "$D/err"; false; }
    grep -q "^ckpt-resume: persisted [1-9][0-9]* generation" "$D/err" || { cat "$D/err"; false; }
    for r in 0 1; do
        "$INSPECT" timeline --rank "$r" --iters 1..13 | grep -q '^[0-9]* disk-write ' ||
            { echo "rank $r: no disk write on the timeline"; "$INSPECT" timeline --rank "$r" --iters 1..13; false; }
    done
    run "$INSPECT" timeline --rank 1 --iters 1..13 -o "$D/d.svg"
    [ "$status" -eq 0 ]
    [[ $(cat "$D/d.svg") == *"<title>persist, iteration"* ]]
    [ "$(grep -c 'not recorded yet' "$D/d.svg")" = 2 ] # network sends and the standby: none in this job
    if command -v xmllint >/dev/null; then xmllint --noout "$D/d.svg"; fi
}
