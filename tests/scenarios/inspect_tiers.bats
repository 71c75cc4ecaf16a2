#!/usr/bin/env bats
# ckpt-inspect over every tier that holds a job's snapshots: the arena,
# the replicas a node holds for its peers (CKPT_ARENA_DIR/peers, made here
# by ckpt-replica) and the generations persisted to CKPT_PERSIST_DIRS
# (made by ckpt-persist, the engine the node agent runs).  list shows every
# copy in every tier; verify names the tier, rank and chunk of a flipped
# byte in any of them and exits 1; export and diff read from the fastest
# tier that holds a generation, or from the one --tier names, and the disk
# copy exports to the same bytes as the arena's; gc finds a dead job's
# replicas without taking the peers directory for a job.

bats_require_minimum_version 1.5.0

load bytes

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so
    INSPECT=$BUILD/bin/ckpt-inspect
    PERSIST=$BUILD/bin/ckpt-persist
    REP=$BUILD/bin/ckpt-replica
    D=$BATS_TEST_TMPDIR
    unset CKPT_JOB RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT CKPT_IO_DEPTH CKPT_IO_BLOCK_KB LD_PRELOAD \
        CKPT_PERSIST_KEEP CKPT_FABRIC_PROVIDER
    export CKPT_ARENA_DIR=$D/arena CKPT_PERSIST_DIRS=$D/ssd0,$D/ssd1
    mkdir -p -m 0700 "$D/ssd0" "$D/ssd1"
    if "$PERSIST" list --dirs "$D/ssd0" 2>&1 | grep -q "io_uring is not available"; then
        skip "io_uring is not available here"
    fi
    PEERS=1
    "$REP" probe --node 127.0.0.1 >/dev/null 2>&1 || PEERS=
}

teardown() {
    local pid
    for pid in $(cat "$D/pids" 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

slot() { # job rank slot [root]: the slot file
    echo "${4:-$CKPT_ARENA_DIR}/$(id -u)-$1/rank$2/slot$3"
}


# replicate JOB RANK SLOT: the slot sent to a receiver that keeps replicas
# where the node agent keeps them, CKPT_ARENA_DIR/peers.
replicate() {
    "$REP" serve --listen 127.0.0.1:0 --dir "$CKPT_ARENA_DIR/peers" --once >"$D/serve.out" 2>"$D/serve.err" &
    local server=$! port=
    for _ in $(seq 400); do
        port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$D/serve.out")
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { cat "$D/serve.err"; return 1; }
    "$REP" send --to "127.0.0.1:$port" --image "$(slot "$1" "$2" "$3")" >/dev/null || { cat "$D/serve.err"; return 1; }
    wait "$server"
}

# three JOB: two data-parallel ranks of statewriter (20 MiB, several
# chunks each, identical on both ranks: stored once on disk); iteration 5
# and 6 persisted; rank 0's newest slot and rank 1's older one replicated.
three() {
    local r
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 CKPT_JOB=$1 CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
            "$BUILD/tests/progs/statewriter" --iters 6 --mib 20 >/dev/null 2>&1 || return 1
    done
    CKPT_JOB=$1 "$PERSIST" save --iteration 5 >/dev/null || return 1
    CKPT_JOB=$1 "$PERSIST" save >/dev/null || return 1
    if [ -n "$PEERS" ]; then
        replicate "$1" 0 "$(newest_slot "$1" 0)" && replicate "$1" 1 "$((1 - $(newest_slot "$1" 1)))"
    fi
}

newest_slot() { # job rank
    [ "$(u64 "$(slot "$1" "$2" 1)" 88)" -gt "$(u64 "$(slot "$1" "$2" 0)" 88)" ] && echo 1 || echo 0
}

# locate MANIFEST WHAT: where a byte of WHAT lies in a persisted generation
# (persist_format.h) and what verify must then say.  WHAT: data-first (the
# first data extent of stripe 0), data-last (the last byte of the last data
# extent of stripe 1), log (a replay log extent), manifest.  Prints
# "FILE OFFSET", then one expected line per chunk that uses those bytes.
locate() {
    python3 - "$1" "$2" <<'PY'
import os, struct, sys
path, what = sys.argv[1], sys.argv[2]
m = open(path, 'rb').read()
it, = struct.unpack_from('<Q', m, 80)
ndirs, = struct.unpack_from('<I', m, 12)
nranks, = struct.unpack_from('<I', m, 96)
nextents, nrefs = struct.unpack_from('<QQ', m, 104)
ranks = [struct.unpack_from('<IIQQQQQQQQQQQII', m, 152 + 104 * i) for i in range(nranks)]
ext_at = 152 + 104 * nranks + 8 * ndirs
ext = [struct.unpack_from('<IIQQQ', m, ext_at + 32 * e) for e in range(nextents)]
refs = struct.unpack_from('<%dQ' % nrefs, m, ext_at + 32 * nextents)
uses = {}  # extent -> [(rank, generation, kind, chunk, chunk_bytes)]
for (rank, world, gen, ib, ho, hb, cb, dref, dn, lb, lref, ln, lsum, lwhere, _) in ranks:
    for c in range(dn):
        uses.setdefault(refs[dref + c], []).append((rank, gen, 'data', c, cb))
    for c in range(ln):
        uses.setdefault(refs[lref + c], []).append((rank, gen, 'log', c, cb))
gendir = os.path.dirname(path)
def stripe(d):
    return os.path.join(os.path.dirname(os.path.dirname(gendir)).replace('ssd0', 'ssd%d' % d),
                        os.path.basename(os.path.dirname(gendir)), os.path.basename(gendir), 'stripe-%d' % d)
if what == 'manifest':
    print(path, 200)
    print('gen-%d (disk): manifest checksum mismatch' % it)
    sys.exit(0)
kind = 'log' if what == 'log' else 'data'
want_dir = 1 if what == 'data-last' else 0
cands = [e for e in range(nextents) if any(u[2] == kind for u in uses.get(e, [])) and
         (kind == 'log' or ext[e][0] == want_dir)]
e = cands[-1] if what == 'data-last' else cands[0]
d, _, off, n, _ = ext[e]
print(stripe(d), off + n - 1 if what == 'data-last' else off + 5)
for (rank, gen, k, c, cb) in uses[e]:
    if k == 'data':
        print('rank%d gen-%d (disk): generation %d: chunk %d (bytes %d..) checksum mismatch' % (rank, it, gen, c, c * cb))
    else:
        print('rank%d replay log (disk gen-%d): chunk %d (bytes %d..) checksum mismatch' % (rank, it, c, c * cb))
PY
}

manifest() { # job iteration
    echo "$D/ssd0/$(id -u)-$1/gen-$2/manifest"
}

@test "list shows every copy of a job in the arena, the peer replicas and on disk, each verified" {
    three j
    run "$INSPECT" list
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^job j: 2 ranks, newest generation on every rank 6 (iteration 6)$" || { echo "$output"; false; }
    for r in 0 1; do
        for s in 0 1; do
            g=$(u64 "$(slot j $r $s)" 88)
            echo "$output" | grep -Eq "^  arena +$r +$s +$g +$g +[0-9.]+ MiB +[0-9]+s  verified$" ||
                { echo "no arena line for rank $r slot $s"; echo "$output"; false; }
        done
        for i in 5 6; do
            echo "$output" | grep -Eq "^  disk +$r +- +$i +$i +[0-9.]+ MiB +[0-9]+s  verified$" ||
                { echo "no disk line for rank $r iteration $i"; echo "$output"; false; }
        done
    done
    if [ -n "$PEERS" ]; then
        echo "$output" | grep -Eq "^  peer +0 +[01] +6 +6 +[0-9.]+ MiB +[0-9]+s  verified$" || { echo "$output"; false; }
        echo "$output" | grep -Eq "^  peer +1 +[01] +5 +5 +[0-9.]+ MiB +[0-9]+s  verified$" || { echo "$output"; false; }
    fi
    # --tier keeps one tier; the peers directory is never a job.
    run "$INSPECT" --tier disk list
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -c '^  disk ')" -eq 4 ] && ! echo "$output" | grep -q '^  arena '
    ! echo "$output" | grep -q "^job peers"
    run "$INSPECT" --tier tape list
    [ "$status" -eq 2 ]
    echo "$output" | grep -q -- "--tier 'tape': expected arena, peer or disk"
}

@test "verify names the tier, rank and chunk of a flipped byte in any chunk of any tier" {
    three j
    run "$INSPECT" --job j verify all
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^rank1 replay log (disk gen-5): verified through iteration [0-9]*$"
    echo "$output" | grep -q "^job j: every image and replay log verified$"
    # tier:what is flipped.  Arena and peer slots are flipped at an offset
    # in the slot file; disk rows at a byte locate() finds in the stripes.
    local rows=("arena:rank1 first chunk" "arena:rank0 last chunk" "arena:rank1 header"
                "disk:data-first" "disk:data-last" "disk:log" "disk:manifest")
    [ -n "$PEERS" ] && rows+=("peer:rank0 first chunk" "peer:rank1 last chunk" "peer:rank0 header")
    for row in "${rows[@]}"; do
        tier=${row%%:*} what=${row#*:}
        if [ "$tier" = disk ]; then
            mapfile -t loc < <(locate "$(manifest j 6)" "$what")
            file=${loc[0]% *} off=${loc[0]##* }
            expect=("${loc[@]:1}")
        else
            r=${what:4:1}
            root=$CKPT_ARENA_DIR
            [ "$tier" = peer ] && root=$CKPT_ARENA_DIR/peers
            s=$(newest_slot j "$r")
            [ "$tier" = peer ] && { [ -s "$(slot j "$r" 0 "$root")" ] && s=0 || s=1; }
            file=$(slot j "$r" "$s" "$root")
            g=$(u64 "$file" 88) data=$(u64 "$file" 120) bytes=$(u64 "$file" 128) chunk=$(u64 "$file" 136)
            last=$(((bytes - 1) / chunk))
            case $what in
            *first*) off=$((data + 5)) expect=("rank$r slot$s ($tier): generation $g: chunk 0 (bytes 0..) checksum mismatch") ;;
            *last*) off=$((data + bytes - 1))
                    expect=("rank$r slot$s ($tier): generation $g: chunk $last (bytes $((last * chunk))..) checksum mismatch") ;;
            *header*) off=200 expect=("rank$r slot$s ($tier): header checksum mismatch") ;;
            esac
        fi
        [ "${#expect[@]}" -ge 1 ]
        flip "$file" "$off"
        run "$INSPECT" --job j verify all
        flip "$file" "$off"
        [ "$status" -eq 1 ] || { echo "$row: exit $status"; echo "$output"; false; }
        for e in "${expect[@]}"; do
            echo "$output" | grep -qF "$e" || { echo "$row: not named: $e"; echo "$output"; false; }
        done
        echo "$output" | grep -q "^job j: [1-9][0-9]* problems\? found$"
        # Only that tier is looked at with --tier, and finds it too.
        run "$INSPECT" --job j --tier "$tier" verify all
        [ "$status" -eq 0 ] || { echo "$row: fine after the byte is put back, yet exit $status"; echo "$output"; false; }
    done
    # verify GEN of the disk generation alone, damaged: exit 1 naming it.
    mapfile -t loc < <(locate "$(manifest j 5)" data-first)
    flip "${loc[0]% *}" "${loc[0]##* }"
    run "$INSPECT" --job j --tier disk verify 5
    [ "$status" -eq 1 ]
    echo "$output" | grep -qF "${loc[1]}"
}

@test "export and diff read the fastest tier (arena > peer > disk) or the one --tier names; disk exports the arena's bytes" {
    three j
    run "$INSPECT" --job j export 6 "$D/a"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^rank0: generation 6 (iteration 6) from rank0 slot[01] (arena), "
    run "$INSPECT" --job j --tier disk export 6 --format safetensors "$D/d"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^rank1: generation 6 (iteration 6) from rank1 gen-6 (disk), .* -> $D/d/rank1.safetensors$"
    cmp "$D/a/rank0.safetensors" "$D/d/rank0.safetensors"
    cmp "$D/a/rank1.safetensors" "$D/d/rank1.safetensors"
    # Both ranks' generation 5 was persisted from the older arena slots:
    # --tier disk reads both generations from disk.
    run "$INSPECT" --job j --tier disk diff 5 6 --rank 1
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^rank1: generation 5 from rank1 gen-5 (disk), generation 6 from rank1 gen-6 (disk)$"
    echo "$output" | grep -q "^  changed: [1-9]"
    if [ -n "$PEERS" ]; then
        run "$INSPECT" --job j --tier peer export 6 "$D/p" --rank 0
        [ "$status" -eq 0 ] || { echo "$output"; false; }
        echo "$output" | grep -q "from rank0 slot[01] (peer)"
        cmp "$D/a/rank0.safetensors" "$D/p/rank0.safetensors"
    fi
    # The arena's copy damaged: the disk's is read instead, and said.
    f=$(slot j 0 "$(newest_slot j 0)")
    flip "$f" $(($(u64 "$f" 120) + 1))
    run "$INSPECT" --job j export 6 "$D/x2" --rank 0
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    if [ -n "$PEERS" ]; then
        echo "$output" | grep -q "from rank0 slot[01] (peer)" || { echo "$output"; false; }
    else
        echo "$output" | grep -q "from rank0 gen-6 (disk)" || { echo "$output"; false; }
    fi
    cmp "$D/a/rank0.safetensors" "$D/x2/rank0.safetensors"
}

@test "progress is drawn on a terminal for reads from disk, never into a pipe" {
    three j
    "$INSPECT" --job j --tier disk export 6 "$D/plain" 2>"$D/err" >/dev/null
    ( ! grep -q "exporting" "$D/err" )
    script -qec "'$INSPECT' --job j --tier disk export 6 '$D/tty' >/dev/null" "$D/typescript" >/dev/null
    grep -q "exporting *\[=*" "$D/typescript"
    grep -q "verifying *\[=*" "$D/typescript"
}

@test "gc finds a dead job's peer replicas and removes them, never takes the peers directory for a job" {
    [ -n "$PEERS" ] || skip "no RMA-capable libfabric provider on 127.0.0.1"
    three j
    rm -rf "$CKPT_ARENA_DIR/$(id -u)-j"
    run "$INSPECT" gc --min-age 0
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "$output" | grep -q "^dead   j (peer replicas): $CKPT_ARENA_DIR/peers/$(id -u)-j, " || { echo "$output"; false; }
    ! echo "$output" | grep -q "peers:"
    run "$INSPECT" gc --min-age 0 --yes
    [ "$status" -eq 0 ]
    echo "$output" | grep -q "^removed j (peer replicas): "
    [ ! -e "$CKPT_ARENA_DIR/peers/$(id -u)-j" ] && [ -d "$CKPT_ARENA_DIR/peers" ]
    # The disk tier is never touched by gc.
    [ -s "$(manifest j 6)" ]
}
