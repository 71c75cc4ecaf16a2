#!/usr/bin/env bats
# ckpt-resume on several nodes, each node an agent with its own arena on
# this machine, meeting through an etcd the test starts on loopback: the
# job runs as one world; a node that is lost (its agent and its ranks
# killed, its host memory wiped) is replaced by a new agent with the same
# node rank, and the job comes back from its peers' memory, ending exactly
# as an uninterrupted run; when every holder of a node's snapshots is lost,
# recovery reads the nodes' disks, and without disks it stops with a
# message naming what was lost.  The election, leases and etcd's own
# faults are etcd.bats' and etcd_faults.bats'.

load output
load bytes
load etcd_cluster

bats_require_minimum_version 1.5.0

setup() {
    export WIRE_VERSION; WIRE_VERSION=$(sed -n 's/^#define CKPT_WIRE_VERSION \([0-9]*\)u.*/\1/p' "$BATS_TEST_DIRNAME/../../replica/wire.h") # frames made by hand
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-nodes-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_LIB CKPT_KEEP_ARENA LD_PRELOAD MASTER_ADDR MASTER_PORT CKPT_COORD \
        CKPT_NNODES CKPT_NODE_RANK CKPT_PERSIST_DIRS FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
    export CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=5 CKPT_NODE_TIMEOUT=5 CKPT_JOB=nodes
    ARGS="--iters 200 --hidden 64 --layers 3"
    PORT=$((10000 + RANDOM % 22000)) # below the ephemeral ports (32768 and up)
    command -v etcd >/dev/null && command -v etcdctl >/dev/null || { echo "etcd is not installed (scripts/setup-deps)" >&2; return 1; }
    export ETCDCTL_API=3
    etcd_up 1
}

teardown() {
    for f in "$D"/sid.*; do [ -f "$f" ] && pkill -KILL -s "$(cat "$f")" 2>/dev/null; done
    etcd_down
    for ns in ${NETNS:-}; do ip netns del "$ns" 2>/dev/null; done
    [ -n "${KEEP_D:-}" ] && cp -r "$D" "$KEEP_D"
    rm -rf "$D"
}

# start I N P [TAG]: starts node I of N (P ranks each) in a session of its own, in the background,
# through the test's etcd (or ETCD_AT); its output goes to $D/out.I[TAG], $D/err.I[TAG], its exit
# status to $D/rc.I[TAG].  With NODE_NS set (an array, one network namespace per node), node I
# runs in ${NODE_NS[I]}.  A test's first node 0 is started as the job's leader (the others are
# started once it leads), so that the coordinator's lines are in $D/err.0 until node 0 is lost.
start() {
    local i=$1 n=$2 p=$3 tag=${4:-} in=() logs=
    [ -n "${NODE_NS[$i]:-}" ] && in=(ip netns exec "${NODE_NS[$i]}")
    [ -n "${LOGS_ON_DISK:-}" ] && logs=$D/logs.$i && mkdir -p "$logs"
    CKPT_REPLAY_LOG_DIR=$logs CKPT_ARENA_DIR=$D/arena.$i "${in[@]}" setsid bash -c 'echo $$ >"$1"; rc=$2; shift 2; timeout -k 5 120 "$@"; echo $? >"$rc"' \
        _ "$D/sid.$i$tag" "$D/rc.$i$tag" "$CKPT" --coord "etcd://${ETCD_AT:-$ENDPOINTS}" --nnodes "$n" --node-rank "$i" \
        --nproc "$p" -- "$TRAIN" $ARGS >"$D/out.$i$tag" 2>"$D/err.$i$tag" </dev/null &
    for _ in $(seq 100); do [ -s "$D/sid.$i$tag" ] && break; sleep 0.01; done
    [ "$i$tag" = 0 ] || return 0
    for _ in $(seq 600); do
        grep -q "^ckpt-resume: this node (0) leads the job" "$D/err.0" 2>/dev/null && return 0
        [ -s "$D/rc.0" ] && break
        sleep 0.05
    done
    echo "node 0 did not come to lead the job" >&2
    return 1
}

# coord_port: the port the leader's coordinator listens on (node 0's).
coord_port() {
    for _ in $(seq 200); do
        sed -n 's/^ckpt-resume: coordinating .* on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$D/err.0" | tail -n 1 | grep . && return 0
        sleep 0.05
    done
    return 1
}

# Waits until node 0's rank 0 has printed iteration $1.
wait_iter() {
    for _ in $(seq 1800); do
        grep -q "^iter $1 " "$D/out.0" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "iteration $1 never came" >&2
    return 1
}

# lose I...: kills nodes I... at once (each its agent and its ranks) and
# wipes their host memory (and the disk their ranks keep their replay logs
# on, with LOGS_ON_DISK).
lose() {
    local i
    for i in "$@"; do
        [ ! -s "$D/rc.$i" ] || { echo "node $i ended (exit $(cat "$D/rc.$i")) before it could be lost: the job is too short"; return 1; }
    done
    for i in "$@"; do pkill -KILL -s "$(cat "$D/sid.$i")"; done
    sleep 0.2
    for i in "$@"; do rm -rf "$D/arena.$i" "$D/logs.$i"; done
}

wait_rc() { # FILE...: waits for every rc file
    for f in "$@"; do
        for _ in $(seq 1200); do [ -s "$f" ] && break; sleep 0.1; done
        [ -s "$f" ] || { echo "$f never came" >&2; return 1; }
    done
}

plain() { # N P: the same job on one node, without libckpt: what the job must end with
    CKPT_DISABLE=1 CKPT_ARENA_DIR=$D/arena.plain timeout -k 5 120 "$CKPT" --nproc $(($1 * $2)) -- "$TRAIN" $ARGS \
        >"$D/plain" 2>"$D/plain.err"
}

# done_line HOW: node 0's last line ends the job after one recovery made HOW (standby, cold).
done_line() {
    [[ $(tail -n 1 "$D/err.0") =~ ^ckpt-resume:\ done\ exit=0\ restarts=1\ \($1\ [0-9.]+\ s\)$ ]] ||
        { echo "last line: $(tail -n 1 "$D/err.0")"; return 1; }
}

show() { show_agents 30; }

# A lost node comes back from its peers' memory, bit-exact.
recover_from_peers() { # N P LOST
    local n=$1 p=$2 lost=$3
    plain "$n" "$p" || { cat "$D/plain.err"; return 1; }
    for i in $(seq 0 $((n - 1))); do start "$i" "$n" "$p"; done
    wait_iter 60
    ${BEFORE_LOSS:-true} || return 1
    lose "$lost"
    start "$lost" "$n" "$p" .new
    local rcs=()
    for i in $(seq 0 $((n - 1))); do [ "$i" = "$lost" ] && rcs+=("$D/rc.$i.new") || rcs+=("$D/rc.$i"); done
    wait_rc "${rcs[@]}" || { show; return 1; }
    for f in "${rcs[@]}"; do [ "$(cat "$f")" = 0 ] || { echo "$f: $(cat "$f")"; show; return 1; }; done
    grep -q "node $lost is lost" "$D/err.0" || { show; return 1; }
    for r in $(seq $((lost * p)) $((lost * p + p - 1))); do
        grep -q "^ckpt-resume: rank $r: from the peer arena of node " "$D/err.0" || { show; return 1; }
        grep -q "^ckpt-resume: rank $r restores iteration [0-9]* from a peer's copy (moved into its arena)$" "$D/err.$lost.new" ||
            { show; return 1; }
    done
    done_line "cold" || { show; return 1; }
    fresh_ports "$D/err.0" # the coordinator drew the restart another port
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "4 nodes x 1 rank: node 2 lost and replaced, recovered from a peer's memory, as uninterrupted" {
    recover_from_peers 4 1 2
}

@test "2 nodes x 2 ranks: node 1 lost and replaced, recovered from a peer's memory, as uninterrupted" {
    recover_from_peers 2 2 1
}

# The copy of rank 1's log that node 0 keeps on its disk is past the memory bound.
peer_log_on_disk() {
    local f=$D/logs.0/peers/rank1.replay.log
    for _ in $(seq 300); do
        [ "$(stat -c %s "$f" 2>/dev/null || echo 0)" -gt 16384 ] && return 0
        [ ! -s "$D/rc.1" ] || { echo "node 1 ended before its log passed the bound: the job is too short"; return 1; }
        sleep 0.1
    done
    echo "$f: $(stat -c %s "$f" 2>&1)"
    show
    return 1
}

# bats test_tags=covered
@test "replay logs on disk (CKPT_REPLAY_LOG_DIR), longer than CKPT_REPLAY_LOG_MAX: each peer keeps its copy on its disk; node 1 lost with its memory and its disk comes back from node 0's copy, as uninterrupted" {
    export CKPT_REPLAY_LOG_MAX=16K LOGS_ON_DISK=1 BEFORE_LOSS=peer_log_on_disk
    ARGS="--iters 1500 --hidden 64 --layers 3" # running on while the log grows past the bound
    recover_from_peers 2 1 1
    ! grep "refused rank .* replay log" "$D"/err.*
}

# bats test_tags=covered
@test "tagged messages (CKPT_FABRIC_DATA=tagged on every node), 2 nodes x 2 ranks: node 1 lost and replaced, recovered from a peer's memory, as uninterrupted" {
    CKPT_FABRIC_DATA=tagged "$BUILD/bin/ckpt-replica" probe --node 127.0.0.1 >/dev/null 2>&1 ||
        skip "no libfabric provider with tagged messages on 127.0.0.1"
    export CKPT_FABRIC_DATA=tagged CKPT_LOG=debug
    recover_from_peers 2 2 1
    for f in "$D/err.0" "$D/err.1.new"; do
        grep -q "^ckpt-resume: debug: taking replicas on .* (provider .*, tagged messages)" "$f" || { show; return 1; }
    done
}

# bats test_tags=covered
@test "nodes in network namespaces of their own, joined by veth pairs: node 1 lost and replaced comes back from node 0's memory, as uninterrupted" {
    # Two namespaces, one per node, and a veth pair between them: nothing
    # travels over loopback, as between two machines.
    local a=ckpt$$a b=ckpt$$b
    ip netns add "$a" 2>/dev/null || skip "cannot make network namespaces here (needs root or CAP_NET_ADMIN)"
    NETNS="$a"
    ip netns exec "$a" true 2>/dev/null || skip "cannot run a program in a network namespace here"
    ip netns add "$b" || return 1
    NETNS="$a $b"
    ip link add "v$$a" type veth peer name "v$$b" || skip "cannot make a veth pair here"
    ip link set "v$$a" netns "$a" && ip link set "v$$b" netns "$b" &&
        ip -n "$a" addr add 10.77.0.1/24 dev "v$$a" && ip -n "$b" addr add 10.77.0.2/24 dev "v$$b" &&
        ip -n "$a" link set "v$$a" up && ip -n "$b" link set "v$$b" up &&
        ip -n "$a" link set lo up && ip -n "$b" link set lo up || return 1
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    # The job's etcd in node 0's namespace: node 1 reaches it over the veth pair too.
    ip netns exec "$a" etcd --name ns --data-dir "$D/etcd.ns" --listen-client-urls http://10.77.0.1:23790 \
        --advertise-client-urls http://10.77.0.1:23790 --listen-peer-urls http://127.0.0.1:23791 \
        --initial-advertise-peer-urls http://127.0.0.1:23791 --initial-cluster ns=http://127.0.0.1:23791 \
        >"$D/etcd.log.ns" 2>&1 &
    echo $! >"$D/etcd.pid.ns"
    disown
    ETCD_AT=10.77.0.1:23790
    for _ in $(seq 100); do ip netns exec "$b" etcdctl --endpoints "$ETCD_AT" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
    NODE_NS=("$a" "$b")
    CKPT_LOG=debug start 0 2 1
    start 1 2 1
    wait_iter 60
    lose 1
    start 1 2 1 .new
    wait_rc "$D/rc.0" "$D/rc.1.new" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1.new")" = 0 ] || { show; return 1; }
    grep -q "node 1 is lost" "$D/err.0" || { show; return 1; }
    grep -q "^ckpt-resume: rank 1: from the peer arena of node 0" "$D/err.0" || { show; return 1; }
    grep -q "^ckpt-resume: rank 1 restores iteration [0-9]* from a peer's copy" "$D/err.1.new" || { show; return 1; }
    grep -q "master 10.77.0.1:" "$D/err.1.new" || { show; return 1; }
    # node 0's snapshots went to node 1 over the veth pair
    grep -q "^ckpt-resume: debug: rank 0 iteration [0-9]* to 10.77.0.2:[0-9]*: [0-9]* bytes" "$D/err.0" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

@test "both holders of a node's snapshots lost, no disk: the job stops, naming the ranks lost" {
    for i in 0 1 2 3; do start "$i" 4 1; done
    wait_iter 60
    lose 2 3
    start 2 4 1 .new
    start 3 4 1 .new
    wait_rc "$D/rc.0" "$D/rc.1" "$D/rc.2.new" "$D/rc.3.new" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 1 ] || { show; return 1; }
    grep -q "cannot recover the job from any tier: ranks 2 (node 2), 3 (node 3) have no copy in any tier" \
        "$D/err.0" || { show; return 1; }
    [ "$(cat "$D/rc.2.new")" = 1 ]
}

# refuse_everywhere [VAR=VALUE...]: 2 nodes x 1 rank whose rank 1 dies
# once, at its 40th sync; every relaunch that restores runs a narrower
# model, whose allocations no snapshot matches, so every restore is refused.
refuse_everywhere() {
    printf '#!/bin/sh\n[ -z "$CKPT_RESTORE" ] || set -- "$@" --hidden 32\nexec "$TRAIN_BIN" "$@"\n' >"$D/narrow"
    chmod +x "$D/narrow"
    (export "$@" TRAIN_BIN=$TRAIN TRAIN=$D/narrow FAKEGPU_CRASH_AT=40 FAKEGPU_CRASH_RANK=1 FAKEGPU_CRASH_ONCE=$D/crashed
     ARGS="--iters 60 --hidden 64 --layers 3"
     for i in 0 1; do
         [ -z "${ON_DISK:-}" ] || { mkdir -p "$D/disk.$i"; export CKPT_PERSIST_DIRS=$D/disk.$i; }
         start $i 2 1
     done)
    wait_rc "$D/rc.0" "$D/rc.1"
}

@test "every restore refused on several nodes: the job stops, its snapshots kept, and says so; a clean start only with CKPT_FALLBACK=clean" {
    refuse_everywhere || { show; return 1; }
    [ -e "$D/crashed" ] && [ "$(cat "$D/rc.0")" = 1 ] || { show; return 1; }
    grep -q "the restore of iteration [0-9]* was refused: trying an older one" "$D/err.0" || { show; return 1; }
    grep -q "no snapshot of this job can be restored (.*): the job stops here, with its snapshots kept; CKPT_FALLBACK=clean would start it again from the beginning, losing the training up to iteration [0-9]*" \
        "$D/err.0" || { show; return 1; }
    ! grep -q "restarting from the beginning\|clean start" "$D/err.0" || { show; return 1; }
    ! grep -q "^iter 1 " <(sed '1,/^iter 2 /d' "$D/out.0") || { echo "the job started again from iteration 1"; show; return 1; }
    # The same with a clean start allowed: the job runs again from the
    # beginning, says what was lost, and ends as uninterrupted.
    rm -rf "$D"/arena.* "$D"/rc.* "$D"/out.* "$D"/err.* "$D"/sid.* "$D/crashed"
    etcd_forget
    ARGS="--iters 60 --hidden 64 --layers 3" plain 2 1 || { cat "$D/plain.err"; return 1; }
    refuse_everywhere CKPT_FALLBACK=clean || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    grep -q "falling back to a clean start (CKPT_FALLBACK=clean): .*; the training up to iteration [0-9]* is lost" \
        "$D/err.0" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "on several nodes, a clean start after every restore was refused retires the failed run's generations on disk; the refused restores retired nothing" {
    ARGS="--iters 60 --hidden 64 --layers 3" plain 2 1 || { cat "$D/plain.err"; return 1; }
    ON_DISK=1 refuse_everywhere CKPT_FALLBACK=clean || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    grep -q "falling back to a clean start (CKPT_FALLBACK=clean)" "$D/err.0" || { show; return 1; }
    local i points
    for i in 0 1; do
        points=$(sed -n "s/^ckpt-resume: retired this node's generation of iteration [0-9]* on disk (.*): newer than the restore point \([0-9]*\), it belongs to the run the restore replaces$/\1/p" "$D/err.$i" | sort -u)
        echo "node $i retired generations on disk at the restore points:" $points
        [ "$points" = 0 ] || { show; return 1; }
    done
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# Four nodes that persist to disks of their own; nodes 2 and 3, which hold
# each other's replicas, are lost and started again (with VAR=VALUE... in
# their environment) and must read their ranks back from their disks.
lose_2_and_3_to_disk() { # [VAR=VALUE...]
    ARGS="--iters 600 --hidden 64 --layers 3" # still running once nodes 2 and 3 have persisted
    plain 4 1 || { cat "$D/plain.err"; return 1; }
    for i in 0 1 2 3; do mkdir -p "$D/disk.$i"; done
    for i in 0 1 2 3; do CKPT_PERSIST_DIRS=$D/disk.$i start "$i" 4 1; done
    wait_iter 60
    # a generation complete on both disks (its manifest is written last)
    for _ in $(seq 600); do
        ls "$D"/disk.2/*/gen-*/manifest "$D"/disk.3/*/gen-*/manifest >/dev/null 2>&1 && break
        sleep 0.1
    done
    lose 2 3
    for i in 2 3; do (export "$@" CKPT_PERSIST_DIRS=$D/disk.$i; start $i 4 1 .new); done
}

@test "both holders of a node's snapshots lost: recovery reads the nodes' disks, as uninterrupted" {
    lose_2_and_3_to_disk
    wait_rc "$D/rc.0" "$D/rc.1" "$D/rc.2.new" "$D/rc.3.new" || { show; return 1; }
    for f in "$D/rc.0" "$D/rc.1" "$D/rc.2.new" "$D/rc.3.new"; do [ "$(cat "$f")" = 0 ] || { show; return 1; }; done
    grep -q "^ckpt-resume: rank 2: from the disk of node 2" "$D/err.0" || { show; return 1; }
    grep -q "restore iteration [0-9]* from disk" "$D/err.3.new" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "a node that reads its disk for longer than CKPT_NODE_TIMEOUT is not taken as lost: it recovers, as uninterrupted" {
    # Every read I/O of the replaced nodes takes 2.5 s: reading a generation
    # back outlasts the 3 s timeout.  Their agents keep renewing their
    # leases meanwhile; a node taken as lost would fail the launch and the job.
    export CKPT_NODE_TIMEOUT=3
    lose_2_and_3_to_disk CKPT_FAULT=io:delay=2500:op=read
    wait_rc "$D/rc.0" "$D/rc.1" "$D/rc.2.new" "$D/rc.3.new" || { show; return 1; }
    for f in "$D/rc.0" "$D/rc.1" "$D/rc.2.new" "$D/rc.3.new"; do [ "$(cat "$f")" = 0 ] || { show; return 1; }; done
    grep -q "restore iteration [0-9]* from disk" "$D/err.3.new" || { show; return 1; }
    [ "$(grep -c "is lost" "$D/err.0")" -eq 2 ] || { show; return 1; } # nodes 2 and 3, once each
    [ "$(grep -c "^ckpt-resume: restarting" "$D/err.0")" -eq 1 ] || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "a snapshot and a replay log offered to a running node's agent under an older plan (a fenced node's late writes) are refused, naming both epochs; the job ends as uninterrupted" {
    ARGS="--iters 3000 --hidden 64 --layers 3"
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    export FAKEGPU_CRASH_AT=60 FAKEGPU_CRASH_RANK=1 FAKEGPU_CRASH_ONCE=$D/crashed
    CKPT_LOG=debug start 0 2 1
    start 1 2 1
    # Rank 1's crash makes the job's second plan, decided in etcd by whichever agent leads: the nodes act
    # under its revision, and the first plan's is stale.
    local launch restore
    for _ in $(seq 600); do
        grep -q "the restore decided at etcd revision" "$D"/err.* && grep -q "restored iteration" "$D/err.1" && break
        sleep 0.05
    done
    launch=$(sed -n 's/^ckpt-resume: the launch decided at etcd revision \([0-9]*\)$/\1/p' "$D"/err.* | head -n 1)
    restore=$(sed -n 's/^ckpt-resume: the restore decided at etcd revision \([0-9]*\)$/\1/p' "$D"/err.* | head -n 1)
    [ -n "$launch" ] && [ -n "$restore" ] && [ "$restore" -gt "$launch" ] || { show; return 1; }
    local addr slot out=
    addr=$(sed -n 's/.*node 0 joined (.* replicas at \(.*\))$/\1/p' "$D/err.0" | tail -n 1)
    [ -n "$addr" ] || { show; return 1; }
    # Node 1's committed snapshot, as a node left behind at the first plan's epoch would send it.
    slot=$D/arena.1/$(id -u)-nodes/rank1/slot0
    for _ in $(seq 20); do
        cp "$slot" "$D/late" 2>/dev/null || { sleep 0.1; continue; }
        out=$("$BUILD/bin/ckpt-replica" send --to "$addr" --image "$D/late" --epoch "$launch" 2>&1) && break
        [[ $out == *"stale epoch"* ]] && break
        sleep 0.1
    done
    [[ $out == *"a stale epoch: the offer is of epoch $launch, this node acts under epoch $restore"* ]] ||
        { echo "$out"; show; return 1; }
    # Its replay log too (LOG {rank, size, job, epoch}, logship.c): refused at the offer, -ESTALE.
    out=$(python3 - "${addr##*:}" "$launch" <<'PY'
import os, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
def send(t, payload):
    s.sendall(b"CKRP" + struct.pack("<HHII", int(os.environ["WIRE_VERSION"]), t, len(payload), 0) + payload)
send(96, struct.pack("<IIQ", 1, 0, 16) + b"nodes".ljust(64, b"\0") + struct.pack("<Q", int(sys.argv[2])))
head = s.recv(16, socket.MSG_WAITALL)
print("status", struct.unpack("<i", s.recv(4, socket.MSG_WAITALL))[0])
PY
)
    [ "$out" = "status -116" ] || { echo "$out"; show; return 1; }
    grep -q "refused rank 1's replay log: a stale epoch: the offer is of epoch $launch, this node acts under epoch $restore" "$D/err.0" ||
        { show; return 1; }
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    diff <(grep '^digest' "$D/out.0") <(grep '^digest' "$D/plain")
}

@test "a node that cannot take replicas: replication falls behind, said once, and training ends as uninterrupted" {
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    mkdir -p "$D/arena.1" && : >"$D/arena.1/peers" # its store cannot be made
    start 0 2 1
    start 1 2 1
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    grep -q "cannot take replicas from peers: .*the snapshots placed on this node are kept elsewhere only" \
        "$D/err.1" || { show; return 1; }
    [ "$(grep -c "node 0 could not replicate iteration" "$D/err.0")" = 1 ] || { show; return 1; }
    grep -q "^ckpt-resume: replication: [0-9]* rounds, [1-9][0-9]* of them failed on some node" "$D/err.0"
    diff "$D/out.0" "$D/plain"
}

# bats test_tags=covered
@test "a node whose agent froze (SIGSTOP, no CKPT_FENCE_CMD) past its lease is taken as lost; awake, it stops its ranks, takes its rank again, and the job ends as uninterrupted" {
    export CKPT_NODE_TIMEOUT=3
    ARGS="--iters 1000 --hidden 64 --layers 3"
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    start 0 2 1
    start 1 2 1
    wait_iter 60
    agent=$(pgrep -s "$(cat "$D/sid.1")" -x ckpt-resume)
    [ -n "$agent" ] || { echo "node 1 ended before its agent could be stopped: the job is too short"; show; return 1; }
    kill -STOP "$agent"
    for _ in $(seq 400); do grep -q "node 1 is lost" "$D/err.0" && break; sleep 0.1; done
    kill -CONT "$agent"
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    grep -q "node 1 is lost" "$D/err.0" || { show; return 1; }
    # Awake, whichever of the lease's threads runs first fences it: the keeper, finding the lease gone, or
    # the deadline, finding it too late to renew.
    grep -Eq "(this node's etcd lease has expired|this node has not renewed its etcd lease for [0-9.]+ s of its 3 s \(.*\)): this node stops its ranks" \
        "$D/err.1" || { show; return 1; }
    grep -q "it is back in the job as node 1" "$D/err.1" || { show; return 1; }
    grep -q "^ckpt-resume: restarting from iteration [0-9]*$" "$D/err.0" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

@test "a replay log offered for another job, another rank, or under a job name that climbs out of the store, writes nothing" {
    # Without CKPT_JOB_KEY anyone who reaches a node's replica port may
    # offer a log; its job name must never become a path outside the store.
    ARGS="--iters 2000 --hidden 64 --layers 3"
    CKPT_LOG=debug start 0 2 1
    start 1 2 1
    local port=
    for _ in $(seq 200); do
        port=$(sed -n 's/.*node 1 joined .*replicas at 127\.0\.0\.1:\([0-9]*\))$/\1/p' "$D/err.0" | head -n 1)
        [ -n "$port" ] && [ -d "$D/arena.1/peers/$(id -u)-nodes" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { show; return 1; }
    python3 - "$port" <<'PY'
import os, socket, struct, sys
for job, rank in ((b"nodes/../../../escape", 0), (b"other", 0), (b"nodes", 99)):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
    log = struct.pack("<IIQ", rank, 0, 16) + job.ljust(64, b"\0") + struct.pack("<Q", 1 << 40)  # any epoch
    s.sendall(b"CKRP" + struct.pack("<HHII", int(os.environ["WIRE_VERSION"]), 96, len(log), 0) + log)
    s.sendall(b"CKRP" + struct.pack("<HHII", int(os.environ["WIRE_VERSION"]), 97, 16, 0) + b"x" * 16)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
PY
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    [ ! -e "$D/escape" ] || { ls -laR "$D/escape"; return 1; }
    [ ! -e "$D/arena.1/peers/$(id -u)-other" ] && [ ! -e "$D/arena.1/peers/$(id -u)-nodes/rank99" ]
    grep -q "a replay log from a peer was not kept" "$D/err.1" || { show; return 1; }
}

# bats test_tags=covered
@test "strangers that stop mid-frame on the coordinator's port hold nothing up: no node is lost, the job ends as uninterrupted" {
    # Each of them once held the coordinator for a second, and all of them
    # for longer than CKPT_NODE_TIMEOUT (10 s): the nodes lost it.
    ARGS="--iters 3000 --hidden 64 --layers 3"
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    start 0 2 1
    start 1 2 1
    wait_iter 20
    port=$(coord_port) || { show; return 1; }
    python3 - "$port" <<'PY' &
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(30)]
time.sleep(2)  # all of them accepted, then all of them readable at once
for s in held:
    s.sendall(b"CKRP\x03\x00")  # the start of a frame, and nothing more
time.sleep(30)
PY
    local strangers=$!
    wait_rc "$D/rc.0" "$D/rc.1" || { kill "$strangers"; show; return 1; }
    kill "$strangers" 2>/dev/null || true
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    ! grep -q "is lost\|lost the coordinator" "$D/err.0" "$D/err.1" || { show; return 1; }
    [ "$(tail -n 1 "$D/err.0")" = "ckpt-resume: done exit=0 restarts=0" ] || { show; return 1; }
    diff "$D/out.0" "$D/plain"
}

@test "with CKPT_JOB_KEY: the nodes' messages through etcd carry its tag; a node with another key, or a stranger, is refused and named" {
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    export CKPT_JOB_KEY=0123456789abcdef-the-right-one
    start 0 2 1
    CKPT_JOB_KEY=0123456789abcdef-the-wrong-one start 1 2 1 .wrong
    wait_rc "$D/rc.1.wrong" || { show; return 1; }
    [ "$(cat "$D/rc.1.wrong")" = 1 ] || { show; return 1; }
    grep -q "did not authenticate with this node's key (CKPT_JOB_KEY).*every node needs the same CKPT_JOB_KEY" \
        "$D/err.1.wrong" || { show; return 1; }
    grep -q "refused node 1's agent: its messages in etcd did not authenticate with this job's key (CKPT_JOB_KEY)" \
        "$D/err.0" || { show; return 1; }
    # A node with no key at all reads the leader's refusal as it is.
    (unset CKPT_JOB_KEY; start 1 2 1 .none)
    wait_rc "$D/rc.1.none" || { show; return 1; }
    [ "$(cat "$D/rc.1.none")" = 1 ] || { show; return 1; }
    grep -q "the coordinator ends the job: this node's messages did not authenticate with the job's key (CKPT_JOB_KEY): every node needs the same CKPT_JOB_KEY$" \
        "$D/err.1.none" || { show; return 1; }
    # A stranger that speaks the protocol but holds no key.
    exec 7<>"/dev/tcp/127.0.0.1/$(coord_port)" && printf 'CKRP\001\000\100\000\000\000\000\000\000\000\000\000' >&7
    exec 7>&-
    start 1 2 1
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    grep -q "refused a connection that did not authenticate with this job's key" "$D/err.0" || { show; return 1; }
    ( ! grep -q "not authenticated" "$D/err.0" )
    ( ! grep -rq "the-right-one" "$D"/err.* "$D"/out.* )
    diff "$D/out.0" "$D/plain"
}

# machine: what CKPT_NODE_LAUNCHER starts node I through in these tests,
# as srun would on another machine: its session in $D/sid.I, its arena
# $D/arena.I, its output in $D/out.I and $D/err.I (.new when started again),
# the key it was handed in $D/key.I.
machine() {
    cat >"$D/machine" <<EOF
#!/bin/sh
i=\$CKPT_NODE_RANK; tag=; [ -e "$D/sid.\$i" ] && tag=.new
printenv CKPT_JOB_KEY >"$D/key.\$i\$tag"
cut -d ' ' -f 6 /proc/\$\$/stat >"$D/sid.\$i\$tag" # the session node 0 gave the command
CKPT_ARENA_DIR=$D/arena.\$i exec "\$@" >"$D/out.\$i\$tag" 2>"$D/err.\$i\$tag"
EOF
    chmod +x "$D/machine"
}

@test "CKPT_NODE_LAUNCHER: node 0 starts the others with a key it made, starts a lost one again, and the job ends as uninterrupted" {
    ARGS="--iters 1000 --hidden 64 --layers 3" # node 2 still runs when it is lost
    plain 4 1 || { cat "$D/plain.err"; return 1; }
    machine
    unset CKPT_JOB_KEY
    CKPT_NODE_LAUNCHER=$D/machine start 0 4 1
    wait_iter 60 || { show; return 1; }
    # A stranger that speaks the protocol but holds no key.
    exec 7<>"/dev/tcp/127.0.0.1/$(coord_port)" && printf 'CKRP\001\000\100\000\000\000\000\000\000\000\000\000' >&7
    exec 7>&-
    lose 2
    wait_rc "$D/rc.0" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] || { show; return 1; }
    done_line "cold" || { show; return 1; }
    grep -q "CKPT_JOB_KEY is not set: made one for this job" "$D/err.0" || { show; return 1; }
    grep -q "node 2's command ended (killed by signal 9) before the job did; starting it again" "$D/err.0" ||
        { show; return 1; }
    grep -q "^ckpt-resume: rank 2 restores iteration [0-9]* from a peer's copy" "$D/err.2.new" || { show; return 1; }
    grep -q "refused a connection that did not authenticate with this job's key" "$D/err.0" || { show; return 1; }
    ( ! grep -q "not authenticated" "$D"/err.* )
    # Every node was handed the same new key, which no output shows.
    key=$(cat "$D/key.1")
    [[ $key =~ ^[0-9a-f]{64}$ ]] || { echo "key: '$key'"; false; }
    [ "$(cat "$D/key.2")" = "$key" ] && [ "$(cat "$D/key.2.new")" = "$key" ]
    ( ! grep -rqF "$key" "$D"/err.* "$D"/out.* )
    # The nodes started by node 0 have ended with it.
    for f in "$D"/sid.[123]*; do ! pgrep -s "$(cat "$f")" >/dev/null || { echo "$f: still running"; false; }; done
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "CKPT_NODE_LAUNCHER: a node whose command keeps failing stops the job at once, named, with the command's status; unused on one node" {
    export CKPT_MAX_RESTARTS=1
    CKPT_NODE_LAUNCHER='sh -c "exit 3"' start 0 2 1
    wait_rc "$D/rc.0" || { show; return 1; }
    [ "$(cat "$D/rc.0")" != 0 ] || { show; return 1; }
    grep -q "node 1's command ended (exit status 3) before the job did; starting it again" "$D/err.0" ||
        { show; return 1; }
    grep -q "node 1 cannot be kept running: its command (CKPT_NODE_LAUNCHER) ended 2 times, the last with exit status 3" \
        "$D/err.0" || { show; return 1; }
    # The coordinator is told, and ends the job without waiting 10 x CKPT_NODE_TIMEOUT (100 s) for node 1 to join.
    grep -q "error: node 1 will not join: node 0 gave up starting it (CKPT_NODE_LAUNCHER; said there); the job ends" \
        "$D/err.0" || { show; return 1; }
    ! grep -q "did not join within" "$D/err.0" || { show; return 1; }
    # On one node it has nothing to start, and says so.
    run env CKPT_NODE_LAUNCHER=false "$CKPT" --nproc 1 -- true
    [ "$status" = 0 ] && [[ $output == *"CKPT_NODE_LAUNCHER is not used: the job has one node"* ]]
}

# bats test_tags=covered
@test "CKPT_NODE_LAUNCHER: when node 0 dies, the nodes it started get SIGTERM and end" {
    ARGS="--iters 1000 --hidden 64 --layers 3" # node 0 still runs when it is killed
    machine
    CKPT_NODE_LAUNCHER=$D/machine start 0 2 1
    wait_iter 20 || { show; return 1; }
    kill -KILL "$(pgrep -s "$(cat "$D/sid.0")" -x ckpt-resume)"
    for _ in $(seq 300); do pgrep -s "$(cat "$D/sid.1")" >/dev/null || break; sleep 0.1; done
    ! pgrep -s "$(cat "$D/sid.1")" >/dev/null || { echo "node 1 still runs"; show; false; }
    grep -q "got SIGTERM" "$D/err.1" || { show; return 1; }
}

@test "ckpt-resume --new-key prints a new 256-bit key each time" {
    run "$CKPT" --new-key
    [ "$status" = 0 ] && [[ $output =~ ^[0-9a-f]{64}$ ]]
    first=$output
    run "$CKPT" --new-key
    [ "$status" = 0 ] && [[ $output =~ ^[0-9a-f]{64}$ ]] && [ "$output" != "$first" ]
}

# How many committed copies of rank 1 node 0 holds.
copies() {
    local s n=0
    for s in "$D"/arena.0/peers/*/rank1/slot?; do
        [ -s "$s" ] && [ "$(head -c 8 "$s")" = LIBCKPT1 ] && n=$((n + 1))
    done
    echo $n
}

# damage_replicas MODE: every replica node 0 keeps of rank 1, damaged: one
# bit flipped in its data (flip), its first page of data zeroed (zero), cut
# in half (trunc); or (stale) the older one relabelled as the newer one
# (its generation at byte 88, its iteration at 96) and the newer one
# uncommitted, as an old copy left where the newer one belongs.  Prints
# the iterations the damaged copies claim.
damage_replicas() {
    local s off byte slots=() old new
    for s in "$D"/arena.0/peers/*/rank1/slot?; do
        [ -s "$s" ] && [ "$(head -c 8 "$s")" = LIBCKPT1 ] && slots+=("$s")
    done
    if [ "$1" = stale ]; then
        [ ${#slots[@]} -eq 2 ] || return 0
        old=${slots[0]} new=${slots[1]}
        [ "$(u64 "$old" 88)" -lt "$(u64 "$new" 88)" ] || { old=${slots[1]} new=${slots[0]}; }
        u64 "$old" 88 "$(u64 "$new" 88)"
        u64 "$old" 96 "$(u64 "$new" 96)"
        u64 "$new" 0 0
        u64 "$old" 96
        return
    fi
    for s in "${slots[@]}"; do
        u64 "$s" 96
        case $1 in
        flip)
            flip "$s" $(($(stat -c %s "$s") - 1000)) ;;
        zero) dd if=/dev/zero of="$s" bs=4096 seek=1 count=1 conv=notrunc 2>/dev/null ;;
        trunc) truncate -s $(($(stat -c %s "$s") / 2)) "$s" ;;
        esac
    done
}

# bats test_tags=covered
@test "a damaged replica in a peer's memory (bit flip, zeroed page, truncation, stale label) is named and never loaded: the lost node's rank comes from its disk" {
    # Long enough to still run while the test waits for the copies it
    # damages (200 iterations took under a second from the 60th on).
    ARGS="--iters 1000 --hidden 64 --layers 3"
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    local mode said damaged restored
    # what node 0 says: found by its scan when node 1 joins again, or by node 1 as the copy arrives
    local refused="cannot send rank 1's copy of iteration [0-9]* to node 1: (refused by the receiver: |.*/rank1/slot[01] is damaged \\()"
    while IFS='|' read -r mode said; do
        # stale needs two committed copies: node 1 may die while a third
        # travels, leaving one; then the round is run again (3 times at most).
        for try in 1 2 3; do
            rm -rf "$D"/arena.* "$D"/disk.* "$D"/rc.* "$D"/sid.* "$D"/out.* "$D"/err.*
            mkdir -p "$D/disk.0" "$D/disk.1"
            etcd_forget
            CKPT_PERSIST_DIRS=$D/disk.0 start 0 2 1
            CKPT_PERSIST_DIRS=$D/disk.1 start 1 2 1
            wait_iter 60
            # Replication keeps its own pace (slower under a sanitizer on a
            # loaded machine): wait for the copies the mode needs.
            for _ in $(seq 600); do
                [ "$(copies)" -ge "$([ "$mode" = stale ] && echo 2 || echo 1)" ] && break
                sleep 0.1
            done
            lose 1
            damaged=$(damage_replicas "$mode" | tr '\n' ' ')
            [ -n "$damaged" ] && break
            echo "$mode: try $try: fewer than two committed copies to relabel"
            for f in "$D"/sid.*; do pkill -KILL -s "$(cat "$f")" 2>/dev/null || true; done
        done
        [ -n "$damaged" ] || { echo "$mode: nothing could be damaged in 3 tries"; show; return 1; }
        CKPT_PERSIST_DIRS=$D/disk.1 start 1 2 1 .new
        wait_rc "$D/rc.0" "$D/rc.1.new" || { echo "$mode:"; show; return 1; }
        [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1.new")" = 0 ] || { echo "$mode:"; show; return 1; }
        # never loaded: rank 1 comes from node 1's disk
        grep -q "^ckpt-resume: rank 1: from the disk of node 1" "$D/err.0" || { echo "$mode:"; show; return 1; }
        ! grep -q "rank 1 restores iteration [0-9]* from a peer's copy" "$D/err.1.new" || { echo "$mode:"; show; return 1; }
        diff <(resumed_output "$D/out.0") "$D/plain" || { echo "$mode: output differs"; return 1; }
        # named, when the damaged copy was the one the job went for first
        restored=$(sed -n 's/^ckpt-resume: restarting from iteration \([0-9]*\)$/\1/p' "$D/err.0" | head -n 1)
        if [[ " $damaged" == *" $restored "* ]]; then
            grep -Eq "peers/.*/rank1/slot[01] is damaged \($said|$refused$said" "$D/err.0" ||
                { echo "$mode: iteration $restored: not said: $said"; show; return 1; }
            echo "ok $mode: $(grep -Eo "peers/.*/rank1/slot[01] is damaged \($said|$refused$said" "$D/err.0" | head -n 1)"
        else
            echo "ok $mode: the damaged copies (iterations $damaged) were older than the restart's ($restored)"
        fi
        for f in "$D"/sid.*; do pkill -KILL -s "$(cat "$f")" 2>/dev/null || true; done
    done <<'ROWS'
flip|chunk [0-9]* \(.*\) checksum mismatch
zero|chunk 0 \(.*\) checksum mismatch
trunc|header sizes are inconsistent
stale|header checksum mismatch
ROWS
}

# iter_again N: node 0's rank 0 has printed iteration N a second time (a launch that started again from the beginning).
iter_again() {
    for _ in $(seq 1800); do
        [ "$(grep -c "^iter $1 " "$D/out.0" 2>/dev/null)" -ge 2 ] && return 0
        sleep 0.05
    done
    echo "iteration $1 never came again" >&2
    return 1
}

# away_and_back [WIPE]: node 1 of 2 goes away (its agent and rank killed,
# its arena and disk kept; WIPE=arena: its arena lost, as in a reboot), the
# job goes back to the beginning without it, and node 1 comes back with
# what it kept while the new run is past the old run's copies.
away_and_back() {
    ARGS="--iters 800 --hidden 64 --layers 3"
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    # While $D/narrow exists a launch that restores runs a narrower model,
    # whose allocations no snapshot matches: every restore is refused, and
    # the job starts again from the beginning (CKPT_FALLBACK=clean).
    printf '#!/bin/sh\n[ -z "$CKPT_RESTORE" ] || [ ! -e "%s/narrow" ] || set -- "$@" --hidden 32\nexec "%s" "$@"\n' \
        "$D" "$TRAIN" >"$D/train"
    chmod +x "$D/train"
    mkdir -p "$D/disk.0" "$D/disk.1"
    export TRAIN=$D/train CKPT_FALLBACK=clean
    for i in 0 1; do CKPT_PERSIST_DIRS=$D/disk.$i start $i 2 1; done
    wait_iter 100
    pkill -KILL -s "$(cat "$D/sid.1")"
    sleep 0.2
    mv "$D/arena.1" "$D/arena.1.away" && mv "$D/disk.1" "$D/disk.1.away"
    [ "${1:-}" != arena ] || rm -rf "$D/arena.1.away"
    # Another machine takes its place, and the job goes back to the beginning.
    touch "$D/narrow"
    mkdir -p "$D/disk.1"
    CKPT_PERSIST_DIRS=$D/disk.1 start 1 2 1 .new
    for _ in $(seq 600); do grep -q "falling back to a clean start" "$D/err.0" && break; sleep 0.05; done
    grep -q "falling back to a clean start" "$D/err.0" || return 1
    rm "$D/narrow"
    iter_again 40 || return 1
    # That machine is lost, and node 1's own comes back, with what it kept.
    pkill -KILL -s "$(cat "$D/sid.1.new")"
    sleep 0.2
    rm -rf "$D/arena.1" "$D/disk.1"
    [ ! -d "$D/arena.1.away" ] || mv "$D/arena.1.away" "$D/arena.1"
    mv "$D/disk.1.away" "$D/disk.1"
    CKPT_PERSIST_DIRS=$D/disk.1 start 1 2 1 .back
    wait_rc "$D/rc.0" "$D/rc.1.back" || return 1
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1.back")" = 0 ] || return 1
    grep -q "^ckpt-resume: node 1 holds copies of a run that the restore of iteration [0-9]* (epoch [0-9]*) replaced while it was away, from rank [01]'s of iteration [0-9]* in the [a-z]* tier on: not used$" \
        "$D/err.0" || return 1
    grep -q "^ckpt-resume: while this node was away the job went back to iteration 0: what this node holds of later iterations belongs to the run that restore replaced, and is retired$" \
        "$D/err.1.back" || return 1
    grep -q "^ckpt-resume: retired this node's generation of iteration [0-9]* on disk" "$D/err.1.back" || return 1
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "a node away while the job went back (its machine returns with its arena and disk): its copies of the replaced run are named, never used, and retired; the job ends as uninterrupted" {
    away_and_back || { show; return 1; }
    grep -q "^ckpt-resume: retired rank 1's snapshot of iteration [0-9]* in this node's arena" "$D/err.1.back" ||
        { show; return 1; }
    # Its own arena is the fastest source of rank 1: taken from there, an
    # old run's copy would be paired with rank 0's of the new run (on a GPU
    # that is not bit-deterministic, weights that differ between ranks).
    ! grep "^ckpt-resume: rank 1: from the arena of node 1$" "$D/err.0" || { show; return 1; }
}

# bats test_tags=covered
@test "a node away while the job went back, its arena lost (a reboot): the decisions kept on its disk name its generations of the replaced run, never used, and retired; as uninterrupted" {
    away_and_back arena || { show; return 1; }
}

@test "after a restart the restored iteration is made durable before any newer one (a node lost next finds it in its peers)" {
    # A rank of node 1 dies once; the restart restores from the ranks' own
    # arenas an iteration the peers may hold no copy of.  Before any newer
    # round, that iteration must be durable again (held by every node and
    # its replicas): the peers' older copies are all that is left otherwise.
    # The job runs on long enough after the crash for that round to end.
    ARGS="--iters 600 --hidden 64 --layers 3"
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    CKPT_LOG=debug FAKEGPU_CRASH_AT=150 FAKEGPU_CRASH_RANK=1 FAKEGPU_CRASH_ONCE=$D/crashed start 0 2 1
    FAKEGPU_CRASH_AT=150 FAKEGPU_CRASH_RANK=1 FAKEGPU_CRASH_ONCE=$D/crashed start 1 2 1
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    local restored first
    restored=$(sed -n 's/^ckpt-resume: restarting from iteration \([0-9]*\)$/\1/p' "$D/err.0" | head -n 1)
    [ -n "$restored" ] || { show; return 1; }
    first=$(sed -n '/^ckpt-resume: restarting from iteration/,$p' "$D/err.0" |
        sed -n 's/^ckpt-resume: debug: iteration \([0-9]*\) is held by every node and its replicas$/\1/p' | head -n 1)
    [ "$first" = "$restored" ] || { echo "restored $restored, first durable after it: ${first:-none}"; show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# standbys_on_every_node N P: waits until each of the N nodes has started its P standbys.
standbys_on_every_node() {
    local i k
    for i in $(seq 0 $(($1 - 1))); do
        for k in $(seq 600); do
            grep -q "^ckpt-resume: started $2 standbys\? " "$D/err.$i" 2>/dev/null && break
            sleep 0.1
        done
        grep -q "^ckpt-resume: started $2 standbys\? " "$D/err.$i" || { echo "node $i started no standbys"; return 1; }
    done
}

# both_took_over: both nodes ended well, and the standbys of each took
# over at the iteration node 0 named, no rank of either restored cold.
both_took_over() {
    local it i
    wait_rc "$D/rc.0" "$D/rc.1" || return 1
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || return 1
    it=$(sed -n 's/^ckpt-resume: the standbys of every node take over at iteration \([0-9]*\)$/\1/p' "$D/err.0")
    [ -n "$it" ] || { echo "no takeover"; return 1; }
    for i in 0 1; do
        grep -q "^ckpt-resume: the standbys took over at iteration $it in " "$D/err.$i" || return 1
        ! grep -q "^ckpt-resume: rank [0-9]* restores iteration" "$D/err.$i" || return 1
    done
}

@test "standbys on every node (2 nodes x 2 ranks): a rank killed, the standbys of both nodes take over at the same iteration, no rank replays from the start, as uninterrupted" {
    export CKPT_STANDBY=1 CKPT_JOB=nodes-sb-$$-$RANDOM
    ARGS="--iters 1000 --hidden 64 --layers 3" # still running once the standbys are (a loaded machine)
    plain 2 2 || { cat "$D/plain.err"; return 1; }
    start 0 2 2
    start 1 2 2
    standbys_on_every_node 2 2 || { show; return 1; }
    local pid
    pid=$(live_pid 3) || { echo "no live rank 3"; show; return 1; }
    kill -KILL "$pid"
    both_took_over || { show; return 1; }
    ! grep -q "no takeover by the standbys" "$D/err.0" || { show; return 1; }
    done_line "standby" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# standby_pid RANK: the standby of RANK in job $CKPT_JOB.
standby_pid() {
    local p env
    for p in $(pgrep -x mlp-train); do
        env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
        grep -qx "CKPT_JOB=$CKPT_JOB" <<<"$env" && grep -qx "RANK=$1" <<<"$env" &&
            grep -q '^CKPT_FOLLOW=' <<<"$env" && { echo "$p"; return 0; }
    done
    return 1
}

@test "standbys on every node: one that dies is started again alone on its node, served the job's rendezvous from its rank's log; a rank killed on the other node, the standbys of every node take over with unique ids the nodes relay, as uninterrupted" {
    export CKPT_STANDBY=1 CKPT_JOB=nodes-sb-$$-$RANDOM
    ARGS="--iters 2000 --hidden 64 --layers 3" # still running once the standby alone has caught up (a loaded machine)
    plain 2 2 || { cat "$D/plain.err"; return 1; }
    start 0 2 2
    start 1 2 2
    standbys_on_every_node 2 2 || { show; return 1; }
    local pid i alone=""
    pid=$(standby_pid 2) || { echo "no standby of rank 2"; show; return 1; }
    # Following: past the shadow job's rendezvous, which its rank 0 serves
    # until every rank has met there (one killed before it did would hold
    # the others there: a standby that dies as it starts is not this test's).
    for i in $(seq 300); do
        CKPT_ARENA_DIR=$D/arena.1 "$BUILD/bin/ckpt-inspect" list --job "$CKPT_JOB" 2>&1 |
            grep -q "^  standby of rank 2 (pid $pid): replayed to iteration [1-9]" && break
        sleep 0.1
    done
    kill -KILL "$pid"
    for i in $(seq 300); do
        alone=$(sed -n 's/^ckpt-resume: warning: the standby of rank 2 (pid [0-9]*) was killed by SIGKILL: a new one (pid \([0-9]*\)) follows rank 2 alone, from the start$/\1/p' "$D/err.1")
        [ -n "$alone" ] && break
        sleep 0.1
    done
    [ -n "$alone" ] || { show; return 1; }
    # Caught up: its node reports its standbys ready to the coordinator again.
    for i in $(seq 300); do
        CKPT_ARENA_DIR=$D/arena.1 "$BUILD/bin/ckpt-inspect" list --job "$CKPT_JOB" 2>&1 |
            grep -q "^  standby of rank 2 (pid $alone): replayed to iteration [1-9]" && break
        sleep 0.1
    done
    pid=$(live_pid 1) || { echo "no live rank 1"; show; return 1; }
    kill -KILL "$pid"
    both_took_over || { show; return 1; }
    done_line "standby" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "standbys on every node: a node lost with its standbys, the replacement has none: every node recovers by the cold path, said, as uninterrupted" {
    export CKPT_STANDBY=1 CKPT_JOB=nodes-sb-$$-$RANDOM
    ARGS="--iters 1000 --hidden 64 --layers 3" # still running once the standbys are (a loaded machine)
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    start 0 2 1
    start 1 2 1
    standbys_on_every_node 2 1 || { show; return 1; }
    lose 1
    start 1 2 1 .new
    wait_rc "$D/rc.0" "$D/rc.1.new" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1.new")" = 0 ] || { show; return 1; }
    grep -q "^ckpt-resume: no takeover by the standbys (node 1 has no standbys ready\|rank 1 restores from a copy outside its node's arena): every node recovers by the cold path$" \
        "$D/err.0" || { show; return 1; }
    ! grep -q "took over" "$D/err.0" || { show; return 1; }
    grep -q "^ckpt-resume: rank 1 restores iteration [0-9]* from a peer's copy" "$D/err.1.new" || { show; return 1; }
    done_line "cold" || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

# bats test_tags=covered
@test "standbys on every node: one node's standby killed during the takeover, the other's already live: every node goes on by the cold path, said, as uninterrupted" {
    export CKPT_STANDBY=1 CKPT_JOB=nodes-sb-$$-$RANDOM
    ARGS="--iters 1000 --hidden 64 --layers 3" # still running once the standbys are (a loaded machine)
    plain 2 1 || { cat "$D/plain.err"; return 1; }
    start 0 2 1
    CKPT_FAULT=kill:rank=1:iter=1:phase=restore start 1 2 1
    standbys_on_every_node 2 1 || { show; return 1; }
    local pid
    pid=$(live_pid 0) || { echo "no live rank 0"; show; return 1; }
    kill -KILL "$pid"
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    grep -q "^ckpt-resume: the standbys of every node take over at iteration [0-9]*$" "$D/err.0" || { show; return 1; }
    grep -q "^ckpt-resume: warning: the standby of rank 1 (pid [0-9]*) was killed by SIGKILL: a failure now recovers by replaying from the start$" \
        "$D/err.1" || { show; return 1; }
    grep -q "^ckpt-resume: stopping the job on every node: the standbys of node 1 could not take over (said there): every node recovers by the cold path$" \
        "$D/err.0" || { show; return 1; }
    for i in 0 1; do grep -q "^ckpt-resume: rank $i restores iteration [0-9]* from this node's arena$" "$D/err.$i" || { show; return 1; }; done
    # The failed takeover is not another restart: node 0's ranks were its
    # standbys for a moment, then cold ones; node 1's were cold at once.
    local r0 r1
    r0=$(sed -n 's/^ckpt-resume: done exit=0 restarts=\([0-9]*\) (.*standby [0-9.]* s, cold [0-9.]* s)$/\1/p' "$D/err.0")
    r1=$(sed -n 's/^ckpt-resume: done exit=0 restarts=\([0-9]*\) (.*cold [0-9.]* s)$/\1/p' "$D/err.1")
    [ -n "$r0" ] && [ "$r0" = "$r1" ] && [ "$(grep -c "^ckpt-resume: restart [0-9]* of " "$D/err.0")" = "$r0" ] || { show; return 1; }
    diff <(resumed_output "$D/out.0") "$D/plain"
}

@test "replication rounds are sent from the ranks' published schedule and show on their timelines" {
    export CKPT_KEEP_ARENA=1
    start 0 2 1
    start 1 2 1
    wait_rc "$D/rc.0" "$D/rc.1" || { show; return 1; }
    [ "$(cat "$D/rc.0")" = 0 ] && [ "$(cat "$D/rc.1")" = 0 ] || { show; return 1; }
    for i in 0 1; do
        sends=$(CKPT_ARENA_DIR=$D/arena.$i "$BUILD/bin/ckpt-inspect" timeline --rank $i --iters 1..200 | grep -c ' send ')
        [ "$sends" -ge 1 ] || { echo "node $i: no send on the timeline"; return 1; }
    done
    [ -s "$D"/arena.1/peers/*/rank0/slot0 ] && [ -s "$D"/arena.0/peers/*/rank1/slot0 ]
}

@test "bad node options stop ckpt-resume before any rank starts, naming what to fix" {
    local etcd=etcd://$ENDPOINTS
    run -2 "$CKPT" --nnodes 2 --nproc 1 -- "$TRAIN"
    [[ $output == *"--nnodes and --node-rank need --coord etcd://HOST:PORT[,...] (or CKPT_COORD)"* ]]
    run -2 "$CKPT" --coord "$etcd" --nnodes 2 --node-rank 2 --nproc 1 -- "$TRAIN"
    [[ $output == *"--node-rank 2: expected 0 to 1 (--nnodes 2)"* ]]
    run -2 "$CKPT" --coord "$etcd" --nnodes 2 -- "$TRAIN"
    [[ $output == *"--coord needs --nproc N"* ]]
    CKPT_REPLICAS=3 run -2 "$CKPT" --coord "$etcd" --nnodes 2 --nproc 1 -- "$TRAIN"
    [[ $output == *"CKPT_REPLICAS=3: the job has 2 nodes"* ]]
    # The coordinator on node 0 (--coord HOST:PORT) is no more: said, with what to give instead.
    for coord in nowhere 127.0.0.1:$PORT; do
        run -2 "$CKPT" --coord "$coord" --nnodes 2 --node-rank 0 --nproc 1 -- "$TRAIN"
        [[ $output == *"--coord $coord: the nodes of a job meet through etcd: expected etcd://HOST:PORT[,HOST:PORT...]"* ]] ||
            { echo "$output"; false; }
    done
    CKPT_JOB_KEY=short run -2 "$CKPT" --coord "$etcd" --nnodes 2 --nproc 1 -- "$TRAIN"
    [[ $output == *"CKPT_JOB_KEY is too short: it must have at least 16 characters"* ]]
    [[ $output != *"short"*"short"* ]]
    run -2 "$CKPT" --spare --nproc 1 -- "$TRAIN"
    [[ $output == *"--spare needs --coord etcd://...: the job whose lost node it replaces"* ]]
    run -2 "$CKPT" --coord "$etcd" --spare --node-rank 1 --nnodes 2 --nproc 1 -- "$TRAIN"
    [[ $output == *"--spare takes the rank of the node that is lost: give no --node-rank"* ]]
}
