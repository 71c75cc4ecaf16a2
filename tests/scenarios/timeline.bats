#!/usr/bin/env bats
# The per-rank timeline on the unmodified example trainer: libckpt.so is
# NCCL's profiler plugin unless the user named another (then the NCCL
# wrappers' host times stand in), every rank's arena gets a timeline with
# the trainer's collectives (one AllReduce per layer and iteration) and the
# snapshot copies, ckpt-inspect draws it as a well-formed SVG with every
# lane and a legend, and refuses a damaged one.

load bytes

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    TRAIN=$BUILD/examples/mlp-train
    RESUME=$BUILD/bin/ckpt-resume
    INSPECT=$BUILD/bin/ckpt-inspect
    ARENA=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
    export CKPT_ARENA_DIR=$ARENA CKPT_JOB=tl CKPT_KEEP_ARENA=1
    unset NCCL_PROFILER_PLUGIN
}

teardown() {
    rm -rf "$ARENA"
}

train() { # n: the trainer with n ranks under libckpt
    LD_PRELOAD=$LIB timeout 120 "$RESUME" --nproc "$1" -- "$TRAIN" --iters 12 --hidden 64 --layers 3 \
        >"$ARENA/out" 2>"$ARENA/err" || { cat "$ARENA/err"; return 1; }
}

# check_rank r source: iterations 4..11 of rank r each hold exactly three
# AllReduces timed by source (gpu/host); the run has snapshot copies.
check_rank() {
    local r=$1 source=$2 list i
    list=$("$INSPECT" timeline --rank "$r" --iters 1..13) || { echo "rank $r: no timeline"; return 1; }
    for i in $(seq 4 11); do
        [ "$(echo "$list" | grep -c "^$i collective .* AllReduce $source\$")" = 3 ] ||
            { echo "rank $r iteration $i: not three AllReduces ($source)"; echo "$list"; return 1; }
    done
    [ "$(echo "$list" | grep -c " collective .* $([ "$source" = gpu ] && echo host || echo gpu)\$")" = 0 ] ||
        { echo "rank $r: collectives timed by the wrong clock"; echo "$list"; return 1; }
    [ "$(echo "$list" | grep -c '^[0-9]* copy ')" -ge 5 ] || { echo "rank $r: too few copies"; echo "$list"; return 1; }
    echo "$list" | grep -q '^[0-9]* commit ' || { echo "rank $r: no commit"; return 1; }
}

@test "1 and 2 ranks: each timeline has three GPU-timed AllReduces per iteration and the snapshot copies" {
    for n in 1 2; do
        rm -rf "${ARENA:?}"/*
        train "$n"
        for ((r = 0; r < n; r++)); do
            [ -f "$ARENA/$(id -u)-tl/rank$r/timeline" ]
            check_rank "$r" gpu
        done
    done
}

@test "a user's NCCL_PROFILER_PLUGIN is left alone; collectives then come from host times" {
    NCCL_PROFILER_PLUGIN=none train 2
    check_rank 0 host
    check_rank 1 host
}

@test "ckpt-inspect timeline -o draws a well-formed SVG with every lane, a time axis and a legend" {
    train 2
    run "$INSPECT" timeline --rank 1 --iters 4..7 -o "$ARENA/x.svg"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    svg=$(cat "$ARENA/x.svg")
    for lane in compute collectives "device-to-host copies" "network sends" "disk writes" standby "time (ms)" \
        'id="legend"' "end of 5" "rank 1, iterations 4..7"; do
        [[ $svg == *"$lane"* ]] || { echo "missing: $lane"; false; }
    done
    [ "$(grep -c 'not recorded yet' "$ARENA/x.svg")" = 3 ] # network, disk, standby: none in this job
    [ "$(grep -c '<title>AllReduce, iteration' "$ARENA/x.svg")" = 12 ]
    if command -v xmllint >/dev/null; then xmllint --noout "$ARENA/x.svg"; fi
    if command -v python3 >/dev/null; then
        python3 -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith("svg")' \
            "$ARENA/x.svg"
    fi
}

@test "ckpt-inspect timeline --rank all: every rank of the node in one picture over one time axis, and in the list" {
    train 2
    run "$INSPECT" timeline --rank all --iters 4..7 -o "$ARENA/node.svg"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    svg=$(cat "$ARENA/node.svg")
    for want in "2 ranks of this node, iterations 4..7" ">rank 0</text>" ">rank 1</text>" 'id="lane-0-0"' 'id="lane-1-5"' \
        "time (ms)" 'id="legend"'; do
        [[ $svg == *"$want"* ]] || { echo "missing: $want"; false; }
    done
    # Both ranks' collectives: three AllReduces per iteration each, one axis.
    [ "$(grep -c '<title>AllReduce, iteration' "$ARENA/node.svg")" = 24 ]
    [ "$(grep -c 'time (ms)' "$ARENA/node.svg")" = 1 ]
    python3 -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith("svg")' \
        "$ARENA/node.svg"
    run "$INSPECT" timeline --rank all --iters 4..5
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -c '^# rank [01], iterations 4..5')" = 2 ] || { echo "$output"; false; }
}

@test "a damaged timeline is refused, and bad arguments are usage errors" {
    train 1
    f=$ARENA/$(id -u)-tl/rank0/timeline
    flip "$f" 60 0xff
    run "$INSPECT" timeline -o "$ARENA/y.svg"
    [ "$status" -eq 1 ]
    [[ $output == *checksum* ]]
    run "$INSPECT" timeline --iters 5..2
    [ "$status" -eq 2 ]
    run "$INSPECT" timeline --rank 7
    [ "$status" -eq 1 ]
    run "$INSPECT" timeline --rank every
    [ "$status" -eq 2 ]
}

@test "inactive (CKPT_DISABLE=1) with NCCL loading libckpt.so as its plugin: same output, no timeline" {
    plain=$(CKPT_DISABLE=1 NCCL_PROFILER_PLUGIN=none "$RESUME" --nproc 2 -- "$TRAIN" --iters 6 --hidden 64 --layers 3 \
        2>/dev/null)
    run env CKPT_DISABLE=1 NCCL_PROFILER_PLUGIN=$(realpath "$LIB") NCCL_DEBUG=INFO LD_PRELOAD=$LIB \
        "$RESUME" --nproc 2 -- "$TRAIN" --iters 6 --hidden 64 --layers 3
    [ "$status" -eq 0 ]
    [[ $output == *"loaded profiler plugin libckpt"* ]] || { echo "$output"; false; }
    [ "$(echo "$output" | grep -v -e '^libckpt' -e '^ckpt-resume' -e '^fakenccl')" = "$plain" ]
    [ -z "$(find "$ARENA" -name timeline)" ]
}
