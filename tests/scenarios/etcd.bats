#!/usr/bin/env bats
# ckpt-resume on several nodes meeting through etcd (--coord etcd://...):
# a three-member etcd cluster the tests start on loopback ports, nodes as
# agents with arenas of their own on this machine.  No node is special:
# the node whose agent leads can be lost like any other, a replacement
# machine takes the lost node's rank without being told it, and the job
# ends exactly as an uninterrupted run; an etcd member lost goes unnoticed;
# two jobs share one etcd, kept apart by their names; an etcd that cannot
# be reached, or refuses the credentials, stops the job before it trains.

load output

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    command -v etcd >/dev/null && command -v etcdctl >/dev/null || { echo "etcd is not installed (scripts/setup-deps)" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-etcd-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_LIB CKPT_KEEP_ARENA LD_PRELOAD MASTER_ADDR MASTER_PORT CKPT_COORD \
        CKPT_NNODES CKPT_NODE_RANK CKPT_PERSIST_DIRS CKPT_ETCD_USER CKPT_ETCD_PASSWORD_FILE CKPT_ETCD_CA
    export CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=5 CKPT_NODE_TIMEOUT=3 CKPT_JOB=etcdjob
    export ETCDCTL_API=3
    ARGS="--iters 3000 --hidden 16 --layers 2 --batch 30"
    etcd_up 3
}

teardown() {
    for f in "$D"/sid.*; do [ -f "$f" ] && pkill -KILL -s "$(cat "$f")" 2>/dev/null; done
    for i in 0 1 2; do [ -f "$D/etcd.pid.$i" ] && kill -KILL "$(cat "$D/etcd.pid.$i")" 2>/dev/null; done
    [ -n "${KEEP_D:-}" ] && cp -r "$D" "$KEEP_D"; rm -rf "$D"
}

# etcd_up N: an etcd cluster of N members on free loopback ports; ENDPOINTS lists their client addresses.
etcd_up() {
    local n=$1 i base cluster=""
    base=$((20000 + RANDOM % 10000))
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
}

# start TAG N [NODE_RANK]: an agent of N nodes x 1 rank in a session of its own, arena $D/arena.TAG
# (or $D/arena.$ARENA_OF: the machine of an agent that died); out/err/rc in $D/{out,err,rc}.TAG.
start() {
    local tag=$1 n=$2 rank=()
    [ -n "${3:-}" ] && rank=(--node-rank "$3")
    CKPT_ARENA_DIR=$D/arena.${ARENA_OF:-$tag} setsid bash -c 'echo $$ >"$1"; rc=$2; shift 2; timeout -k 5 150 "$@"; echo $? >"$rc"' \
        _ "$D/sid.$tag" "$D/rc.$tag" "$CKPT" --coord "etcd://$ENDPOINTS" --nnodes "$n" "${rank[@]}" --nproc 1 -- \
        "$TRAIN" $ARGS >"$D/out.$tag" 2>"$D/err.$tag" </dev/null &
    for _ in $(seq 100); do [ -s "$D/sid.$tag" ] && return 0; sleep 0.01; done
}

wait_rc() { # TAG...: waits for each agent's exit status
    local t
    for t in "$@"; do
        for _ in $(seq 1500); do [ -s "$D/rc.$t" ] && break; sleep 0.1; done
        [ -s "$D/rc.$t" ] || { echo "node $t never ended" >&2; return 1; }
    done
}

# The tag of the agent that is node rank $1 of job $2.
tag_of() {
    local f
    for f in "$D"/err.*; do grep -q "^ckpt-resume: node $1 of [0-9]* in job $2, through etcd" "$f" && { echo "${f##*/err.}"; return 0; }; done
    return 1
}

digests() { grep -h '^digest ' "$@" | sort -u; }
# The job was led under two epochs at least: the first leader's, and another agent's after it was lost
# (the survivors' or the replacement's: whichever wins the election).
leaders_elected_twice() {
    [ "$(sed -n 's/^ckpt-resume: this node ([0-9]*) leads the job (etcd epoch \([0-9]*\))$/\1/p' "$D"/err.* | sort -u | wc -l)" -ge 2 ]
}
show() { for f in "$D"/err.*; do echo "== $f"; grep -v '^libckpt' "$f" | tail -n 25; done; }

plain() { timeout -k 5 120 "$CKPT" --nproc "$1" -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null; }

@test "3 nodes through a 3-member etcd: the leader's node lost with its memory, a replacement that names no rank takes its place, a new leader, recovered from a peer's memory, as uninterrupted" {
    plain 3
    local t leader victim
    for t in a b c; do start $t 3; done
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    leader=$(etcdctl --endpoints "$ENDPOINTS" get "/ckpt/$CKPT_JOB/leader" --print-value-only)
    [ -n "$leader" ] || { show; return 1; }
    victim=$(tag_of "$leader" "$CKPT_JOB") || { show; return 1; }
    pkill -KILL -s "$(cat "$D/sid.$victim")"
    rm -rf "$D/arena.$victim"
    start new 3
    local others=()
    for t in a b c new; do [ "$t" = "$victim" ] || others+=("$t"); done
    wait_rc "${others[@]}" || { show; return 1; }
    for t in "${others[@]}"; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    # The replacement took the lost rank; another node led the recovery.
    grep -q "^ckpt-resume: node $leader of 3 in job $CKPT_JOB, through etcd" "$D/err.new" || { show; return 1; }
    grep -q "^ckpt-resume: rank $leader restores iteration [0-9]* from a peer's copy" "$D/err.new" || { show; return 1; }
    leaders_elected_twice || { show; return 1; }
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
}

@test "one etcd member lost while the job runs: the job does not notice; two jobs on one etcd are kept apart by their names" {
    plain 2
    local t
    for t in a b; do CKPT_JOB=one start $t 2; done
    for t in c d; do CKPT_JOB=two start $t 2; done
    for _ in $(seq 300); do grep -q "^iter 200 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    kill -KILL "$(cat "$D/etcd.pid.0")"
    wait_rc a b c d || { show; return 1; }
    for t in a b c d; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    ! grep -q "restarting\|was lost\|is lost\|lost the coordinator" "$D"/err.*
    [ "$(digests "$D/out.a" "$D/out.b")" = "$(digests "$D/plain")" ]
    [ "$(digests "$D/out.c" "$D/out.d")" = "$(digests "$D/plain")" ]
    grep -q "^ckpt-resume: done exit=0 restarts=0$" "$D/err.a"
}

@test "an etcd nobody answers at, a wrong password: a clear error naming it, before any rank starts" {
    local port=$((33000 + RANDOM % 1000))
    CKPT_ARENA_DIR=$D/arena.x run -2 --separate-stderr timeout -k 5 60 "$CKPT" --coord "etcd://127.0.0.1:$port" \
        --nnodes 2 --nproc 1 -- "$TRAIN" $ARGS
    [[ $stderr == *"ckpt-resume: error: cannot join the job through etcd: etcd at http://127.0.0.1:$port: "*"(CKPT_COORD)"* ]] ||
        { echo "$stderr"; return 1; }
    [[ $stderr != *"started 1 rank"* ]]
    etcdctl --endpoints "$ENDPOINTS" user add root --new-user-password=s3cret --interactive=false >/dev/null
    etcdctl --endpoints "$ENDPOINTS" auth enable >/dev/null
    echo wrong >"$D/pw"
    CKPT_ETCD_USER=root CKPT_ETCD_PASSWORD_FILE=$D/pw CKPT_ARENA_DIR=$D/arena.x run -2 --separate-stderr \
        timeout -k 5 60 "$CKPT" --coord "etcd://$ENDPOINTS" --nnodes 2 --nproc 1 -- "$TRAIN" $ARGS
    [[ $stderr == *"cannot join the job through etcd: "*"authentication failed"* ]] || { echo "$stderr"; return 1; }
    [[ $stderr != *"started 1 rank"* ]]
    # The right one: both nodes run through the authenticated etcd.
    echo s3cret >"$D/pw"
    plain 2
    export CKPT_ETCD_USER=root CKPT_ETCD_PASSWORD_FILE=$D/pw
    start a 2
    start b 2
    wait_rc a b || { show; return 1; }
    [ "$(cat "$D/rc.a")" = 0 ] && [ "$(cat "$D/rc.b")" = 0 ] || { show; return 1; }
    [ "$(digests "$D/out.a" "$D/out.b")" = "$(digests "$D/plain")" ]
}

# cert NAME CA USAGE: a key and a certificate for 127.0.0.1 signed by CA ($D/tls/CA.pem), in $D/tls/NAME.{key,pem}.
cert() {
    openssl req -newkey rsa:2048 -nodes -keyout "$D/tls/$1.key" -out "$D/tls/$1.csr" -subj "/CN=$1" 2>/dev/null &&
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n' "$3" >"$D/tls/$1.ext" &&
        openssl x509 -req -in "$D/tls/$1.csr" -CA "$D/tls/$2.pem" -CAkey "$D/tls/$2.key" -CAcreateserial \
            -out "$D/tls/$1.pem" -days 2 -extfile "$D/tls/$1.ext" 2>/dev/null
}

@test "etcd over TLS with client certificates (CKPT_ETCD_CA, CERT, KEY): the job runs through it; no CA, or a certificate another CA signed: a clear error before any rank starts" {
    command -v openssl >/dev/null || { echo "openssl is not installed (scripts/setup-deps)" >&2; return 1; }
    mkdir -p "$D/tls"
    local ca other port=$((34000 + RANDOM % 1000))
    for ca in ca rogue-ca; do
        openssl req -x509 -newkey rsa:2048 -nodes -keyout "$D/tls/$ca.key" -out "$D/tls/$ca.pem" -days 2 -subj "/CN=$ca" 2>/dev/null
    done
    cert server ca serverAuth,clientAuth && cert client ca clientAuth && cert rogue rogue-ca clientAuth
    kill "$(cat "$D/etcd.pid.1")" "$(cat "$D/etcd.pid.2")" # room on the two cores: this test uses its own member
    etcd --name t --data-dir "$D/etcd.tls" --listen-client-urls "https://127.0.0.1:$port" \
        --advertise-client-urls "https://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" --initial-cluster "t=http://127.0.0.1:$((port + 1))" \
        --cert-file "$D/tls/server.pem" --key-file "$D/tls/server.key" --trusted-ca-file "$D/tls/ca.pem" \
        --client-cert-auth >"$D/etcd.log.tls" 2>&1 &
    echo $! >"$D/etcd.pid.2" # for teardown
    for _ in $(seq 100); do
        etcdctl --endpoints "127.0.0.1:$port" --cacert "$D/tls/ca.pem" --cert "$D/tls/client.pem" --key "$D/tls/client.key" \
            endpoint health >/dev/null 2>&1 && break
        sleep 0.1
    done
    # No CA: plain http to a TLS member.
    CKPT_ARENA_DIR=$D/arena.x run -2 --separate-stderr timeout -k 5 60 "$CKPT" --coord "etcd://127.0.0.1:$port" \
        --nnodes 2 --nproc 1 -- "$TRAIN" $ARGS
    [[ $stderr == *"ckpt-resume: error: cannot join the job through etcd: etcd at http://127.0.0.1:$port: "* ]] &&
        [[ $stderr != *"started 1 rank"* ]] || { echo "$stderr"; return 1; }
    # A client certificate the members' CA did not sign.
    CKPT_ETCD_CA=$D/tls/ca.pem CKPT_ETCD_CERT=$D/tls/rogue.pem CKPT_ETCD_KEY=$D/tls/rogue.key CKPT_ARENA_DIR=$D/arena.x \
        run -2 --separate-stderr timeout -k 5 60 "$CKPT" --coord "etcd://127.0.0.1:$port" --nnodes 2 --nproc 1 -- "$TRAIN" $ARGS
    [[ $stderr == *"ckpt-resume: error: cannot join the job through etcd: etcd at https://127.0.0.1:$port: "* ]] &&
        [[ $stderr != *"started 1 rank"* ]] || { echo "$stderr"; return 1; }
    # The right ones: both nodes run through it.
    plain 2
    export CKPT_ETCD_CA=$D/tls/ca.pem CKPT_ETCD_CERT=$D/tls/client.pem CKPT_ETCD_KEY=$D/tls/client.key
    ENDPOINTS=127.0.0.1:$port start a 2
    ENDPOINTS=127.0.0.1:$port start b 2
    wait_rc a b || { show; return 1; }
    [ "$(cat "$D/rc.a")" = 0 ] && [ "$(cat "$D/rc.b")" = 0 ] || { show; return 1; }
    [ "$(digests "$D/out.a" "$D/out.b")" = "$(digests "$D/plain")" ] || { show; return 1; }
    grep -q "^ckpt-resume: node [01] of 2 in job $CKPT_JOB, through etcd at 127.0.0.1:$port$" "$D/err.a" || { show; return 1; }
}

@test "a node cut off from etcd (a proxy the test cuts) stops its ranks by itself and says so; back, it takes its rank again; the job ends as uninterrupted" {
    plain 3
    local proxy_port=$((30000 + RANDOM % 2000)) first=${ENDPOINTS%%,*}
    python3 "$BATS_TEST_DIRNAME/tcpcut.py" "$proxy_port" "$first" >"$D/proxy.log" 2>&1 &
    local proxy=$!
    for _ in $(seq 50); do grep -q listening "$D/proxy.log" && break; sleep 0.1; done
    start a 3 0
    start b 3 1
    ENDPOINTS=127.0.0.1:$proxy_port start c 3 2
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    kill -USR1 $proxy
    for _ in $(seq 100); do grep -q "this node stops its ranks" "$D/err.c" && break; sleep 0.1; done
    grep -q "^ckpt-resume: error: this node cannot renew its etcd lease: this node stops its ranks before the others restart without it$" "$D/err.c" ||
        { kill $proxy; show; return 1; }
    sleep 2
    # Its member saw the coordinator go, and stopped the rank (member.c).
    grep -q "^ckpt-resume: warning: lost the coordinator" "$D/err.c" || { kill $proxy; show; return 1; }
    kill -USR2 $proxy
    for _ in $(seq 100); do grep -q "back in the job" "$D/err.c" && break; sleep 0.1; done
    grep -q "^ckpt-resume: this node reaches etcd again: it is back in the job as node 2$" "$D/err.c" ||
        { kill $proxy; show; return 1; }
    # Its agent joins the job again: the job ends with all three, as uninterrupted.
    wait_rc a b c || { kill $proxy; show; return 1; }
    kill $proxy
    for t in a b c; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
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

@test "a node frozen (SIGSTOP: it cannot fence itself) is fenced by CKPT_FENCE_CMD, tried again until it succeeds, before the job restarts; a replacement takes its place, as uninterrupted" {
    plain 3
    # The fence fails once, then kills the frozen node's session; what it was given is kept.
    export CKPT_FENCE_CMD='echo "$CKPT_FENCE_NODE $CKPT_FENCE_ADDR $CKPT_JOB" >>"$FENCE_DIR/fenced"
        [ -e "$FENCE_DIR/tried" ] || { touch "$FENCE_DIR/tried"; exit 1; }
        pkill -KILL -s "$(cat "$FENCE_DIR/sid.$(cat "$FENCE_DIR/tag.$CKPT_FENCE_NODE")")"'
    export FENCE_DIR=$D
    local t leader lead victim rank
    for t in a b c; do start $t 3; done
    for _ in $(seq 300); do grep -q "^iter 300 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    leader=$(etcdctl --endpoints "$ENDPOINTS" get "/ckpt/$CKPT_JOB/leader" --print-value-only)
    lead=$(tag_of "$leader" "$CKPT_JOB") || { show; return 1; }
    for t in a b c; do [ "$t" != "$lead" ] && { victim=$t; break; }; done
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
    [ "$(sort -u "$D/fenced")" = "$rank 127.0.0.1 $CKPT_JOB" ] && [ "$(wc -l <"$D/fenced")" -eq 2 ] || { cat "$D/fenced"; show; return 1; }
    grep -q "^ckpt-resume: warning: CKPT_FENCE_CMD against node $rank failed (exit status 1): trying again$" "$D/err.$lead" ||
        { show; return 1; }
    # The restart came after the fence, and the frozen node's processes are gone.
    sed -n "/node $rank fenced by CKPT_FENCE_CMD/,\$p" "$D/err.$lead" | grep -q "^ckpt-resume: restarting from iteration" ||
        { show; return 1; }
    ! pgrep -s "$(cat "$D/sid.$victim")" >/dev/null || { echo "the frozen node still has processes"; return 1; }
}

@test "8 nodes on loopback through etcd: one lost and replaced, as uninterrupted" {
    ARGS="--iters 1500 --hidden 16 --layers 2 --batch 32"
    plain 8
    local t tags=(a b c d e f g h) others=()
    for t in "${tags[@]}"; do start $t 8; done
    for _ in $(seq 600); do grep -q "^iter 200 " "$D"/out.* 2>/dev/null && break; sleep 0.05; done
    pkill -KILL -s "$(cat "$D/sid.e")"
    rm -rf "$D/arena.e"
    start new 8
    for t in "${tags[@]}"; do [ "$t" = e ] || others+=("$t"); done
    wait_rc "${others[@]}" new || { show; return 1; }
    for t in "${others[@]}" new; do [ "$(cat "$D/rc.$t")" = 0 ] || { show; return 1; }; done
    [ "$(digests "$D"/out.*)" = "$(digests "$D/plain")" ] || { show; return 1; }
}
