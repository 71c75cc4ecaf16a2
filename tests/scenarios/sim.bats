#!/usr/bin/env bats
# ckpt-sim: on a fixed cluster its numbers are GEMINI's formulas worked by
# hand (t_ckpt, the interval in whole iterations, T = t_ckpt + 1/(2f) +
# t_retrieve, and the exact recovery probability of group placement); on a
# recorded timeline it finds the iteration time and the idle share of the
# link; bad arguments are usage errors.

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    SIM=$BUILD/bin/ckpt-sim
    D=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
}

teardown() {
    rm -rf "$D"
}

@test "a fixed cluster: the formula's numbers, 16 and 1000 machines" {
    run "$SIM" --iteration-ms 1000 --idle-fraction 0.5 --machines 16 --gpus 8 --state-gb 75 --net-gbps 50 \
        --pcie-gbps 25 --storage-gbps 2.5 --failure-rate 0.01 --replicas 2 --placement group
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    # in memory: max(75/8/(25*0.5), 75*(2-1)/(50*0.5)) = 3 s, 3 iterations; retrieve 75/50 = 1.5 s; T = 3 + 1.5 + 1.5
    [[ $output == *"in-memory (m=2, group): t_ckpt 3.000 s, interval 3.000 s (3 iterations), t_retrieve 1.500 s, wasted per failure 6.000 s"* ]] ||
        { echo "$output"; false; }
    # remote: 16*75/2.5 = 480 s each; T = 480 + 240 + 480
    [[ $output == *"remote storage: t_ckpt 480.000 s, interval 480.000 s (480 iterations), t_retrieve 480.000 s, wasted per failure 1200.000 s"* ]]
    # 0.16 failures a day; 2 of 16 machines in the same group of 2: 8 / C(16,2)
    [[ $output == *"failures per day: 0.16; wasted per day: in-memory 1.0 s, remote storage 192.0 s (200.0x)"* ]]
    [[ $output == *"with 2 machines failed at once: 0.933333"* ]]

    run "$SIM" --iteration-ms 1000 --idle-fraction 0.5 --machines 1000 --state-gb 75 --replicas 2 --placement group
    [ "$status" -eq 0 ]
    [[ $output == *"remote storage: t_ckpt 30000.000 s"* ]] # 1000*75/2.5
    [[ $output == *"with 2 machines failed at once: 0.998999"* ]] # 1 - 500 / C(1000,2)
    run "$SIM" --iteration-ms 1000 --idle-fraction 0.5 --machines 16 --replicas 3 --placement ring --failed 2
    [[ $output == *"in-memory (m=3, ring)"* && $output == *"with 2 machines failed at once: 1.000000"* ]]
}

@test "a recorded timeline: its iteration time and idle share" {
    CKPT_ARENA_DIR=$D/arena CKPT_JOB=sim LD_PRELOAD=$BUILD/lib/libckpt.so \
        "$BUILD/tests/progs/statewriter" --iters 14 --nccl 10 >/dev/null 2>&1
    run "$SIM" --timeline "$D/arena/$(id -u)-sim/rank0/timeline" --machines 16
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    # two 10 ms naps per iteration: at least 20 ms
    line=$(echo "$output" | grep '^iteration: ')
    [[ $line =~ ^iteration:\ ([0-9.]+)\ s,\ link\ idle\ ([0-9.]+)% ]] || { echo "$output"; false; }
    awk -v t="${BASH_REMATCH[1]}" -v i="${BASH_REMATCH[2]}" 'BEGIN { exit !(t >= 0.02 && t < 2 && i > 0 && i <= 100) }'
}

@test "bad arguments are usage errors; a damaged timeline is refused" {
    run "$SIM"
    [ "$status" -eq 2 ]
    run "$SIM" --iteration-ms 10 --idle-fraction 1.5
    [ "$status" -eq 2 ]
    [[ $output == *"--idle-fraction '1.5'"* ]]
    run "$SIM" --iteration-ms 10 --idle-fraction 0.5 --machines 5 --replicas 2 --placement group
    [ "$status" -eq 2 ]
    head -c 100 /dev/urandom >"$D/tl"
    run "$SIM" --timeline "$D/tl"
    [ "$status" -eq 1 ]
    run "$SIM" --help
    [ "$status" -eq 0 ]
    [[ $output == *"--sched"* || $output == *"--timeline FILE"* ]]
}
