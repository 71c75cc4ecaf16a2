#!/usr/bin/env bats
# libckpt.so on the unmodified example trainer: the program's results do
# not change under it, snapshots are taken at every boundary, bad
# configuration stops the job before it trains, CKPT_DISABLE is a
# pass-through.

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    TRAIN=$BUILD/examples/mlp-train
    RESUME=$BUILD/bin/ckpt-resume
    ARENA=$(mktemp -d /tmp/ckpt-bats-XXXXXX)
    export CKPT_ARENA_DIR=$ARENA CKPT_JOB=bats
}

teardown() {
    rm -rf "$ARENA"
}

# Runs the trainer with n ranks, with or without libckpt; prints its stdout.
# ckpt-resume always preloads libckpt.so: without it means CKPT_DISABLE=1,
# every call passed straight through.
train() { # n preload(0/1) args...
    local n=$1 preload=$2
    shift 2
    if [ "$preload" = 1 ]; then
        LD_PRELOAD=$LIB "$RESUME" --nproc "$n" -- "$TRAIN" "$@"
    else
        CKPT_DISABLE=1 "$RESUME" --nproc "$n" -- "$TRAIN" "$@"
    fi
}

@test "the trainer's digest and loss lines are the same with and without libckpt, 1, 2 and 4 ranks" {
    for n in 1 2 4; do
        plain=$(train "$n" 0 --iters 12 --hidden 64 --layers 3 2>/dev/null)
        hooked=$(CKPT_STATS_FILE=$ARENA/stats.$n train "$n" 1 --iters 12 --hidden 64 --layers 3 2>/dev/null)
        [ -n "$plain" ]
        echo "$plain" | grep -q '^digest '
        [ "$plain" = "$hooked" ] || { echo "ranks $n differ"; diff <(echo "$plain") <(echo "$hooked"); false; }
        # Snapshots were really taken, by every rank.
        for r in $(seq 0 $((n - 1))); do
            count=$(grep -c "\"rank\":$r," "$ARENA/stats.$n")
            [ "$count" -ge 5 ] || { echo "rank $r took $count snapshots"; false; }
        done
    done
}

@test "snapshot iterations count up by one from the learned boundary, warm-up included" {
    CKPT_STATS_FILE=$ARENA/stats train 1 1 --iters 15 --hidden 64 --layers 3 >/dev/null 2>&1
    iters=$(sed -E 's/.*"iteration":([0-9]+).*/\1/' "$ARENA/stats")
    first=$(echo "$iters" | head -n 1)
    last=$(echo "$iters" | tail -n 1)
    [ "$last" -eq 15 ]
    [ "$(echo "$iters" | wc -l)" -eq $((last - first + 1)) ]
}

@test "CKPT_EVERY=5 snapshots every fifth iteration" {
    CKPT_EVERY=5 CKPT_STATS_FILE=$ARENA/stats train 1 1 --iters 20 --hidden 64 --layers 3 >/dev/null 2>&1
    run sed -E 's/.*"iteration":([0-9]+).*/\1/' "$ARENA/stats"
    for it in $output; do [ $((it % 5)) -eq 0 ]; done
    [ "$(echo "$output" | wc -l)" -ge 2 ]
}

@test "each rank says at exit what it captured" {
    run env LD_PRELOAD=$LIB "$TRAIN" --iters 8 --hidden 64 --layers 3
    [ "$status" -eq 0 ]
    echo "$output" | grep -E '^libckpt\[rank 0\]: snapshots [0-9]+ \(skipped [0-9]+\)'
}

@test "a bad CKPT_* value stops the job before the first iteration, naming the variable" {
    while IFS='|' read -r var value says; do
        run env "$var=$value" LD_PRELOAD=$LIB "$TRAIN" --iters 3
        [ "$status" -eq 2 ] || { echo "$var=$value: exit $status"; false; }
        echo "$output" | grep -q "$says" || { echo "$var=$value: '$output'"; false; }
        ! echo "$output" | grep -q '^iter ' || { echo "$var=$value: training started"; false; }
    done <<'CASES'
CKPT_EVERY|0|CKPT_EVERY='0' is not valid: expected an integer in 1..1000000
CKPT_EVERY|ten|CKPT_EVERY='ten'
CKPT_BOUNDARY|every:0|CKPT_BOUNDARY='every:0' is not valid: expected auto or every:N
CKPT_CONSISTENCY|eventual|expected one of overlap|strict
CKPT_DISABLE|maybe|CKPT_DISABLE='maybe'
CKPT_LOG|loud|CKPT_LOG='loud'
CKPT_JOB|a/b|CKPT_JOB='a/b'
CKPT_ARENA_DIR||CKPT_ARENA_DIR=''
CASES
}

@test "an unknown CKPT_* name gets a did-you-mean warning and the job runs" {
    run env CKPT_EVRY=2 LD_PRELOAD=$LIB "$TRAIN" --iters 3 --hidden 64 --layers 3
    [ "$status" -eq 0 ]
    echo "$output" | grep -q 'CKPT_EVRY is not a libckpt variable; did you mean CKPT_EVERY?'
}

@test "CKPT_DISABLE=1 is a pass-through: same output, no arena" {
    plain=$("$TRAIN" --iters 5 --hidden 64 --layers 3 2>/dev/null)
    run env CKPT_DISABLE=1 LD_PRELOAD=$LIB "$TRAIN" --iters 5 --hidden 64 --layers 3
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -v '^libckpt')" = "$plain" ]
    [ -z "$(ls -A "$ARENA")" ]
}

@test "an arena directory that belongs to someone else is refused and the job still trains" {
    mkdir -p "$ARENA/$(id -u)-bats"
    chmod 0755 "$ARENA/$(id -u)-bats"
    run env LD_PRELOAD=$LIB "$TRAIN" --iters 6 --hidden 64 --layers 3
    [ "$status" -eq 0 ]
    echo "$output" | grep -q 'no arena (.*must be this user'
    echo "$output" | grep -q '^digest '
}

@test "a child forked after CUDA init never checkpoints, and exits cleanly" {
    run env CKPT_BOUNDARY=every:1 CKPT_STATS_FILE=$ARENA/stats LD_PRELOAD=$LIB "$BUILD/tests/progs/forker" 6
    [ "$status" -eq 0 ]
    echo "$output" | grep -q '^child exit 7$'
    # One snapshot per parent iteration, and one exit line: the parent's.
    [ "$(wc -l <"$ARENA/stats")" -eq 6 ]
    [ "$(echo "$output" | grep -c 'snapshots [0-9]')" -eq 1 ]
}

@test "a CUDA helper the rank execs leaves the rank's arena alone and is a pass-through" {
    # The helper inherits RANK, CKPT_JOB and LD_PRELOAD.  Were it to take the
    # arena too, it would empty the slots and the replay log under the rank.
    run env CKPT_BOUNDARY=every:1 CKPT_STATS_FILE=$ARENA/stats LD_PRELOAD=$LIB "$BUILD/tests/progs/forker" 6 exec
    [ "$status" -eq 0 ]
    echo "$output" | grep -q '^helper done 0$'
    echo "$output" | grep -q '^child exit 0$'
    echo "$output" | grep -q 'rank0 is in use by process [0-9]*, which started this process: this one does not checkpoint'
    [ "$(wc -l <"$ARENA/stats")" -eq 6 ]
    [ "$(echo "$output" | grep -c 'snapshots [0-9]')" -eq 1 ]
    run "$BUILD/bin/ckpt-inspect" --arena "$ARENA" --job bats verify
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    ! echo "$output" | grep -q 'damaged'
}

@test "a second process as the same rank of the same job is warned about and does not checkpoint" {
    dir=$ARENA/$(id -u)-bats/rank0
    mkdir -p -m 0700 "$ARENA/$(id -u)-bats" "$dir"
    python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "w"); fcntl.lockf(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close(); time.sleep(60)' \
        "$dir/owner" "$ARENA/locked" &
    holder=$!
    for _ in $(seq 200); do [ -e "$ARENA/locked" ] && break; sleep 0.1; done
    run env CKPT_BOUNDARY=every:1 CKPT_STATS_FILE=$ARENA/stats LD_PRELOAD=$LIB "$BUILD/tests/progs/forker" 4
    kill "$holder"
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "warning: .*rank0 is in use by process $holder: does another process run as rank 0 of job bats? This one does not checkpoint"
    [ ! -e "$ARENA/stats" ]
    [ ! -e "$dir/slot0" ]
}

@test "every loading shape reaches libckpt: linked runtime, static-runtime dlopen, PyTorch-style, late NCCL" {
    readelf -d "$BUILD/tests/progs/shapes" | grep NEEDED
    for shape in linked static pytorch nccl; do
        rm -f "$ARENA/stats"
        run env CKPT_STATS_FILE=$ARENA/stats LD_PRELOAD=$LIB "$BUILD/tests/progs/shapes" "$shape" 6
        [ "$status" -eq 0 ] || { echo "$shape: exit $status: $output"; false; }
        want=$(echo "$output" | sed -n 's/^allocations //p')
        [ -s "$ARENA/stats" ] || { echo "$shape: no snapshot taken"; false; }
        # The newest snapshot holds exactly the program's allocations:
        # none missed, and none of NCCL's own buffers.
        got=$(tail -n 1 "$ARENA/stats" | sed -E 's/.*"allocations":([0-9]+).*/\1/')
        [ "$got" = "$want" ] || { echo "$shape: snapshot has $got allocations, program made $want"; false; }
    done
}

@test "libckpt.so needs nothing but libc at link time and exports only its hooks and its own interface" {
    run readelf -d "$LIB"
    needed=$(echo "$output" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    for lib in $needed; do
        case $lib in
        libc.so.6 | ld-linux*.so.* | libdl.so.2 | libpthread.so.0) ;;
        libasan.so.* | libubsan.so.* | libtsan.so.*) ;; # make check-sanitize's and check-tsan's builds
        *) echo "libckpt.so needs $lib"; false ;;
        esac
    done
    exports=$(nm -D --defined-only "$LIB" | awk '{print $3}')
    [ -n "$exports" ]
    for sym in $exports; do
        case $sym in
        cu[A-Z]* | cuda* | nccl* | dlsym | InitializeInjectionNvtx2) ;;
        pthread_create) ;; # thread keys (interpose/thread.c)
        mmap | mmap64) ;; # the driver's room (interpose/addrspace.c)
        open | open64 | openat | openat64 | fopen | fopen64 | rename | unlink) ;; # replay's files (interpose/world.c)
        connect | bind | listen | accept | accept4 | read | readv | recv | recvfrom | recvmsg | close) ;; # the rendezvous
        __read_chk | __recv_chk | __recvfrom_chk) ;; # (interpose/rendezvous.c)
        ckpt_declare_free | ckpt_declare_live | ckpt_declare_wait | ckpt_declare_answer) ;; # include/libckpt.h
        *) echo "libckpt.so exports $sym"; false ;;
        esac
    done
}

@test "dlsym(RTLD_NEXT) keeps its meaning for the caller under libckpt" {
    d=$BATS_TEST_TMPDIR
    printf 'const char *who(void) { return "y"; }\n' >"$d/y.c"
    printf '#define _GNU_SOURCE\n#include <dlfcn.h>\nconst char *who(void) { return "x"; }\nconst char *next_who(void) { const char *(*f)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "who"); return f ? f() : "none"; }\n' >"$d/x.c"
    printf '#include <stdio.h>\nconst char *next_who(void);\nint main(void) { puts(next_who()); return 0; }\n' >"$d/m.c"
    cc -shared -fPIC -o "$d/liby.so" "$d/y.c"
    cc -shared -fPIC -o "$d/libx.so" "$d/x.c" -ldl
    cc -o "$d/m" "$d/m.c" -L"$d" -Wl,--no-as-needed -lx -ly -Wl,-rpath,"$d"
    [ "$("$d/m")" = y ]
    [ "$(LD_PRELOAD=$LIB "$d/m")" = y ]
}
