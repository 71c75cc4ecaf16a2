# An etcd cluster for a test, on free loopback ports, its files in $D.

# etcd_up N: an etcd cluster of N members on free loopback ports; ENDPOINTS lists their client addresses.
etcd_up() {
    local n=$1 i base cluster="" p
    # 2N ports in a row that nothing holds (below the ephemeral ports)
    for _ in $(seq 100); do
        base=$((20000 + RANDOM % 10000))
        for ((p = base; p < base + 2 * n; p++)); do [ -z "$(ss -Htan "sport = :$p")" ] || continue 2; done
        break
    done
    for ((i = 0; i < n; i++)); do cluster+="${cluster:+,}m$i=http://127.0.0.1:$((base + 2 * i + 1))"; done
    ENDPOINTS=""
    for ((i = 0; i < n; i++)); do
        ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:$((base + 2 * i))"
        echo "--name m$i --data-dir $D/etcd.$i --listen-client-urls http://127.0.0.1:$((base + 2 * i)) \
--advertise-client-urls http://127.0.0.1:$((base + 2 * i)) --listen-peer-urls http://127.0.0.1:$((base + 2 * i + 1)) \
--initial-advertise-peer-urls http://127.0.0.1:$((base + 2 * i + 1)) --initial-cluster $cluster \
--heartbeat-interval 50 --election-timeout 500" >"$D/etcd.args.$i"
        etcd_member $i
    done
    for _ in $(seq 100); do etcdctl --endpoints "$ENDPOINTS" endpoint health >/dev/null 2>&1 && return 0; sleep 0.1; done
    echo "etcd did not come up" >&2
    cat "$D"/etcd.log.* >&2
    return 1
}
etcd_member() { # I: (re)starts member I
    # shellcheck disable=SC2046
    etcd $(cat "$D/etcd.args.$1") >>"$D/etcd.log.$1" 2>&1 &
    echo $! >"$D/etcd.pid.$1"
    disown # killed without a word from bash
}

etcd_down() { # kills every member etcd_up started
    local f
    for f in "$D"/etcd.pid.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
    return 0
}

etcd_forget() { # every key of every job: a test's next job starts as on a new etcd
    etcdctl --endpoints "$ENDPOINTS" del --prefix /ckpt/ >/dev/null
}
