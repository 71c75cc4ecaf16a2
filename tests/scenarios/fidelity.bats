#!/usr/bin/env bats
# Fidelity of restore by replay: programs that let the host observe the
# device the way real frameworks do (tests/progs/fid_*.c: caching
# allocators, pinned pools, polling, host functions, graphs, background
# threads, threads that map memory before CUDA starts, autotuning, pointer
# tables, virtual memory, several contexts)
# are killed once, after an iteration drawn at random, under ckpt-resume,
# and must come back from a snapshot with exactly the output of a run that
# was never killed: every iteration line (the restarted launch prints them
# all again, the replayed ones too) and the final digest of device and host
# state.  The two programs libckpt cannot replay (the host reads managed
# or mapped memory without a copy call) must have their restore refused
# with the reason.
#
# A job that exits 0 with other output than the plain run's fails every
# test here, whatever was expected of it: a silent wrong state is the one
# failure libckpt must never have.  A library that refuses everything
# fails the tests of the programs it is expected to restore.
#
# The iteration a program dies after is printed on failure (--die-at K);
# to rerun one case: FID_DIE_ONCE=/tmp/x LD_PRELOAD=build/lib/libckpt.so
# build/bin/ckpt-resume --nproc 1 -- build/tests/progs/PROG --die-at K.

load output

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    LIB=$BUILD/lib/libckpt.so
    [ -x "$CKPT" ] && [ -f "$LIB" ] || { echo "missing $CKPT or $LIB: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-fidelity-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_BOUNDARY \
        CKPT_CONSISTENCY LD_PRELOAD MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE \
        FID_DIE_ONCE CKPT_FALLBACK CKPT_ADDR_RANDOMIZE
    # A snapshot every third iteration: restore points fall all over the run.
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=3 CKPT_LOG=info
    # ThreadSanitizer's runtime maps memory of its own before the first
    # context in amounts that depend on what the process did (a standby
    # follows a log, a replaying run replays one, the recorded run did
    # neither): the double's device range, placed by mmap, can start 2 MiB
    # apart, and the restore be refused.  Under it the range is placed at
    # a fixed address; the plain and AddressSanitizer runs test the
    # placement mmap chooses.
    [ -z "${TEST_UNDER_TSAN:-}" ] || export FAKEGPU_VA_HINT=0x7f0000000000
}

teardown() {
    rm -rf "$D"
}

# The program's own lines of a job's output: without libckpt's and ckpt-resume's.
program_lines() {
    grep -v -e '^libckpt' -e '^ckpt-resume' "$1" || true
}

# What the first launch printed, up to its death after iteration $1.
first_launch() {
    awk -v k="$1" '{print} $1 == "iter" && $2 == k {exit}'
}

# What the job's log says, for a failure.
show_job() {
    echo "--- the job's log (last 40 lines):"
    tail -n 40 "$D/err"
    [ -s "$D/diff" ] && { echo "--- plain run vs last launch:"; head -n 40 "$D/diff"; }
    return 0
}

# fidelity PROG EXPECT LOW HIGH [FROM]
#   Runs build/tests/progs/PROG plainly (twice: it must be deterministic),
#   then as a job under ckpt-resume with libckpt, killed once after
#   iteration K, drawn from LOW..HIGH.  EXPECT is "restore" (the job comes
#   back from a snapshot, output exactly the plain run's; with FROM, of an
#   iteration FROM or later), "refuse:REGEX" (every restore is refused
#   with a reason matching REGEX, grep -iE, and nothing is restored) or
#   "either:REGEX" (one of the two: a restore, exact, or a refusal whose
#   reason matches REGEX, for a program whose restorability depends on
#   how its threads happened to interleave).  FID_STANDBY=1: the job
#   runs with a standby, and "restore" asks that the standby took over.
#   FID_AGAIN=1: the restored run is killed too, after an iteration K2
#   drawn from K+7..37 (the restored run's first snapshot, at most 3 past
#   K, has had 4 iterations to commit, on a loaded machine too), and
#   "restore" asks that the second restore was of a snapshot the restored
#   run took (its log is what replay reads); with FID_STANDBY=1, that a
#   standby took over both times.
fidelity() {
    local prog=$1 expect=$2 low=$3 high=$4 from=${5:-0} rc=0
    local bin=$BUILD/tests/progs/$prog
    local k=$((low + RANDOM % (high - low + 1))) again=()
    echo "$prog: killed after iteration $k (--die-at $k), a snapshot every $CKPT_EVERY iterations, expected: $expect"
    if [ "${FID_AGAIN:-0}" = 1 ]; then
        again=(--die-again-at $((k + 7 + RANDOM % (31 - k))))
        echo "and again after iteration ${again[1]} (${again[*]})"
    fi
    [ -x "$bin" ] || { echo "missing $bin: build first"; return 1; }

    timeout -k 5 30 "$bin" >"$D/plain" 2>"$D/plain.err" || { echo "the plain run failed (exit $?):"; cat "$D/plain.err"; return 1; }
    timeout -k 5 30 "$bin" >"$D/plain2" 2>&1 || { echo "the second plain run failed (exit $?)"; cat "$D/plain2"; return 1; }
    diff "$D/plain" "$D/plain2" || { echo "two plain runs differ: the program or the double is not deterministic"; return 1; }
    grep -q '^digest [0-9a-f]*$' "$D/plain" && grep -q "^iter $k " "$D/plain" || { echo "no digest or iteration $k in the plain run"; return 1; }

    FID_DIE_ONCE=$D/died CKPT_STANDBY=${FID_STANDBY:-0} LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$bin" --die-at "$k" "${again[@]}" >"$D/out" 2>"$D/err" || rc=$?
    echo "the job exited $rc"
    [ -e "$D/died" ] || { echo "the program never got to the end of iteration $k, where it was to die"; show_job; return 1; }
    [ ${#again[@]} = 0 ] || [ -e "$D/died.again" ] ||
        { echo "the restored run never got to the end of iteration ${again[1]}, where it was to die"; show_job; return 1; }
    program_lines "$D/out" >"$D/lines"
    resumed_output <"$D/lines" >"$D/last"
    first_launch "$k" <"$D/lines" >"$D/first"
    head -n "$k" "$D/plain" | diff - "$D/first" >"$D/diff" ||
        { echo "the launch that was killed already printed other lines than the plain run: libckpt changed the recorded run"; show_job; return 1; }
    if [ "$rc" -eq 0 ] && ! diff "$D/plain" "$D/last" >"$D/diff"; then
        echo "WRONG STATE: the job exited 0, but its output differs from the plain run's"
        show_job
        return 1
    fi
    diff "$D/plain" "$D/last" >"$D/diff" || true

    case $expect in
    restore)
        [ "$rc" -eq 0 ] || { echo "the job failed"; show_job; return 1; }
        local restored
        restored=$(sed -n 's/^libckpt\[rank 0\]: restored iteration \([0-9]*\) .*/\1/p' "$D/err" | tail -n 1)
        [ -n "$restored" ] || { echo "the job completed, but from a clean start: no snapshot was restored"; show_job; return 1; }
        [ "$restored" -ge "$from" ] ||
            { echo "restored iteration $restored: no snapshot of iteration $from or later was there"; show_job; return 1; }
        if [ ${#again[@]} != 0 ]; then
            local first
            first=$(sed -n 's/^libckpt\[rank 0\]: restored iteration \([0-9]*\) .*/\1/p' "$D/err" | head -n 1)
            [ "$(grep -c '^libckpt\[rank 0\]: restored iteration ' "$D/err")" = 2 ] && [ "$restored" -gt "$first" ] ||
                { echo "the second restore was not of a snapshot the restored run took (first $first, then $restored)"
                  show_job; return 1; }
            [ "${FID_STANDBY:-0}" = 0 ] || [ "$(grep -c '^ckpt-resume: the standby took over at iteration ' "$D/err")" = 2 ] ||
                { echo "the standby started after the first takeover did not take over the second time"; show_job; return 1; }
        fi
        [ "${FID_STANDBY:-0}" = 0 ] || grep -q '^ckpt-resume: the standby took over at iteration ' "$D/err" ||
            { echo "the standby did not take over"; show_job; return 1; }
        # The resumed run stays protected: what replay served counts as
        # what the program did (a thread that allocated before the restore
        # and polls after it is no mere poller).
        ! sed -n '/^libckpt\[rank 0\]: restored iteration /,$p' "$D/err" | grep -E 'cannot be restored by replay' ||
            { echo "the resumed run's snapshots cannot be restored"; show_job; return 1; }
        # The standby started behind the one that took over replays the
        # same program (an exclusive create of FID_DIE_ONCE included: it
        # must see the file there, as the live run did) and stays up.
        ! grep -E '^ckpt-resume: .*the standby of rank [0-9]+ \(pid [0-9]+\) (was killed|exited)' "$D/err" ||
            { echo "a standby died"; show_job; return 1; }
        ;;
    refuse:*)
        local why=${expect#refuse:}
        grep -E '^(libckpt|ckpt-resume)' "$D/err" |
            grep -iE 'refus|unrestorable|not restorable|cannot be restored|cannot restore' | grep -iqE -- "$why" ||
            { echo "no refusal whose reason matches '$why'"; show_job; return 1; }
        ! grep -Eq '^libckpt\[rank 0\]: restored iteration ' "$D/err" ||
            { echo "a snapshot of a program libckpt cannot replay was restored"; show_job; return 1; }
        # Then the job stops, or starts again from the beginning
        # (CKPT_FALLBACK=clean): either way, if it exits 0, it printed the
        # plain run's output (checked above).
        ;;
    either:*)
        if grep -Eq '^libckpt\[rank 0\]: restored iteration ' "$D/err" && [ "$rc" -eq 0 ]; then
            return 0 # exact: checked above
        fi
        grep -E '^(libckpt|ckpt-resume)' "$D/err" | grep -i 'refused' | grep -iqE -- "${expect#either:}" ||
            { echo "neither restored nor refused with a reason matching '${expect#either:}'"; show_job; return 1; }
        ;;
    *)
        echo "bad expectation $expect"
        return 1
        ;;
    esac
}

# restore_points: the iterations a job killed after iteration 20 (a
# snapshot every third) is restored from, in turn, when every restore
# fails: 18, then 15; or 15 alone when the death came before 18's commit
# (it is asynchronous): 18 was being written over 12, so 15 was the only
# one left.
restore_points() {
    local first
    first=$(sed -n 's/^ckpt-resume: restarting from generation [0-9]* (iteration \([0-9]*\))$/\1/p' "$D/err")
    case $first in
    18) echo "18 15"
        grep -q "falling back to generation [0-9]* (iteration 15)" "$D/err" || { echo "no fallback to iteration 15" >&2; return 1; } ;;
    15) echo 15 ;;
    *) echo "the job restarted from iteration '$first', not 18 or 15" >&2; return 1 ;;
    esac
}

# said_per_point FORMAT COUNTED: the job's log has, for each restore point
# P, a line matching FORMAT with P for its %s, and as many lines matching
# COUNTED as there are points.
said_per_point() {
    local points it
    points=$(restore_points) || return 1
    for it in $points; do
        grep -q "$(printf "$1" "$it")" "$D/err" || { echo "no line matching '$(printf "$1" "$it")'"; return 1; }
    done
    [ "$(grep -c "$2" "$D/err")" -eq "$(echo $points | wc -w)" ] || { echo "not one line '$2' per restore point"; return 1; }
}

# The resumed run proves itself: it is checked against what the failed run
# logged after the restore point.  The restarted launches here make one
# allocation the recorded run never made (--stray-at, two iterations past
# the restore): the rank must stop, naming the difference, and ckpt-resume
# fall back to the older snapshot, where the same happens; then the job
# stops (CKPT_FALLBACK=stop), or starts clean (CKPT_FALLBACK=clean, where
# no launch strays) and ends exactly as the plain run.
diverge() {
    local fallback=$1 bin=$BUILD/tests/progs/fid_evalloc rc=0
    local launch='if [ -n "$CKPT_RESTORE" ]; then set -- "$@" --stray-at $((CKPT_RESTORE + 1)); fi; exec "$0" "$@"'
    timeout -k 5 30 "$bin" >"$D/plain" 2>&1
    CKPT_FALLBACK=$fallback FID_DIE_ONCE=$D/died LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        sh -c "$launch" "$bin" --die-at 20 >"$D/out" 2>"$D/err" || rc=$?
    echo "the job exited $rc"
    said_per_point "restored from iteration %s diverged from the failed run at its observation [0-9]* after the restore: it made an allocation where the failed run made" \
        'diverged from the failed run' || { show_job; return 1; }
    program_lines "$D/out" | resumed_output >"$D/last"
    if [ "$fallback" = clean ]; then
        [ "$rc" -eq 0 ] && diff "$D/plain" "$D/last" || { echo "the clean start did not end as the plain run"; show_job; return 1; }
        grep -q "falling back to a clean start (CKPT_FALLBACK=clean)" "$D/err" || { show_job; return 1; }
    else
        [ "$rc" -ne 0 ] || { echo "the job exited 0 after every restore diverged"; show_job; return 1; }
        grep -q "error: no snapshot of this job can be restored" "$D/err" || { show_job; return 1; }
    fi
}

@test "a program that crashes while it replays: each restore is refused, saying where it crashed; the older snapshot is tried, then the job stops, never restarted into the same crash" {
    local bin=$BUILD/tests/progs/fid_evalloc rc=0
    local launch='if [ -n "$CKPT_RESTORE" ]; then set -- "$@" --segv-at 5; fi; exec "$0" "$@"'
    FID_DIE_ONCE=$D/died LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        sh -c "$launch" "$bin" --die-at 20 >"$D/out" 2>"$D/err" || rc=$?
    echo "the job exited $rc"
    [ "$rc" -ne 0 ] || { show_job; return 1; }
    said_per_point '^libckpt\[rank 0\]: error: restore of iteration %s refused: the program crashed while it replayed (Segmentation fault), where its recorded run went on; where it crashed:$' \
        'refused: the program crashed while it replayed' || { show_job; return 1; }
    grep -q 'fid_evalloc(' "$D/err" || { echo "no frame of the program"; show_job; return 1; }
    grep -q "error: no snapshot of this job can be restored" "$D/err" || { show_job; return 1; }
    ! grep -q "killed by SIGSEGV\|giving up after" "$D/err" || { show_job; return 1; }
}

@test "a run that diverges after its restore went live is stopped, naming the difference, and falls back; then stops" {
    diverge stop
}

@test "a run that diverges after its restore went live falls back, then starts clean with CKPT_FALLBACK=clean" {
    diverge clean
}

@test "the resumed run is verified against the failed run's log after the restore point, values included" {
    CKPT_DETERMINISTIC=1 FID_DIE_ONCE=$D/died LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$BUILD/tests/progs/fid_poll" --die-at 20 >"$D/out" 2>"$D/err" || { show_job; return 1; }
    # From iteration 18, or 15 when the death at 20 came before 18's commit (it is asynchronous).
    grep -Eq "the resume is verified: the run restored from iteration 1[58] matched the failed run over the [1-9][0-9]* observations it made after that point, values included" "$D/err" ||
        { show_job; return 1; }
}

@test "fid_evalloc: a caching allocator reuses blocks when cudaEventQuery says so (PyTorch CUDACachingAllocator)" {
    fidelity fid_evalloc restore 12 27
}

@test "lazy module loading (CUDA_MODULE_LOADING=LAZY, CUDA's default): a kernel's first launch takes device memory for its code, so replay loads each function its suppressed launches would have, and later allocations come back where they were" {
    # Under ckpt-resume ranks load eagerly unless the user chose; here the user chose lazy.
    export CUDA_MODULE_LOADING=LAZY
    fidelity fid_evalloc restore 12 27
    rm -f "$D/died"
    fidelity fid_ptrtable restore 12 27
}

@test "fid_pinpool: a pinned host-buffer pool reused by event query, H2D batches, async D2H results (CachingHostAllocator)" {
    fidelity fid_pinpool restore 12 27
}

@test "fid_poolstats: a stream-ordered allocator's statistics (cudaMemPoolGetAttribute) printed and acted on every iteration: recorded, not a taint, restored exactly" {
    fidelity fid_poolstats restore 12 27
}

@test "fid_poll: async D2H into pinned memory, completion found by polling cudaEventQuery, bytes fed back" {
    fidelity fid_poll restore 12 27
}

@test "fid_pageable: non_blocking D2H into pageable memory, read as soon as the call returns" {
    fidelity fid_pageable restore 12 27
}

@test "fid_managed: the host reads a loss from managed memory: the restore is refused, naming managed memory" {
    fidelity fid_managed 'refuse:pointer into managed memory' 12 27
}

@test "fid_zerocopy: the host reads a loss from mapped pinned memory: the restore is refused, naming it" {
    fidelity fid_zerocopy 'refuse:pointer into pinned host memory mapped for the device \(zero-copy\)' 12 27
}

@test "fid_zerocopy: the same through pinned memory from cudaMallocHost, never asked to be mapped (under unified addressing a kernel writes it): refused, naming it" {
    FID_ZEROCOPY_PINNED=1 fidelity fid_zerocopy 'refuse:pointer into pinned host memory' 12 27
}

@test "pinned memory only copied into, and NCCL's own mapped host memory, taint nothing: a program with both is restored exactly" {
    # fid_pinpool copies into cudaHostAlloc'd blocks and never hands them to
    # a kernel; the double's NCCL, as NCCL does, keeps mapped host flags.
    fidelity fid_pinpool restore 12 27
    run grep -c 'pinned host memory\|managed memory' "$D/err"
    [ "$output" = 0 ]
    rm -f "$D/died"
    fidelity fid_nccl_zero 'either:allocation .* is at 0x[0-9a-f]* in the replaying run|diverged from the failed run' 12 27
    ! grep -q 'pinned host memory\|mapped for the device' "$D/err" || { show_job; return 1; }
}

@test "fid_graph: a CUDA graph captured once after warm-up, launched every iteration" {
    fidelity fid_graph restore 12 27
}

@test "fid_graphupdate: a graph captured again every iteration and re-instantiated" {
    fidelity fid_graphupdate restore 12 27
}

@test "fid_graphmem: a graph captured once allocates in its capture (memory nodes, auto-free on launch); the output is freed before each iteration ends" {
    # Graph memory is never copied, so the double's fault on unbacked graph memory never fires.
    fidelity fid_graphmem restore 12 27 9
    ! grep -q 'no snapshot' "$D/err" || { show_job; return 1; }
}

@test "fid_graphmem, FID_KEEP_OUTPUT=1: graph memory live at even iterations' ends: those snapshots are skipped, said, and the job comes back from another" {
    export FID_KEEP_OUTPUT=1
    fidelity fid_graphmem restore 12 27 9
    # CKPT_EVERY=3: iteration 6 ends with the output live, 9 with it freed.
    grep -q '^libckpt\[rank 0\]: warning: iteration 6: no snapshot: 1 allocation of graph-owned memory (4 bytes, the first at 0x[0-9a-f]*), left by a CUDA graph.s launch and not freed yet, is live; replay does not run graph launches' "$D/err" ||
        { show_job; return 1; }
    grep -q '^libckpt\[rank 0\]: iteration 9: snapshots resume (1 skipped while graph-owned memory was live)$' "$D/err" ||
        { show_job; return 1; }
    local restored
    restored=$(sed -n 's/^libckpt\[rank 0\]: restored iteration \([0-9]*\) .*/\1/p' "$D/err" | tail -n 1)
    [ $((restored % 2)) -eq 1 ] || { echo "restored iteration $restored: an iteration that ended with graph memory live"; show_job; return 1; }
}

@test "fid_graphmem, FID_INSTANTIATE=params: the graph instantiated with cuGraphInstantiateWithParams is followed as well" {
    export FID_KEEP_OUTPUT=1 FID_INSTANTIATE=params
    fidelity fid_graphmem restore 12 27 9
    grep -q 'iteration 6: no snapshot: 1 allocation of graph-owned memory' "$D/err" || { show_job; return 1; }
    ! grep -q 'cannot be restored by replay' "$D/err" || { show_job; return 1; }
}

@test "fid_hostfn: host functions after an async D2H read the bytes into host state" {
    fidelity fid_hostfn restore 12 27
}

@test "fid_bgthread: a metrics thread does its own D2H copies and syncs beside training" {
    fidelity fid_bgthread restore 12 27
}

@test "fid_ema: a background thread's last call before a boundary queues device work (a moving average): replay does not run it twice" {
    fidelity fid_ema restore 12 27
}

@test "fid_watchdog: a watchdog thread polls the work's events on a timer: replay answers it and does not wait for it" {
    fidelity fid_watchdog restore 12 27
    grep -Eq '^libckpt\[rank 0\]: 1 thread only polled before the snapshot \([1-9][0-9]* queries\): replay answers it itself' "$D/err" ||
        { echo "the watchdog was not told from the program's threads"; show_job; return 1; }
}

@test "fid_watchdog: a watchdog that only polled and then allocates: the snapshots from then on are refused, naming it" {
    FID_WATCHDOG_ALLOCS_AT=2 fidelity fid_watchdog 'refuse:a thread that had only polled \([0-9]+ queries\) allocated device memory' 12 27
}

@test "fid_autotune: a kernel variant chosen by cudaEventElapsedTime, chosen again when the shape changes" {
    # Restore points from just before the second tuning, at iteration 21, to after it.
    fidelity fid_autotune restore 20 28
}

@test "fid_ptrtable: device memory holding device pointers, walked by a kernel, entries reallocated" {
    fidelity fid_ptrtable restore 12 27
}

@test "fid_prethread: a loader thread maps its memory before CUDA starts in the restarted launch and after in the recorded one: the driver's ranges, and every device pointer, are where they were; bit-exact, by the cold path and by a standby" {
    fidelity fid_prethread restore 12 27
    rm -f "$D/died"
    FID_STANDBY=1 fidelity fid_prethread restore 12 27
}

@test "fid_vmm: expandable segments: one cuMemUnmap over two mappings, mapped again, snapshots go on" {
    # The unmap is at iteration 16 and the new mappings at 28: killed at
    # 26..30, the job has had eight iterations or more to commit a snapshot
    # of the shrunk segment (18 or later), and must restore one.
    fidelity fid_vmm restore 26 30 18
}

@test "fid_nccl_zero: a proxy-like thread allocates, memsets and syncs on its own stream beside training" {
    # The proxy is the program's own thread: its allocations and the
    # training thread's race for the same addresses, differently in every
    # run.  A restore is exact, or refused naming the allocation that came
    # back elsewhere (or stopped by the resumed run's check); an older
    # snapshot may still restore.
    fidelity fid_nccl_zero 'either:allocation .* is at 0x[0-9a-f]* in the replaying run|diverged from the failed run' 12 27
}

@test "devvars: training state in device variables (__device__ globals the runtime finds with cuLibraryGetGlobal)" {
    fidelity devvars restore 12 27
}

@test "fid_twoctx: two contexts (cuCtxCreate), each with its own stream and state" {
    fidelity fid_twoctx restore 12 27
    # Each stream is ordered with an event of its own context: no snapshot is lost to it.
    ! grep -q "could not be ordered" "$D/err" || { show_job; return 1; }
}

@test "fid_files: a log, a history and the program's own checkpoint, written every iteration: no line twice after a resume, none lost, replay's writes and prints aside" {
    local bin=$BUILD/tests/progs/fid_files k=$((12 + RANDOM % 16)) rc=0
    mkdir -p "$D/plain" "$D/job"
    FID_FILES_DIR=$D/plain timeout -k 5 30 "$bin" >"$D/plain/out" 2>"$D/plain/err" || { cat "$D/plain/err"; return 1; }
    FID_FILES_DIR=$D/job FID_DIE_ONCE=$D/died LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- "$bin" --die-at $k \
        >"$D/out" 2>"$D/err" || rc=$?
    echo "killed after iteration $k; the job exited $rc"
    [ "$rc" -eq 0 ] || { show_job; return 1; }
    grep -q '^libckpt\[rank 0\]: restored iteration ' "$D/err" || { show_job; return 1; }
    grep -q "replay wrote [1-9][0-9]* files aside, never over the program's own" "$D/err" || { show_job; return 1; }
    for f in train.log history model.ckpt; do
        diff "$D/plain/$f" "$D/job/$f" || { echo "$f differs from the plain run's"; show_job; return 1; }
    done
    [ "$(sort "$D/job/history" | uniq -d)" = "" ]
    [ ! -e "$CKPT_ARENA_DIR" ] || [ -z "$(find "$CKPT_ARENA_DIR" -name 'replay-*')" ]
    # What the replay printed went aside: the lines of the iterations before
    # the restored boundary (the program's iteration s ends with the sync in
    # it, after its print) are on stdout and stderr once, from the launch
    # that was killed; the resumed run prints on from there, as the plain run.
    local s
    s=$(sed -n 's/^libckpt\[rank 0\]: restored iteration \([0-9]*\) .*/\1/p' "$D/err")
    echo "restored iteration $s"
    [ "$(grep -c '^iter 1 ' "$D/out")" -eq 1 ] || { echo "iteration 1 printed again in replay"; show_job; return 1; }
    for i in $(seq 1 $((s - 1))); do
        [ "$(grep -c "^iter $i " "$D/out")" -eq 1 ] && [ "$(grep -cx "progress $i" "$D/err")" -eq 1 ] ||
            { echo "iteration $i printed more than once"; show_job; return 1; }
    done
    [ "$(grep -c "^iter $s " "$D/out")" -eq 2 ] && [ "$(grep -cx "progress $s" "$D/err")" -eq 2 ]
    diff <(resumed_output "$D/out") "$D/plain/out" >"$D/diff" 2>&1 || { show_job; return 1; }
}

@test "fid_files under a standby: the files come out as the plain run's; the standby started after the takeover replays the once-only marker the failed run created (fopen wx) as the live run saw it, and stays up" {
    local bin=$BUILD/tests/progs/fid_files k=$((12 + RANDOM % 16)) rc=0
    mkdir -p "$D/plain" "$D/job"
    FID_FILES_DIR=$D/plain timeout -k 5 30 "$bin" >"$D/plain/out" 2>"$D/plain/err" || { cat "$D/plain/err"; return 1; }
    FID_FILES_DIR=$D/job FID_DIE_ONCE=$D/died CKPT_STANDBY=1 LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- \
        "$bin" --die-at $k >"$D/out" 2>"$D/err" || rc=$?
    echo "killed after iteration $k; the job exited $rc"
    [ "$rc" -eq 0 ] && [ -e "$D/died" ] || { show_job; return 1; }
    grep -q '^ckpt-resume: the standby took over at iteration ' "$D/err" || { show_job; return 1; }
    for f in train.log history model.ckpt; do
        diff "$D/plain/$f" "$D/job/$f" || { echo "$f differs from the plain run's"; show_job; return 1; }
    done
    grep -q '^ckpt-resume: started 1 standby .*' <(sed -n '/standby took over/,$p' "$D/err") ||
        { echo "no standby started after the takeover"; show_job; return 1; }
    ! grep -E '^ckpt-resume: .*the standby of rank [0-9]+ \(pid [0-9]+\) (was killed|exited)' "$D/err" ||
        { echo "a standby died"; show_job; return 1; }
    diff <(program_lines "$D/out" | resumed_output) "$D/plain/out" >"$D/diff" 2>&1 || { show_job; return 1; }
}

# made_real PROG: how the standby that took over made its contexts,
# streams and events real: at the takeover, having held none until then,
# or earlier, when the program made a call a virtual context cannot
# answer, named (a capture, its own virtual memory).  A library's load
# needs no context, and its variables are made at the takeover.
made_real() {
    local how want
    how=$(sed -n "s/^libckpt\[rank 0\]: the standby's contexts, streams and events made real (\(.*\)): [0-9]* calls in .*/\1/p" "$D/err" |
        head -n 1)
    case $1 in
    fid_graph | fid_graphupdate) want="the program called cuStreamBeginCapture_v2, *" ;;
    fid_vmm) want="the program called cuMemGetAllocationGranularity, *" ;;
    *) want="the takeover" ;;
    esac
    # shellcheck disable=SC2053
    [[ $how == $want ]] || { echo "$1: the standby's objects made real ($how), expected ($want)"; return 1; }
}

@test "standby: the programs that restore are taken over by their standby, which held their large allocations as reservations and their pinned buffers unpinned and no context until the takeover (or the call that needed one, named), bit-exact" {
    local prog
    # The programs whose standby needs a context before its takeover may make one.
    export CKPT_STANDBY_CONTEXT=1
    for prog in fid_evalloc fid_pinpool fid_poll fid_pageable fid_graph fid_graphupdate fid_hostfn fid_bgthread \
        fid_ema fid_ptrtable devvars fid_twoctx; do
        FID_STANDBY=1 fidelity $prog restore 12 27 || return 1
        made_real $prog || { show_job; return 1; }
        rm -f "$D/died"
        # The pool's buffers were ordinary memory until the takeover pinned them.
        [ $prog != fid_pinpool ] ||
            grep -q '^libckpt\[rank 0\]: host memory pinned for the takeover: [0-9]* buffers, ' "$D/err" ||
            { show_job; return 1; }
    done
    FID_STANDBY=1 fidelity fid_autotune restore 20 28
    made_real fid_autotune || { show_job; return 1; }
    rm -f "$D/died"
    FID_STANDBY=1 fidelity fid_vmm restore 26 30 18
    made_real fid_vmm || { show_job; return 1; }
}

@test "a standby whose program captures a CUDA graph stops at the capture by default, naming it, and the failure recovers by the cold path, bit-exact; the same for one that maps its own virtual memory" {
    local prog bin call
    for prog in fid_graph fid_vmm; do
        bin=$BUILD/tests/progs/$prog
        [ $prog = fid_graph ] && call=cuStreamBeginCapture_v2 || call=cuMemGetAllocationGranularity
        rm -f "$D/died"
        timeout -k 5 30 "$bin" >"$D/plain" 2>&1 || { cat "$D/plain"; return 1; }
        FID_DIE_ONCE=$D/died CKPT_STANDBY=1 LD_PRELOAD=$LIB timeout -k 5 120 "$CKPT" --nproc 1 -- "$bin" --die-at 22 \
            >"$D/out" 2>"$D/err" || { show_job; return 1; }
        grep -q "^libckpt\[rank 0\]: error: the standby stops: the program called $call, which a standby without a CUDA context cannot answer, and a standby makes none on its rank's GPU before it takes over unless CKPT_STANDBY_CONTEXT=1" "$D/err" ||
            { show_job; return 1; }
        grep -q '^ckpt-resume: warning: the standby of rank 0 (pid [0-9]*) exited with status 75 (its reason is said above): a failure now recovers by replaying from the start$' "$D/err" &&
            grep -q '^libckpt\[rank 0\]: replaying [0-9]* iterations to restore generation ' "$D/err" &&
            grep -Eq '^ckpt-resume: done exit=0 restarts=1 \(cold [0-9.]+ s\)$' "$D/err" || { show_job; return 1; }
        ( ! grep -q "made real\|took over" "$D/err" ) || { show_job; return 1; }
        program_lines "$D/out" | resumed_output | diff - "$D/plain" || { show_job; return 1; }
    done
}

@test "a copy thread whose asynchronous copies return after the training thread ended the iteration: the cold path makes the copy pending at the snapshot again, a standby waits for the copy's record as its cut moves on; both bit-exact" {
    # The copies return 20 ms after they are queued (the double's
    # FAKEGPU_D2H_RETURN_US), and the training thread ends each iteration
    # 5 ms after the copier made its call: the copy's record follows the
    # iteration's end in the log.  The restore's copy is pending at the
    # snapshot (made again as the restore goes live), and a standby
    # replaying the call finds its record past its cut.
    FAKEGPU_D2H_RETURN_US=20000 fidelity fid_lateret restore 12 27
    rm -f "$D/died"
    FAKEGPU_D2H_RETURN_US=20000 FID_STANDBY=1 fidelity fid_lateret restore 12 27
}

@test "restored twice: the second restore is of a snapshot the restored run took, out of the log it wrote, by the cold path or by a standby; bit-exact" {
    # The restored run's log must say what that run saw: a copy pending at
    # the snapshot, made again as the restore goes live, is settled by the
    # sync that waited for it (a thread whose log ran dry at a sync makes
    # the sync again once live), not by a later one with other bytes.  The
    # double's device takes 1 ms an op: an event recorded behind a copy
    # is pending a while, as on a GPU.
    local prog low high from
    while read -r prog low high from; do
        # Under ThreadSanitizer, the programs with threads of their own.
        [ -z "${TEST_UNDER_TSAN:-}" ] || [[ " fid_lateret fid_hostfn fid_bgthread fid_ema fid_watchdog " == *" $prog "* ]] ||
            continue
        rm -f "$D/died" "$D/died.again"
        FAKEGPU_OP_US=1000 FAKEGPU_D2H_RETURN_US=$([ $prog = fid_lateret ] && echo 20000 || echo 0) FID_AGAIN=1 \
            fidelity $prog restore $low $high $from || return 1
    done <<'PROGRAMS'
fid_lateret 12 27 0
fid_evalloc 12 27 0
fid_pinpool 12 27 0
fid_poolstats 12 27 0
fid_poll 12 27 0
fid_pageable 12 27 0
fid_graph 12 27 0
fid_graphupdate 12 27 0
fid_hostfn 12 27 0
fid_bgthread 12 27 0
fid_ema 12 27 0
fid_watchdog 12 27 0
fid_autotune 20 28 0
fid_ptrtable 12 27 0
fid_vmm 26 30 18
devvars 12 27 0
fid_twoctx 12 27 0
PROGRAMS
    # By the standbys, each time: the one started behind the first takeover
    # follows the restored run's log and takes over the second time.
    [ -z "${TEST_UNDER_TSAN:-}" ] || return 0
    for prog in fid_lateret fid_evalloc fid_hostfn fid_ema; do
        rm -f "$D/died" "$D/died.again"
        FAKEGPU_OP_US=1000 FAKEGPU_D2H_RETURN_US=$([ $prog = fid_lateret ] && echo 20000 || echo 0) FID_AGAIN=1 \
            FID_STANDBY=1 fidelity $prog restore 12 27 || return 1
    done
}
