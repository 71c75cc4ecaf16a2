#!/usr/bin/env bats
# Standbys (CKPT_STANDBY=1): beside each rank ckpt-resume runs the same
# command following the rank's replay log; a failed job comes back by a
# takeover at the newest snapshot every rank holds, without a replay from
# the start, and ends exactly as an uninterrupted run.  A standby that
# dies, before or during the takeover, leaves the cold path, said with
# why, and the job still ends bit-exact.  The standbys never touch the live
# job's output, files or rendezvous.  Recovery by them takes as long at
# iteration 20,000 as at 1,000, and ckpt-inspect says where each stands.

load output
load torchrun

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-standby-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_FAULT LD_PRELOAD \
        MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=10 CKPT_STANDBY=1
    export CKPT_JOB=standby-$$-$RANDOM
    ARGS="--iters 600 --hidden 32 --layers 2"
}

teardown() {
    rm -rf "$D"
}

ckpt() { timeout -k 5 120 "$CKPT" "$@"; }

# kill_when_standing N ERR RANK: once ckpt-resume says (in ERR) that it
# started its N standbys, SIGKILLs the live RANK, as a machine fails
# (under torchrun, a worker of the job's torchrun).
kill_when_standing() {
    local i pid
    for i in $(seq 600); do
        grep -q "^ckpt-resume: started $1 standbys\? " "$2" 2>/dev/null && break
        sleep 0.1
    done
    pid=$(live_pid "$3") || { echo "no live rank $3"; return 1; }
    kill -KILL "$pid"
    echo "killed rank $3 (pid $pid)"
}

# standbys_pgid ERR: once ckpt-resume says (in ERR) that it started the
# standbys, their process group.
standbys_pgid() {
    local i pgid
    for i in $(seq 600); do
        pgid=$(sed -n 's/^ckpt-resume: started [0-9]* standbys\? (process group \([0-9]*\),.*/\1/p' "$1")
        [ -n "$pgid" ] && { echo "$pgid"; return 0; }
        sleep 0.1
    done
    return 1
}

# run_killed N ERR OUT RANK ARGS...: the job under ckpt-resume, live RANK
# killed once the standbys run; the command is $PROG_PATH, else the trainer.
run_killed() {
    local n=$1 err=$2 out=$3 rank=$4
    shift 4
    ckpt --nproc "$n" -- "${PROG_PATH:-$TRAIN}" "$@" >"$out" 2>"$err" &
    local job=$!
    kill_when_standing "$n" "$err" "$rank" || { wait $job; return 1; }
    wait $job
}

@test "a rank killed mid-run: the standbys take over at the newest common snapshot, no replay from the start, output as uninterrupted (1, 2, 4 ranks)" {
    for n in 1 2 4; do
        CKPT_STANDBY=0 ckpt --nproc $n -- "$TRAIN" $ARGS >"$D/plain.$n" 2>"$D/plain.$n.err" ||
            { cat "$D/plain.$n.err"; return 1; }
        run_killed $n "$D/err.$n" "$D/out.$n" $((n - 1)) $ARGS || { echo "ranks $n: exit $?"; cat "$D/err.$n"; return 1; }
        grep -q "^ckpt-resume: started $n standbys\? (process group [0-9]*, master 127.0.0.1:[0-9]*)$" "$D/err.$n"
        local k
        k=$(sed -n 's/^ckpt-resume: the standbys\? took over at iteration \([0-9]*\) in [0-9.]* s$/\1/p' "$D/err.$n")
        [ -n "$k" ] || { cat "$D/err.$n"; return 1; }
        echo "ranks $n: took over at iteration $k"
        [ "$(grep -c "^libckpt\[rank [0-9]*\]: taking over at iteration $k " "$D/err.$n")" -eq $n ]
        [ "$(grep -c "^libckpt\[rank [0-9]*\]: restored iteration $k " "$D/err.$n")" -eq $n ]
        ( ! grep -q "replaying [0-9]* iterations\|cold path" "$D/err.$n" )
        [[ $(tail -n 1 "$D/err.$n") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(standby\ [0-9]+\.[0-9]{3}\ s\)$ ]]
        diff <(resumed_output "$D/out.$n") "$D/plain.$n"
        [ ! -e "$CKPT_ARENA_DIR" ] || [ -z "$(ls "$CKPT_ARENA_DIR")" ] || { ls -R "$CKPT_ARENA_DIR"; return 1; }
    done
}

# standby_of PGID RANK: the pid of RANK's standby in process group PGID.
standby_of() {
    local p
    for p in $(pgrep -g "$1"); do
        tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx "RANK=$2" && { echo "$p"; return 0; }
    done
    return 1
}

# alone_standby ERR RANK: once ckpt-resume says (in ERR) that a standby
# follows RANK alone, its pid; then once ckpt-inspect lists it as past
# iteration 1 (it has been served its rendezvous and replays).
alone_standby() {
    local i pid=""
    for i in $(seq 300); do
        pid=$(sed -n "s/^ckpt-resume: warning: .*: a new one (pid \([0-9]*\)) follows rank $2 alone, from the start$/\1/p" "$1" | tail -n 1)
        [ -n "$pid" ] && break
        sleep 0.1
    done
    [ -n "$pid" ] || return 1
    for i in $(seq 300); do
        "$BUILD/bin/ckpt-inspect" list --job "$CKPT_JOB" 2>&1 |
            grep -q "^  standby of rank $2 (pid $pid): replayed to iteration [1-9]" && { echo "$pid"; return 0; }
        sleep 0.1
    done
    return 1
}

# kill_standbys ERR RANKS...: SIGKILLs the standbys of RANKS once they run,
# then waits for each one's replacement to follow its rank alone.
kill_standbys() {
    local err=$1 pgid r p pids=()
    shift
    pgid=$(standbys_pgid "$err") || { echo "no standbys"; return 1; }
    for r in "$@"; do
        p=$(standby_of "$pgid" "$r") || { echo "no standby of rank $r"; return 1; }
        pids+=("$p")
    done
    kill -KILL "${pids[@]}"
    for r in "$@"; do
        alone_standby "$err" "$r" >/dev/null || { echo "no standby followed rank $r alone"; return 1; }
    done
}

@test "a standby that dies is started again alone and served the job's rendezvous from its rank's log (the live job holds its port): a rank killed later, the standbys take over, bit-exact" {
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" --iters 4000 --hidden 32 --layers 2 >"$D/plain" 2>/dev/null
    ckpt --nproc 2 -- "$TRAIN" --iters 4000 --hidden 32 --layers 2 >"$D/out" 2>"$D/err" &
    local job=$! pid
    # Rank 0's standby listened at the shadow job's port, rank 1's connected
    # there: a replacement that did either at the live job's port would
    # fail to bind it, or find no one listening (rank 0 stopped once every
    # rank had the id), and never replay an iteration.
    kill_standbys "$D/err" 0 1 || { kill $job; wait $job; cat "$D/err"; return 1; }
    pid=$(live_pid 1) || { kill $job; cat "$D/err"; return 1; }
    kill -KILL "$pid"
    wait $job || { cat "$D/err"; return 1; }
    for r in 0 1; do
        grep -q "^ckpt-resume: warning: the standby of rank $r (pid [0-9]*) was killed by SIGKILL: a new one (pid [0-9]*) follows rank $r alone, from the start$" "$D/err" ||
            { cat "$D/err"; return 1; }
    done
    grep -q "^ckpt-resume: the standbys took over at iteration [0-9]* in [0-9.]* s$" "$D/err" || { cat "$D/err"; return 1; }
    ( ! grep -q "cold path\|replaying [0-9]* iterations" "$D/err" )
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(standby\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "a program that keeps its store connection, as PyTorch keeps its TCPStore's: standbys started together take over; ones started alone refuse at the takeover, naming the connection they were served, and so does one whose program meets its peers before CUDA, at once; the cold path then ends bit-exact" {
    local prog=$BUILD/tests/progs/fid_store pid PROG=fid_store
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$prog" --iters 4000 >"$D/plain" 2>/dev/null
    # Together: the standbys' store is their shadow job's, and the live one's after the takeover.
    ckpt --nproc 2 -- "$prog" --iters 4000 >"$D/out" 2>"$D/err" &
    local job=$!
    standbys_pgid "$D/err" >/dev/null && pid=$(live_pid 1) && kill -KILL "$pid"
    wait $job || { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ \(standby\ [0-9.]+\ s\)$ ]] || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out" | sort) <(sort "$D/plain")
    # Alone: each was served the store, and still holds it at the takeover.
    ckpt --nproc 2 -- "$prog" --iters 4000 >"$D/out" 2>"$D/err" &
    job=$!
    kill_standbys "$D/err" 0 1 || { kill $job; wait $job; cat "$D/err"; return 1; }
    pid=$(live_pid 1) && kill -KILL "$pid"
    wait $job || { cat "$D/err"; return 1; }
    grep -q "^libckpt\[rank [01]\]: error: restore of iteration [0-9]* refused: the program still holds a connection at its job's rendezvous (MASTER_PORT=[0-9]*), which this standby, started alone, was served from its rank's log: its peers are not at the other end" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: recovering by the cold path" "$D/err"
    [[ $(tail -n 1 "$D/err") =~ \(cold\ [0-9.]+\ s\)$ ]] || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out" | sort) <(sort "$D/plain")
    # Early: the store is met before CUDA wakes libckpt, before a log is open.
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$prog" --early --iters 4000 >"$D/plain" 2>/dev/null
    ckpt --nproc 2 -- "$prog" --early --iters 4000 >"$D/out" 2>"$D/err" &
    job=$!
    local pgid i
    pgid=$(standbys_pgid "$D/err") && pid=$(standby_of "$pgid" 1) && kill -KILL "$pid"
    for i in $(seq 300); do
        grep -q "^ckpt-resume: warning: the standby of rank 1 (pid [0-9]*) exited with status 75 (its reason is said above): a failure now recovers by replaying from the start$" "$D/err" && break
        sleep 0.1
    done
    pid=$(live_pid 1) && kill -KILL "$pid"
    wait $job || { cat "$D/err"; return 1; }
    grep -q "^libckpt\[rank 1\]: error: the standby stops: the program connected to its job's rendezvous (MASTER_PORT=[0-9]*) before its first CUDA call, where its rank's log is not open yet: a standby started alone cannot be served that$" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: no takeover: the standby of rank 1 (pid [0-9]*) exited with status 75" "$D/err" || { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ \(cold\ [0-9.]+\ s\)$ ]] || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out" | sort) <(sort "$D/plain")
}

# bats test_tags=covered
@test "a standby killed during its takeover: the cold path restores the same iteration, bit-exact" {
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    CKPT_FAULT=kill:rank=0:iter=1:phase=restore run_killed 2 "$D/err" "$D/out" 1 $ARGS || { cat "$D/err"; return 1; }
    local k
    k=$(sed -n 's/^ckpt-resume: the standbys take over at iteration \([0-9]*\) (the one furthest behind is at iteration [0-9]*)$/\1/p' "$D/err")
    [ -n "$k" ] || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: stopping the standbys: the standby of rank 0 (pid [0-9]*) was killed by SIGKILL$" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: recovering by the cold path" "$D/err"
    # Both restarted ranks restore k (the standby of rank 1 may have restored it too, before it was stopped).
    [ "$(sed -n '/recovering by the cold path/,$p' "$D/err" | grep -c "^libckpt\[rank [0-9]*\]: restored iteration $k ")" -eq 2 ] ||
        { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "a program that carries its own copy of NCCL gets no standby: it refuses when CUDA starts, before a communicator can be made, naming the object; no other is started, and the cold path ends bit-exact" {
    local prog=$BUILD/tests/progs/ncclstatic
    CKPT_STANDBY=0 ckpt --nproc 1 -- "$prog" --iters 400 >"$D/plain" 2>/dev/null
    CKPT_FAULT=kill:rank=0:iter=300 ckpt --nproc 1 -- "$prog" --iters 400 >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^libckpt\[rank 0\]: error: the standby stops: $prog carries its own copy of NCCL 2.28.9, linked in statically: libckpt cannot see its API" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: warning: no more standbys for this job: the standby of rank 0 refused to stand by before its first iteration and would again$" "$D/err"
    [ "$(grep -c '^ckpt-resume: started 1 standby ' "$D/err")" -eq 1 ]
    [ "$(grep -c 'the standby stops' "$D/err")" -eq 1 ]
    ( ! grep -q "standing by: following" "$D/err" )
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "standbys stay out of the live job's way: its log, history and checkpoint files and its output are its own, with a failure and without" {
    # fid_files appends to a log it opened before CUDA, appends to a history
    # it opens each time, and writes its own checkpoint whole every
    # iteration; its standby replays all of that a few iterations behind.
    local bin=$BUILD/tests/progs/fid_files
    mkdir -p "$D/plain" "$D/calm" "$D/job"
    FID_FILES_DIR=$D/plain timeout -k 5 30 "$bin" --iters 1000 >"$D/plain/out" 2>"$D/plain/err" ||
        { cat "$D/plain/err"; return 1; }
    export CKPT_EVERY=1
    FID_FILES_DIR=$D/calm ckpt --nproc 1 -- "$bin" --iters 1000 >"$D/calm/out" 2>"$D/calm/err" ||
        { cat "$D/calm/err"; return 1; }
    grep -q "^ckpt-resume: started 1 standby " "$D/calm/err" || { cat "$D/calm/err"; return 1; }
    FID_FILES_DIR=$D/job PROG=fid_files PROG_PATH=$bin run_killed 1 "$D/job/err" "$D/job/out" 0 --iters 1000 ||
        { cat "$D/job/err"; return 1; }
    grep -q "^ckpt-resume: the standby took over at iteration " "$D/job/err" || { cat "$D/job/err"; return 1; }
    for f in train.log history model.ckpt; do
        diff "$D/plain/$f" "$D/calm/$f" || { echo "$f differs with a standby beside the run"; return 1; }
        diff "$D/plain/$f" "$D/job/$f" || { echo "$f differs after the takeover"; return 1; }
    done
    diff "$D/plain/out" "$D/calm/out"
    diff <(resumed_output "$D/job/out") "$D/plain/out"
    [ "$(grep -c '^progress 1$' "$D/calm/err")" -eq 1 ] && [ "$(grep -c '^progress 1$' "$D/job/err")" -eq 1 ]
}

# bats test_tags=covered
@test "a standby that hangs: the takeover gives up on it within seconds, said with why, and the cold path ends bit-exact" {
    # Long enough that the job is still running when its standbys are
    # stopped, however late on a loaded machine they start.
    ARGS="--iters 2000 --hidden 32 --layers 2"
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" &
    local job=$! pgid pid i
    pgid=$(standbys_pgid "$D/err") || { wait $job; cat "$D/err"; return 1; }
    # Once both are up (a standby still starting is given longer).
    for i in $(seq 300); do
        [ "$(grep -c '^libckpt\[rank [01]\]: standing by: following' "$D/err")" -eq 2 ] && break
        sleep 0.1
    done
    sleep 0.5
    kill -STOP -- "-$pgid" || { wait $job; cat "$D/err"; return 1; }
    pid=$(live_pid 0) || { wait $job; cat "$D/err"; return 1; }
    kill -KILL "$pid"
    wait $job || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: stopping the standbys: the standbys replayed no iteration for 5 s on their way to iteration [0-9]* (one hangs)$" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: recovering by the cold path" "$D/err"
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "a standby that diverges from its rank stops, naming the divergence; the live job runs on untouched" {
    CKPT_EVERY=1 ckpt --nproc 1 -- "$BUILD/tests/progs/clockseed" --iters 3000 >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: started 1 standby " "$D/err" || { cat "$D/err"; return 1; }
    grep -q "^libckpt\[rank 0\]: error: the standby stops: the program diverged from its recorded run: " "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: warning: the standby of rank 0 (pid [0-9]*) exited with status [0-9]* (its reason is said above): a failure now recovers by replaying from the start$" "$D/err"
    [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=0 restarts=0" ]
    [ "$(grep -c '^iter [0-9]* batch [0-9]*$' "$D/out")" -eq 3000 ]
}

@test "ckpt-inspect list, the stats lines and the timeline show where each standby is, while the job runs" {
    # ckpt-resume itself in the background (not the ckpt function's subshell), so that SIGTERM reaches it.
    CKPT_STATS_FILE=$D/stats timeout -k 5 120 "$CKPT" --nproc 2 -- "$TRAIN" --iters 4000 --hidden 32 --layers 2 \
        >/dev/null 2>"$D/err" &
    local job=$! i listed=""
    for i in $(seq 600); do
        grep -q "^ckpt-resume: started 2 standbys " "$D/err" && break
        sleep 0.1
    done
    for i in $(seq 100); do
        listed=$("$BUILD/bin/ckpt-inspect" list --job "$CKPT_JOB" 2>&1)
        [ "$(grep -c '^  standby of rank [01] (pid [0-9]*): replayed to iteration [1-9]' <<<"$listed")" -eq 2 ] && break
        sleep 0.1
    done
    # The agent draws each standby on its rank's timeline (the standby
    # lane): where it stood, and how far behind, once a second.
    local tl=""
    for i in $(seq 100); do
        tl=$("$BUILD/bin/ckpt-inspect" timeline --rank 1 --iters 1..1000000 2>&1 | grep ' standby ') && break
        sleep 0.1
    done
    grep -q '^[0-9]* standby [0-9.]* [0-9.]* at=[1-9][0-9]*,behind=[0-9]* host$' <<<"$tl" || { echo "$tl"; kill $job; return 1; }
    # Five commits of each rank at least since its standby ran (a slow,
    # sanitized build takes its time).
    for i in $(seq 300); do
        [ "$(grep '^{"rank":0,' "$D/stats" 2>/dev/null | grep -c '"standby_iteration":')" -ge 5 ] &&
            [ "$(grep '^{"rank":1,' "$D/stats" | grep -c '"standby_iteration":')" -ge 5 ] && break
        sleep 0.1
    done
    kill -TERM $job
    wait $job || true
    grep -q '^ckpt-resume: done exit=' "$D/err" || { cat "$D/err"; return 1; }
    [ "$(grep -c '^  standby of rank [01] (pid [0-9]*): replayed to iteration [1-9]' <<<"$listed")" -eq 2 ] ||
        { echo "$listed"; cat "$D/err"; return 1; }
    # Each says how far behind the iteration every rank holds it is (the
    # snapshots are read before the standbys: a newer one may have been
    # committed, and replayed, in between).
    newest=$(sed -n 's/.*newest generation on every rank [0-9]* (iteration \([0-9]*\)).*/\1/p' <<<"$listed")
    for r in 0 1; do
        line=$(grep "^  standby of rank $r " <<<"$listed")
        at=$(sed -n 's/.*replayed to iteration \([0-9]*\).*/\1/p' <<<"$line")
        if [ "$at" -gt "$newest" ]; then
            [[ $line == *": replayed to iteration $at" ]] || { echo "$listed"; return 1; }
        elif [ "$at" -lt "$newest" ]; then
            [[ $line == *", $((newest - at)) behind the newest iteration every rank holds" ]] || { echo "$listed"; return 1; }
        else
            [[ $line == *", the newest every rank holds" ]] || { echo "$listed"; return 1; }
        fi
    done
    # The stats lines of both ranks say where the standby was at each
    # commit once it ran: never past the committed iteration, and moving.
    for r in 0 1; do
        grep "^{\"rank\":$r," "$D/stats" | grep '"standby_iteration":' |
            sed -E 's/.*"iteration":([0-9]+),.*"standby_iteration":([0-9]+),.*/\1 \2/' >"$D/at.$r"
        [ "$(wc -l <"$D/at.$r")" -ge 5 ] || { cat "$D/stats"; return 1; }
        awk '$2 > $1 { bad = 1 } END { exit bad }' "$D/at.$r" || { cat "$D/at.$r"; return 1; }
        [ "$(awk '{ print $2 }' "$D/at.$r" | sort -un | wc -l)" -ge 2 ]
    done
}

# bats test_tags=long
@test "recovery by the standbys does not grow with the job's age: killed at iteration 1,000 and 20,000, each takes over a snapshot from where it stood, as fast, bit-exact" {
    # The live rank is killed by libckpt's fault point at the end of that
    # iteration; the standby replays at most one snapshot interval to the
    # takeover.  The time is the end-of-job line's, from the death seen to
    # the rank restored; the cold path takes seconds at 20,000 iterations.
    local n t args="--hidden 32 --layers 2" times=()
    for n in 1000 20000; do
        CKPT_STANDBY=0 ckpt --nproc 1 -- "$TRAIN" --iters $((n + 20)) $args >"$D/plain.$n" 2>/dev/null
        CKPT_FAULT=kill:rank=0:iter=$n timeout -k 5 300 "$CKPT" --nproc 1 -- "$TRAIN" --iters $((n + 20)) $args \
            >"$D/out.$n" 2>"$D/err.$n" || { cat "$D/err.$n"; return 1; }
        line=$(grep '^ckpt-resume: the standbys take over at iteration ' "$D/err.$n") || { cat "$D/err.$n"; return 1; }
        [[ $line =~ at\ iteration\ ([0-9]+)\ \(the\ one\ furthest\ behind\ is\ at\ iteration\ ([0-9]+)\)$ ]]
        k=${BASH_REMATCH[1]} behind=${BASH_REMATCH[2]}
        [ "$k" -le "$n" ] && [ "$k" -gt $((n - 20)) ] || { cat "$D/err.$n"; return 1; }
        [ $((k - behind)) -le $CKPT_EVERY ] || { echo "a standby was $((k - behind)) iterations behind"; return 1; }
        ( ! grep -q "replaying [0-9]* iterations\|cold path" "$D/err.$n" )
        t=$(sed -n -E 's/^ckpt-resume: done exit=0 restarts=1 \(standby ([0-9.]+) s\)$/\1/p' "$D/err.$n")
        [ -n "$t" ] || { cat "$D/err.$n"; return 1; }
        times+=("$t")
        diff <(resumed_output "$D/out.$n") "$D/plain.$n"
    done
    echo "recovery at 1,000: ${times[0]} s, at 20,000: ${times[1]} s"
    # Within 1.5 times of each other; 50 ms either way is a busy machine's scheduling, not the job's age.
    awk -v a="${times[0]}" -v b="${times[1]}" 'BEGIN { exit !(b <= 1.5 * a + 0.05 && a <= 1.5 * b + 0.05) }'
}

# cpu_ticks PID: the user and system time PID has used, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

@test "CKPT_STANDBY_CPU holds a standby to its share of a core: it falls behind, said; its takeover is not held back and ends bit-exact" {
    # hostwork's host side is the heavy part, as a framework's dispatch
    # is: its standby needs about 0.4 of a core here to keep up.
    local bin=$BUILD/tests/progs/hostwork job pgid pid a b t0 t1 used
    CKPT_STANDBY=0 ckpt --nproc 1 -- "$bin" --iters 4000 >"$D/plain" 2>/dev/null
    CKPT_STANDBY_CPU=0.05 CKPT_STANDBY_LAG=1 ckpt --nproc 1 -- "$bin" --iters 4000 >"$D/out" 2>"$D/err" &
    job=$!
    pgid=$(standbys_pgid "$D/err") || { wait $job; cat "$D/err"; return 1; }
    sleep 0.5
    a=$(cpu_ticks "$pgid") t0=$(date +%s.%N)
    sleep 2
    b=$(cpu_ticks "$pgid") t1=$(date +%s.%N)
    used=$(awk -v a="$a" -v b="$b" -v t0="$t0" -v t1="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", (b - a) / hz / (t1 - t0) }')
    echo "the standby used $used of a core"
    for _ in $(seq 100); do grep -q ' lags: ' "$D/err" && break; sleep 0.1; done
    PROG=hostwork pid=$(live_pid 0) || { wait $job; cat "$D/err"; return 1; }
    kill -KILL "$pid"
    wait $job || { cat "$D/err"; return 1; }
    # Twice the budget: one second's allowance and the clock's ticks.
    awk -v u="$used" 'BEGIN { exit !(u <= 0.1) }' || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: warning: the standby of rank 0 lags: " "$D/err" || { cat "$D/err"; return 1; }
    local line k behind
    line=$(grep '^ckpt-resume: the standbys\? take\(s\)\? over at iteration ' "$D/err") || { cat "$D/err"; return 1; }
    [[ $line =~ at\ iteration\ ([0-9]+)\ \(the\ one\ furthest\ behind\ is\ at\ iteration\ ([0-9]+)\)$ ]]
    k=${BASH_REMATCH[1]} behind=${BASH_REMATCH[2]}
    echo "took over at $k from $behind"
    [ $((k - behind)) -ge 200 ] || { cat "$D/err"; return 1; } # held back, it had fallen far behind
    grep -q "^ckpt-resume: the standby took over at iteration $k in " "$D/err" || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
}

# bats test_tags=covered
@test "a standby that falls behind is said to lag, by how much, and to have caught up once it has; the job runs on untouched" {
    CKPT_STANDBY=0 ckpt --nproc 1 -- "$TRAIN" --iters 3000 --hidden 32 --layers 2 >"$D/plain" 2>/dev/null
    CKPT_STANDBY_LAG=1 ckpt --nproc 1 -- "$TRAIN" --iters 3000 --hidden 32 --layers 2 >"$D/out" 2>"$D/err" &
    local job=$! i pgid
    pgid=$(standbys_pgid "$D/err") || { wait $job; cat "$D/err"; return 1; }
    kill -STOP -- "-$pgid"
    for i in $(seq 100); do grep -q ' lags: ' "$D/err" && break; sleep 0.1; done
    kill -CONT -- "-$pgid"
    wait $job || { cat "$D/err"; return 1; }
    grep -Eq "^ckpt-resume: warning: the standby of rank 0 lags: at iteration [0-9]+, short of iteration [0-9]+, which every rank had committed [0-9]+ s ago \(CKPT_STANDBY_LAG=1\); a takeover now replays that much more$" "$D/err" ||
        { cat "$D/err"; return 1; }
    # Then caught up (after the lag was said, not before).
    grep -A1000 -m1 ' lags: ' "$D/err" | grep -Eq "^ckpt-resume: the standby of rank 0 has caught up \(iteration [0-9]+\)$" ||
        { cat "$D/err"; return 1; }
    [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=0 restarts=0" ]
    diff "$D/out" "$D/plain"
}

@test "communicators made nonblocking, split with splitShare, a registered buffer, state in ncclMemAlloc memory, PreMulSum operators, AlltoAll, Gather, Scatter and Bcast, and at the end NCCL's memory asked for, a window's buffer and a communicator revoked: the standbys take over, and the cold path restores, bit-exact (2 and 4 ranks; NCCL's buffers by cuMem and by cuMemAlloc)" {
    local n mode prog=$BUILD/tests/progs/commsplit
    for n in 2 4; do
        # NCCL makes its buffers with cuMem calls by default; older NCCL
        # with cuMemAlloc: each moves the program's later allocations.
        [ $n = 2 ] && export NCCL_CUMEM_ENABLE=0 || unset NCCL_CUMEM_ENABLE
        CKPT_STANDBY=0 ckpt --nproc $n -- "$prog" --iters 300 >"$D/plain.$n" 2>/dev/null
        for mode in 1 0; do
            CKPT_STANDBY=$mode CKPT_FAULT=kill:rank=1:iter=200 ckpt --nproc $n -- "$prog" --iters 300 \
                >"$D/out.$n.$mode" 2>"$D/err.$n.$mode" || { cat "$D/err.$n.$mode"; return 1; }
            if [ $mode = 1 ]; then
                grep -q '^ckpt-resume: the standbys take over at iteration 190 ' "$D/err.$n.$mode" ||
                    { cat "$D/err.$n.$mode"; return 1; }
                ( ! grep -q "replaying [0-9]* iterations\|cold path" "$D/err.$n.$mode" )
            else
                grep -q '^libckpt\[rank 1\]: replaying 190 iterations to restore generation ' "$D/err.$n.$mode" ||
                    { cat "$D/err.$n.$mode"; return 1; }
            fi
            # Each rank prints its digest at the end, in whatever order they finish.
            diff <(resumed_output "$D/out.$n.$mode" | sort) <(sort "$D/plain.$n")
        done
    done
}

@test "a standby holds no communicator until it takes over: NCCL makes none while it stands by, every one the rank made is made at the takeover, and the job ends bit-exact" {
    # The double's NCCL says "Init COMPLETE" for each communicator it makes
    # and "window ... registered" for each window (NCCL_DEBUG=INFO), on
    # stderr: a standby's goes to its replay-output until it is live, the
    # live job's to the job's stderr.
    local prog=$BUILD/tests/progs/commsplit job pgid r i listed PROG=commsplit
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$prog" --iters 3000 >"$D/plain" 2>/dev/null
    NCCL_DEBUG=INFO ckpt --nproc 2 -- "$prog" --iters 3000 >"$D/out" 2>"$D/err" &
    job=$!
    pgid=$(standbys_pgid "$D/err") || { kill $job; cat "$D/err"; return 1; }
    # Both standbys past an iteration: past the communicators' creation.
    for i in $(seq 300); do
        listed=$("$BUILD/bin/ckpt-inspect" list --job "$CKPT_JOB" 2>&1)
        [ "$(grep -c '^  standby of rank [01] (pid [0-9]*): replayed to iteration [1-9]' <<<"$listed")" -eq 2 ] && break
        sleep 0.1
    done
    [ "$(grep -c '^  standby of rank [01] (pid [0-9]*): replayed to iteration [1-9]' <<<"$listed")" -eq 2 ] ||
        { kill $job; echo "$listed"; return 1; }
    for r in 0 1; do
        [ -e "$CKPT_ARENA_DIR/0-$CKPT_JOB/rank$r/replay-output" ] || { kill $job; echo "no output of standby $r"; return 1; }
        ( ! grep -q 'Init COMPLETE\|window .* registered' "$CKPT_ARENA_DIR/0-$CKPT_JOB/rank$r/replay-output" ) ||
            { kill $job; cat "$CKPT_ARENA_DIR/0-$CKPT_JOB/rank$r/replay-output"; return 1; }
    done
    # The live ranks made theirs: world and parity group, each rank, and a window of the world each.
    [ "$(grep -c 'Init COMPLETE' "$D/err")" -eq 4 ] || { kill $job; cat "$D/err"; return 1; }
    [ "$(grep -c 'window .* registered' "$D/err")" -eq 2 ] || { kill $job; cat "$D/err"; return 1; }
    kill -KILL "$(live_pid 1)"
    wait $job || { cat "$D/err"; return 1; }
    grep -q '^ckpt-resume: the standbys took over at iteration [0-9]* in ' "$D/err" || { cat "$D/err"; return 1; }
    # The two that took over made both communicators and the window each, after the takeover.
    [ "$(sed -n '/^ckpt-resume: the standbys take over at iteration/,$p' "$D/err" | grep -c 'Init COMPLETE')" -eq 4 ] ||
        { cat "$D/err"; return 1; }
    [ "$(sed -n '/^ckpt-resume: the standbys take over at iteration/,$p' "$D/err" | grep -c 'window .* registered')" -eq 2 ] ||
        { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out" | sort) <(sort "$D/plain")
}

# no_context_until_takeover N PROG ARGS...: the job under ckpt-resume, each
# standby past iteration 10 holds no CUDA context (the double lists every
# context made in FAKEGPU_CONTEXT_LOG, as nvidia-smi lists the processes
# holding one) while its rank does; rank N-1 killed, every standby makes
# its context at the takeover and the job ends as an uninterrupted run.
no_context_until_takeover() {
    local n=$1 prog=$2 job i listed pids p
    shift 2
    CKPT_STANDBY=0 ckpt --nproc "$n" -- "$prog" "$@" >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    rm -f "$D/ctx"
    FAKEGPU_CONTEXT_LOG=$D/ctx ckpt --nproc "$n" -- "$prog" "$@" >"$D/out" 2>"$D/err" &
    job=$!
    standbys_pgid "$D/err" >/dev/null || { kill $job; cat "$D/err"; return 1; }
    for i in $(seq 300); do
        listed=$("$BUILD/bin/ckpt-inspect" list --job "$CKPT_JOB" 2>&1)
        [ "$(grep -c '^  standby of rank [0-9]* (pid [0-9]*): replayed to iteration [1-9][0-9]' <<<"$listed")" -eq "$n" ] &&
            break
        sleep 0.1
    done
    pids=$(sed -n 's/^  standby of rank [0-9]* (pid \([0-9]*\)): replayed to iteration [1-9][0-9].*/\1/p' <<<"$listed")
    [ "$(wc -w <<<"$pids")" -eq "$n" ] || { kill $job; echo "$listed"; return 1; }
    for p in $pids; do
        ( ! grep -q "^$p " "$D/ctx" ) || { kill $job; echo "standby $p holds a context:"; cat "$D/ctx"; return 1; }
    done
    for i in $(seq 0 $((n - 1))); do
        grep -q "^$(live_pid "$i") [0-9]* primary$" "$D/ctx" || { kill $job; echo "rank $i holds none"; cat "$D/ctx"; return 1; }
    done
    kill -KILL "$(live_pid $((n - 1)))"
    wait $job || { cat "$D/err"; return 1; }
    grep -q '^ckpt-resume: the standbys\? took over at iteration [0-9]* in ' "$D/err" || { cat "$D/err"; return 1; }
    ( ! grep -q "replaying [0-9]* iterations\|cold path\|which a standby without a context cannot answer" "$D/err" ) ||
        { cat "$D/err"; return 1; }
    [ "$(grep -c "^libckpt\[rank [0-9]*\]: the standby's contexts, streams and events made real (the takeover): [0-9]* calls in " "$D/err")" -eq "$n" ] ||
        { cat "$D/err"; return 1; }
    for p in $pids; do
        grep -q "^$p [0-9]* primary$" "$D/ctx" || { echo "standby $p made no context at its takeover"; cat "$D/ctx"; return 1; }
    done
    diff <(resumed_output "$D/out" | sort) <(sort "$D/plain")
}

@test "a standby holds no CUDA context until it takes over: its contexts, streams, events and allocations are virtual, made at the takeover, and the job ends bit-exact (the trainer on 2 ranks, a caching allocator, split and nonblocking communicators)" {
    no_context_until_takeover 2 "$TRAIN" --iters 3000 --hidden 32 --layers 2
    PROG=alloc_train no_context_until_takeover 1 "$BUILD/tests/progs/alloc_train" caching --iters 3000
    PROG=commsplit no_context_until_takeover 2 "$BUILD/tests/progs/commsplit" --iters 3000
}

@test "standbys are on by default: with CKPT_STANDBY unset ckpt-resume starts one beside each rank and a failure comes back by their takeover; a launcher of the job's own that is not torchrun runs the job without them, said" {
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    ( ! grep -q "started [0-9]* standby" "$D/plain.err" ) || { cat "$D/plain.err"; return 1; }
    unset CKPT_STANDBY
    run_killed 2 "$D/err" "$D/out" 1 $ARGS || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: started 2 standbys (process group " "$D/err" || { cat "$D/err"; return 1; }
    grep -q '^ckpt-resume: the standbys took over at iteration [0-9]* in ' "$D/err" || { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"
    # A launcher of the job's own: the job runs, without standbys.
    printf '#!/bin/sh\nexec "$@"\n' >"$D/launch" && chmod +x "$D/launch"
    ckpt -- "$D/launch" "$TRAIN" --iters 40 --hidden 32 --layers 2 >"$D/own" 2>"$D/own.err" ||
        { cat "$D/own.err"; return 1; }
    grep -q "^ckpt-resume: warning: no standbys: $D/launch is not torchrun, .* a failure recovers by replaying from the start" \
        "$D/own.err" || { cat "$D/own.err"; return 1; }
    ( ! grep -q "started [0-9]* standby" "$D/own.err" ) || { cat "$D/own.err"; return 1; }
}

@test "a standby holds no device memory: beside a rank that fills most of the GPU they share, it reserves the rank's addresses, gets memory at the takeover and ends bit-exact" {
    # alloc_train caching: PyTorch's caching allocator, 2 MiB segments.  One
    # GPU of 10 MiB for the rank and its standby: the rank holds 6 MiB, so a
    # standby that allocated as the rank does would run out of memory.
    local gpu=$D/gpu pgid pid i held
    mkdir "$gpu"
    export FAKEGPU_SHARED_GPU=$gpu FAKEGPU_MEM_MB=10 PROG=alloc_train
    local prog=$BUILD/tests/progs/$PROG
    CKPT_STANDBY=0 ckpt --nproc 1 -- "$prog" caching --iters 3000 >"$D/plain" 2>"$D/plain.err" ||
        { cat "$D/plain.err"; return 1; }
    ckpt --nproc 1 -- "$prog" caching --iters 3000 >"$D/out" 2>"$D/err" &
    local job=$!
    pgid=$(standbys_pgid "$D/err") || { kill $job; cat "$D/err"; return 1; }
    for i in $(seq 100); do
        pid=$(pgrep -g "$pgid" -x "$PROG" | head -n 1) && [ -n "$pid" ] && break
        sleep 0.1
    done
    [ -n "$pid" ] || { echo "no standby"; kill $job; cat "$D/err"; return 1; }
    sleep 1 # the standby has replayed the allocator's first segments
    # What it holds on the GPU: the first 8 bytes of its file in the double.
    held=$(od -An -tu8 -N8 "$gpu/$pid" 2>/dev/null | tr -d ' ')
    held=${held:-0}
    live=$(live_pid 0) || { kill $job; cat "$D/err"; return 1; }
    echo "the standby holds $held bytes of device memory, the rank $(od -An -tu8 -N8 "$gpu/$live" | tr -d ' ')"
    [ "$held" -lt $((1 << 20)) ]
    [ "$(od -An -tu8 -N8 "$gpu/$live" | tr -d ' ')" -ge $((4 << 20)) ]
    kill -KILL "$live"
    wait $job || { cat "$D/err"; return 1; }
    grep -q '^ckpt-resume: the standbys\? took over at iteration [0-9]* in ' "$D/err" || { cat "$D/err"; return 1; }
    grep -q '^libckpt\[rank 0\]: device memory for the takeover: [0-9]* ranges, [4-9]\.[0-9] MiB$' "$D/err" ||
        { cat "$D/err"; return 1; }
    ( ! grep -q "replaying [0-9]* iterations\|cold path\|out of memory" "$D/err" )
    diff <(resumed_output "$D/out") "$D/plain"
}

@test "a standby ends with its ckpt-resume: killed with SIGKILL, it leaves no standby behind (the ranks are left as without standbys)" {
    "$CKPT" --nproc 2 -- "$TRAIN" --iters 100000 --hidden 32 --layers 2 >"$D/out" 2>"$D/err" &
    local job=$! pgid rpgid i
    pgid=$(standbys_pgid "$D/err") || { kill $job; cat "$D/err"; return 1; }
    rpgid=$(sed -n 's/^ckpt-resume: started 2 ranks of .* (process group \([0-9]*\),.*/\1/p' "$D/err")
    [ -n "$(pgrep -g "$pgid")" ]
    kill -KILL $job
    # SIGKILL takes a while to end a large process (under ThreadSanitizer, seconds).
    for i in $(seq 100); do
        [ -z "$(pgrep -g "$pgid")" ] && break
        sleep 0.1
    done
    [ -n "$rpgid" ] && kill -KILL -- -"$rpgid" 2>/dev/null || true
    [ -z "$(pgrep -g "$pgid")" ] || { ps -o pid,stat,args -g "$pgid"; return 1; }
}

# bats test_tags=covered
@test "a standby dies with its ckpt-resume from its first line, before the program touches CUDA, and one whose ckpt-resume is already gone exits at once" {
    local lib=$BUILD/lib/libckpt.so parent child i rc=0
    # A program that never calls cuInit (sleep), its agent killed: the
    # signal was armed when libckpt loaded.
    bash -c "LD_PRELOAD=$lib CKPT_FOLLOW=\$\$ sleep 60 & echo \$! >$D/child; wait" &
    parent=$!
    for i in $(seq 100); do [ -s "$D/child" ] && break; sleep 0.05; done
    child=$(cat "$D/child")
    sleep 0.2 # past the constructor
    kill -0 "$child"
    kill -KILL "$parent"
    for i in $(seq 100); do kill -0 "$child" 2>/dev/null || break; sleep 0.05; done
    ! kill -0 "$child" 2>/dev/null || { kill -KILL "$child"; echo "the standby outlived its agent"; return 1; }

    # An agent gone before the standby started: it exits with 75 before
    # the program's first line.
    bash -c 'exit 0' &
    parent=$!
    wait "$parent"
    CKPT_FOLLOW=$parent LD_PRELOAD=$lib timeout 30 "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || rc=$?
    [ "$rc" -eq 75 ] || { echo "exit $rc"; cat "$D/err"; return 1; }
    [ ! -s "$D/out" ]
}

@test "under torchrun: a second torchrun starts the standbys and serves their rendezvous on a port of their own; a worker killed, they take over, bit-exact; standbys through a launcher that is not torchrun are refused before anything starts" {
    torchrun_standin "$D/torchrun"
    CKPT_STANDBY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    # The job's torchrun at a port of its choosing: the standbys' must be at another.
    local port k
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    ckpt -- "$D/torchrun" --nproc-per-node 2 --master-port "$port" --no-python "$TRAIN" $ARGS >"$D/out" 2>"$D/err" &
    local job=$!
    kill_when_standing 2 "$D/err" 1 || { wait $job; cat "$D/err"; return 1; }
    wait $job || { echo "exit $?"; cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: started 2 standbys through a second $D/torchrun (pid [0-9]*, its port [0-9]*)$" "$D/err" ||
        { cat "$D/err"; return 1; }
    [ "$(sed -n 's/^ckpt-resume: started 2 standbys .*, its port \([0-9]*\))$/\1/p' "$D/err")" != "$port" ]
    k=$(sed -n 's/^ckpt-resume: the standbys took over at iteration \([0-9]*\) in [0-9.]* s$/\1/p' "$D/err")
    [ -n "$k" ] || { cat "$D/err"; return 1; }
    [ "$(grep -c "^libckpt\[rank [01]\]: restored iteration $k " "$D/err")" -eq 2 ] || { cat "$D/err"; return 1; }
    ! grep -q "replaying [0-9]* iterations\|cold path\|Address already in use" "$D/err" || { cat "$D/err"; return 1; }
    [[ $(tail -n 1 "$D/err") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(standby\ [0-9]+\.[0-9]{3}\ s\)$ ]] ||
        { cat "$D/err"; return 1; }
    diff <(resumed_output "$D/out") "$D/plain"

    # Standbys through a launcher of the job's own only when it is torchrun.
    run --separate-stderr ckpt -- sh -c "exec $TRAIN $ARGS"
    [ "$status" -eq 2 ] && [[ $stderr == *"CKPT_STANDBY=1: sh is not torchrun"*"ckpt-resume --nproc N, or set CKPT_STANDBY=0"* ]] ||
        { echo "$status $stderr"; return 1; }
}

# faulted PROG ARGS...: PROG under ckpt-resume with its standby, its rank killed at the boundary of
# iteration $KILL_AT (CKPT_FAULT); the output in $D/out, ckpt-resume's in $D/err, and an uninterrupted
# run's in $D/plain.
faulted() {
    CKPT_STANDBY=0 ckpt --nproc 1 -- "$@" >"$D/plain" 2>"$D/plain.err" || { cat "$D/plain.err"; return 1; }
    CKPT_FAULT=kill:rank=0:iter=$KILL_AT ckpt --nproc 1 -- "$@" >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    diff <(grep '^digest' "$D/out") <(grep '^digest' "$D/plain") || { cat "$D/err"; return 1; }
}

@test "programs that allocate in stream order every iteration (cudaMallocAsync's pool; two pools on three streams) are taken over by their standby bit-exact, its journal as short at iteration 3,900 as at 900; one that reads its pools' statistics is refused at the takeover, said, and comes back by the cold path" {
    local n calls=()
    for n in 1000 4000; do
        KILL_AT=$((n - 100)) faulted "$BUILD/tests/progs/alloc_train" async --iters $n || return 1
        grep -q "^ckpt-resume: the standby took over at iteration [0-9]* in " "$D/err" || { cat "$D/err"; return 1; }
        calls+=("$(sed -n 's/.*made real (the takeover): \([0-9]*\) calls in .*/\1/p' "$D/err")")
    done
    echo "driver calls that made the standby real, killed at iterations 900 and 3,900: ${calls[*]}"
    [ -n "${calls[0]}" ] && [ "${calls[0]}" = "${calls[1]}" ] || return 1
    KILL_AT=1900 faulted "$BUILD/tests/progs/poolmix" --iters 2000 || return 1
    grep -q "^ckpt-resume: the standby took over at iteration [0-9]* in " "$D/err" || { cat "$D/err"; return 1; }
    KILL_AT=1900 faulted "$BUILD/tests/progs/fid_poolstats" --iters 2000 || return 1
    grep -q "^libckpt\[rank 0\]: error: restore of iteration [0-9]* refused: the program reads its memory pools' statistics (cuMemPoolGetAttribute), and the standby held its stream-ordered memory outside the pools (by reserving its addresses): after a takeover they would not be its rank's" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: recovering by the cold path" "$D/err" || { cat "$D/err"; return 1; }
}
