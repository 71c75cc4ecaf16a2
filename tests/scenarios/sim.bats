#!/usr/bin/env bats
# ckpt-sim: on a fixed cluster its numbers are GEMINI's formulas worked by
# hand (t_ckpt, the interval in whole iterations, T = t_ckpt + 1/(2f) +
# t_retrieve, and the exact recovery probability of group placement); on a
# recorded timeline it finds the iteration time and the idle share of the
# link; bad arguments are usage errors.  `ckpt-sim goodput`: the published
# failure record at its own scale, the baseline near the record's effective
# training time, one scale's numbers worked by hand, and what the model
# must show (standbys do not grow with the job's age, the cold path does).

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    SIM=$BUILD/bin/ckpt-sim
    D=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
}

teardown() {
    rm -rf "$D"
}

ckpt_sim_default() { "$SIM" goodput; }

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

@test "goodput: the record's failures at its own scale, the baseline near its effective training time, one case worked by hand" {
    run "$SIM" goodput --gpus 16384 --state-gb 1 --pcie-gbps 1 --net-gbps 8 --storage-gbps 16384 --iteration-s 1 \
        --idle-fraction 1
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    # Table 5's causes sum to the 419 unexpected interruptions; at 16,384 GPUs over 54 days, exactly the record.
    [[ $output == *"(419 unexpected and 47 planned interruptions in 54 days on 16384 GPUs)"* ]] || { echo "$output"; false; }
    [[ $output == *"failures: node lost 356.0, process crash 56.0, hang 7.0, planned stop 47.0, needing people 3.0; one every 2.78 h"* ]]
    # Remote storage: a 1 s copy to host stalls each checkpoint; Young's interval sqrt(2 x 1 x 4665600/466) = 141.5 -> 142
    # iterations of 1 s, overhead 1/142; the upload max(16384 x 1 / 16384, 8 x 1 / 8) = 1 s.
    [[ $output == *"remote storage, periodic every 142 s (t_ckpt 1.0 s, overhead 0.70%)"* ]] || { echo "$output"; false; }
    # Per failure: detect 30 (hang 600, planned 0) + stop 5 + replace 300 (node, planned) + restart 120 + 4.3 + 5 + 32.768
    # + retrieve 1 + lost 1 + 71 (not planned): node 570.068, crash 270.068, hang 840.068, planned 468.068;
    # mean (356 x 570.068 + 56 x 270.068 + 7 x 840.068 + 47 x 468.068) / 466 = 527.8.
    line=$(echo "$output" | grep '^remote storage, periodic  *35.5')
    [[ $line =~ 527\.8$ ]] || { echo "$output"; false; }
    # Goodput: (1 - 1/142) x (1 - (466 x 527.78 + 3 x 4 h) / 54 days) = 93.1%, near the record's "above 90%".
    [[ $output == *"remote storage, periodic                  93.1%"* ]] || { echo "$output"; false; }
    [[ $output == *"the record: effective training time above 90%: consistent"* ]]
    # Every input is printed with its source.
    [[ $output == *"--storage-gbps         16384"* && $output == *"--watchdog-s           600"* ]] || { echo "$output"; false; }
}

@test "goodput: standbys beat the baseline at scale and do not grow with the job's age; the cold path does" {
    pct() { echo "$1" | sed -n "s/^$2  *//p" | tr -s ' ' '\n' | sed -n "${3}p" | tr -d %; }
    run "$SIM" goodput
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    [[ $output == *"1024 GPUs"*"16384 GPUs"*"100000 GPUs"* ]]
    local k remote standby cold
    for k in 1 2 3; do
        remote=$(pct "$output" "remote storage, periodic" $k)
        standby=$(pct "$output" "libckpt, standbys + spares" $k)
        awk -v r="$remote" -v s="$standby" -v k=$k 'BEGIN { exit !(k == 1 || s > r) }' || { echo "$output"; false; }
    done
    # The baseline loses more at larger scale.
    awk -v a="$(pct "$output" "remote storage, periodic" 1)" -v b="$(pct "$output" "remote storage, periodic" 3)" \
        'BEGIN { exit !(a > b) }'
    # A day-old job against a 54-day one: the standby's figure stays, the cold path's replay sinks it.
    run "$SIM" goodput --days 1 --gpus 16384
    local young_cold young_standby
    young_cold=$(pct "$output" "libckpt, cold path" 1); young_standby=$(pct "$output" "libckpt, standbys + spares" 1)
    standby=$(pct "$(ckpt_sim_default)" "libckpt, standbys + spares" 2)
    cold=$(pct "$(ckpt_sim_default)" "libckpt, cold path" 2)
    awk -v yc="$young_cold" -v c="$cold" -v ys="$young_standby" -v s="$standby" \
        'BEGIN { d = ys - s; exit !(yc > c && d < 1 && d > -1) }' || { echo "$output"; false; }
    [[ $output == *"libckpt's cold path comes back slower than the baseline once a job is "* ]]
}

@test "goodput: inputs that miss the record say so; bad values are usage errors naming the option" {
    run "$SIM" goodput --start-s 3000
    [ "$status" -eq 0 ]
    [[ $output == *"NOT consistent: these inputs do not describe the record's job"* ]] || { echo "$output"; false; }
    run "$SIM" goodput --state-gb -1
    [ "$status" -eq 2 ]
    [[ $output == *"--state-gb '-1': expected GB per GPU in"* ]] || { echo "$output"; false; }
    run "$SIM" goodput --gpus 0
    [ "$status" -eq 2 ]
    [[ $output == *"--gpus '0'"* ]]
    run "$SIM" goodput --no-such-input 1
    [ "$status" -eq 2 ]
    run "$SIM" goodput extra
    [ "$status" -eq 2 ]
}
