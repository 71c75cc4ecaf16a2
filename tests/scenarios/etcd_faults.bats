#!/usr/bin/env bats
# ckpt-resume through etcd when things go wrong beyond a lost node: a node
# partitioned away in a network namespace of its own (etcd, its peers and
# its ranks' traffic cut at once), or cut off from etcd alone through a
# proxy (it fences itself, comes back, rejoins), its packets
# lost (its lease's deadline kills its ranks), the leading
# agent killed in the middle of an agreement, a frozen node (a follower, the
# leader) fenced by CKPT_FENCE_CMD.  The cluster and the agents as in
# etcd.bats (etcd.bash); etcd losing its quorum is etcd_quorum.bats.

load output
load etcd

bats_require_minimum_version 1.5.0

# cut_off close|drop: 3 nodes, node 2 reaching etcd through a proxy the test cuts mid-run (closing its
# connections, or dropping what they carry: its requests then hang), then heals. It stops its ranks by itself
# and says so; back, it takes its rank again, and the job ends as uninterrupted.
cut_off() {
    # Long enough to run on through the cut, the fence and the return.
    ARGS="--iters 10000 --hidden 16 --layers 2 --batch 30" AGENT_TIMEOUT=300
    plain 3
    local proxy_port first=${ENDPOINTS%%,*} cut_at killed_at lost_at
    python3 "$BATS_TEST_DIRNAME/tcpcut.py" 0 "$first" "$1" >"$D/proxy.log" 2>&1 &
    local proxy=$!
    for _ in $(seq 50); do grep -q listening "$D/proxy.log" && break; sleep 0.1; done
    proxy_port=$(sed -n 's/^listening \([0-9]*\)$/\1/p' "$D/proxy.log")
    [ -n "$proxy_port" ] || { kill $proxy; cat "$D/proxy.log"; return 1; }
    start a 3 0
    start b 3 1
    ENDPOINTS=127.0.0.1:$proxy_port start c 3 2
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    kill -USR1 $proxy
    cut_at=$(date +%s.%N)
    # The lease's deadline kills the ranks itself, within the TTL (CKPT_NODE_TIMEOUT), before the others
    # take the node as lost, whatever its agent's requests wait for.
    for _ in $(seq 200); do grep -q "ranks (process group [0-9]*) are killed at once" "$D/err.c" && break; sleep 0.02; done
    killed_at=$(date +%s.%N)
    grep -q "^ckpt-resume: error: this node's etcd lease lapsed: its ranks (process group [0-9]*) are killed at once$" \
        "$D/err.c" || { kill $proxy; show; return 1; }
    echo "the ranks killed $(awk -v a="$killed_at" -v b="$cut_at" 'BEGIN { print a - b }') s after the cut"
    awk -v a="$killed_at" -v b="$cut_at" -v ttl="$CKPT_NODE_TIMEOUT" 'BEGIN { exit !(a - b < ttl) }' ||
        { kill $proxy; show; return 1; }
    # The others take the node as lost only a quarter of the TTL and the kill's time (1 s) after its lease
    # ended: well after its ranks were killed.
    for _ in $(seq 300); do grep -q "node 2 is lost" "$D/err.a" "$D/err.b" 2>/dev/null && break; sleep 0.02; done
    lost_at=$(date +%s.%N)
    grep -q "^ckpt-resume: node 2's etcd lease ended: the job goes on without its agent in 1.75 s, once the node has stopped its ranks$" \
        "$D/err.a" "$D/err.b" || { kill $proxy; show; return 1; }
    echo "node 2 taken as lost $(awk -v a="$lost_at" -v b="$killed_at" 'BEGIN { print a - b }') s after its ranks were killed"
    awk -v a="$lost_at" -v b="$killed_at" 'BEGIN { exit !(a - b > 1) }' || { kill $proxy; show; return 1; }
    # The agent says so when its bridge next turns: with packets dropped, after the etcd requests it was
    # waiting on have timed out (5 s each).
    for _ in $(seq 300); do grep -q "this node stops its ranks" "$D/err.c" && break; sleep 0.1; done
    grep -Eq "^ckpt-resume: error: this node (cannot renew its etcd lease \(etcd at http://127.0.0.1:$proxy_port: .*\)|has not renewed its etcd lease for [0-9.]+ s of its 3 s \(.*\)): this node stops its ranks before the others restart without it$" "$D/err.c" ||
        { kill $proxy; show; return 1; }
    # Its member saw the coordinator go (member.c).
    for _ in $(seq 300); do grep -q "^ckpt-resume: warning: lost the coordinator" "$D/err.c" && break; sleep 0.1; done
    grep -q "^ckpt-resume: warning: lost the coordinator" "$D/err.c" || { kill $proxy; show; return 1; }
    kill -USR2 $proxy
    for _ in $(seq 300); do grep -q "back in the job" "$D/err.c" && break; sleep 0.1; done
    grep -q "^ckpt-resume: this node reaches etcd again: it is back in the job as node 2$" "$D/err.c" ||
        { kill $proxy; show; return 1; }
    # Its agent joins the job again: the job ends with all three, as uninterrupted.
    wait_rc a b c || { kill $proxy; show; return 1; }
    kill $proxy
    for t in a b c; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
}

# bats test_tags=long
@test "a node partitioned away in a network namespace of its own (its end of a veth pair set down: etcd, its peers and its ranks' collectives cut alike) stops its ranks by itself within the TTL, before the others take it as lost; back, it takes its rank again, and a write it made under the plan before is refused as stale; the job ends as uninterrupted" {
    local ns=ckpt$$p host=v$$h inner=v$$p net=10.78.$((RANDOM % 250)) port cut_at killed_at lost_at
    ip netns add "$ns" 2>/dev/null || skip "cannot make network namespaces here (needs root or CAP_NET_ADMIN): the tests below cut a node off through a proxy instead"
    NETNS=$ns
    ip link add "$host" type veth peer name "$inner" && ip link set "$inner" netns "$ns" &&
        ip addr add "$net.1/24" dev "$host" && ip -n "$ns" addr add "$net.2/24" dev "$inner" &&
        ip link set "$host" up && ip -n "$ns" link set "$inner" up && ip -n "$ns" link set lo up || return 1
    # One etcd at the host's end of the pair: nodes a and b reach it there, and take replicas and rank 0's
    # rendezvous at that address; node c reaches it, and them, across the pair.
    etcd_down
    port=$((20000 + RANDOM % 10000))
    etcd --name p --data-dir "$D/etcd.p" --listen-client-urls "http://$net.1:$port" \
        --advertise-client-urls "http://$net.1:$port" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" --initial-cluster "p=http://127.0.0.1:$((port + 1))" \
        --heartbeat-interval 50 --election-timeout 500 >"$D/etcd.log.p" 2>&1 &
    echo $! >"$D/etcd.pid.p"
    disown
    ENDPOINTS=$net.1:$port
    for _ in $(seq 100); do etcdctl --endpoints "$ENDPOINTS" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
    ARGS="--iters 10000 --hidden 16 --layers 2 --batch 30" AGENT_TIMEOUT=300
    plain 3
    # Node a leads (it is started first, the others once it does): its log says who joined from where.
    CKPT_LOG=debug start a 3 0
    for _ in $(seq 100); do grep -q "^ckpt-resume: this node (0) leads the job" "$D/err.a" && break; sleep 0.05; done
    grep -q "^ckpt-resume: this node (0) leads the job" "$D/err.a" || { show; return 1; }
    start b 3 1
    IN_NS=$ns start c 3 2
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    ip -n "$ns" link set "$inner" down
    cut_at=$(date +%s.%N)
    for _ in $(seq 400); do grep -q "ranks (process group [0-9]*) are killed at once" "$D/err.c" && break; sleep 0.02; done
    killed_at=$(date +%s.%N)
    grep -q "^ckpt-resume: error: this node's etcd lease lapsed: its ranks (process group [0-9]*) are killed at once$" \
        "$D/err.c" || { show; return 1; }
    echo "the ranks killed $(awk -v a="$killed_at" -v b="$cut_at" 'BEGIN { print a - b }') s after the cut"
    awk -v a="$killed_at" -v b="$cut_at" -v ttl="$CKPT_NODE_TIMEOUT" 'BEGIN { exit !(a - b < ttl) }' || { show; return 1; }
    for _ in $(seq 600); do grep -q "node 2 is lost" "$D/err.a" && break; sleep 0.02; done
    lost_at=$(date +%s.%N)
    grep -q "node 2 is lost" "$D/err.a" || { show; return 1; }
    echo "node 2 taken as lost $(awk -v a="$lost_at" -v b="$killed_at" 'BEGIN { print a - b }') s after its ranks were killed"
    awk -v a="$lost_at" -v b="$killed_at" 'BEGIN { exit !(a - b > 1) }' || { show; return 1; }
    ip -n "$ns" link set "$inner" up
    for _ in $(seq 300); do grep -q "back in the job" "$D/err.c" && break; sleep 0.1; done
    grep -q "^ckpt-resume: this node reaches etcd again: it is back in the job as node 2$" "$D/err.c" || { show; return 1; }
    # A write node c made under the plan before the partition, arriving now (as a stalled transfer would):
    # node b acts under the restore's plan, and refuses it, naming both epochs.
    local launch restore addr out=
    for _ in $(seq 600); do grep -q "^ckpt-resume: the rank restored iteration" "$D/err.b" && break; sleep 0.05; done
    launch=$(sed -n 's/^ckpt-resume: the launch decided at etcd revision \([0-9]*\)$/\1/p' "$D/err.a" | head -n 1)
    restore=$(sed -n 's/^ckpt-resume: the restore decided at etcd revision \([0-9]*\)$/\1/p' "$D/err.a" | tail -n 1)
    addr=$(sed -n 's/.*node 1 joined (.* replicas at \(.*\))$/\1/p' "$D/err.a" | tail -n 1)
    [ -n "$launch" ] && [ -n "$restore" ] && [ "$restore" -gt "$launch" ] && [ -n "$addr" ] || { show; return 1; }
    for _ in $(seq 50); do
        cp "$D/arena.c/$(id -u)-$CKPT_JOB/rank2/slot0" "$D/late" 2>/dev/null || { sleep 0.1; continue; }
        out=$(ip netns exec "$ns" "$BUILD/bin/ckpt-replica" send --to "$addr" --image "$D/late" --epoch "$launch" 2>&1) || true
        [[ $out == *"stale epoch"* ]] && break
        sleep 0.1
    done
    [[ $out == *"a stale epoch: the offer is of epoch $launch, this node acts under epoch $restore"* ]] ||
        { echo "$out"; show; return 1; }
    wait_rc a b c || { show; return 1; }
    for t in a b c; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
    # Node c's traffic crossed the pair: it joined from the namespace's address.
    grep -q "node 2 joined (.* replicas at $net.2:[0-9]*)" "$D/err.a" || { show; return 1; }
}

@test "a node cut off from etcd (a proxy the test cuts) stops its ranks by itself, within the TTL, and says so; back, it takes its rank again; the job ends as uninterrupted" {
    cut_off close
}

@test "a node whose packets to etcd are lost (the proxy drops them, its requests hang) has its ranks killed by its lease's deadline within the TTL; back, it takes its rank again; the job ends as uninterrupted" {
    cut_off drop
}

@test "the leader's agent killed during an agreement (it has planned the restart, the nodes have not launched): another leads, as uninterrupted" {
    plain 3
    local t leader lead victim
    for t in a b c; do start $t 3; done
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    leader=$(etcdctl --endpoints "$ENDPOINTS" get "/ckpt/$CKPT_JOB/leader" --print-value-only)
    lead=$(tag_of "$leader" "$CKPT_JOB") || { show; return 1; }
    for t in a b c; do [ "$t" != "$lead" ] && { victim=$t; break; }; done
    # A node lost: the leader gathers the nodes and plans; then it dies, its machine's memory kept.
    pkill -KILL -s "$(cat "$D/sid.$victim")"
    rm -rf "$D/arena.$victim"
    start new 3
    for _ in $(seq 3000); do grep -q "^ckpt-resume: restarting from iteration" "$D/err.$lead" && break; sleep 0.01; done
    grep -q "^ckpt-resume: restarting from iteration" "$D/err.$lead" || { show; return 1; }
    pkill -KILL -s "$(cat "$D/sid.$lead")"
    ARENA_OF=$lead start again 3
    local others=()
    for t in a b c; do [ "$t" = "$victim" ] || [ "$t" = "$lead" ] || others+=("$t"); done
    wait_rc "${others[@]}" new again || { show; return 1; }
    for t in "${others[@]}" new again; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    leaders_elected_twice || { show; return 1; }
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
}

# frozen_and_fenced follower|leader: 3 nodes, one of them frozen (SIGSTOP: it cannot fence itself) and its
# machine gone for good; CKPT_FENCE_CMD fails once, then kills the frozen node's session. The job restarts
# only after the fence, with a replacement, as uninterrupted.
frozen_and_fenced() {
    plain 3
    export CKPT_FENCE_CMD='echo "$CKPT_FENCE_NODE $CKPT_FENCE_ADDR $CKPT_JOB" >>"$FENCE_DIR/fenced"
        [ -e "$FENCE_DIR/tried" ] || { touch "$FENCE_DIR/tried"; exit 1; }
        pkill -KILL -s "$(cat "$FENCE_DIR/sid.$(cat "$FENCE_DIR/tag.$CKPT_FENCE_NODE")")"'
    export FENCE_DIR=$D
    local t leader lead victim rank fencer
    for t in a b c; do start $t 3; done
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    leader=$(etcdctl --endpoints "$ENDPOINTS" get "/ckpt/$CKPT_JOB/leader" --print-value-only)
    lead=$(tag_of "$leader" "$CKPT_JOB") || { show; return 1; }
    if [ "$1" = leader ]; then victim=$lead; else
        for t in a b c; do [ "$t" != "$lead" ] && { victim=$t; break; }; done
    fi
    for rank in 0 1 2; do [ "$(tag_of $rank "$CKPT_JOB")" = "$victim" ] && echo "$victim" >"$D/tag.$rank"; done
    pkill -STOP -s "$(cat "$D/sid.$victim")"
    rm -rf "$D/arena.$victim" # its machine is gone for good
    start new 3
    local others=()
    for t in a b c; do [ "$t" = "$victim" ] || others+=("$t"); done
    wait_rc "${others[@]}" new || { show; return 1; }
    for t in "${others[@]}" new; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
    # Fenced twice (a failure, then the kill), given the node rank, its address and the job.
    rank=$(ls "$D"/tag.* | sed 's/.*tag\.//')
    [ "$(sort -u "$D/fenced")" = "$rank 127.0.0.1 $CKPT_JOB" ] && [ "$(wc -l <"$D/fenced")" -eq 2 ] || { cat "$D/fenced" || true; show; return 1; }
    fencer=$(grep -l "^ckpt-resume: node $rank fenced by CKPT_FENCE_CMD" "$D"/err.*) || { show; return 1; }
    grep -q "^ckpt-resume: warning: CKPT_FENCE_CMD against node $rank failed (exit status 1): trying again$" "$fencer" ||
        { show; return 1; }
    # The restart came after the fence, and the frozen node's processes are gone.
    sed -n "/node $rank fenced by CKPT_FENCE_CMD/,\$p" "$fencer" | grep -q "^ckpt-resume: restarting from iteration" ||
        { show; return 1; }
    ! pgrep -s "$(cat "$D/sid.$victim")" >/dev/null || { echo "the frozen node still has processes"; return 1; }
}

@test "a node frozen (SIGSTOP: it cannot fence itself) is fenced by CKPT_FENCE_CMD, tried again until it succeeds, before the job restarts; a replacement takes its place, as uninterrupted" {
    frozen_and_fenced follower
}

# bats test_tags=covered
@test "the leading node frozen: the agent that leads next fences it before the job restarts, as uninterrupted" {
    frozen_and_fenced leader
    grep -q "^ckpt-resume: node [0-9] led the job until its lease ended: it is fenced before the job goes on$" "$D"/err.* ||
        { show; return 1; }
}
