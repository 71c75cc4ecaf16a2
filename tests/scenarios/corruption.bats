#!/usr/bin/env bats
# Corruption in every single-node tier, table-driven: an arena slot's data
# chunks and header, the replay log, a persisted stripe and its manifest,
# each with a flipped bit, a truncation, a zeroed page, and a stale
# generation that carries a newer number.  Every row must be detected and
# named, never loaded (no rank restores the damaged iteration), and the
# job must fall back to the next good generation and end exactly as an
# uninterrupted run.  The replica tier (a peer's memory) has its own table
# in nodes.bats ("a damaged replica in a peer's memory"), since it needs
# several nodes.
#
# The job: 2 ranks, a snapshot every 5th iteration, rank 1 killed at the
# end of iteration 23 and not restarted, so every rank holds iterations 15
# and 20 in its arena; both are persisted to two directories.  Each row
# damages a copy of that state, then ckpt-resume restarts the job with
# CKPT_RESTORE (as after a failure) and must say what it refused.

load output
load bytes

bats_require_minimum_version 1.5.0

# tier | damage | target | arena wiped | CKPT_RESTORE | said (ERE) | restores
ROWS='
arena chunk | flip  | slot 1 20 mid      | no  | 20 | rank1/slot[01] is damaged .chunk [0-9]+ .* checksum mismatch. | 15
arena chunk | zero  | slot 1 20 page1    | no  | 20 | rank1/slot[01] is damaged .chunk [0-9]+ .* checksum mismatch. | 15
arena chunk | trunc | slot 1 20 half     | no  | 20 | rank1/slot[01] is damaged .header sizes are inconsistent | 15
header      | flip  | slot 1 20 100      | no  | 20 | rank1/slot[01] is damaged .header checksum mismatch | 15
header      | zero  | slot 1 20 page0    | no  | 20 | restore of iteration 20 refused: .*rank1 .*slot[01]: no committed snapshot | 15
header      | trunc | slot 1 20 64       | no  | 20 | rank1/slot[01] is damaged .image too short | 15
header      | stale | relabel 15 25      | no  | 25 | rank0/slot[01] is damaged .header checksum mismatch | 20
replay log  | flip  | log 1 mid          | no  | 20 | restore of iteration 20 refused: replay log record at byte [0-9]+ is damaged | 15
replay log  | zero  | log 1 page0        | no  | 20 | restore of iteration 20 refused: .*rank1/replay.log is not a replay log | 15
replay log  | trunc | log 1 half         | no  | 20 | restore of iteration 20 refused: the replay log ends at iteration [0-9]+, before iteration 20 | 15
disk chunk  | flip  | stripe 1 20 mid    | yes | 20 | cannot restore iteration 20 from disk: .*stripe-1: bytes [0-9.]+ do not match their checksum; trying an older one | 15
disk chunk  | zero  | stripe 1 20 page0  | yes | 20 | cannot restore iteration 20 from disk: .*stripe-1: bytes [0-9.]+ do not match their checksum; trying an older one | 15
disk chunk  | trunc | stripe 1 20 half   | yes | 20 | skipping the generation of iteration 20 in .*stripe-1 is [0-9]+ bytes, the manifest says [0-9]+: the generation is torn | 15
manifest    | flip  | manifest 20 mid    | yes | 20 | skipping the generation of iteration 20 in .*: manifest checksum mismatch | 15
manifest    | zero  | manifest 20 page0  | yes | 20 | skipping the generation of iteration 20 in .*: the manifest is not one | 15
manifest    | trunc | manifest 20 half   | yes | 20 | skipping the generation of iteration 20 in .*: the manifest is [0-9]+ bytes, it says [0-9]+ .truncated | 15
manifest    | stale | regen 15 25        | yes | 25 | skipping the generation of iteration 25 in .*: the manifest is of job c iteration 15 | 20
manifest    | stale | remanifest 15 20   | yes | 20 | skipping the generation of iteration 20 in .*: the manifest is of job c iteration 15 | 15
'

setup_file() {
    export BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    export TRAIN=$BUILD/examples/mlp-train RESUME=$BUILD/bin/ckpt-resume PERSIST=$BUILD/bin/ckpt-persist
    export P=$BATS_FILE_TMPDIR/pristine ARGS="--iters 30 --hidden 64 --layers 3"
    mkdir -p "$P/ssd0" "$P/ssd1"
    unset CKPT_RESTORE CKPT_FAULT LD_PRELOAD FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
    export CKPT_ARENA_DIR=$P/arena CKPT_JOB=c CKPT_EVERY=5 CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 \
        CKPT_PERSIST_DIRS=$P/ssd0,$P/ssd1 CKPT_PERSIST_EVERY=0
    # The replay logs stay in the arena (CKPT_REPLAY_LOG_DIR=arena, no
    # CKPT_PERSIST_DIRS for the job itself): every row damages its own copy
    # of them.
    CKPT_PERSIST_DIRS= CKPT_REPLAY_LOG_DIR=arena "$RESUME" --nproc 2 -- "$TRAIN" $ARGS >"$P/plain" 2>/dev/null
    CKPT_PERSIST_DIRS= CKPT_REPLAY_LOG_DIR=arena FAKEGPU_CRASH_AT=24 FAKEGPU_CRASH_RANK=1 "$RESUME" --nproc 2 \
        --max-restarts 0 -- "$TRAIN" $ARGS >/dev/null 2>&1 || true
    "$PERSIST" save --iteration 15 >/dev/null
    "$PERSIST" save --iteration 20 >/dev/null
}

# The slot of rank R that holds iteration K.
slot_of() {
    local s
    for s in "$A/rank$1/slot0" "$A/rank$1/slot1"; do
        [ "$(od -A n -t u8 -j 96 -N 8 "$s" | tr -d ' ')" = "$2" ] && { echo "$s"; return; }
    done
    echo "no slot of rank $1 holds iteration $2" >&2
    return 1
}

# damage MODE FILE WHERE: flip one bit, zero a 4 KiB page, or truncate.
# WHERE: mid (half the file), half (the same, for truncation), pageN, or a byte offset.
damage() {
    local mode=$1 f=$2 where=$3 size off
    size=$(stat -c %s "$f")
    case $where in
    mid|half) off=$((size / 2)) ;;
    page*) off=$((${where#page} * 4096)) ;;
    *) off=$where ;;
    esac
    case $mode in
    flip) flip "$f" "$off" 16 ;;
    zero) dd if=/dev/zero of="$f" bs=4096 seek=$((off / 4096)) count=1 conv=notrunc 2>/dev/null ;;
    trunc) truncate -s "$off" "$f" ;;
    esac
}

# apply MODE TARGET...: the row's damage on the copy in $D.
apply() {
    local mode=$1 what=$2
    shift 2
    case $what in
    slot) damage "$mode" "$(slot_of "$1" "$2")" "$3" ;;
    log) damage "$mode" "$A/rank$1/replay.log" "$2" ;;
    stripe) damage "$mode" "$D/ssd$1/$(id -u)-c/gen-$2/stripe-$1" "$3" ;;
    manifest) damage "$mode" "$D/ssd0/$(id -u)-c/gen-$1/manifest" "$2" ;;
    relabel) # every rank's slot of iteration $1 claims generation 5, iteration $2
        local r s
        for r in 0 1; do
            s=$(slot_of $r "$1")
            u64 "$s" 88 5
            u64 "$s" 96 "$2"
        done ;;
    regen) # the generation of iteration $1 moved to a newer number
        local d
        for d in 0 1; do mv "$D/ssd$d/$(id -u)-c/gen-$1" "$D/ssd$d/$(id -u)-c/gen-$2"; done ;;
    remanifest) # an older manifest where a newer one was
        cp "$D/ssd0/$(id -u)-c/gen-$1/manifest" "$D/ssd0/$(id -u)-c/gen-$2/manifest" ;;
    esac
}

@test "corruption in any tier is detected, never loaded, and the fallback is taken and said" {
    local failed=0 n=0 tier mode target wiped restore said restores
    while IFS='|' read -r tier mode target wiped restore said restores; do
        tier=$(echo $tier) mode=$(echo $mode) target=$(echo $target) wiped=$(echo $wiped)
        restore=$(echo $restore) restores=$(echo $restores) said=$(echo "$said" | sed 's/^ *//; s/ *$//')
        [ -n "$tier" ] || continue
        n=$((n + 1))
        D=$BATS_TEST_TMPDIR/row$n
        cp -a "$P" "$D"
        A=$D/arena/$(id -u)-c
        apply "$mode" $target || { echo "FAIL $tier x $mode: cannot damage $target"; failed=$((failed + 1)); continue; }
        [ "$wiped" = yes ] && rm -rf "${A:?}"/*
        CKPT_ARENA_DIR=$D/arena CKPT_PERSIST_DIRS=$D/ssd0,$D/ssd1 CKPT_RESTORE=$restore \
            timeout -k 5 60 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err"
        local rc=$? why=
        if [ $rc -ne 0 ]; then
            why="exit $rc"
        elif ! grep -Eq "$said" "$D/err"; then
            why="stderr does not say /$said/"
        elif [ "$(grep -c "^libckpt\[rank [0-9]*\]: restored iteration $restores " "$D/err")" -ne 2 ]; then
            why="not restored from iteration $restores on both ranks"
        elif grep -q "^libckpt\[rank [0-9]*\]: restored iteration $restore " "$D/err"; then
            why="the damaged iteration $restore was loaded"
        elif ! restored_tail "$(cat "$P/plain")" "$(cat "$D/out")" >"$D/tail"; then
            why="output is not the uninterrupted run's from the restored iteration on: $(head -n 1 "$D/tail")"
        fi
        if [ -n "$why" ]; then
            failed=$((failed + 1))
            echo "FAIL $tier x $mode ($target): $why"
            sed 's/^/    | /' "$D/err" | grep -v snapshots | tail -n 15
        else
            echo "ok   $tier x $mode ($target): $(grep -E "$said" "$D/err" | head -n 1 | cut -c1-150)"
            [ -n "${CORRUPTION_VERBOSE:-}" ] && grep -E "warning|error|refused|skipping" "$D/err" | cut -c1-220
            rm -rf "$D"
        fi
    done <<<"$ROWS"
    echo "$n rows, $failed failed"
    [ $n -ge 18 ] && [ $failed -eq 0 ]
}
