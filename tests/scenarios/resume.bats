#!/usr/bin/env bats
# ckpt-resume restarting failed jobs: a rank that dies or hangs stops the
# job, which comes back from the newest iteration every rank holds a
# verified snapshot of and ends exactly as an uninterrupted run; damaged
# snapshots are skipped; a restore the ranks refuse falls back to an older
# snapshot, then to a clean start; restarts are bounded and spaced;
# configuration errors stop it before any rank runs; the arena goes after
# success and stays after a failure.
#
# Snapshots are taken every 5th iteration (CKPT_EVERY=5) and ranks are
# killed at their 24th stream synchronisation, the end of iteration 23, far
# from a snapshot: every rank then holds verified snapshots of iterations 15
# and 20 (generations 3 and 4), so the restore point is known.  With a
# snapshot at every iteration, the survivors are stopped while a snapshot
# is being copied, and whether all ranks still share one would be a race.

load output
load torchrun

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-resume-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA LD_PRELOAD \
        MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=5
    ARGS="--iters 40 --hidden 64 --layers 3"
    # $D/damage DIR ITERATION: flips one byte in the data area of the slot
    # of rank directory DIR that holds ITERATION; prints the slot's path.
    cat >"$D/damage" <<'SCRIPT'
#!/bin/sh
for s in "$1/slot0" "$1/slot1"; do
    [ "$(od -A n -t u8 -j 96 -N 8 "$s" | tr -d ' ')" = "$2" ] || continue
    off=$(($(stat -c %s "$s") - 100000))
    byte=$(od -A n -t u1 -j $off -N 1 "$s" | tr -d ' ')
    printf "$(printf '\\%03o' $(((byte ^ 1) & 255)))" | dd of="$s" bs=1 seek=$off conv=notrunc 2>/dev/null
    echo "$s"
    exit 0
done
echo "no slot in $1 holds iteration $2" >&2
exit 1
SCRIPT
    chmod +x "$D/damage"
}

teardown() {
    rm -rf "$D"
}

# ckpt-resume, bounded: a job it fails to end fails the test instead of hanging it.
ckpt() { timeout -k 5 30 "$CKPT" "$@"; }

# Crash injection: rank $1 is SIGKILLed at the end of iteration ${3:-24} - 1, once per file $2.
crash() { export FAKEGPU_CRASH_AT=${3:-24} FAKEGPU_CRASH_RANK=$1 FAKEGPU_CRASH_ONCE=$2; }

@test "a rank killed mid-run: one restart from the newest common snapshot, output as uninterrupted (1, 2, 4 ranks)" {
    # Another job's arena beside this one's must outlive it.
    mkdir -p "$CKPT_ARENA_DIR/$(id -u)-other/rank0" && echo keep >"$CKPT_ARENA_DIR/$(id -u)-other/rank0/slot0"
    # Snapshots of iterations 10 and 20, the crash at the end of iteration
    # 28: eight iterations for the newest to commit, on a loaded machine too.
    export CKPT_EVERY=10
    for n in 1 2 4; do
        ckpt --nproc $n -- "$TRAIN" $ARGS >"$D/plain.$n" 2>"$D/plain.$n.err" || { cat "$D/plain.$n.err"; return 1; }
        grep -q '^digest ' "$D/plain.$n"
        victim=$((n - 1))
        (crash $victim "$D/crashed.$n" 29 && ckpt --nproc $n -- "$TRAIN" $ARGS >"$D/out.$n" 2>"$D/err.$n") ||
            { echo "ranks $n: exit $?"; cat "$D/err.$n"; return 1; }
        [ -e "$D/crashed.$n" ]
        grep -q "rank $victim (pid [0-9]*) was killed by SIGKILL" "$D/err.$n"
        grep -q "^ckpt-resume: restarting from generation 2 (iteration 20)$" "$D/err.$n" || { cat "$D/err.$n"; return 1; }
        [ "$(grep -c '^libckpt\[rank [0-9]*\]: restored iteration 20 ' "$D/err.$n")" -eq $n ]
        [[ $(tail -n 1 "$D/err.$n") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
        # The restarted run's iteration lines and digest are the uninterrupted run's.
        diff <(resumed_output "$D/out.$n") "$D/plain.$n"
        # The job's arena is gone; the other job's is not.
        [ "$(ls "$CKPT_ARENA_DIR")" = "$(id -u)-other" ] || { ls -R "$CKPT_ARENA_DIR"; return 1; }
    done
    [ "$(cat "$CKPT_ARENA_DIR/$(id -u)-other/rank0/slot0")" = keep ]
}

@test "under torchrun, whose own process initialises CUDA and serves its store on MASTER_PORT: the workers checkpoint, not torchrun; one killed, the job is resumed bit-exact" {
    torchrun_standin "$D/torchrun"
    ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    (crash 1 "$D/crashed" 29 && CKPT_LOG=debug ckpt -- "$D/torchrun" --nproc-per-node 2 --no-python "$TRAIN" $ARGS \
        >"$D/out" 2>"$D/err") || { echo "exit $?"; cat "$D/err"; return 1; }
    [ -e "$D/crashed" ]
    grep -q "torchrun's own process: no rank, pass-through" "$D/err" || { cat "$D/err"; return 1; }
    ! grep -q "in use by process\|Address already in use" "$D/err" || { cat "$D/err"; return 1; }
    grep -q '^libckpt\[rank 1\]: restored iteration 25 ' "$D/err" || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "under torchrun, ckpt-resume restarts the job: torchrun's own restarts are 0; asking torchrun for restarts, or a torchrun of several nodes, is refused before anything starts" {
    torchrun_standin "$D/torchrun"
    ckpt -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    (crash 0 "$D/crashed" 29 && ckpt -- "$D/torchrun" "$TRAIN" $ARGS >"$D/out" 2>"$D/err") || { cat "$D/err"; return 1; }
    [ -e "$D/crashed" ]
    # Two launches, each with torchrun's restarts at 0; the second restored.
    [ "$(cat "$D/pet")" = "$(printf '0\n0')" ] || { cat "$D/pet" "$D/err"; return 1; }
    grep -q "^ckpt-resume: done exit=0 restarts=1" "$D/err" || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
    # --max-restarts 0 (either spelling) is what ckpt-resume wants anyway.
    rm -f "$D/pet"
    ckpt -- "$D/torchrun" --max_restarts=0 "$TRAIN" $ARGS >/dev/null 2>"$D/err" || { cat "$D/err"; return 1; }
    [ "$(cat "$D/pet")" = 0 ]
    # Restarts asked of torchrun: refused, naming the option and the fix, and nothing starts.
    rm -f "$D/pet"
    local how
    for how in "--max-restarts 3" "--nproc-per-node 2 --max_restarts=1" ; do
        run --separate-stderr ckpt -- "$D/torchrun" $how "$TRAIN" $ARGS
        [ "$status" -eq 2 ] || { echo "$how: $status $stderr"; return 1; }
        [[ $stderr == *"torchrun --max-restarts"*"torchrun would restart its workers itself"*"ckpt-resume sets torchrun's restarts to 0"* ]] ||
            { echo "$stderr"; return 1; }
    done
    PET_MAX_RESTARTS=2 run --separate-stderr ckpt -- "$D/torchrun" "$TRAIN" $ARGS
    [ "$status" -eq 2 ] && [[ $stderr == *"PET_MAX_RESTARTS=2: torchrun would restart"* ]] || { echo "$stderr"; return 1; }
    # A torchrun of several nodes: each node's ckpt-resume would restore from its own choice of iteration.
    run --separate-stderr ckpt -- "$D/torchrun" --nnodes=2 --nproc-per-node 2 "$TRAIN" $ARGS
    [ "$status" -eq 2 ] && [[ $stderr == *"torchrun --nnodes 2: under one ckpt-resume per node"*"ckpt-resume --coord etcd://HOST:PORT --nnodes N --nproc P -- CMD per node"* ]] ||
        { echo "$stderr"; return 1; }
    PET_NNODES=1:2 run --separate-stderr ckpt -- "$D/torchrun" "$TRAIN" $ARGS
    [ "$status" -eq 2 ] && [[ $stderr == *"torchrun --nnodes 1:2: under one ckpt-resume per node"* ]] || { echo "$stderr"; return 1; }
    # python -m torch.distributed.run is torchrun too (refused before Python runs it).
    run --separate-stderr ckpt -- python3 -m torch.distributed.run --max-restarts 5 "$TRAIN"
    [ "$status" -eq 2 ] && [[ $stderr == *"torchrun --max-restarts 5"* ]] || { echo "$stderr"; return 1; }
    [ ! -e "$D/pet" ]
    # The training program's own arguments are its own: --max-restarts after it is not torchrun's.
    ckpt -- "$D/torchrun" "$TRAIN" $ARGS --max-restarts 3 >/dev/null 2>"$D/err" || true
    ( ! grep -q "torchrun would restart" "$D/err" )
}

@test "a launcher that starts the ranks itself is restarted from what every rank directory holds" {
    # A failed launch of this launcher damages rank 1's snapshot of
    # iteration 20: only a restore point that counts rank1/ finds 15.
    launcher='pids=; for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 "$@" & pids="$pids $!"; done
              rc=0; for p in $pids; do wait $p || rc=$?; done
              if [ $rc -ne 0 ] && [ ! -e "$0/damaged" ]; then
                  "$0/damage" "$CKPT_ARENA_DIR/$(id -u)-$CKPT_JOB/rank1" 20 >"$0/damaged"
              fi
              exit $rc'
    ckpt -- sh -c "$launcher" "$D" "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    crash 1 "$D/crashed"
    run --separate-stderr ckpt -- sh -c "$launcher" "$D" "$TRAIN" $ARGS
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    [[ $stderr == *"rank1/slot"?" is damaged"* ]]
    [[ $stderr == *"restarting from generation 3 (iteration 15)"* ]] || { echo "$stderr"; return 1; }
    [[ $stderr != *"refused"* ]]
    # A launcher's ranks are not counted: how the job recovered, not how fast.
    [[ $stderr == *"ckpt-resume: done exit=0 restarts=1 (cold)" ]]
    [ "$(echo "$output" | grep '^digest')" = "$(grep '^digest' "$D/plain")" ]
}

@test "a rank killed while its peer's NCCL spins in a collective without noticing (NCCL_FAKE_DEAD_PEER=hang, as over P2P/SHM): the job comes back, bit-exact" {
    export CKPT_EVERY=10
    ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    (crash 1 "$D/crashed" 29 && NCCL_FAKE_DEAD_PEER=hang ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err") ||
        { echo "exit $?"; cat "$D/err"; return 1; }
    [ -e "$D/crashed" ]
    grep -q "rank 1 (pid [0-9]*) was killed by SIGKILL" "$D/err" || { cat "$D/err"; return 1; }
    # The survivor never failed on its own: ckpt-resume stopped it.
    ! grep -q "a peer rank failed" "$D/err" || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: restarting from generation [0-9]* (iteration [0-9]*)$" "$D/err" || { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "a hung rank is detected, the job stopped and restarted, and it completes" {
    # Long enough to run on past the stop, with a hang timeout no stall of
    # a loaded machine reaches (a second hang would be a second restart).
    args="--iters 2000 --hidden 64 --layers 3"
    CKPT_DISABLE=1 CKPT_ARENA_DIR=$D/arena.plain timeout -k 5 120 "$CKPT" --nproc 2 -- "$TRAIN" $args >"$D/plain" 2>/dev/null
    CKPT_HANG_TIMEOUT=5 timeout -k 5 120 "$CKPT" --nproc 2 -- sh -c 'echo $$ > "$0/pid.$RANK"; exec "$@"' \
        "$D" "$TRAIN" $args >"$D/out" 2>"$D/err" &
    launcher=$!
    for i in $(seq 600); do grep -q '^iter 20 ' "$D/out" 2>/dev/null && break; sleep 0.05; done
    kill -STOP "$(cat "$D/pid.1")" || { echo "rank 1 was gone before it could be stopped"; cat "$D/err"; return 1; }
    wait $launcher && rc=0 || rc=$?
    [ "$rc" -eq 0 ] || { echo "exit $rc"; cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: rank [01] hung: no iteration boundary for 5 s (last iteration [0-9]*)$" "$D/err"
    grep -q "^ckpt-resume: restarting from " "$D/err"
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    [ "$(grep '^digest' "$D/out" | tail -n 1)" = "$(grep '^digest' "$D/plain")" ]
}

@test "a damaged snapshot is skipped and named; the restart goes to the newest iteration every rank still holds" {
    # Rank 1's first launch damages its own snapshot of iteration 20 once
    # its trainer has been killed, ignoring the job's SIGTERM meanwhile.
    rank='if [ "$RANK" != 1 ] || [ -e "$0/launched" ]; then exec "$@"; fi
          touch "$0/launched"; trap "" TERM
          "$@"; rc=$?
          "$0/damage" "$CKPT_ARENA_DIR/$(id -u)-$CKPT_JOB/rank1" 20 >"$0/damaged"; exit $rc'
    ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    crash 1 "$D/crashed"
    run --separate-stderr ckpt --nproc 2 -- sh -c "$rank" "$D" "$TRAIN" $ARGS
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    slot=$(cat "$D/damaged")
    [[ $slot == */rank1/slot? ]]
    [[ $stderr == *"ckpt-resume: warning: $slot is damaged (chunk "*" checksum mismatch): skipped"* ]]
    [[ $stderr == *"ckpt-resume: restarting from generation 3 (iteration 15)"* ]] || { echo "$stderr"; return 1; }
    [[ $stderr != *"refused"* ]]
    [[ $stderr =~ ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    [ "$(echo "$output" | grep '^digest')" = "$(grep '^digest' "$D/plain")" ]
}

@test "a restore retires the snapshots newer than its point as the ranks go live: they belong to the run it replaces" {
    # After the restore of 15 the ranks' replay logs go on past 15 as the
    # new run's, and a program that is not bit-exact from run to run
    # computes another iteration 20: a rank's old 20 beside another rank's
    # new one would be a state no run had.  (A refused restore retires
    # nothing: "falls back past its damaged snapshot" below restores by
    # hand what the refusals left.)
    export CKPT_JOB=by-hand
    crash 1 "$D/crashed"
    run -137 ckpt --nproc 2 --max-restarts 0 -- "$TRAIN" $ARGS
    run --separate-stderr env CKPT_RESTORE=15 "$CKPT" --nproc 2 -- "$TRAIN" $ARGS
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    local r
    for r in 0 1; do
        [[ $stderr == *"libckpt[rank $r]: retired its snapshot of iteration 20: newer than the restored iteration 15, it belongs to the run this one replaces"* ]] ||
            { echo "$stderr"; return 1; }
    done
    [[ $stderr == *"ckpt-resume: done exit=0 restarts=0" ]]
    ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    [ "$(echo "$output" | grep '^digest')" = "$(grep '^digest' "$D/plain")" ]
}

@test "a restore the ranks refuse falls back to an older snapshot, then stops: no clean start unless allowed" {
    model='if [ -e "$0/launched.$RANK" ]; then h=32; else h=64; touch "$0/launched.$RANK"; fi
           exec "$1" --iters 40 --hidden $h --layers 3'
    crash 1 "$D/crashed"
    run --separate-stderr ckpt --nproc 2 -- sh -c "$model" "$D" "$TRAIN"
    [ "$status" -ne 0 ] || { echo "$stderr"; return 1; }
    [[ $stderr == *"falling back to generation 3 (iteration 15)"* ]] || { echo "$stderr"; return 1; }
    [[ $stderr == *"error: no snapshot of this job can be restored (no iteration older than 15 has a verified snapshot on every rank"*"the job stops here, with its snapshots kept; CKPT_FALLBACK=clean would start it again from the beginning, losing the training up to iteration 20"* ]] ||
        { echo "$stderr"; return 1; }
    [[ $stderr != *"clean start"* ]]
    ! echo "$output" | grep -q '^digest'
}

@test "with CKPT_FALLBACK=clean a restore the ranks refuse falls back to an older snapshot, then to a clean start" {
    # After the first launch the ranks run a narrower model, whose replay diverges from the recorded run.
    model='if [ -e "$0/launched.$RANK" ]; then h=32; else h=64; touch "$0/launched.$RANK"; fi
           exec "$1" --iters 40 --hidden $h --layers 3'
    crash 1 "$D/crashed"
    export CKPT_FALLBACK=clean
    run --separate-stderr ckpt --nproc 2 -- sh -c "$model" "$D" "$TRAIN"
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    expect=(
        "restarting from generation 4 (iteration 20)"
        "rank [01] refused the restore of iteration 20 (exit 75): not a failure of the program"
        "falling back to generation 3 (iteration 15), the next older iteration every rank holds"
        "rank [01] refused the restore of iteration 15 (exit 75): not a failure of the program"
        "falling back to a clean start (CKPT_FALLBACK=clean): no iteration older than 15 has a verified snapshot on every rank"
        "done exit=0 restarts=1 (from the start)$"
    )
    said=$(echo "$stderr" | grep -e "restarting" -e "refused the restore" -e "falling back" -e "done")
    [ "$(echo "$said" | wc -l)" -eq ${#expect[@]} ] || { echo "$stderr"; return 1; }
    for i in "${!expect[@]}"; do
        echo "$said" | sed -n "$((i + 1))p" | grep -q "^ckpt-resume: ${expect[$i]}" ||
            { echo "line $((i + 1)) is not '${expect[$i]}':"; echo "$said"; return 1; }
    done
    # The clean start ran the narrower model to its end.
    unset FAKEGPU_CRASH_AT
    narrow=$(ckpt --nproc 2 -- "$TRAIN" --iters 40 --hidden 32 --layers 3 2>/dev/null | grep '^digest')
    [ "$(echo "$output" | grep '^digest')" = "$narrow" ]
}

@test "a launcher that does not pass exit status 75 on: the ranks' own report makes the refusal one" {
    # The launcher exits 1 whenever a rank fails, as torchrun does; after the first launch the ranks
    # run a narrower model, whose replay diverges from the recorded run.
    launcher='pids=; for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 sh -c "$1" "$0" "$2" & pids="$pids $!"; done
              rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc'
    model='if [ -e "$0/launched.$RANK" ]; then h=32; else h=64; touch "$0/launched.$RANK"; fi
           exec "$1" --iters 40 --hidden $h --layers 3'
    crash 1 "$D/crashed"
    export CKPT_FALLBACK=clean
    run --separate-stderr ckpt --max-restarts 1 -- sh -c "$launcher" "$D" "$model" "$TRAIN"
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    [[ $stderr == *"rank "[01]" refused the restore of iteration 20 (exit 75): not a failure of the program"* ]] ||
        { echo "$stderr"; return 1; }
    [[ $stderr == *"falling back to a clean start"* ]]
    [[ $stderr == *"ckpt-resume: done exit=0 restarts=1 (from the start)" ]]
}

@test "a restore asked for by hand that a rank refuses falls back past its damaged snapshot" {
    export CKPT_JOB=by-hand
    crash 1 "$D/crashed"
    run -137 ckpt --nproc 2 --max-restarts 0 -- "$TRAIN" $ARGS
    [[ $output == *"the job's arena is kept in $CKPT_ARENA_DIR/$(id -u)-by-hand (CKPT_JOB=by-hand)"* ]]
    slot=$("$D/damage" "$CKPT_ARENA_DIR/$(id -u)-by-hand/rank1" 20)
    run --separate-stderr env CKPT_RESTORE=20 "$CKPT" --nproc 2 -- "$TRAIN" $ARGS
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    [[ $stderr == *"rank 1 refused the restore of iteration 20 (exit 75)"* ]]
    [[ $stderr == *"warning: $slot is damaged (chunk "*" checksum mismatch): skipped"* ]]
    [[ $stderr == *"falling back to generation 3 (iteration 15)"* ]]
    [[ $stderr == *"ckpt-resume: done exit=0 restarts=0" ]]
    ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    [ "$(echo "$output" | grep '^digest')" = "$(grep '^digest' "$D/plain")" ]
}

@test "when restarts run out: giving up after 2 restarts, the job's exit status, the arena kept" {
    export CKPT_JOB=doomed FAKEGPU_CRASH_AT=24 FAKEGPU_CRASH_RANK=1 # every launch crashes
    run -137 --separate-stderr ckpt --nproc 2 --max-restarts 2 -- "$TRAIN" $ARGS
    [ "$(echo "$stderr" | grep -c 'restarting from generation 4 (iteration 20)')" -eq 2 ]
    [[ $stderr == *"ckpt-resume: giving up after 2 restarts"* ]]
    [[ $stderr == *"the job's arena is kept in $CKPT_ARENA_DIR/$(id -u)-doomed (CKPT_JOB=doomed)"* ]]
    # Each restart restored iteration 20 before the crash came again.
    [[ ${stderr_lines[-1]} =~ ^ckpt-resume:\ done\ exit=137\ restarts=2\ \(cold\ [0-9.]+\ s,\ cold\ [0-9.]+\ s\)$ ]]
    for r in 0 1; do
        [ -s "$CKPT_ARENA_DIR/$(id -u)-doomed/rank$r/replay.log" ]
    done
    # A fresh start of the same job clears what the failed one left.
    unset FAKEGPU_CRASH_AT
    run --separate-stderr ckpt --nproc 2 -- "$TRAIN" $ARGS
    [ "$status" -eq 0 ]
    [[ $stderr == *"removed the arena an earlier run of job doomed left"* ]]
    [ -z "$(ls -A "$CKPT_ARENA_DIR")" ]
}

@test "each launch draws rank 0 a free port of its own, outside the ephemeral ports; MASTER_PORT, when set, is every launch's" {
    # the first launches fail, as a rank 0 that finds its port taken does (each with another status:
    # the same early failure twice in a row is not restarted again, as the next test shows)
    local cmd='echo "$MASTER_PORT" >>"$0/ports"; n=$(wc -l <"$0/ports"); [ "$n" -ge 3 ] || exit $((10 + n))'
    run --separate-stderr ckpt --nproc 1 --max-restarts 2 -- sh -c "$cmd" "$D"
    [ "$status" -eq 0 ] || { echo "$stderr"; false; }
    [ "$(wc -l <"$D/ports")" -eq 3 ]
    printf '%s\n' "$stderr" >"$D/err"
    fresh_ports "$D/err"
    rm "$D/ports"
    MASTER_PORT=29555 run --separate-stderr ckpt --nproc 1 --max-restarts 2 -- sh -c "$cmd" "$D"
    [ "$status" -eq 0 ]
    [ "$(sort -u "$D/ports")" = 29555 ]
}

@test "a rank that fails before any boundary with the same exit status on two launches in a row (a usage error) stops the job, said; different statuses use up the restarts" {
    run --separate-stderr ckpt --nproc 2 --max-restarts 5 -- "$TRAIN" --no-such-option
    [ "$status" -eq 2 ] || { echo "$stderr"; false; }
    # two launches, no more
    [ "$(grep -c "^ckpt-resume: started 2 ranks" <<<"$stderr")" -eq 2 ] &&
        grep -q "^mlp-train: .*unknown option '--no-such-option'" <<<"$stderr" || { echo "$stderr"; false; }
    [[ $stderr == *"ckpt-resume: error: rank "[01]" exited with status 2 before any rank reached an iteration boundary, on two launches in a row: an error in the command or its set-up (its output above says which), which a restart would repeat; not restarted again"* ]] ||
        { echo "$stderr"; false; }
    [ "$(tail -n 1 <<<"$stderr")" = "ckpt-resume: done exit=2 restarts=1 (from the start)" ] || { echo "$stderr"; false; }
    # A rank that fails after a boundary is restarted as many times as allowed, whatever its status.
    run --separate-stderr ckpt --nproc 1 --max-restarts 2 -- sh -c '"$0" --iters 12 --hidden 16 --layers 2 >/dev/null; exit 3' "$TRAIN"
    [ "$status" -eq 3 ] && [[ $stderr == *"giving up after 2 restarts"* ]] && ! [[ $stderr == *"two launches in a row"* ]] ||
        { echo "$stderr"; false; }
}

@test "restarts wait CKPT_RESTART_BACKOFF, twice as long each time" {
    export CKPT_RESTART_BACKOFF=0.4
    t0=$(date +%s%N)
    # each launch fails with another status: 3, 4, 5
    run --separate-stderr ckpt --max-restarts 2 -- sh -c 'n=$(cat "$0/n" 2>/dev/null || echo 0); echo $((n + 1)) >"$0/n"; exit $((3 + n))' "$D"
    t1=$(date +%s%N)
    [ "$status" -eq 5 ]
    [[ $stderr == *"restart 1 of 2 in 0.4 s"*"restart 2 of 2 in 0.8 s"*"giving up after 2 restarts"* ]]
    [ $(((t1 - t0) / 1000000)) -ge 1200 ]
}

@test "ranks get libckpt.so first in LD_PRELOAD, the agent socket, one CKPT_JOB for all launches, and never the job key" {
    lib=$(realpath "$BUILD/lib/libckpt.so")
    rank='echo "$LD_PRELOAD|$CKPT_JOB|${CKPT_RESTORE-unset}|$(test -S "$CKPT_AGENT_SOCKET" && echo "$CKPT_AGENT_SOCKET")|${CKPT_JOB_KEY-unset}" >>"$0/env"
          [ -e "$0/failed" ] || { touch "$0/failed"; exit 3; }'
    CKPT_JOB_KEY=0123456789abcdef-agents-only LD_PRELOAD=libm.so.6 run --separate-stderr ckpt --max-restarts 1 -- \
        sh -c "$rank" "$D"
    [ "$status" -eq 0 ]
    [[ $stderr == *"restarting from the beginning: no rank took a snapshot"* ]]
    [ "$(wc -l <"$D/env")" -eq 2 ]
    [ "$(sort -u "$D/env" | wc -l)" -eq 1 ]
    IFS='|' read -r preload job restore socket key <"$D/env"
    [ "$preload" = "$lib:libm.so.6" ]
    [[ $job =~ ^j[0-9]+-[0-9]+$ ]]
    [ "$restore" = unset ]
    [ -n "$socket" ] && [ ! -e "$(dirname "$socket")" ]
    [ "$key" = unset ]
    # The user's job name is kept; a libckpt.so the user preloads is not loaded twice.
    rm "$D/env"
    CKPT_JOB=mine LD_PRELOAD=$BUILD/lib/libckpt.so run ckpt -- sh -c "$rank" "$D"
    [ "$(cut -d'|' -f1,2 "$D/env")" = "$lib|mine" ]
}

@test "a second ckpt-resume of the same job on one machine is refused before any rank starts, naming the running one; the first trains on undisturbed and ends as uninterrupted" {
    "$CKPT" --nproc 2 -- "$TRAIN" --iters 3000 --hidden 16 --layers 2 >"$D/plain" 2>/dev/null
    export CKPT_JOB=twice
    "$CKPT" --nproc 2 -- "$TRAIN" --iters 3000 --hidden 16 --layers 2 >"$D/out" 2>"$D/err" &
    local first=$!
    for _ in $(seq 200); do grep -q "^iter 100 " "$D/out" 2>/dev/null && break; sleep 0.05; done
    run -2 "$CKPT" --nproc 2 -- "$TRAIN" --iters 3000 --hidden 16 --layers 2
    [[ $output == *"error: job twice already runs on this machine (ckpt-resume pid $first holds $CKPT_ARENA_DIR/$(id -u)-twice/.ckpt-resume.lock)"* ]]
    [[ $output != *"started"* ]]
    wait $first || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: done exit=0 restarts=0$" "$D/err" || { cat "$D/err"; return 1; }
    diff <(grep -h '^digest ' "$D/out") <(grep -h '^digest ' "$D/plain")
    # Done: its arena and lock are gone, and the job's name is free again.
    [ ! -e "$CKPT_ARENA_DIR/$(id -u)-twice" ]
    "$CKPT" --nproc 1 -- "$TRAIN" --iters 5 >/dev/null 2>&1
}

@test "configuration errors stop ckpt-resume before any rank starts, naming the variable" {
    while IFS='|' read -r var value says; do
        run env "$var=$value" "$CKPT" --nproc 2 -- sh -c 'touch "$0/started"' "$D"
        [ "$status" -eq 2 ] || { echo "$var=$value: exit $status"; return 1; }
        [ "${#lines[@]}" -eq 1 ] && [[ ${lines[0]} == *"$says"* ]] || { echo "$var=$value: $output"; return 1; }
        [ ! -e "$D/started" ]
    done <<'EOF'
CKPT_HANG_TIMEOUT|soon|ckpt-resume: error: CKPT_HANG_TIMEOUT='soon' is not valid: expected a number of seconds in 0..86400
CKPT_MAX_RESTARTS|-1|CKPT_MAX_RESTARTS='-1' is not valid: expected an integer in 0..1000
CKPT_RESTART_BACKOFF|31|CKPT_RESTART_BACKOFF='31' is not valid: expected a number of seconds in 0..30
CKPT_EVERY|0|CKPT_EVERY='0' is not valid: expected an integer in 1..1000000
CKPT_JOB|a/b|CKPT_JOB='a/b' is not valid
CKPT_LIB|/nowhere/libckpt.so|cannot preload /nowhere/libckpt.so into the ranks: No such file or directory
EOF
    CKPT_HANG_TIMOUT=1 run ckpt -- true
    [ "$status" -eq 0 ]
    [[ $output == *"ckpt-resume: warning: CKPT_HANG_TIMOUT is not a libckpt variable; did you mean CKPT_HANG_TIMEOUT?"* ]]
}

@test "--help-env lists every CKPT_* variable with its default and what it accepts" {
    run ckpt --help-env
    [ "$status" -eq 0 ]
    for v in EVERY HANG_TIMEOUT MAX_RESTARTS KILL_GRACE RESTART_BACKOFF KEEP_ARENA LIB JOB ARENA_DIR RESTORE; do
        [[ $output == *"CKPT_$v ("* ]] || { echo "CKPT_$v missing"; return 1; }
    done
    [[ $output == *"CKPT_EVERY (integer: 1..1000000, default '1')"* ]]
}

@test "a launcher of the job's own whose ranks say a WORLD_SIZE larger than the ranks here (the others under another agent): said at the first commit; a failure is not restored from here, and the job stops; CKPT_FALLBACK=clean starts it again from the beginning" {
    local bin=$BUILD/tests/progs/fid_evalloc
    local launch='RANK=0 WORLD_SIZE=2 exec "$0" "$@"'
    timeout 30 "$bin" >"$D/plain" 2>/dev/null
    FID_DIE_ONCE=$D/died run --separate-stderr ckpt -- sh -c "$launch" "$bin" --die-at 20
    [ -e "$D/died" ] && [ "$status" -ne 0 ] || { echo "exit $status: $stderr"; return 1; }
    [[ $stderr == *"warning: the ranks say WORLD_SIZE=2, and 1 of them run under this ckpt-resume: the others run under another agent"* ]] ||
        { echo "$stderr"; return 1; }
    [[ $stderr == *"error: not restarted: the ranks say WORLD_SIZE=2, and the others run under another agent"* ]] ||
        { echo "$stderr"; return 1; }
    [[ $stderr != *"restarting from generation"* ]] || { echo "$stderr"; return 1; }
    rm -f "$D/died"
    CKPT_FALLBACK=clean FID_DIE_ONCE=$D/died run --separate-stderr ckpt -- sh -c "$launch" "$bin" --die-at 20
    [ "$status" -eq 0 ] || { echo "exit $status: $stderr"; return 1; }
    [[ $stderr == *"starting the job again from the beginning (CKPT_FALLBACK=clean)"* ]] || { echo "$stderr"; return 1; }
    [[ $stderr == *"ckpt-resume: done exit=0 restarts=1"* ]] || { echo "$stderr"; return 1; }
    [ "$(echo "$output" | tail -n 1)" = "$(tail -n 1 "$D/plain")" ]
}
