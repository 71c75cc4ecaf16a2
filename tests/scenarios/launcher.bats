#!/usr/bin/env bats
# ckpt-resume as a launcher: what each rank sees, how the job's exit status
# is formed, how a failure or a signal stops the whole job, and that nothing
# the job started outlives it.  Ranks are small shell commands; each one
# writes what it saw, or its pid, into a per-test directory.  Ranks that
# start long sleeps send their output to /dev/null, so that a process the
# launcher failed to stop cannot hold bats' output open: the test then fails
# at once instead of hanging.  Restarts are off here (CKPT_MAX_RESTARTS=0):
# these ranks take no checkpoint, and each test is about one launch;
# tests/scenarios/resume.bats is about restarts.

BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
CKPT=$BUILD/bin/ckpt-resume
bats_require_minimum_version 1.5.0

setup() {
    [ -x "$CKPT" ] || { echo "missing $CKPT: build first" >&2; return 1; }
    D=$BATS_TEST_TMPDIR
    unset MASTER_ADDR MASTER_PORT CKPT_KILL_GRACE
    export CKPT_MAX_RESTARTS=0 CKPT_ARENA_DIR=$D/arena
}

# Waits up to 20 s until $1 files match the glob $2.
wait_files() {
    local want=$1 glob=$2 i n
    for i in $(seq 200); do
        n=$(compgen -G "$glob" | wc -l)
        [ "$n" -ge "$want" ] && return 0
        sleep 0.1
    done
    echo "only $n of $want files $glob appeared" >&2
    return 1
}

# Succeeds when no pid listed in the files $@ is alive; a survivor is named,
# then killed, so a failing test leaves nothing behind either.
all_gone() {
    local f pid rc=0
    for f in "$@"; do
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then
            echo "pid $pid from $f still alive: $(ps -o stat=,args= -p "$pid")" >&2
            kill -9 "$pid" 2>/dev/null
            rc=1
        fi
    done
    return $rc
}

# ckpt-resume, bounded: if it ever fails to end a job, the test fails in
# 30 s (timeout's SIGTERM is passed on like any other) instead of hanging.
ckpt() { timeout -k 5 30 "$CKPT" "$@"; }

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

@test "each rank sees the torchrun variables" {
    run ckpt --nproc 3 -- sh -c 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT" > "$0/rank.$RANK"' "$D"
    [ "$status" -eq 0 ]
    port=$(cut -d' ' -f7 "$D/rank.0")
    [[ $port =~ ^[0-9]+$ ]]
    [ "$port" -gt 0 ]
    [ "$port" -lt 65536 ]
    for r in 0 1 2; do
        [ "$(cat "$D/rank.$r")" = "$r $r 3 3 0 127.0.0.1 $port" ]
    done
}

@test "MASTER_ADDR and MASTER_PORT are kept from the environment; stale RANK is replaced" {
    MASTER_ADDR=10.1.2.3 MASTER_PORT=29555 RANK=7 run ckpt --nproc 2 -- sh -c 'echo "$RANK $MASTER_ADDR $MASTER_PORT" > "$0/rank.$RANK"' "$D"
    [ "$status" -eq 0 ]
    [ "$(cat "$D/rank.0")" = "0 10.1.2.3 29555" ]
    [ "$(cat "$D/rank.1")" = "1 10.1.2.3 29555" ]
}

@test "the user's PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF reach the ranks unchanged; a restoring launch adds PYTHONUNBUFFERED=1 unless it is set" {
    local show='echo "${PYTORCH_CUDA_ALLOC_CONF-unset}|${PYTORCH_ALLOC_CONF-unset}|${PYTHONUNBUFFERED-unset}" > "$0/env.$RANK"'
    unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF PYTHONUNBUFFERED
    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,max_split_size_mb:128" PYTORCH_ALLOC_CONF="backend:native" \
        run ckpt --nproc 2 -- sh -c "$show" "$D"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    for r in 0 1; do [ "$(cat "$D/env.$r")" = "expandable_segments:True,max_split_size_mb:128|backend:native|unset" ]; done
    # A launch that restores (CKPT_RESTORE): Python must not hold replay's
    # lines in its own buffer past the restore.
    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" CKPT_RESTORE=5 run ckpt --nproc 1 -- sh -c "$show" "$D"
    [ "$(cat "$D/env.0")" = "expandable_segments:True|unset|1" ] || { cat "$D/env.0"; echo "$output"; false; }
    PYTHONUNBUFFERED=0 CKPT_RESTORE=5 run ckpt --nproc 1 -- sh -c "$show" "$D"
    [ "$(cat "$D/env.0")" = "unset|unset|0" ] || { cat "$D/env.0"; echo "$output"; false; }
}

@test "ranks load their kernels eagerly (CUDA_MODULE_LOADING=EAGER), so a replay, whose launches load nothing, finds its allocations where they were; a user's setting is kept" {
    local show='echo "${CUDA_MODULE_LOADING-unset}" > "$0/env.$RANK"'
    unset CUDA_MODULE_LOADING
    run ckpt --nproc 2 -- sh -c "$show" "$D"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    for r in 0 1; do [ "$(cat "$D/env.$r")" = EAGER ]; done
    CUDA_MODULE_LOADING=LAZY run ckpt --nproc 1 -- sh -c "$show" "$D"
    [ "$(cat "$D/env.0")" = LAZY ]
}

@test "CKPT_TORCH_ALLOCATOR=async gives the ranks backend:cudaMallocAsync, and never changes a PyTorch allocator setting the user made" {
    local show='echo "${PYTORCH_CUDA_ALLOC_CONF-unset}|${PYTORCH_ALLOC_CONF-unset}" > "$0/env.$RANK"'
    unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
    CKPT_TORCH_ALLOCATOR=async run ckpt --nproc 1 -- sh -c "$show" "$D"
    [ "$status" -eq 0 ] && [ "$(cat "$D/env.0")" = "backend:cudaMallocAsync|unset" ] || { echo "$output"; false; }
    # Already chosen by the user: as it is.
    CKPT_TORCH_ALLOCATOR=async PYTORCH_ALLOC_CONF="backend:cudaMallocAsync" run ckpt --nproc 1 -- sh -c "$show" "$D"
    [ "$status" -eq 0 ] && [ "$(cat "$D/env.0")" = "unset|backend:cudaMallocAsync" ] || { echo "$output"; false; }
    # Another choice of the user's: a configuration error before any rank starts.
    rm -f "$D/env.0"
    CKPT_TORCH_ALLOCATOR=async PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" run ckpt --nproc 1 -- sh -c "$show" "$D"
    [ "$status" -eq 2 ] && [ ! -e "$D/env.0" ] || { echo "$output"; false; }
    echo "$output" | grep -q "CKPT_TORCH_ALLOCATOR=async would change the PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True you set"
    CKPT_TORCH_ALLOCATOR=fast run ckpt --nproc 1 -- true
    [ "$status" -eq 2 ] && echo "$output" | grep -q "CKPT_TORCH_ALLOCATOR"
}

@test "the exit status is the rank's, and the done line comes last on stderr" {
    # command | expected status
    while IFS='|' read -r cmd want; do
        ckpt -- sh -c "$cmd" 2>"$D/err" && got=0 || got=$?
        [ "$got" -eq "$want" ] || { echo "'$cmd': exit $got, want $want" >&2; return 1; }
        [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=$want restarts=0" ] || { cat "$D/err" >&2; return 1; }
    done <<'EOF'
exit 0|0
exit 3|3
kill -9 $$|137
kill -TERM $$|143
EOF
}

@test "a command that cannot be run exits 127" {
    run -127 ckpt -- "$D/no-such-program"
    [[ $output == *"cannot start rank 0"*"no-such-program"* ]]
}

@test "the first failure wins and the other ranks are gone within the grace period" {
    export CKPT_KILL_GRACE=5
    t0=$(now_ms)
    run ckpt --nproc 4 -- sh -c '
        exec >/dev/null 2>&1
        echo $$ > "$0/pid.$RANK.tmp" && mv "$0/pid.$RANK.tmp" "$0/pid.$RANK"
        if [ "$RANK" = 2 ]; then
            while [ $(ls "$0" | grep -c "^pid\.[0-9]*$") -lt 4 ]; do sleep 0.05; done
            exit 3
        fi
        exec sleep 1000' "$D"
    t1=$(now_ms)
    [ "$status" -eq 3 ]
    [[ $output == *"rank 2 "*"exited with status 3"* ]]
    [ $((t1 - t0)) -lt 5000 ]
    all_gone "$D"/pid.*
}

@test "a rank that ignores SIGTERM is killed after CKPT_KILL_GRACE" {
    export CKPT_KILL_GRACE=1
    t0=$(now_ms)
    run ckpt --nproc 2 -- sh -c '
        exec >/dev/null 2>&1
        trap "" TERM
        echo $$ > "$0/pid.$RANK"
        if [ "$RANK" = 0 ]; then
            while [ ! -e "$0/pid.1" ]; do sleep 0.05; done
            exit 9
        fi
        exec sleep 1000' "$D"
    t1=$(now_ms)
    [ "$status" -eq 9 ]
    [[ $output == *"sending SIGKILL"* ]]
    [ $((t1 - t0)) -ge 1000 ]
    [ $((t1 - t0)) -lt 4000 ]
    all_gone "$D"/pid.*
}

@test "SIGTERM, SIGHUP and SIGINT sent to ckpt-resume reach every rank" {
    for sig in TERM HUP INT; do
        rm -rf "$D/$sig" && mkdir "$D/$sig"
        # timeout (as in ckpt, but run directly so that $! is its pid) passes
        # the signal on to ckpt-resume; env undoes the SIGINT that bash ignores
        # in background jobs.
        env --default-signal=INT timeout -k 20 30 "$CKPT" --nproc 3 -- sh -c '
            exec >/dev/null 2>&1
            trap "echo got > \"$0/trap.$RANK\"; exit 7" '$sig'
            sleep 1000 & echo $! > "$0/pid.sleep.$RANK"
            echo $$ > "$0/pid.$RANK"
            wait' "$D/$sig" 2>"$D/$sig/err" 3>&- &
        launcher=$!
        wait_files 3 "$D/$sig/pid.[0-9]*"
        t0=$(now_ms)
        kill -$sig $launcher
        wait $launcher && got=0 || got=$?
        t1=$(now_ms)
        # The background sleeps ignore SIGINT: the SIGTERM for what the ranks
        # left, not the SIGKILL after the grace period, must end them.
        [ $((t1 - t0)) -lt 3000 ] || { echo "SIG$sig: took $((t1 - t0)) ms" >&2; return 1; }
        [ "$got" -eq 7 ] || { echo "SIG$sig: exit $got" >&2; cat "$D/$sig/err" >&2; return 1; }
        [ "$(cat "$D/$sig"/trap.* | wc -l)" -eq 3 ]
        grep -q "got SIG$sig, passing it to the job" "$D/$sig/err"
        all_gone "$D/$sig"/pid.*
        [ $(ls "$D/$sig"/pid.* | wc -l) -eq 6 ]
    done
}

@test "wrapping a command that forks: its children and grandchildren are killed and reaped" {
    run ckpt -- sh -c '
        exec >/dev/null 2>&1
        sleep 1000 & echo $! > "$0/pid.a"
        sh -c "sleep 1000 & echo \$! > \"$0/pid.b\"; wait" & echo $! > "$0/pid.c"
        while [ ! -e "$0/pid.b" ]; do sleep 0.05; done
        exit 4' "$D"
    [ "$status" -eq 4 ]
    all_gone "$D"/pid.*
}

@test "processes left behind by ranks that succeeded are stopped, even outside the job's group" {
    # The setsid child writes its pid once it has left the group, so the
    # rank's exit cannot catch it still inside.
    CKPT_KILL_GRACE=1 run ckpt --nproc 2 -- sh -c '
        exec >/dev/null 2>&1
        sleep 1000 & echo $! > "$0/pid.child.$RANK"
        setsid sh -c "echo \$\$ > \"$0/pid.setsid.$RANK\"; exec sleep 1000" &
        while [ ! -s "$0/pid.setsid.$RANK" ]; do sleep 0.05; done
        exit 0' "$D"
    [ "$status" -eq 0 ]
    [[ $output == *"stopping the processes they left"* ]]
    [ "${lines[-1]}" = "ckpt-resume: done exit=0 restarts=0" ]
    all_gone "$D"/pid.*
}

@test "bad usage exits 2 and names the option and what it accepts" {
    # arguments | expected message
    while IFS='|' read -r args want; do
        eval "set -- $args"
        ckpt "$@" >"$D/out" 2>&1 && got=0 || got=$?
        [ "$got" -eq 2 ] || { echo "ckpt-resume $args: exit $got" >&2; return 1; }
        grep -qF -- "$want" "$D/out" || { echo "ckpt-resume $args:" >&2; cat "$D/out" >&2; return 1; }
    done <<'EOF'
true|expected '--' before the command, got 'true'
|missing '-- CMD'
--|no command after '--'
--nproc 0 -- true|--nproc: expected an integer from 1 to 4096, got '0'
--nproc junk -- true|--nproc: expected an integer from 1 to 4096, got 'junk'
--nproc=4097 -- true|--nproc: expected an integer from 1 to 4096, got '4097'
--nproc|--nproc needs a value
--max-restarts -1 -- true|--max-restarts: expected an integer from 0 to 1000, got '-1'
--max-restarts 1.5 -- true|--max-restarts: expected an integer from 0 to 1000, got '1.5'
--max-restarts=1001 -- true|--max-restarts: expected an integer from 0 to 1000, got '1001'
--frobnicate -- true|unknown option '--frobnicate'; accepted: --nproc N, --max-restarts R, --coord etcd://HOST:PORT
--nnodes 0 -- true|--nnodes: expected an integer from 1 to 65536, got '0'
--node-rank x -- true|--node-rank: expected an integer from 0 to 65535, got 'x'
--coord|--coord needs a value: etcd://HOST:PORT[,...]
EOF
    CKPT_KILL_GRACE=soon run ckpt -- true
    [ "$status" -eq 2 ]
    [[ $output == *"CKPT_KILL_GRACE='soon' is not valid: expected a number of seconds in 0..3600"* ]]
}

@test "--help describes the options and exits 0" {
    run ckpt --help
    [ "$status" -eq 0 ]
    [[ $output == *"--nproc N"* ]]
    [[ $output == *"--max-restarts R"* ]]
    [[ $output == *"CKPT_KILL_GRACE"* ]]
    run ckpt --nproc 2 --max-restarts=3 -- true
    [ "$status" -eq 0 ]
}
