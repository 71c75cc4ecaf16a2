#!/usr/bin/env bats
# Snapshots persisted to disk and brought back, end to end with the
# unmodified trainer and ckpt-persist (the engine the node agent calls):
# after a failure that also wiped every arena, the newest generation on
# disk (striped over two directories) is read back into the arena and the
# restarted run prints exactly what an uninterrupted run prints, for 1 and
# 2 ranks; a damaged newer generation is skipped, naming why; a persist
# killed half-way leaves the previous generation intact and used, and the
# next persist replaces the partial one; SIGTERM cancels cleanly.  Then
# the same driven by ckpt-resume itself (CKPT_PERSIST_EVERY): a job whose
# arena is wiped by its failure comes back from disk on its own; the agent
# killed mid-persist leaves the older generation, which the next run uses;
# a full disk is said once and training goes on; a disk that fails with
# EIO (CKPT_FAULT=io:...) while persisting is said once, training goes on
# bit-exact and the generation written before stays complete; EIO while a
# generation is read back skips it, saying so, for an older one or a clean
# start; ranks that refuse every restore from disk (the program changed)
# make ckpt-resume fall back to the next older generation, then to a clean
# start, each step said.
#
# As in resume.bats, snapshots are taken every 5th iteration and a rank is
# killed at the end of iteration 23, so the arena holds iterations 15 and 20.

load output
load bytes

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    TRAIN=$BUILD/examples/mlp-train
    RESUME=$BUILD/bin/ckpt-resume
    PERSIST=$BUILD/bin/ckpt-persist
    [ -x "$RESUME" ] && [ -x "$PERSIST" ] && [ -x "$TRAIN" ] || { echo "build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-persist-bats-XXXXXX)
    unset CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA LD_PRELOAD CKPT_BOUNDARY \
        CKPT_IO_DEPTH CKPT_IO_BLOCK_KB CKPT_PERSIST_KEEP CKPT_PERSIST_EVERY CKPT_FAULT MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK \
        FAKEGPU_CRASH_ONCE CKPT_KEEP_ARENA
    mkdir -p "$D/ssd0" "$D/ssd1"
    if "$PERSIST" list --dirs "$D/ssd0" 2>&1 | grep -q "io_uring is not available"; then
        skip "io_uring is not available here"
    fi
    export CKPT_ARENA_DIR=$D/arena CKPT_JOB=p CKPT_EVERY=5 CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 \
        CKPT_PERSIST_DIRS=$D/ssd0,$D/ssd1 CKPT_PERSIST_EVERY=0 # the by-hand cases persist with ckpt-persist
    ARGS="--iters 30 --hidden 64 --layers 3"
}

teardown() {
    [ -n "${BG:-}" ] && kill -KILL "$BG" 2>/dev/null
    [ -n "${PG:-}" ] && kill -KILL -- "-$PG" 2>/dev/null
    mountpoint -q "$D/full" 2>/dev/null && umount "$D/full"
    rm -rf "$D"
}

ckpt() { timeout -k 5 60 "$RESUME" "$@"; }

# crashed N: an uninterrupted run of N ranks into $D/plain.N, then a run
# whose last rank dies at the end of iteration 23 and is not restarted.
crashed() {
    ckpt --nproc "$1" -- "$TRAIN" $ARGS >"$D/plain.$1" 2>/dev/null
    grep -q '^digest ' "$D/plain.$1"
    run env CKPT_MAX_RESTARTS=0 FAKEGPU_CRASH_AT=24 FAKEGPU_CRASH_RANK=$(($1 - 1)) \
        LD_PRELOAD="$LIB" timeout -k 5 60 "$RESUME" --nproc "$1" -- "$TRAIN" $ARGS
    [ "$status" -ne 0 ]
}

# resumes N K: the job restarted at iteration K prints what the uninterrupted run printed from there.
resumes() {
    CKPT_RESTORE=$2 LD_PRELOAD="$LIB" ckpt --nproc "$1" -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; return 1; }
    [ "$(grep -c "^libckpt\[rank [0-9]*\]: restored iteration $2 " "$D/err")" -eq "$1" ] || { cat "$D/err"; return 1; }
    restored_tail "$(cat "$D/plain.$1")" "$(cat "$D/out")"
}

gen() { echo "$1/$(id -u)-$CKPT_JOB/gen-$2"; }

@test "every arena wiped after a failure: the job comes back from disk bit-exact (1 and 2 ranks, 2 directories)" {
    for n in 1 2; do
        rm -rf "$D/ssd0"/* "$D/ssd1"/* "$CKPT_ARENA_DIR"
        crashed $n
        run "$PERSIST" save --iteration 15
        [ "$status" -eq 0 ] && [[ $output == "persisted iteration 15 of job p: ranks $n,"* ]] || { echo "$output"; false; }
        run "$PERSIST" save
        [ "$status" -eq 0 ] && [[ $output == "persisted iteration 20 of job p: ranks $n,"* ]] || { echo "$output"; false; }
        [ -s "$(gen "$D/ssd0" 20)/stripe-0" ] && [ -e "$(gen "$D/ssd1" 20)/stripe-1" ]
        rm -rf "$CKPT_ARENA_DIR"
        run "$PERSIST" restore
        [ "$status" -eq 0 ] && [[ $output == "restored iteration 20 of job p: ranks $n,"* ]] || { echo "$output"; false; }
        resumes $n 20
    done
}

@test "one node: a restore of an older iteration retires, once live, the generations on disk of later ones (the logs they name are cut there); the restored run persists those iterations again, and they restore bit-exact" {
    crashed 2
    "$PERSIST" save --iteration 15 >/dev/null
    "$PERSIST" save >/dev/null
    [ -e "$(gen "$D/ssd0" 20)/manifest" ]
    run --separate-stderr env CKPT_RESTORE=15 CKPT_PERSIST_EVERY=1 CKPT_PERSIST_KEEP=10 LD_PRELOAD="$LIB" \
        timeout -k 5 60 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS
    [ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
    [[ $stderr == *"ckpt-resume: retired this node's generation of iteration 20 on disk ("*"): newer than the restore point 15, it belongs to the run the restore replaces"* ]] ||
        { echo "$stderr"; return 1; }
    # The restored run's 20, with the log as it wrote it, comes back.
    rm -rf "$CKPT_ARENA_DIR"
    run "$PERSIST" restore --iteration 20
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    resumes 2 20
}

@test "a damaged newer generation is skipped with its reason; the older one restores bit-exact" {
    crashed 2
    "$PERSIST" save --iteration 15 >/dev/null
    "$PERSIST" save >/dev/null
    stripe=$(gen "$D/ssd1" 20)/stripe-1
    flip "$stripe" 1000 0xff
    rm -rf "$CKPT_ARENA_DIR"
    run "$PERSIST" list --verify
    [[ ${lines[0]} == "iteration 20: not usable: $stripe: bytes "*" do not match their checksum" ]] ||
        { echo "$output"; false; }
    [[ ${lines[1]} == "iteration 15: complete, ranks 2,"* ]]
    run "$PERSIST" restore
    [ "$status" -eq 0 ]
    [[ $output == *"the generation of iteration 20 does not verify ($stripe: bytes "*"): trying an older one"* ]]
    [[ $output == *"restored iteration 15 of job p: ranks 2,"* ]]
    resumes 2 15
}

# A persist slow enough to be caught half-way: 64 MiB in 4 KiB writes, one at a time.
slow_save() {
    CKPT_EVERY=1 CKPT_BOUNDARY=every:1 CKPT_JOB=s LD_PRELOAD="$LIB" "$BUILD/tests/progs/statewriter" --iters 3 --mib 64 \
        >/dev/null 2>&1
    CKPT_JOB=s "$PERSIST" save --iteration 2 >/dev/null
    CKPT_JOB=s "$PERSIST" save --iteration 3 --depth 1 --block-kb 4 >"$D/slow.out" 2>"$D/slow.err" &
    BG=$!
    for _ in $(seq 500); do
        [ -e "$(CKPT_JOB=s gen "$D/ssd1" 3)/stripe-1" ] && return 0
        sleep 0.01
    done
    echo "the persist of iteration 3 never started" >&2
    return 1
}

@test "a persist killed half-way leaves the previous generation intact and used; the next one replaces it" {
    slow_save
    kill -KILL "$BG"
    wait "$BG" || true
    BG=
    export CKPT_JOB=s
    [ ! -e "$(gen "$D/ssd0" 3)/manifest" ]
    run "$PERSIST" list
    [ "${lines[0]}" = "iteration 3: not usable: no manifest: the generation is incomplete" ]
    [[ ${lines[1]} == "iteration 2: complete, ranks 1,"* ]]
    # The older generation comes back byte for byte.
    orig=$CKPT_ARENA_DIR/$(id -u)-s/rank0
    for s in 0 1; do [ "$(od -A n -t u8 -j 96 -N 8 "$orig/slot$s" | tr -d ' ')" = 2 ] && src=$orig/slot$s; done
    cp -a "$CKPT_ARENA_DIR" "$D/orig" && rm -rf "$CKPT_ARENA_DIR"
    run "$PERSIST" restore
    [[ $output == *"skipping the generation of iteration 3 in $D/ssd0/$(id -u)-s: no manifest"* ]] &&
        [[ $output == *"restored iteration 2 of job s: ranks 1,"* ]] || { echo "$output"; false; }
    restored=$CKPT_ARENA_DIR/$(id -u)-s/rank0/slot0
    cmp -n "$(stat -c %s "$restored")" "$restored" "$D/orig/$(id -u)-s/rank0/slot${src: -1}"
    cmp "$CKPT_ARENA_DIR/$(id -u)-s/rank0/replay.log" "$D/orig/$(id -u)-s/rank0/replay.log"
    # The next persist of iteration 3 replaces the partial one.
    rm -rf "$CKPT_ARENA_DIR" && mv "$D/orig" "$CKPT_ARENA_DIR"
    run "$PERSIST" save --iteration 3
    [ "$status" -eq 0 ]
    run "$PERSIST" list --verify
    [[ ${lines[0]} == "iteration 3: complete,"* ]] && [[ ${lines[1]} == "iteration 2: complete,"* ]] ||
        { echo "$output"; false; }
}

@test "SIGTERM cancels a persist cleanly: nothing of it is left, the previous generation stays" {
    slow_save
    kill -TERM "$BG"
    rc=0
    wait "$BG" || rc=$?
    BG=
    [ "$rc" -eq 1 ]
    grep -q "^ckpt-persist: error: cancelled after [0-9]* of [0-9]* bytes$" "$D/slow.err"
    export CKPT_JOB=s
    [ ! -e "$(gen "$D/ssd0" 3)" ] && [ ! -e "$(gen "$D/ssd1" 3)" ]
    run "$PERSIST" list --verify
    [ "${#lines[@]}" -eq 1 ] && [[ ${lines[0]} == "iteration 2: complete,"* ]]
}

# wiping N: the job under ckpt-resume, persisting every snapshot, rank 0
# killed at the end of iteration 23; each rank's wrapper shell survives its
# trainer and, in the first launch, wipes every rank's arena once the
# trainer has ended, so that the restart finds nothing in memory.  Each
# launch's output goes to $D/out.<CKPT_RESTORE>.<RANK>.
wiping() {
    local wipe='trap : TERM; "$0" "$@" >"$OUT.${CKPT_RESTORE:-0}.$RANK"; rc=$?
        [ -n "$CKPT_RESTORE" ] || [ $rc -eq 0 ] || rm -rf "$CKPT_ARENA_DIR"/*/rank*; exit $rc'
    OUT=$D/out CKPT_FAULT=kill:rank=0:iter=23 ckpt --nproc "$1" -- sh -c "$wipe" "$TRAIN" $ARGS 2>"$D/err"
}

@test "ckpt-resume: every arena wiped by the failure, the job comes back from disk bit-exact (1 and 2 ranks)" {
    export CKPT_PERSIST_EVERY=1
    for n in 1 2; do
        rm -rf "$D/ssd0"/* "$D/ssd1"/* "$CKPT_ARENA_DIR" "$D"/out.*
        CKPT_PERSIST_EVERY=0 ckpt --nproc $n -- "$TRAIN" $ARGS >"$D/plain.$n" 2>/dev/null
        wiping $n || { cat "$D/err"; false; }
        grep -q "^ckpt-resume: nothing to restart from in the arena (rank 0 has no verified snapshot); looking on disk$" \
            "$D/err" || { cat "$D/err"; false; }
        # The newest generation on disk: 20, or 15 when the persist of 20
        # came due while that of 15 was still running (a loaded machine).
        it=$(sed -n 's/^ckpt-resume: restoring generation [0-9]* (iteration \(15\|20\)) from disk$/\1/p' "$D/err")
        [ -n "$it" ] || { cat "$D/err"; false; }
        grep -q "^ckpt-resume: persisted [1-9][0-9]* generations (skipped [0-9]*, failed 0), [0-9]* bytes written, " "$D/err"
        # The line before the last says how the job was protected.
        grep -q "^ckpt-resume: summary: snapshots [1-9][0-9]* committed, [0-9]* skipped; in memory through iteration [1-9][0-9]* (a boundary at most [0-9]* iterations past its rank's newest commit); persisted through iteration 30 (at most [0-9]* iterations behind the commits; [1-9][0-9]* generations, [0-9]* skipped, 0 failed); 1 restart$" "$D/err" ||
            { cat "$D/err"; false; }
        restored_tail "$(cat "$D/plain.$n")" "$(cat "$D/out.$it.0")"
        [ -s "$(gen "$D/ssd0" 30)/manifest" ] && [ -e "$(gen "$D/ssd1" 30)/stripe-1" ]
        [ ! -e "$CKPT_ARENA_DIR/$(id -u)-p" ] # removed after success, pin included
    done
}

@test "CKPT_SLOTS=1: a rank killed while its one slot is being written comes back from the disk copy, never the half-written slot" {
    ckpt --nproc 1 -- "$TRAIN" $ARGS >"$D/plain.1" 2>/dev/null
    CKPT_SLOTS=1 CKPT_PERSIST_EVERY=1 CKPT_FAULT=kill:rank=0:iter=20:phase=snapshot LD_PRELOAD="$LIB" \
        ckpt --nproc 1 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || { cat "$D/err"; false; }
    grep -q "rank 0 (pid [0-9]*) was killed by SIGKILL" "$D/err" || { cat "$D/err"; false; }
    # Killed during the copy of its first snapshot at or after iteration 20
    # (20's own is skipped when the persist of 15 still reads the one slot):
    # the slot held it half-written, not a restore point.
    local killed from
    killed=$(sed -n 's/^libckpt\[rank 0\]: warning: CKPT_FAULT: killing this rank during the snapshot copy of iteration \([0-9]*\)$/\1/p' "$D/err")
    [ -n "$killed" ] && [ "$killed" -ge 20 ] || { cat "$D/err"; false; }
    grep -q "^ckpt-resume: nothing to restart from in the arena (rank 0 has no verified snapshot); looking on disk$" \
        "$D/err" || { cat "$D/err"; false; }
    from=$(sed -n 's/^ckpt-resume: restoring generation [0-9]* (iteration \([0-9]*\)) from disk$/\1/p' "$D/err")
    [ -n "$from" ] && [ "$from" -lt "$killed" ] || { cat "$D/err"; false; }
    grep -q "^libckpt\[rank 0\]: restored iteration " "$D/err" || { cat "$D/err"; false; }
    diff <(resumed_output "$D/out") "$D/plain.1" || { cat "$D/err"; false; }
}

# The persist of the next generation is running: the newest gen-* directory
# has no manifest and an older one is complete. (A generation being pruned
# loses its manifest first too, but it is never the newest.)
mid_persist() {
    local dir=$D/ssd0/$(id -u)-$CKPT_JOB g n newest=-1 complete=-1
    for g in "$dir"/gen-*; do
        [ -d "$g" ] || continue
        n=${g##*/gen-}
        [ "$n" -gt "$newest" ] && newest=$n
        [ -e "$g/manifest" ] && [ "$n" -gt "$complete" ] && complete=$n
    done
    [ "$complete" -ge 0 ] && [ "$newest" -gt "$complete" ]
}

@test "ckpt-resume killed in the middle of a persist: the previous generation is intact and used by the next run" {
    export CKPT_JOB=k CKPT_PERSIST_EVERY=1 CKPT_EVERY=1 CKPT_BOUNDARY=every:1 CKPT_PERSIST_KEEP=5
    CKPT_PERSIST_DIRS= ckpt --nproc 1 -- "$BUILD/tests/progs/statewriter" --iters 12 --mib 64 >"$D/plain" 2>/dev/null
    CKPT_IO_DEPTH=1 CKPT_IO_BLOCK_KB=4 "$RESUME" --nproc 1 -- "$BUILD/tests/progs/statewriter" --iters 1000 --mib 64 \
        >/dev/null 2>"$D/agent.err" &
    BG=$!
    local found=
    for _ in $(seq 18000); do mid_persist && { found=1; break; }; sleep 0.01; done # a loaded machine under ASan: up to 180 s
    PG=$(sed -n 's/.*process group \([0-9]*\).*/\1/p' "$D/agent.err" | head -n 1)
    [ -n "$found" ] || { cat "$D/agent.err"; false; }
    kill -KILL "$BG" && wait "$BG" || true
    BG=
    kill -KILL -- "-$PG"
    run "$PERSIST" list --verify
    [[ ${lines[0]} == "iteration "*": not usable: no manifest: the generation is incomplete" ]] || { echo "$output"; false; }
    [[ ${lines[1]} =~ ^iteration\ ([0-9]+):\ complete ]] || { echo "$output"; false; }
    good=${BASH_REMATCH[1]}
    # The next run persists nothing itself; its arena is wiped when it fails.
    local wipe='trap : TERM; "$0" "$@" >"$OUT.${CKPT_RESTORE:-0}"; rc=$?
        [ -n "$CKPT_RESTORE" ] || [ $rc -eq 0 ] || rm -rf "$CKPT_ARENA_DIR"/*/rank*; exit $rc'
    OUT=$D/out CKPT_PERSIST_EVERY=0 CKPT_FAULT=kill:rank=0:iter=$((good + 2)) ckpt --nproc 1 -- sh -c "$wipe" \
        "$BUILD/tests/progs/statewriter" --iters 12 --mib 64 2>"$D/err" || { cat "$D/err"; false; }
    grep -q "skipping the generation of iteration [0-9]* in $D/ssd0/$(id -u)-k: no manifest" "$D/err" ||
        { cat "$D/err"; false; }
    grep -q "^ckpt-resume: restoring generation [0-9]* (iteration $good) from disk$" "$D/err"
    ( ! grep -q "^ckpt-resume: persisted" "$D/err" )
    diff "$D/out.$good" "$D/plain" # statewriter prints only at its end, once live
}

@test "ckpt-resume on a full disk: one clear warning, training finishes, the older generation intact" {
    mkdir "$D/full"
    mount -t tmpfs -o size=1m,mode=0700 tmpfs "$D/full" 2>/dev/null || skip "cannot mount a tmpfs here"
    export CKPT_PERSIST_DIRS=$D/full CKPT_PERSIST_KEEP=3 CKPT_PERSIST_EVERY=1
    run ckpt --nproc 2 -- "$TRAIN" $ARGS
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    [ "$(grep -c "warning: cannot persist iteration" <<<"$output")" -eq 1 ] || { echo "$output"; false; }
    grep -q "^ckpt-resume: warning: cannot persist iteration [0-9]*: .*$D/full.*No space left on device.*; the last complete generation is kept and training goes on$" <<<"$output" || { echo "$output"; false; }
    grep -q "^ckpt-resume: persisted 1 generation (skipped [0-9]*, failed [1-9][0-9]*), " <<<"$output" ||
        { echo "$output"; false; }
    run "$PERSIST" list --verify
    [[ ${lines[0]} == "iteration 5: complete, ranks 2,"* ]] || { echo "$output"; false; }
}

@test "a directory without O_DIRECT (ramfs): persisted through the page cache, said once, restored bit-exact" {
    mkdir "$D/full"
    mount -t ramfs -o mode=0700 ramfs "$D/full" 2>/dev/null || skip "cannot mount a ramfs here"
    export CKPT_PERSIST_DIRS=$D/full,$D/ssd1
    crashed 2
    run "$PERSIST" save
    [ "$status" -eq 0 ] && [[ $output == *"persisted iteration 20 of job p: ranks 2,"* ]] || { echo "$output"; false; }
    [ "$(grep -c "$D/full/.* does not support O_DIRECT: going through the page cache" <<<"$output")" -eq 1 ] ||
        { echo "$output"; false; }
    [ -s "$(gen "$D/full" 20)/stripe-0" ]
    rm -rf "$CKPT_ARENA_DIR"
    run "$PERSIST" restore
    [ "$status" -eq 0 ] && [[ $output == *"restored iteration 20 of job p: ranks 2,"* ]] || { echo "$output"; false; }
    resumes 2 20
}

@test "ckpt-resume with EIO while persisting: one warning naming the directory and the errno, training finishes bit-exact, the previous generation intact" {
    export CKPT_PERSIST_EVERY=1 CKPT_PERSIST_KEEP=3
    CKPT_PERSIST_EVERY=0 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    # The first generation (iteration 5) is written; every later write fails.
    CKPT_FAULT=io:errno=EIO:op=write:after=1 ckpt --nproc 2 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; false; }
    diff "$D/out" "$D/plain"
    [ "$(grep -c "warning: cannot persist iteration" "$D/err")" -eq 1 ] || { cat "$D/err"; false; }
    grep -Eq "^ckpt-resume: warning: cannot persist iteration [0-9]+: cannot write $D/ssd[01]/$(id -u)-p/gen-[0-9]+/stripe-[01]: Input/output error; the last complete generation is kept and training goes on$" \
        "$D/err" || { cat "$D/err"; false; }
    grep -q "^ckpt-resume: persisted 1 generation (skipped [0-9]*, failed [1-9][0-9]*), " "$D/err" || { cat "$D/err"; false; }
    run "$PERSIST" list --verify
    [ "${#lines[@]}" -eq 1 ] && [[ ${lines[0]} == "iteration 5: complete, ranks 2,"* ]] || { echo "$output"; false; }
    # No partial generation is left behind on either directory.
    [ "$(ls "$D/ssd0/$(id -u)-p" "$D/ssd1/$(id -u)-p" | grep -c '^gen-')" -eq 2 ]
}

# wiping_with FAULT: as wiping, one rank, the rank crashed by the test
# double at iteration 24 (once), CKPT_FAULT=FAULT for the agent's disks.
wiping_with() {
    local wipe='trap : TERM; "$0" "$@" >"$OUT.${CKPT_RESTORE:-0}.$RANK"; rc=$?
        [ -n "$CKPT_RESTORE" ] || [ $rc -eq 0 ] || rm -rf "$CKPT_ARENA_DIR"/*/rank*; exit $rc'
    OUT=$D/out CKPT_FAULT=$1 FAKEGPU_CRASH_AT=24 FAKEGPU_CRASH_RANK=0 FAKEGPU_CRASH_ONCE=$D/crashed \
        ckpt --nproc 1 -- sh -c "$wipe" "$TRAIN" $ARGS 2>"$D/err"
}

@test "ckpt-resume with EIO while reading a generation back: it is skipped, said, and an older one or a clean start is used" {
    export CKPT_PERSIST_EVERY=1
    CKPT_PERSIST_EVERY=0 ckpt --nproc 1 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    local cannot="^ckpt-resume: warning: cannot restore iteration \([0-9]*\) from disk: cannot read $D/ssd[01]/$(id -u)-p/gen-[0-9]*/stripe-[01]: Input/output error; trying an older one$"
    # The newest generation on disk (iteration 20, or 15 when the persist
    # of 20 was skipped on a busy disk) fails to read; the older one reads.
    rm -rf "$D/ssd0"/* "$D/ssd1"/* "$CKPT_ARENA_DIR" "$D"/out.* "$D/crashed"
    wiping_with io:errno=EIO:op=read:times=1 || { cat "$D/err"; false; }
    newest=$(sed -n "s|$cannot|\1|p" "$D/err")
    [ "$(echo "$newest" | wc -w)" -eq 1 ] || { cat "$D/err"; false; }
    used=$(sed -n 's/^ckpt-resume: restoring generation [0-9]* (iteration \([0-9]*\)) from disk$/\1/p' "$D/err")
    [ -n "$used" ] && [ "$used" -lt "$newest" ] || { cat "$D/err"; false; }
    restored_tail "$(cat "$D/plain")" "$(cat "$D/out.$used.0")"
    # Every read fails: both generations are skipped, then a clean start, said.
    rm -rf "$D/ssd0"/* "$D/ssd1"/* "$CKPT_ARENA_DIR" "$D"/out.* "$D/crashed"
    wiping_with io:errno=EIO:op=read || { cat "$D/err"; false; }
    [ "$(grep -c "$cannot" "$D/err")" -eq 2 ] || { cat "$D/err"; false; }
    grep -q "^ckpt-resume: no complete generation of job p on disk older than the one refused$" "$D/err"
    grep -q "^ckpt-resume: restarting from the beginning: " "$D/err" || { cat "$D/err"; false; }
    ( ! grep -q "restoring generation" "$D/err" )
    diff "$D/out.0.0" "$D/plain"
}

@test "ckpt-resume: ranks that refuse every restore from disk (the program changed) fall back to the older generation, then a clean start (CKPT_FALLBACK=clean), each step said" {
    export CKPT_PERSIST_EVERY=1 CKPT_FALLBACK=clean
    CKPT_PERSIST_EVERY=0 ckpt --nproc 1 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    # The first launch crashes and its arena is wiped; every restore runs a
    # narrower model, whose allocations the snapshots do not match.
    local wipe='trap : TERM; [ -z "$CKPT_RESTORE" ] || set -- "$@" --hidden 32
        "$0" "$@" >"$OUT.${CKPT_RESTORE:-0}.$RANK"; rc=$?
        [ -n "$CKPT_RESTORE" ] || [ $rc -eq 0 ] || rm -rf "$CKPT_ARENA_DIR"/*/rank*; exit $rc'
    OUT=$D/out FAKEGPU_CRASH_AT=24 FAKEGPU_CRASH_RANK=0 FAKEGPU_CRASH_ONCE=$D/crashed \
        ckpt --nproc 1 -- sh -c "$wipe" "$TRAIN" $ARGS 2>"$D/err" || { cat "$D/err"; false; }
    # The two generations on disk: 15 and 20 (or two older ones when a
    # persist was skipped on a busy disk).
    local its
    its=($(sed -n 's/^ckpt-resume: restoring generation [0-9]* (iteration \([0-9]*\)) from disk$/\1/p' "$D/err"))
    [ "${#its[@]}" -eq 2 ] && [ "${its[1]}" -lt "${its[0]}" ] || { cat "$D/err"; false; }
    local steps=("restoring generation [0-9]* (iteration ${its[0]}) from disk"
                 "rank 0 refused the restore of iteration ${its[0]} (exit 75): not a failure of the program"
                 "restoring generation [0-9]* (iteration ${its[1]}) from disk"
                 "rank 0 refused the restore of iteration ${its[1]} (exit 75): not a failure of the program"
                 "no complete generation of job p on disk older than the one refused"
                 "falling back to a clean start (CKPT_FALLBACK=clean): ")
    local at=0 n
    for step in "${steps[@]}"; do
        n=$(grep -n "^ckpt-resume: $step" "$D/err" | head -n 1 | cut -d: -f1)
        [ -n "$n" ] && [ "$n" -gt "$at" ] || { echo "missing or out of order: $step"; cat "$D/err"; false; }
        at=$n
    done
    diff "$D/out.0.0" "$D/plain"
}
