#!/usr/bin/env bats
# libckpt on a program that reaches CUDA through the per-thread default
# stream variants (_ptsz/_ptds), as code built with --default-stream
# per-thread does (tests/progs/ptsz_train.c): its output does not change,
# its host synchronisations are boundaries, the snapshots hold its state
# as of their iteration, and a rank killed mid-run resumes bit-exact.

load output

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    RESUME=$BUILD/bin/ckpt-resume
    INSPECT=$BUILD/bin/ckpt-inspect
    PROG=$BUILD/tests/progs/ptsz_train
    [ -x "$PROG" ] && [ -x "$RESUME" ] || { echo "missing $PROG or $RESUME: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-ptsz-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA LD_PRELOAD \
        MASTER_ADDR MASTER_PORT FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE CKPT_BOUNDARY CKPT_EVERY
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2
}

teardown() {
    rm -rf "$D"
}

# ckpt-resume, bounded: a job it fails to end fails the test instead of hanging it.
ckpt() { timeout -k 5 60 "$RESUME" "$@"; }

@test "per-thread stream calls are seen: same output, a snapshot per iteration holding that iteration's state" {
    "$PROG" --iters 12 >"$D/plain"
    grep -q '^digest ' "$D/plain"
    CKPT_JOB=pt CKPT_BOUNDARY=every:2 CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB "$PROG" --iters 12 >"$D/hooked"
    diff "$D/plain" "$D/hooked"
    # Two host syncs per iteration, both through _ptsz/_ptds entry points:
    # one snapshot per iteration, numbered as the program counts.
    [ "$(sed -E 's/.*"iteration":([0-9]+).*/\1/' "$D/stats" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]
    "$INSPECT" --job pt verify all
    # Both slots (iterations 12 and 11) hold pattern(iteration - 1) in
    # allocation 0, written on the per-thread stream just before the
    # iteration's syncs and overwritten right after them.
    python3 - "$CKPT_ARENA_DIR/$(id -u)-pt/rank0" <<'PY'
import struct, sys

M = (1 << 64) - 1
def pattern(it, ordinal, word):
    x = ((it * 0x9e3779b97f4a7c15) & M) ^ ((ordinal * 0xbf58476d1ce4e5b9) & M) ^ ((word * 0x94d049bb133111eb) & M)
    x ^= x >> 31
    x = (x * 0xd6e8feb86659fd93) & M
    x ^= x >> 32
    return x & 0xffffffff

seen = []
for s in ("slot0", "slot1"):
    img = open(sys.argv[1] + "/" + s, "rb").read()
    gen, it, _, nallocs, data_off = struct.unpack_from("<QQQQQ", img, 88)
    recs = [struct.unpack_from("<QQQIIQQQ", img, 168 + 56 * i) for i in range(nallocs)]  # format.h: after the header
    ordinal, size, off = recs[0][:3]
    assert ordinal == 0 and size == 16384 * 4, recs[0]
    words = struct.unpack_from("<16384I", img, data_off + off)
    want = tuple(pattern(it - 1, 0, w) for w in range(16384))
    bad = sum(a != b for a, b in zip(words, want))
    assert bad == 0, "%s (iteration %d): %d words are not pattern(%d)" % (s, it, bad, it - 1)
    seen.append(it)
assert sorted(seen) == [11, 12], seen
print("slots hold iterations", sorted(seen))
PY
}

@test "a per-thread stream program killed mid-run resumes from its snapshot with the output of an uninterrupted run" {
    export CKPT_EVERY=5
    for n in 1 2; do
        CKPT_DISABLE=1 ckpt --nproc $n -- "$PROG" --iters 40 >"$D/plain.$n" 2>"$D/plain.$n.err" ||
            { cat "$D/plain.$n.err"; return 1; }
        grep -q '^digest ' "$D/plain.$n"
        victim=$((n - 1))
        (export FAKEGPU_CRASH_AT=24 FAKEGPU_CRASH_RANK=$victim FAKEGPU_CRASH_ONCE=$D/crashed.$n &&
            ckpt --nproc $n -- "$PROG" --iters 40 >"$D/out.$n" 2>"$D/err.$n") ||
            { echo "ranks $n: exit $?"; cat "$D/err.$n"; return 1; }
        [ -e "$D/crashed.$n" ]
        grep -q "rank $victim (pid [0-9]*) was killed by SIGKILL" "$D/err.$n"
        # The ranks run unsynchronised: the newest snapshot they all hold is
        # iteration 20 for one rank, 20 or an earlier one for two.
        it=$(sed -n -E 's/^ckpt-resume: restarting from generation [0-9]+ \(iteration ([0-9]+)\)$/\1/p' "$D/err.$n")
        [ "$it" = 20 ] || { [ $n -gt 1 ] && [ "${it:-0}" -ge 5 ] && [ "$it" -lt 20 ]; } || { cat "$D/err.$n"; return 1; }
        [ "$(grep -c "^libckpt\[rank [0-9]*\]: restored iteration $it " "$D/err.$n")" -eq $n ]
        [[ $(tail -n 1 "$D/err.$n") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \(cold\ [0-9]+\.[0-9]{3}\ s\)$ ]]
        # The restarted run replayed to iteration 20, restored, and went on:
        # its iteration lines and digest are the uninterrupted run's.
        diff <(resumed_output "$D/out.$n") "$D/plain.$n"
    done
}
