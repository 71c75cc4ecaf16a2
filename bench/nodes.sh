# The benchmarks of several nodes, sourced by bench/run (row, skip, say,
# stamp and OUT are its): recovery of a lost node (bench_nodes) and the
# control plane's time to a restart decision (bench_control).  The agents
# meet through a one-member etcd on loopback (bench_etcd).

# bench_etcd DIR: starts an etcd with its data in DIR; sets BENCH_ETCD
# (its address) and BENCH_ETCD_PID.  Returns 1 when etcd is missing or
# does not come up.
bench_etcd() {
    local port
    command -v etcd >/dev/null && command -v etcdctl >/dev/null || return 1
    port=$((20000 + RANDOM % 10000))
    etcd --name b --data-dir "$1/etcd" --listen-client-urls "http://127.0.0.1:$port" \
        --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" --initial-cluster "b=http://127.0.0.1:$((port + 1))" \
        >"$1/etcd.log" 2>&1 &
    BENCH_ETCD_PID=$!
    disown # not a job that `wait` for the agents would wait for
    BENCH_ETCD=127.0.0.1:$port
    for _ in $(seq 100); do ETCDCTL_API=3 etcdctl --endpoints "$BENCH_ETCD" endpoint health >/dev/null 2>&1 && return 0; sleep 0.1; done
    return 1
}
bench_etcd_stop() {
    kill "$BENCH_ETCD_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$BENCH_ETCD_PID" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$BENCH_ETCD_PID" 2>/dev/null
}

# Recovery of a lost node, from a peer's memory against from disk: two nodes
# of one rank each (statewriter, 256 MiB of state, a snapshot every
# iteration), each with its own arena and disk directory.  Once an
# iteration is durable (replicated) and persisted, node 1 is killed and its
# memory wiped, and a new node 1 started: timed from its claim of node
# rank 1 (once the lost agent's lease ended: up to CKPT_NODE_TIMEOUT, 5 s
# here, before it) to its rank running again, restored from node 0's copy.
# Then the same with both nodes lost, so that only the disks hold the
# snapshots.  Each job is one of its own in etcd (NODES_JOB).
node_up() { # I DIR TAG: starts node I of 2 in a session of its own
    local i=$1 dir=$2 tag=$3
    CKPT_ARENA_DIR=$dir/arena.$i CKPT_PERSIST_DIRS=$dir/disk.$i CKPT_LOG=debug CKPT_BOUNDARY=every:1 \
        CKPT_JOB=$NODES_JOB CKPT_NODE_TIMEOUT=5 CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=1 setsid bash -c 'echo $$ >"$1"; shift; "$@"' _ \
        "$dir/sid.$i" "$BUILD/bin/ckpt-resume" --coord "etcd://$BENCH_ETCD" --nnodes 2 --node-rank "$i" --nproc 1 \
        -- "$BUILD/tests/progs/statewriter" --iters 80 --mib 256 2>&1 >/dev/null </dev/null | stamp >"$dir/log.$i$tag" &
    sleep 0.2
}
node_down() { pkill -KILL -s "$(cat "$1/sid.$2")" 2>/dev/null; sleep 0.3; rm -rf "$1/arena.$2"; }
# Waits up to 60 s for a line matching $2 in $1.
wait_line() { local _; for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# Seconds from the node's claim of its rank in log $1 to its first line matching $2.
span() { awk -v pat="$2" '/node [0-9]* of [0-9]* in job/ && !t0 { t0 = $1 } t0 && $0 ~ pat { printf "%.2f", $1 - t0; exit }' "$1"; }
bench_nodes() {
    local dir=$OUT/nodes peer disk
    say "recovery of a lost node (256 MiB of state): from a peer's memory, from disk"
    rm -rf "$dir" && mkdir -p "$dir/disk.0" "$dir/disk.1"
    if ! bench_etcd "$dir"; then
        skip "lost node back, from peer memory" "s" "no etcd (scripts/setup-deps installs it)"
        skip "lost node back, from disk" "s" "no etcd (scripts/setup-deps installs it)"
        return
    fi
    NODES_JOB=benchnodes
    node_up 0 "$dir" "" && node_up 1 "$dir" ""
    if wait_line "$dir/log.0" "held by every node and its replicas" && wait_line "$dir/log.1" "persisted iteration"; then
        node_down "$dir" 1
        node_up 1 "$dir" .peer
        wait_line "$dir/log.1.peer" "restored iteration" && peer=$(span "$dir/log.1.peer" "restored iteration")
    fi
    wait
    NODES_JOB=benchnodes-disk
    rm -rf "$dir/arena.0" "$dir/arena.1"
    node_up 0 "$dir" .d && node_up 1 "$dir" .d
    if wait_line "$dir/log.0.d" "held by every node and its replicas" && wait_line "$dir/log.1.d" "persisted iteration"; then
        node_down "$dir" 0 && node_down "$dir" 1
        node_up 0 "$dir" .disk && node_up 1 "$dir" .disk
        wait_line "$dir/log.1.disk" "restored iteration" && disk=$(span "$dir/log.1.disk" "restored iteration")
        grep -q "from disk" "$dir/log.1.disk" || disk=""
    fi
    wait
    bench_etcd_stop
    if [ -n "${peer:-}" ]; then
        row "lost node back, from peer memory" "$peer" "s"
    else
        skip "lost node back, from peer memory" "s" "the job did not recover as expected (see $dir)"
    fi
    if [ -n "${disk:-}" ]; then
        row "lost node back, from disk" "$disk" "s" "lost node back, from peer memory"
    else
        skip "lost node back, from disk" "s" "the job did not recover from disk as expected (see $dir)"
    fi
    [ -n "${peer:-}" ] && [ -n "${disk:-}" ] && rm -rf "$dir"
}

# The control plane: N agents (3, 8, 32; BENCH_ETCD_NODES) of one rank
# each, the rank a trivial program (sleep), a one-member etcd on loopback,
# CKPT_NODE_TIMEOUT=2.  One agent is killed and a replacement started at
# once: timed from the kill to the leader's stop order (detection: bounded
# by CKPT_NODE_TIMEOUT, the lease's), and from the replacement's join (its
# node rank claimed, once the lost agent's lease ended) to the leader's
# restart decision (the agreement over every node's inventory).
etcd_agents() { # DIR N TAG: N agents in sessions of their own
    local dir=$1 n=$2 tag=$3 i
    for ((i = 0; i < n; i++)); do etcd_agents_one "$dir" "$n" "$tag" "$i"; done
}
bench_control() {
    local dir=$OUT/control n t_kill t_stop t_join t_plan victim failed=0
    say "the control plane: a node lost and replaced, to the restart decision"
    rm -rf "$dir" && mkdir -p "$dir"
    bench_etcd "$dir" || { skip "control plane" "s" "no etcd (scripts/setup-deps installs it)"; return; }
    for n in ${BENCH_ETCD_NODES:-3 8 32}; do
        local tag=n$n
        etcd_agents "$dir" "$n" "$tag"
        for _ in $(seq 600); do [ "$(cat "$dir"/log.$tag.* 2>/dev/null | grep -c 'started 1 rank')" -ge "$n" ] && break; sleep 0.1; done
        # A node that does not lead: a leader's loss is an election first.
        victim=$((n - 1))
        while [ $victim -gt 0 ] && grep -q 'leads the job' "$dir/log.$tag.$victim"; do victim=$((victim - 1)); done
        t_kill=$EPOCHREALTIME
        pkill -KILL -s "$(cat "$dir/sid.$tag.$victim")"
        rm -rf "$dir/arena.$tag.$victim"
        local t_new=$EPOCHREALTIME
        etcd_agents_one "$dir" "$n" "$tag" new
        for _ in $(seq 900); do grep -q 'restarting from' "$dir"/log.$tag.* 2>/dev/null && break; sleep 0.1; done
        t_stop=$(awk '/stopping the job on every node/ { print $1; exit }' "$dir"/log.$tag.* | sort -n | head -n 1)
        t_join=$(awk '/node [0-9]* of [0-9]* in job/ { print $1; exit }' "$dir/log.$tag.new")
        t_plan=$(awk '/restarting from/ { print $1; exit }' "$dir"/log.$tag.* | sort -n | head -n 1)
        for f in "$dir"/sid.$tag.*; do pkill -KILL -s "$(cat "$f")" 2>/dev/null; done
        if [ -z "$t_stop" ] || [ -z "$t_plan" ]; then
            skip "node lost to stop, $n nodes" "s" "no decision (see $dir/log.$tag.*)"
            failed=1
            continue
        fi
        row "node lost to stop, $n nodes" "$(awk -v a="$t_kill" -v b="$t_stop" 'BEGIN { printf "%.3f", b - a }')" "s"
        row "replacement to decision, $n nodes" "$(awk -v a="$t_new" -v b="$t_plan" 'BEGIN { printf "%.3f", b - a }')" "s"
        [ -n "$t_join" ] && row "claim to decision, $n nodes" \
            "$(awk -v a="$t_join" -v b="$t_plan" 'BEGIN { printf "%.3f", (b > a ? b - a : 0) }')" "s"
        sleep 1
    done
    bench_etcd_stop
    [ $failed = 1 ] || rm -rf "$dir" # a skipped row names the logs to read
}
etcd_agents_one() { # DIR N TAG NAME: one more agent, NAME, that claims whichever node rank is free
    local dir=$1 n=$2 tag=$3 name=$4
    CKPT_ARENA_DIR=$dir/arena.$tag.$name CKPT_JOB=benchcp$tag CKPT_NODE_TIMEOUT=2 CKPT_RESTART_BACKOFF=0 \
        CKPT_REPLICAS=1 setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$dir/sid.$tag.$name" \
        "$BUILD/bin/ckpt-resume" --coord "etcd://$BENCH_ETCD" --nnodes "$n" --nproc 1 -- sleep 600 \
        2>&1 </dev/null | stamp >"$dir/log.$tag.$name" &
}

# A lost node's ranks back at several job ages (BENCH_SPARE_ITERS: 1,000
# and 10,000 iterations): two nodes of one rank each with standbys
# (CKPT_STANDBY=1), the trainer with a tiny model (host work dominates, as
# a framework's dispatch does), node 1 killed with its memory once the job
# is past iteration N.  Back by a spare with standbys that waited beside
# the job (its standbys followed node 1's rank from the copies it took),
# against a replacement started after the loss (no standbys of its own:
# every node by the cold path, replaying from the start).  Timed from the
# agent's claim of node rank 1 (once the lost agent's lease ended) to its
# rank restored.
spare_agent() { # DIR TAG ITERS ARGS...: an agent of 2 nodes in a session of its own
    local dir=$1 tag=$2 iters=$3
    shift 3
    CKPT_ARENA_DIR=$dir/arena.$tag CKPT_STANDBY=1 CKPT_JOB=$SPARE_JOB CKPT_NODE_TIMEOUT=2 CKPT_RESTART_BACKOFF=0 \
        CKPT_KILL_GRACE=1 CKPT_EVERY=10 setsid bash -c 'echo $$ >"$1"; o=$2; shift 2; "$@" >"$o"' _ \
        "$dir/sid.$tag" "$dir/out.$tag" "$BUILD/bin/ckpt-resume" --coord "etcd://$BENCH_ETCD" --nnodes 2 "$@" --nproc 1 \
        -- "$BUILD/examples/mlp-train" --iters "$iters" --hidden 32 --layers 2 2>&1 </dev/null | stamp >"$dir/log.$tag" &
    sleep 0.2
}
bench_spare() {
    local dir=$OUT/spare n mode new t failed=0
    say "a lost node's ranks back at several job ages: by a spare's standbys, by a replacement's cold path"
    rm -rf "$dir" && mkdir -p "$dir"
    if ! bench_etcd "$dir"; then
        skip "lost node back, spare" "s" "no etcd (scripts/setup-deps installs it)"
        return
    fi
    for n in ${BENCH_SPARE_ITERS:-1000 10000}; do
        for mode in spare cold; do
            SPARE_JOB=benchspare-$mode-$n
            [ $mode = spare ] && spare_agent "$dir" "s.$n" $((n + 300)) --spare
            spare_agent "$dir" "0.$mode.$n" $((n + 300)) --node-rank 0
            spare_agent "$dir" "1.$mode.$n" $((n + 300)) --node-rank 1
            for _ in $(seq 1200); do grep -q "^iter $n " "$dir/out.0.$mode.$n" 2>/dev/null && break; sleep 0.05; done
            pkill -KILL -s "$(cat "$dir/sid.1.$mode.$n")" 2>/dev/null
            rm -rf "$dir/arena.1.$mode.$n"
            new=s.$n
            if [ $mode = cold ]; then
                new=r.$n
                spare_agent "$dir" "$new" $((n + 300))
            fi
            t=""
            wait_line "$dir/log.$new" "restored iteration" &&
                t=$(awk '/node [0-9]* of [0-9]* in job/ && !t0 { t0 = $1 } t0 && /restored iteration/ { printf "%.3f", $1 - t0; exit }' "$dir/log.$new")
            [ $mode = cold ] || grep -q "the standby took over at iteration" "$dir/log.$new" || t=""
            wait
            if [ -z "$t" ]; then
                skip "lost node at $n its, $mode" "s" "the job did not recover as expected (see $dir/log.$new)"
                failed=1
            elif [ $mode = spare ]; then
                row "lost node at $n its, spare" "$t" "s"
            else
                row "lost node at $n its, cold" "$t" "s" "lost node at $n its, spare"
            fi
        done
    done
    bench_etcd_stop
    [ $failed = 1 ] || rm -rf "$dir"
}
