#!/usr/bin/env bats
# ckpt-inspect on arenas that unmodified programs wrote under libckpt.so:
# list shows every slot of every rank; verify passes on a fresh arena and
# names the slot and chunk of any flipped byte, and a damaged replay log;
# diff tells weights that change from a constant table; export writes
# safetensors files whose bytes are the arena's; gc removes only dead
# jobs' arenas; docs/configuration.md is the generated table.

load output
load bytes

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    ROOT=$BATS_TEST_DIRNAME/../..
    LIB=$BUILD/lib/libckpt.so
    TRAIN=$BUILD/examples/mlp-train
    INSPECT=$BUILD/bin/ckpt-inspect
    D=$BATS_TEST_TMPDIR
    export CKPT_ARENA_DIR=$D/arena
    unset CKPT_JOB RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
}

teardown() {
    local pid
    for pid in $(cat "$D/pids" 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# train JOB N: N ranks of the trainer under libckpt, to the end.
train() {
    local job=$1 n=$2 port r rc=0 pids=()
    port=$(free_port)
    for ((r = 0; r < n; r++)); do
        CKPT_JOB=$job RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            LD_PRELOAD=$LIB timeout 60 "$TRAIN" --iters 20 --hidden 64 --layers 3 >"$D/$job.out.$r" 2>&1 &
        pids+=($!)
    done
    for r in "${!pids[@]}"; do
        wait "${pids[$r]}" || { rc=1; cat "$D/$job.out.$r" >&2; }
    done
    return $rc
}

slot() { # job rank slot: the slot file
    echo "$CKPT_ARENA_DIR/$(id -u)-$1/rank$2/slot$3"
}


@test "list shows both slots of every rank, verified, for 1 and 2 ranks" {
    train one 1
    train two 2
    run "$INSPECT" list
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^job one: 1 rank, newest generation on every rank 18 (iteration 20)"
    echo "$output" | grep -q "^job two: 2 ranks, newest generation on every rank 18 (iteration 20)"
    for job in one two; do
        n=1
        [ $job = two ] && n=2
        for ((r = 0; r < n; r++)); do
            for s in 0 1; do
                g=$(u64 "$(slot $job $r $s)" 88)
                i=$(u64 "$(slot $job $r $s)" 96)
                # Only the job's own block: from its "job" line to the next.
                echo "$output" | sed -n "/^job $job:/,/^job /p" |
                    grep -Eq "^  arena +$r +$s +$g +$i +[0-9.]+ KiB +[0-9]+s  verified$" ||
                    { echo "no verified line for $job rank $r slot $s (generation $g)"; echo "$output"; false; }
            done
        done
    done
    run "$INSPECT" --job two list
    ! echo "$output" | grep -q "^job one"
}

@test "where a snapshot's bytes go: by allocation kind in list and in the stats, summing to what was copied" {
    # Expandable segments (cuMemMap'ed ranges) beside plain allocations.
    CKPT_JOB=kinds CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB "$BUILD/tests/progs/fid_vmm" --iters 20 >/dev/null 2>"$D/err" ||
        { cat "$D/err"; false; }
    run "$INSPECT" --job kinds list
    [ "$status" -eq 0 ]
    echo "$output" | grep -Eq "^  a snapshot of generation [0-9]+ copies [0-9.]+ [KMG]?i?B: plain [0-9.]+ [KMG]?i?B in [0-9]+ allocations?, vmm [0-9.]+ [KMG]?i?B in [1-9][0-9]* allocations?$" ||
        { echo "$output"; false; }
    # Each line's kinds add up to the bytes it copied (its "bytes" is the
    # image's data area, allocations aligned); the exit line names them.
    awk 'function f(k) { return match($0, "\"" k "\":[0-9]+") ? substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) + 0 : -1 }
         { kinds = f("plain") + f("async") + f("vmm") + f("managed") + f("pitch") + f("global"); copied = f("boundary_bytes") + f("gap_bytes") + f("spill_bytes") + f("touch_bytes")
           if (kinds != copied || f("vmm") <= 0 || kinds > f("bytes")) { print "line " NR ": " kinds " by kind, " copied " copied: " $0; bad = 1 } }
         END { exit bad }' "$D/stats"
    grep -Eq "snapshots [0-9]+ \(skipped [0-9]+\), [0-9.]+ MiB each \(the last: [0-9.]+ MiB of allocations; copied plain [0-9.]+, stream-ordered [0-9.]+, VMM [0-9.]+, managed [0-9.]+, pitched [0-9.]+, device variables [0-9.]+ MiB\)" "$D/err"
}

@test "a program that declares its free blocks: list says how much of the allocated bytes a snapshot copies, export and diff read the parts" {
    CKPT_JOB=decl LD_PRELOAD=$LIB "$BUILD/tests/progs/alloc_train" caching --declare --iters 10 >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; false; }
    run "$INSPECT" --job decl list
    [ "$status" -eq 0 ]
    echo "$output" | grep -Eq "^  of 6.0 MiB allocated: 2[0-9].[0-9]% copied, the rest declared free by the program$" ||
        { echo "$output"; false; }
    g0=$(u64 "$(slot decl 0 0)" 88)
    g1=$(u64 "$(slot decl 0 1)" 88)
    run "$INSPECT" --job decl export "$g1" "$D/x"
    [ "$status" -eq 0 ]
    exported "$D/x/rank0.safetensors" "$(slot decl 0 1)" 4
    # The parts matched up into the program's four allocations, at their
    # whole sizes: the loss, and three segments.
    run "$INSPECT" --job decl diff "$g0" "$g1"
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -Ec "^ +[0-3] plain +[0-9]+ +(4 B|2.0 MiB) +(changed|unchanged)$")" -eq 4 ] ||
        { echo "$output"; false; }
    echo "$output" | grep -Eq "^  unchanged: [0-9] allocations?, " || { echo "$output"; false; }
}

@test "verify passes on a fresh arena, 1 and 2 ranks, and checks every generation with 'all'" {
    train one 1
    train two 2
    run "$INSPECT" --job one verify
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^job one: generation 18 (iteration 20) verified on all 1 rank$"
    run env CKPT_JOB=two "$INSPECT" verify
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^rank1 slot[01] (arena): generation 18, iteration 20, .*: verified$"
    echo "$output" | grep -q "^rank1 replay log (arena): verified through iteration 20$"
    echo "$output" | grep -q "^job two: generation 18 (iteration 20) verified on all 2 ranks$"
    run "$INSPECT" --job two verify all
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -c ': verified$')" -eq 4 ]
    run "$INSPECT" verify
    [ "$status" -eq 3 ]
    echo "$output" | grep -q "2 jobs in .* (one, two): name one with --job"
}

@test "verify names the slot and chunk of a flipped byte in the header, the first and the last chunk of either slot" {
    CKPT_JOB=big LD_PRELOAD=$LIB "$BUILD/tests/progs/statewriter" --iters 6 --mib 20 >/dev/null 2>&1
    for s in 0 1; do
        f=$(slot big 0 $s)
        g=$(u64 "$f" 88)
        data=$(u64 "$f" 120)
        bytes=$(u64 "$f" 128)
        chunk=$(u64 "$f" 136)
        last=$(((bytes - 1) / chunk))
        [ "$last" -ge 2 ] || { echo "want an image of 3 chunks or more, got $((last + 1))"; false; }
        # offset:expected message
        for place in "200:header checksum mismatch" \
                     "$((data + 5)):generation $g: chunk 0 (bytes 0..) checksum mismatch" \
                     "$((data + bytes - 1)):generation $g: chunk $last (bytes $((last * chunk))..) checksum mismatch"; do
            off=${place%%:*}
            flip "$f" "$off"
            run "$INSPECT" --job big verify "$g"
            flip "$f" "$off"
            [ "$status" -eq 1 ] || { echo "slot$s byte $off: exit $status"; echo "$output"; false; }
            echo "$output" | grep -qF "rank0 slot$s (arena): ${place#*:}" ||
                { echo "slot$s byte $off: not named"; echo "$output"; false; }
        done
        run "$INSPECT" --job big verify "$g"
        [ "$status" -eq 0 ]
    done
    # Two chunks at once: both named; list says why it is not verified.
    f=$(slot big 0 1)
    flip "$f" $(($(u64 "$f" 120) + 1))
    flip "$f" $(($(u64 "$f" 120) + $(u64 "$f" 136) + 1))
    run "$INSPECT" --job big verify all
    [ "$status" -eq 1 ]
    echo "$output" | grep -q "rank0 slot1 (arena): generation [0-9]*: chunk 0 (bytes 0..) checksum mismatch"
    echo "$output" | grep -q "rank0 slot1 (arena): generation [0-9]*: chunk 1 (bytes [0-9]*..) checksum mismatch"
    run "$INSPECT" --job big list
    echo "$output" | grep -Eq "^  arena +0 +1 .* NOT verified: chunk 0 \(bytes 0\.\.\) checksum mismatch, and 1 more chunk$"
}

@test "verify finds a damaged replay log, and one too short for the snapshot" {
    train two 2
    log=$CKPT_ARENA_DIR/$(id -u)-two/rank1/replay.log
    cp "$log" "$D/log"
    size=$(stat -c %s "$log")
    flip "$log" $((size / 2))
    run "$INSPECT" --job two verify
    [ "$status" -eq 1 ]
    echo "$output" | grep -q "^rank1 replay log (arena): replay log record at byte [0-9]* is damaged (after iteration [0-9]*)$"
    echo "$output" | grep -q "^rank0 replay log (arena): verified through iteration 20$"
    # Cut after a whole record: every record verifies, but the log ends too early.
    cp "$D/log" "$log"
    truncate -s 64 "$log"
    run "$INSPECT" --job two verify
    [ "$status" -eq 1 ]
    echo "$output" | grep -q "^rank1 replay log (arena): ends at iteration 0, before iteration 20: that snapshot cannot be restored$"
    cp "$D/log" "$log"
    run "$INSPECT" --job two verify
    [ "$status" -eq 0 ]
}

@test "diff: weights written every iteration changed, a table written once did not" {
    CKPT_JOB=fz LD_PRELOAD=$LIB "$BUILD/tests/progs/frozen" --iters 12 >"$D/kinds" 2>/dev/null
    g0=$(u64 "$(slot fz 0 0)" 88)
    g1=$(u64 "$(slot fz 0 1)" 88)
    run "$INSPECT" --job fz diff "$g0" "$g1"
    [ "$status" -eq 0 ]
    while read -r kind ord; do
        want=$([ "$kind" = constant ] && echo unchanged || echo changed)
        echo "$output" | grep -Eq "^ +$ord plain +0 +[0-9.]+ (B|KiB) +$want$" ||
            { echo "ordinal $ord ($kind) is not '$want'"; echo "$output"; false; }
    done <"$D/kinds"
    echo "$output" | grep -q "^  changed: 2 allocations, .* (parameters, optimizer state, or buffers rewritten every iteration)$"
    echo "$output" | grep -q "^  unchanged: 1 allocation, .* (constants)$"
    run "$INSPECT" --job fz diff 1 "$g1"
    [ "$status" -eq 1 ]
    echo "$output" | grep -q "^rank0: no verified image of generation 1$"
}

# exported FILE SLOT PARTS: the safetensors file FILE holds the image in
# the slot file SLOT, tensor by tensor, at least PARTS of them parts of
# allocations the program declared partly free.
exported() {
    python3 - "$@" <<'EOF'
import json, struct, sys

path, slot, want_parts = sys.argv[1], sys.argv[2], sys.argv[3]
raw = open(path, "rb").read()
img = open(slot, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
assert (8 + n) % 8 == 0, "data not 8-byte aligned"
text = raw[8:8 + n].decode("utf-8")
assert text.startswith("{") and text.rstrip(" ") == text.rstrip(), "header padding is not spaces"
head = json.loads(text)
meta = head.pop("__metadata__")
assert all(isinstance(v, str) for v in meta.values()), "metadata values must be strings"

# The slot's header (runtime/format.h) and records.
job = img[16:80].split(b"\0")[0].decode()
rank, world = struct.unpack_from("<II", img, 80)
gen, it, _, nallocs, data_off = struct.unpack_from("<QQQQQ", img, 88)
recs = [struct.unpack_from("<QQQIIQQQ", img, 168 + 56 * i) for i in range(nallocs)]  # after the 168-byte header
assert (meta["job"], meta["rank"], meta["world"], meta["generation"], meta["iteration"]) == \
    (job, str(rank), str(world), str(gen), str(it)), meta
assert len(head) == nallocs, (len(head), nallocs)

data = raw[8 + n:]
end = 0
parts = 0
for ordinal, size, off, kind, _, birth, start, nbytes in recs:
    # A live part of an allocation declared partly free is named by its start.
    name = "rank%d/alloc%d" % (rank, ordinal) + ("" if nbytes == size else "@%d" % start)
    t = head[name]
    assert t["dtype"] == "U8" and t["shape"] == [nbytes], t
    b, e = t["data_offsets"]
    assert b == end and e == b + nbytes, "tensors must follow each other without holes"
    end = e
    assert data[b:e] == img[data_off + off:data_off + off + nbytes], name + " differs from the arena"
    assert meta[name + ".ordinal"] == str(ordinal) and meta[name + ".birth"] == str(birth)
    assert meta[name + ".kind"] in ("plain", "async", "vmm", "managed", "pitch", "global")
    if nbytes != size:
        assert meta[name + ".start"] == str(start) and meta[name + ".allocation_bytes"] == str(size), name
        parts += 1
assert end == len(data), "bytes after the last tensor"
assert parts >= int(want_parts), "%d tensors are parts of allocations, expected at least %s" % (parts, want_parts)
print("ok", path, nallocs, "tensors")
EOF
}

@test "export writes safetensors files whose tensors are the arena's bytes, and refuses a damaged image" {
    train two 2
    g=$(u64 "$(slot two 0 0)" 88)
    run "$INSPECT" --job two export "$g" --format safetensors "$D/out"
    [ "$status" -eq 0 ]
    for r in 0 1; do
        s=0
        [ "$(u64 "$(slot two $r 1)" 88)" = "$g" ] && s=1
        exported "$D/out/rank$r.safetensors" "$(slot two $r $s)" 0
    done
    if python3 -c 'import safetensors.numpy' 2>/dev/null; then
        python3 -c 'import sys; from safetensors.numpy import load_file; assert len(load_file(sys.argv[1])) > 0' \
            "$D/out/rank1.safetensors"
    fi
    # A flipped byte: no file for that rank, exit 1.
    f=$(slot two 1 0)
    flip "$f" $(($(u64 "$f" 120) + 7))
    run "$INSPECT" --job two export "$(u64 "$f" 88)" "$D/bad"
    [ "$status" -eq 1 ]
    echo "$output" | grep -q "^rank1: no verified image of generation [0-9]*: not exported$"
    [ -f "$D/bad/rank0.safetensors" ] && [ ! -e "$D/bad/rank1.safetensors" ] && [ ! -e "$D/bad/rank1.safetensors.tmp" ]
}

@test "export without a generation takes the newest one every rank has a verified image of; a damaged newest falls back to the older" {
    train two 2
    local g0 g1 newest older f
    g0=$(u64 "$(slot two 0 0)" 88) g1=$(u64 "$(slot two 0 1)" 88)
    newest=$((g0 > g1 ? g0 : g1)) older=$((g0 > g1 ? g1 : g0))
    run "$INSPECT" --job two export "$D/out"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^generation $newest (iteration [0-9]*): the newest with a verified image of every rank$" ||
        { echo "$output"; false; }
    for r in 0 1; do
        s=0
        [ "$(u64 "$(slot two $r 1)" 88)" = "$newest" ] && s=1
        exported "$D/out/rank$r.safetensors" "$(slot two $r $s)" 0
    done
    # Rank 1's newest damaged: the older generation, which both ranks hold, is exported.
    f=$(slot two 1 0)
    [ "$(u64 "$f" 88)" = "$newest" ] || f=$(slot two 1 1)
    flip "$f" $(($(u64 "$f" 120) + 7))
    run "$INSPECT" --job two export "$D/old"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^generation $older (iteration [0-9]*): the newest with a verified image of every rank$" ||
        { echo "$output"; false; }
    [ -f "$D/old/rank0.safetensors" ] && [ -f "$D/old/rank1.safetensors" ]
}

@test "gc removes a dead job's arena, leaves a live job's and a recent one's" {
    CKPT_JOB=dead LD_PRELOAD=$LIB "$BUILD/tests/progs/frozen" --iters 5 >/dev/null 2>&1
    CKPT_JOB=live LD_PRELOAD=$LIB "$TRAIN" --iters 100000000 --hidden 16 --layers 1 >/dev/null 2>&1 &
    echo $! >>"$D/pids"
    for _ in $(seq 300); do
        [ -s "$(slot live 0 0)" ] && break
        sleep 0.1
    done
    [ -s "$(slot live 0 0)" ]
    dead=$CKPT_ARENA_DIR/$(id -u)-dead
    # Just ended: too recent for the default age.
    run "$INSPECT" gc --yes
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^recent dead: .*: left alone (younger than 60s)$"
    [ -d "$dead" ]
    # Without --yes nothing goes; the live job is told by its process.
    run "$INSPECT" gc --min-age 0
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^dead   dead: $dead, "
    echo "$output" | grep -q "^live   live: $CKPT_ARENA_DIR/$(id -u)-live, .*, in use by pid $(cat "$D/pids") (mlp-train)$"
    # Other jobs' replay logs whose arenas are gone (under /var/tmp, of jobs
    # whose arena was in memory) are dead too: the count is of every one.
    local n
    n=$(echo "$output" | grep -c "^dead   ")
    echo "$output" | grep -Eq "^$n dead arenas?, .*: \`ckpt-inspect gc --yes\` removes (it|them)$" || { echo "$output"; false; }
    [ -d "$dead" ]
    touch -h -d '-2 minutes' "$dead" "$dead"/*/ "$dead"/*/*
    run "$INSPECT" gc --yes
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^removed dead: $dead, "
    echo "$output" | grep -q "^live   live: "
    [ ! -e "$dead" ]
    [ -s "$(slot live 0 0)" ]
    kill "$(cat "$D/pids")"
}

@test "progress bars are drawn on a terminal only" {
    CKPT_JOB=big LD_PRELOAD=$LIB "$BUILD/tests/progs/statewriter" --iters 3 --mib 8 >/dev/null 2>&1
    "$INSPECT" --job big export 1 "$D/plain" 2>"$D/err" >/dev/null
    ( ! grep -q "exporting" "$D/err" )
    script -qec "'$INSPECT' --job big export 1 '$D/tty' >/dev/null" "$D/typescript" >/dev/null
    grep -q "exporting *\[=*" "$D/typescript"
    grep -q "verifying *\[=*" "$D/typescript"
}

@test "usage errors exit 2, a job that is not there 3" {
    run "$INSPECT" frobnicate
    [ "$status" -eq 2 ]
    echo "$output" | grep -q "unknown command 'frobnicate'"
    run "$INSPECT" diff 1
    [ "$status" -eq 2 ]
    run "$INSPECT" export 1 --format numpy "$D/x"
    [ "$status" -eq 2 ]
    mkdir -p "$CKPT_ARENA_DIR"
    run "$INSPECT" --job nosuch verify
    [ "$status" -eq 3 ]
    echo "$output" | grep -q "no tier holds job 'nosuch'"
}

@test "docs/configuration.md is the generated table of every CKPT_* variable" {
    "$INSPECT" env --markdown >"$D/generated"
    diff "$D/generated" "$ROOT/docs/configuration.md" ||
        { echo "docs/configuration.md is stale: run build/bin/ckpt-inspect env --markdown > docs/configuration.md"; false; }
    for name in $(sed -n 's/^CKPT_VAR(\([A-Z_0-9]*\),.*/\1/p' "$ROOT/runtime/config.def"); do
        grep -q "^| \`CKPT_$name\` | " "$ROOT/docs/configuration.md" || { echo "CKPT_$name missing"; false; }
    done
}
