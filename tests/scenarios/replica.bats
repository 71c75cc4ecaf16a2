#!/usr/bin/env bats
# Replication's data path (replica/, through ckpt-replica) on loopback: a
# committed slot image sent to a receiver arrives bit for bit and verifies;
# chunks the receiver already holds (the same image again, an identical
# data-parallel rank) do not travel again; a chunk damaged in transit is
# refused and the receiver keeps its previous replica; a receiver killed
# in the middle of a transfer keeps its previous replica too, and serves
# again after a restart; a sender killed in the middle leaves the previous
# replica intact and the receiver serving; chunks are verified while the
# transfer goes on, so a chunk that does not match what the sender says
# was delivered, or progress that contradicts itself, is refused before
# the sender's DONE (a scripted sender speaks the control protocol for
# that).  The five cases before it run again with the bytes sent as tagged
# messages (CKPT_FABRIC_DATA=tagged), and two ends that send otherwise are
# refused naming that variable; with tagged messages, a piece that never
# came fails the round after DONE, naming it, and PROGRESS is refused.  An
# offer under an older plan (epoch) than the receiver's is refused unread.  Skipped where no libfabric provider with
# RMA is found on 127.0.0.1.

load bytes

setup() {
    export WIRE_VERSION; WIRE_VERSION=$(sed -n 's/^#define CKPT_WIRE_VERSION \([0-9]*\)u.*/\1/p' "$BATS_TEST_DIRNAME/../../replica/wire.h") # frames made by hand
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    REP=$BUILD/bin/ckpt-replica
    LIB=$BUILD/lib/libckpt.so
    [ -x "$REP" ] || { echo "missing $REP: build first" >&2; return 1; }
    unset CKPT_FABRIC_PROVIDER CKPT_FABRIC_DATA LD_PRELOAD RANK WORLD_SIZE
    D=$(mktemp -d /tmp/ckpt-replica-bats-XXXXXX)
    PIDS=()
    if ! why=$("$REP" probe --node 127.0.0.1 2>&1); then
        skip "no RMA-capable libfabric provider on 127.0.0.1: $why"
    fi
}

teardown() {
    for p in "${PIDS[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    rm -rf "$D"
}

# image JOB ARGS...: runs the trainer under libckpt into $D/arena; its two
# slots are then $D/arena/<uid>-JOB/rank0/slot{0,1}.
image() {
    local job=$1
    shift
    CKPT_ARENA_DIR=$D/arena CKPT_JOB=$job LD_PRELOAD=$LIB "$BUILD/examples/mlp-train" "$@" >/dev/null 2>&1
}

slot() { # JOB SLOT [RANK]
    echo "$D/arena/$(id -u)-$1/rank${3:-0}/slot$2"
}

# serve DIR: starts a receiver on a free port; sets PORT and SERVER.
serve() {
    "$REP" serve --listen 127.0.0.1:0 --dir "$1" >"$D/serve.out" 2>>"$D/serve.err" 3>&- &
    SERVER=$!
    PIDS+=("$SERVER")
    for _ in $(seq 400); do
        PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$D/serve.out")
        [ -n "$PORT" ] && return 0
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 0.05
    done
    echo "the receiver did not start:" && cat "$D/serve.err"
    return 1
}

# same SOURCE REPLICA: header region and data area equal byte for byte.
same() {
    local hb off len
    hb=$(od -A n -t u4 -j 12 -N 4 "$1" | tr -d ' ')
    off=$(u64 "$1" 120)
    len=$(u64 "$1" 128)
    cmp -n "$hb" "$1" "$2" && cmp -n "$len" -i "$off:$off" "$1" "$2"
}

# The receiver's slot of JOB/RANK holding GENERATION (committed and
# verified), or nothing.
replica_of() { # DIR JOB GENERATION [RANK]
    local s
    for s in "$1/$(id -u)-$2/rank${4:-0}"/slot[01]; do
        if "$REP" verify "$s" 2>/dev/null | grep -q " generation $3 "; then echo "$s"; fi
    done
}

# fake_sender STEP...: a sender that speaks only the control protocol
# (replica.h, wire.h) to the receiver on $PORT, and never writes a byte
# over the fabric.  Steps: "offer SLOT" (prints "accept NEED" with the
# number of chunks asked for, or "result STATUS REASON"), "progress UPTO"
# (data bytes),
# "done", "result" (prints "result STATUS REASON" for the message it
# waits up to 30 s for, else "silent"), "quiet" (the same, but a RESULT
# that has not come within 3 s is taken for none: "silent").
# It hands the receiver its own HELLO back, so it takes the receiver's
# data path, whichever.
fake_sender() {
    python3 - "$PORT" "$@" <<'PY'
import os, socket, struct, sys
HELLO, OFFER, ACCEPT, DONE, RESULT, PROGRESS = 1, 2, 3, 4, 5, 6
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def send(t, payload=b""):
    s.sendall(b"CKRP" + struct.pack("<HHII", int(os.environ["WIRE_VERSION"]), t, len(payload), 0) + payload)
def exact(n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise SystemExit("connection closed")
        b += k
    return b
def recv(timeout=None):
    s.settimeout(timeout)
    try:
        head = exact(16)
    except socket.timeout:
        return None, None
    s.settimeout(None)
    assert head[:4] == b"CKRP", head
    _, t, n, _ = struct.unpack("<HHII", head[4:])
    return t, exact(n)
def result(p):
    st, slot, gen = struct.unpack("<iIQ", p[:16])
    print("result", st, p[16:].decode())
t, hello = recv()          # the receiver's own name, given back: a peer
send(HELLO, hello)         # it never writes to
for step in sys.argv[2:]:
    verb, _, arg = step.partition(" ")
    if verb == "offer":
        img = open(arg, "rb").read()
        send(OFFER, struct.pack("<QQ", 0, 0) + img[:struct.unpack("<I", img[12:16])[0]])
        t, p = recv(30)
        if t == ACCEPT:
            print("accept", bin(int.from_bytes(p[40:], "little")).count("1"))
        else:
            result(p)
    elif verb == "progress":
        send(PROGRESS, struct.pack("<Q", int(arg)))
    elif verb == "done":
        send(DONE, struct.pack("<iIQ", 0, 0, 0))
    elif verb in ("result", "quiet"):
        t, p = recv(30 if verb == "result" else 3)
        result(p) if t == RESULT else print("silent")
    sys.stdout.flush()
PY
}

# tagged: this test's receivers and senders send the bytes as tagged
# messages instead of RMA writes (CKPT_FABRIC_DATA); skipped where no
# provider offers FI_TAGGED.
tagged() {
    export CKPT_FABRIC_DATA=tagged
    local why
    why=$("$REP" probe --node 127.0.0.1 2>&1) || skip "no libfabric provider with tagged messages on 127.0.0.1: $why"
    [[ $why == *", data tagged" ]]
}

sent_bytes() { # the bytes a send line says went over the fabric
    sed -n 's/.* chunks, \([0-9]*\) bytes sent,.*/\1/p' <<<"$1"
}

@test "a committed slot image arrives bit-exact and verifies with image.c" { arrives_bit_exact; }
@test "tagged messages: a committed slot image arrives bit-exact and verifies with image.c" { tagged; arrives_bit_exact; }

arrives_bit_exact() {
    image j --iters 8 --hidden 64 --layers 3
    serve "$D/rep"
    for s in 0 1; do
        run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j $s)"
        [ "$status" -eq 0 ] || { echo "$output"; cat "$D/serve.err"; false; }
        gen=$(u64 "$(slot j $s)" 88)
        [[ $output == *"generation $gen "* ]]
        [ "$(sent_bytes "$output")" -eq "$(u64 "$(slot j $s)" 128)" ]
        r=$(replica_of "$D/rep" j "$gen")
        [ -n "$r" ] || { "$REP" verify "$D/rep/$(id -u)-j/rank0"/slot*; false; }
        same "$(slot j $s)" "$r"
    done
    # Both generations are held, each in its own slot.
    [ "$("$REP" verify "$D/rep/$(id -u)-j/rank0"/slot[01] | grep -c ': ok$')" -eq 2 ]
}

@test "an offer under an older plan than the receiver's (a fenced sender's late write) is refused, naming both epochs; the receiver keeps its replica" {
    image j --iters 8 --hidden 64 --layers 3
    "$REP" serve --listen 127.0.0.1:0 --dir "$D/rep" --epoch 5 >"$D/serve.out" 2>>"$D/serve.err" 3>&- &
    SERVER=$!
    PIDS+=("$SERVER")
    for _ in $(seq 400); do
        PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$D/serve.out")
        [ -n "$PORT" ] && break
        sleep 0.05
    done
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 0)" --epoch 5
    [ "$status" -eq 0 ] || { echo "$output"; cat "$D/serve.err"; false; }
    local gen0 gen1
    gen0=$(u64 "$(slot j 0)" 88) gen1=$(u64 "$(slot j 1)" 88)
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 1)" --epoch 4
    [ "$status" -ne 0 ] || { echo "$output"; false; }
    [[ $output == *"a stale epoch: the offer is of epoch 4, this node acts under epoch 5"* ]] || { echo "$output"; false; }
    [ -z "$(replica_of "$D/rep" j "$gen1")" ]
    same "$(slot j 0)" "$(replica_of "$D/rep" j "$gen0")"
    # A newer plan than the receiver's is the sender having heard first: taken.
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 1)" --epoch 6
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    same "$(slot j 1)" "$(replica_of "$D/rep" j "$gen1")"
}

@test "chunks the receiver holds do not travel again: the same image, an identical data-parallel rank" { held_chunks_stay; }
@test "tagged messages: chunks the receiver holds do not travel again: the same image, an identical data-parallel rank" { tagged; held_chunks_stay; }

held_chunks_stay() {
    image j --iters 8 --hidden 64 --layers 3
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 1)"
    [ "$status" -eq 0 ] && [ "$(sent_bytes "$output")" -gt 0 ]
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 1)"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    [ "$(sent_bytes "$output")" -eq 0 ]
    # Now both slots hold that generation, both verified and exact.
    gen=$(u64 "$(slot j 1)" 88)
    [ "$(replica_of "$D/rep" j "$gen" | wc -l)" -eq 2 ]
    for r in $(replica_of "$D/rep" j "$gen"); do same "$(slot j 1)" "$r"; done

    # Two ranks with the same state (statewriter's data depends on the
    # iteration only): the second rank's 32 MiB are copied, not sent.
    for rank in 0 1; do
        RANK=$rank WORLD_SIZE=2 CKPT_ARENA_DIR=$D/arena CKPT_JOB=dp CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
            "$BUILD/tests/progs/statewriter" --iters 3 --mib 32 >/dev/null 2>&1
    done
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot dp 1 0)"
    [ "$status" -eq 0 ] && [ "$(sent_bytes "$output")" -gt $((32 << 20)) ] || { echo "$output"; false; }
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot dp 1 1)"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    echo "rank 1: $output"
    [ "$(sent_bytes "$output")" -eq 0 ]
    r=$(replica_of "$D/rep" dp "$(u64 "$(slot dp 1 1)" 88)" 1)
    [ -n "$r" ] && same "$(slot dp 1 1)" "$r"
    [ "$(od -A n -t u4 -j 80 -N 4 "$r" | tr -d ' ')" -eq 1 ] # the header says rank 1
}

@test "a chunk damaged in transit is refused and the receiver keeps its previous replica" { damaged_chunk_refused; }
@test "tagged messages: a chunk damaged in transit is refused and the receiver keeps its previous replica" { tagged; damaged_chunk_refused; }

damaged_chunk_refused() {
    image j --iters 8 --hidden 64 --layers 3
    old=$(slot j 0) new=$(slot j 1)
    [ "$(u64 "$old" 88)" -lt "$(u64 "$new" 88)" ] || { old=$(slot j 1) new=$(slot j 0); }
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$old"
    [ "$status" -eq 0 ]
    cp "$new" "$D/new.before"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$new" --flip-byte 1000
    [ "$status" -eq 1 ]
    [[ $output == *"refused by the receiver: chunk 0 (bytes 0..) checksum mismatch"* ]] || { echo "$output"; false; }
    grep -q "generation $(u64 "$new" 88) not kept: chunk 0" "$D/serve.err"
    cmp "$new" "$D/new.before" # the sender's file was never touched
    # The previous replica is intact; the damaged one was never committed.
    r=$(replica_of "$D/rep" j "$(u64 "$old" 88)")
    [ -n "$r" ] && same "$old" "$r"
    [ -z "$(replica_of "$D/rep" j "$(u64 "$new" 88)")" ]
    [ "$("$REP" verify "$D/rep/$(id -u)-j/rank0"/slot[01] | grep -c 'not valid: no committed snapshot')" -eq 1 ]
    # Sent again undamaged, it is taken.
    run "$REP" send --to "127.0.0.1:$PORT" --image "$new"
    [ "$status" -eq 0 ]
    r=$(replica_of "$D/rep" j "$(u64 "$new" 88)")
    [ -n "$r" ] && same "$new" "$r"
}

@test "a receiver killed in the middle of a transfer keeps its previous replica and serves again" { receiver_killed; }
@test "tagged messages: a receiver killed in the middle of a transfer keeps its previous replica and serves again" { tagged; receiver_killed; }

receiver_killed() {
    CKPT_ARENA_DIR=$D/arena CKPT_JOB=big CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
        "$BUILD/tests/progs/statewriter" --iters 3 --mib 48 >/dev/null 2>&1
    old=$(slot big 0) new=$(slot big 1)
    [ "$(u64 "$old" 88)" -lt "$(u64 "$new" 88)" ] || { old=$(slot big 1) new=$(slot big 0); }
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$old"
    [ "$status" -eq 0 ]
    # The sender stops after the first chunk is in the receiver's memory.
    "$REP" send --to "127.0.0.1:$PORT" --image "$new" --pause-after 1 >"$D/send.out" 2>"$D/send.err" 3>&- &
    PIDS+=($!)
    for _ in $(seq 200); do grep -q "paused after" "$D/send.err" && break; sleep 0.05; done
    grep -q "paused after [1-9][0-9]* bytes (delivered)" "$D/send.err" || { cat "$D/send.err"; false; }
    kill -9 "$SERVER"
    wait "$SERVER" 2>/dev/null || true # reaped here, so that it is really gone
    r=$(replica_of "$D/rep" big "$(u64 "$old" 88)")
    [ -n "$r" ] && same "$old" "$r"
    [ -z "$(replica_of "$D/rep" big "$(u64 "$new" 88)")" ]
    # A new receiver on the same directory finds the old replica and
    # takes the new one into the slot the cut transfer left invalid.
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$new"
    [ "$status" -eq 0 ] || { echo "$output"; cat "$D/serve.err"; false; }
    r2=$(replica_of "$D/rep" big "$(u64 "$new" 88)")
    [ -n "$r2" ] && same "$new" "$r2"
    [ "$(replica_of "$D/rep" big "$(u64 "$old" 88)")" = "$r" ]
}

@test "replicas retired under a running receiver (a restore went back past them) count as empty: a new run's replicas, of lower generations, fill both slots and never go over the newest" {
    # One rank's snapshots from an old run (generations 5 and 6) and from
    # the run that replaced it (1 and 2), each pair oldest first.
    local run g gens=() slots=()
    for run in old:6 new:2; do
        rm -rf "$D/arena"
        CKPT_ARENA_DIR=$D/arena CKPT_JOB=ret CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
            "$BUILD/tests/progs/statewriter" --iters "${run#*:}" --mib 1 >/dev/null 2>&1
        for g in 0 1; do cp "$(slot ret "$g")" "$D/${run%:*}.$g"; done
        [ "$(u64 "$D/${run%:*}.0" 88)" -lt "$(u64 "$D/${run%:*}.1" 88)" ] ||
            { mv "$D/${run%:*}.0" "$D/x" && mv "$D/${run%:*}.1" "$D/${run%:*}.0" && mv "$D/x" "$D/${run%:*}.1"; }
    done
    serve "$D/rep"
    for g in 0 1; do
        run "$REP" send --to "127.0.0.1:$PORT" --image "$D/old.$g"
        [ "$status" -eq 0 ] || { echo "$output"; false; }
        [ -n "$(replica_of "$D/rep" ret "$(u64 "$D/old.$g" 88)")" ]
    done
    # The node's agent retires both through their files (ckpt_slot_retire:
    # the magic goes), as a restore of an older iteration does.
    for s in "$D/rep/$(id -u)-ret/rank0"/slot[01]; do
        printf '\0\0\0\0\0\0\0\0' | dd of="$s" bs=8 count=1 conv=notrunc 2>/dev/null
    done
    for g in 0 1; do
        run "$REP" send --to "127.0.0.1:$PORT" --image "$D/new.$g"
        [ "$status" -eq 0 ] || { echo "$output"; false; }
    done
    # Both of the new run's are kept: the second did not go over the first.
    for g in 0 1; do
        r=$(replica_of "$D/rep" ret "$(u64 "$D/new.$g" 88)")
        [ -n "$r" ] && same "$D/new.$g" "$r" || { echo "generation $(u64 "$D/new.$g" 88) is not kept"; false; }
    done
}

@test "a sender killed in the middle of a transfer leaves the previous replica, and the receiver serves on" { sender_killed; }
@test "tagged messages: a sender killed in the middle of a transfer leaves the previous replica, and the receiver serves on" { tagged; sender_killed; }

sender_killed() {
    CKPT_ARENA_DIR=$D/arena CKPT_JOB=big CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
        "$BUILD/tests/progs/statewriter" --iters 3 --mib 48 >/dev/null 2>&1
    old=$(slot big 0) new=$(slot big 1)
    [ "$(u64 "$old" 88)" -lt "$(u64 "$new" 88)" ] || { old=$(slot big 1) new=$(slot big 0); }
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$old"
    [ "$status" -eq 0 ]
    "$REP" send --to "127.0.0.1:$PORT" --image "$new" --pause-after 1 >"$D/send.out" 2>"$D/send.err" 3>&- &
    sender=$!
    PIDS+=("$sender")
    for _ in $(seq 200); do grep -q "paused after" "$D/send.err" && break; sleep 0.05; done
    grep -q "paused after [1-9][0-9]* bytes (delivered)" "$D/send.err" || { cat "$D/send.err"; false; }
    kill -9 "$sender"
    for _ in $(seq 400); do grep -q "not kept" "$D/serve.err" && break; sleep 0.05; done
    grep -q "generation $(u64 "$new" 88) not kept: the transfer was cut short" "$D/serve.err" ||
        { cat "$D/serve.err"; false; }
    r=$(replica_of "$D/rep" big "$(u64 "$old" 88)")
    [ -n "$r" ] && same "$old" "$r"
    [ -z "$(replica_of "$D/rep" big "$(u64 "$new" 88)")" ]
    # The same receiver takes the next sender's transfer.
    kill -0 "$SERVER"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$new"
    [ "$status" -eq 0 ] || { echo "$output"; cat "$D/serve.err"; false; }
    r=$(replica_of "$D/rep" big "$(u64 "$new" 88)")
    [ -n "$r" ] && same "$new" "$r"
}

@test "bytes are verified as they are reported delivered: a bad chunk, or contradictory progress, is refused before DONE" {
    CKPT_ARENA_DIR=$D/arena CKPT_JOB=big CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
        "$BUILD/tests/progs/statewriter" --iters 3 --mib 24 >/dev/null 2>&1
    old=$(slot big 0) new=$(slot big 1)
    [ "$(u64 "$old" 88)" -lt "$(u64 "$new" 88)" ] || { old=$(slot big 1) new=$(slot big 0); }
    nchunks=$(u64 "$new" 144) chunk=$(u64 "$new" 136) bytes=$(u64 "$new" 128)
    [ "$nchunks" -ge 3 ]
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$old"
    [ "$status" -eq 0 ]
    # Progress claims bytes that were never written: the first chunk is
    # refused as soon as it is complete, while the sender has not said
    # DONE; DONE gets no second answer, and the connection carries the
    # next round.  Progress going backwards or past the data is refused
    # too (EPROTO, -71).
    run fake_sender "offer $new" "progress $chunk" "result" "done" "quiet" \
        "offer $old" "progress $((2 * chunk))" "progress $chunk" "result" "done" \
        "offer $old" "progress $((bytes + 1))" "result" "done" \
        "offer $old" "progress $bytes" "done" "result"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "accept $nchunks" ]
    [ "${lines[1]}" = "result -74 chunk 0 (bytes 0..) checksum mismatch" ]
    [ "${lines[2]}" = "silent" ]
    [ "${lines[3]}" = "accept 0" ] # all held: copied locally, nothing to write
    [ "${lines[4]}" = "result -71 the sender's progress is inconsistent: byte $chunk after $((2 * chunk)), of $bytes bytes" ]
    [ "${lines[5]}" = "accept 0" ]
    [ "${lines[6]}" = "result -71 the sender's progress is inconsistent: byte $((bytes + 1)) after 0, of $bytes bytes" ]
    [ "${lines[7]}" = "accept 0" ]
    [ "${lines[8]}" = "result 0 " ]
    # The refused rounds committed nothing; the last one committed a copy
    # of the old image, which is intact where it was.
    [ -z "$(replica_of "$D/rep" big "$(u64 "$new" 88)")" ]
    [ "$(replica_of "$D/rep" big "$(u64 "$old" 88)" | wc -l)" -eq 2 ]
    for r in $(replica_of "$D/rep" big "$(u64 "$old" 88)"); do same "$old" "$r"; done
    grep -q "generation $(u64 "$new" 88) not kept: chunk 0 (bytes 0..) checksum mismatch" "$D/serve.err"
}

@test "tagged messages: a piece that never came fails the round after DONE, naming it; PROGRESS is refused" {
    tagged
    CKPT_ARENA_DIR=$D/arena CKPT_JOB=big CKPT_BOUNDARY=every:1 LD_PRELOAD=$LIB \
        "$BUILD/tests/progs/statewriter" --iters 3 --mib 24 >/dev/null 2>&1
    old=$(slot big 0) new=$(slot big 1)
    [ "$(u64 "$old" 88)" -lt "$(u64 "$new" 88)" ] || { old=$(slot big 1) new=$(slot big 0); }
    nchunks=$(u64 "$new" 144) chunk=$(u64 "$new" 136)
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$old"
    [ "$status" -eq 0 ]
    # A sender that says DONE having sent nothing: the receiver's own
    # receives say what is missing.  A PROGRESS (which this data path does
    # not use) is refused before DONE.  The connection carries each next
    # round.
    run fake_sender "offer $new" "done" "result" \
        "offer $old" "progress $chunk" "result" "done" \
        "offer $old" "done" "result"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "accept $nchunks" ]
    [ "${lines[1]}" = "result -71 the sender said it was done, but the piece at data bytes 0..1048576 never arrived" ]
    [ "${lines[2]}" = "accept 0" ]
    [ "${lines[3]}" = "result -71 the sender reported progress, which the tagged-message data path does not use" ]
    [ "${lines[4]}" = "accept 0" ]
    [ "${lines[5]}" = "result 0 " ]
    [ -z "$(replica_of "$D/rep" big "$(u64 "$new" 88)")" ]
    for r in $(replica_of "$D/rep" big "$(u64 "$old" 88)"); do same "$old" "$r"; done
    # and a real sender's transfer is taken after all that
    run "$REP" send --to "127.0.0.1:$PORT" --image "$new"
    [ "$status" -eq 0 ] || { echo "$output"; cat "$D/serve.err"; false; }
    r=$(replica_of "$D/rep" big "$(u64 "$new" 88)")
    [ -n "$r" ] && same "$new" "$r"
}

@test "refusals name the reason: an uncommitted image, another provider" {
    head -c 65536 /dev/zero >"$D/blank"
    serve "$D/rep"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$D/blank"
    [ "$status" -eq 1 ] && [[ $output == *"no committed snapshot"* ]] || { echo "status $status: $output"; false; }
    image j --iters 4 --hidden 64 --layers 3
    if "$REP" probe --provider shm >/dev/null 2>&1; then
        run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 0)" --provider shm
        [ "$status" -eq 1 ]
        [[ $output == *"the peer uses libfabric provider tcp;ofi_rxm, this end shm"* ]] || { echo "$output"; false; }
    fi
}

@test "two ends that send the bytes otherwise (CKPT_FABRIC_DATA) are refused, naming the variable" {
    tagged
    image j --iters 4 --hidden 64 --layers 3
    serve "$D/rep" # tagged
    run env CKPT_FABRIC_DATA=rma "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 0)"
    [ "$status" -eq 1 ]
    [[ $output == *"the peer sends replicas as tagged messages (tagged), this end as RMA writes (rma): set CKPT_FABRIC_DATA alike on both"* ]] ||
        { echo "$output"; false; }
    for _ in $(seq 400); do grep -q "CKPT_FABRIC_DATA" "$D/serve.err" && break; sleep 0.05; done
    grep -q "the peer sends replicas as RMA writes (rma), this end as tagged messages (tagged): set CKPT_FABRIC_DATA alike" \
        "$D/serve.err" || { cat "$D/serve.err"; false; }
    [ -z "$(replica_of "$D/rep" j "$(u64 "$(slot j 0)" 88)")" ]
    # The other way round, and the receiver serves on: the same image, sent
    # alike, is taken.
    CKPT_FABRIC_DATA=rma serve "$D/rep2"
    run "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 0)"
    [ "$status" -eq 1 ] && [[ $output == *"set CKPT_FABRIC_DATA alike on both"* ]] || { echo "$output"; false; }
    run env CKPT_FABRIC_DATA=rma "$REP" send --to "127.0.0.1:$PORT" --image "$(slot j 0)"
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    r=$(replica_of "$D/rep2" j "$(u64 "$(slot j 0)" 88)")
    [ -n "$r" ] && same "$(slot j 0)" "$r"
}

@test "placement: GEMINI's numbers from the command line" {
    run "$REP" placement --nodes 16 --replicas 2
    [ "$status" -eq 0 ]
    [[ $output == *"placement: group (auto), 16 nodes, 2 replicas"* ]]
    [[ $output == *"2 nodes failed at once: recovery from memory 93.3%"* ]]
    run "$REP" placement --nodes 16 --replicas 2 --placement ring
    [[ $output == *"2 nodes failed at once: recovery from memory 86.7%"* ]]
    run env CKPT_NNODES=128 "$REP" placement
    [[ $output == *"2 nodes failed at once: recovery from memory 99.2%"* ]]
    run "$REP" placement --nodes 16 --replicas 3 --placement group
    [ "$status" -eq 2 ]
    [[ $output == *"needs the replicas (3) to divide the nodes (16)"* ]]
}
