# Helpers of the etcd scenarios (etcd.bats, etcd_faults.bats): a three-member
# etcd cluster on loopback ports (etcd_cluster.bash), agents in sessions of
# their own.

load etcd_cluster

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
    etcd_down
    for ns in ${NETNS:-}; do ip netns del "$ns" 2>/dev/null; done
    [ -n "${KEEP_D:-}" ] && cp -r "$D" "$KEEP_D"; rm -rf "$D"
}

# start TAG N [NODE_RANK]: an agent of N nodes x 1 rank in a session of its own, arena $D/arena.TAG
# (or $D/arena.$ARENA_OF: the machine of an agent that died); out/err/rc in $D/{out,err,rc}.TAG.
# SPARE=1: the agent is a spare (--spare).  AGENT_TIMEOUT: seconds it may run (150).  IN_NS: the network
# namespace it runs in.
start() {
    local tag=$1 n=$2 rank=() in=()
    [ -n "${3:-}" ] && rank=(--node-rank "$3")
    [ -n "${SPARE:-}" ] && rank=(--spare)
    [ -n "${IN_NS:-}" ] && in=(ip netns exec "$IN_NS")
    CKPT_ARENA_DIR=$D/arena.${ARENA_OF:-$tag} "${in[@]}" setsid bash -c 'echo $$ >"$1"; rc=$2 limit=$3; shift 3; timeout -k 5 "$limit" "$@"; echo $? >"$rc"' \
        _ "$D/sid.$tag" "$D/rc.$tag" "${AGENT_TIMEOUT:-150}" "$CKPT" --coord "etcd://$ENDPOINTS" --nnodes "$n" "${rank[@]}" --nproc 1 -- \
        "$TRAIN" $ARGS >"$D/out.$tag" 2>"$D/err.$tag" </dev/null &
    for _ in $(seq 100); do [ -s "$D/sid.$tag" ] && return 0; sleep 0.01; done
}

wait_rc() { # TAG...: waits for each agent's exit status
    local t
    for t in "$@"; do
        for _ in $(seq $(((${AGENT_TIMEOUT:-150} + 10) * 10))); do [ -s "$D/rc.$t" ] && break; sleep 0.1; done
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
show() { show_agents 25; }

# plain N: the job on one node, without libckpt: what the job must end with.
plain() { CKPT_DISABLE=1 CKPT_ARENA_DIR=$D/arena.plain timeout -k 5 300 "$CKPT" --nproc "$1" -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null; }

# The highest iteration any rank has printed.
newest_iter() { cat "$D"/out.* 2>/dev/null | sed -n 's/^iter \([0-9]*\) .*/\1/p' | sort -n | tail -n 1; }

# cert NAME CA USAGE: a key and a certificate for 127.0.0.1 signed by CA ($D/tls/CA.pem), in $D/tls/NAME.{key,pem}.
cert() {
    openssl req -newkey rsa:2048 -nodes -keyout "$D/tls/$1.key" -out "$D/tls/$1.csr" -subj "/CN=$1" 2>/dev/null &&
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n' "$3" >"$D/tls/$1.ext" &&
        openssl x509 -req -in "$D/tls/$1.csr" -CA "$D/tls/$2.pem" -CAkey "$D/tls/$2.key" -CAcreateserial \
            -out "$D/tls/$1.pem" -days 2 -extfile "$D/tls/$1.ext" 2>/dev/null
}
