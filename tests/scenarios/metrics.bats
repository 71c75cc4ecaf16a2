#!/usr/bin/env bats
# Metrics (CKPT_METRICS_ADDR): the node agent serves Prometheus text
# exposition at /metrics while the job runs.  The page passes promtool's
# check, its counters move as the job trains, a recovery shows in it, and
# a real Prometheus server scrapes it and answers queries on it.  An
# address it cannot listen on stops the job before it starts.

load output
load torchrun

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    CKPT=$BUILD/bin/ckpt-resume
    TRAIN=$BUILD/examples/mlp-train
    [ -x "$CKPT" ] && [ -x "$TRAIN" ] || { echo "missing $CKPT or $TRAIN: build first" >&2; return 1; }
    command -v promtool >/dev/null && command -v prometheus >/dev/null ||
        { echo "promtool and prometheus are missing: run scripts/setup-deps" >&2; return 1; }
    D=$(mktemp -d /tmp/ckpt-metrics-bats-XXXXXX)
    unset CKPT_JOB CKPT_RESTORE CKPT_MAX_RESTARTS CKPT_HANG_TIMEOUT CKPT_LIB CKPT_KEEP_ARENA CKPT_FAULT LD_PRELOAD \
        MASTER_ADDR MASTER_PORT CKPT_METRICS_ADDR
    export CKPT_STANDBY=0 CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=10
    export CKPT_JOB=metrics-$$-$RANDOM
    PORT=$(free_port)
}

teardown() {
    [ -z "${PROM:-}" ] || kill "$PROM" 2>/dev/null || true
    [ -z "${JOB:-}" ] || kill "$JOB" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}

# scrape OUT: the page, once the agent serves one with a committed snapshot.
scrape() {
    local i
    for i in $(seq 100); do
        curl -sf "http://127.0.0.1:$PORT/metrics" >"$1" 2>/dev/null && grep -q '^ckpt_snapshots_committed_total{.*} [1-9]' "$1" &&
            return 0
        sleep 0.1
    done
    echo "no metrics with a committed snapshot at 127.0.0.1:$PORT"
    return 1
}

# value FILE METRIC LABELS: the sample's value ("" when absent).
value() {
    sed -n "s/^$2{$3} \\([0-9.e+-]*\\)\$/\\1/p" "$1"
}

@test "a running job's metrics pass promtool's check, their counters move as it trains, and its recovery by a standby is counted" {
    CKPT_METRICS_ADDR=127.0.0.1:$PORT CKPT_STANDBY=1 timeout -k 5 300 "$CKPT" --nproc 2 -- "$TRAIN" --iters 8000 \
        --hidden 32 --layers 2 >"$D/out" 2>"$D/err" &
    JOB=$!
    scrape "$D/m1" || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: metrics at http://127.0.0.1:$PORT/metrics$" "$D/err"
    promtool check metrics <"$D/m1"
    sleep 1
    scrape "$D/m2"
    promtool check metrics <"$D/m2"
    local labels="ckpt_job=\"$CKPT_JOB\",node=\"0\",rank=\"1\"" a b
    a=$(value "$D/m1" ckpt_snapshots_committed_total "$labels")
    b=$(value "$D/m2" ckpt_snapshots_committed_total "$labels")
    echo "rank 1 committed $a, then $b snapshots"
    [ -n "$a" ] && [ "$b" -gt "$a" ]
    [ "$(value "$D/m2" ckpt_snapshot_bytes_total "$labels")" -gt "$(value "$D/m1" ckpt_snapshot_bytes_total "$labels")" ]
    [ "$(value "$D/m2" ckpt_iteration "$labels")" -gt "$(value "$D/m1" ckpt_iteration "$labels")" ]
    [ "$(value "$D/m2" ckpt_committed_iteration "$labels")" -ge "$(value "$D/m1" ckpt_iteration "$labels")" ]
    [ -n "$(value "$D/m2" ckpt_standby_lag_iterations "$labels")" ]
    [ "$(value "$D/m2" ckpt_replay_log_bytes "$labels")" -gt "$(value "$D/m1" ckpt_replay_log_bytes "$labels")" ]
    [ "$(value "$D/m2" ckpt_standby_resident_bytes "$labels")" -gt $((1 << 20)) ]
    [ -n "$(value "$D/m2" ckpt_standby_cpu_seconds_total "$labels")" ]
    [ "$(value "$D/m2" ckpt_snapshot_copy_seconds_count "ckpt_job=\"$CKPT_JOB\",node=\"0\"")" -gt 0 ]
    [ "$(value "$D/m2" ckpt_ranks_running "ckpt_job=\"$CKPT_JOB\",node=\"0\"")" = 2 ]
    [ "$(value "$D/m2" ckpt_restarts_total "ckpt_job=\"$CKPT_JOB\",node=\"0\"")" = 0 ]

    # Rank 1 dies; its standby takes over; the page says so.
    local pid
    pid=$(pgrep -f -x "$TRAIN --iters 8000 --hidden 32 --layers 2" | while read -r p; do
        tr '\0' '\n' <"/proc/$p/environ" | grep -qx RANK=1 && ! tr '\0' '\n' <"/proc/$p/environ" | grep -q '^CKPT_FOLLOW=' &&
            echo "$p"; done | head -n 1)
    [ -n "$pid" ] || { cat "$D/err"; return 1; }
    kill -KILL "$pid"
    local i
    for i in $(seq 100); do
        curl -sf "http://127.0.0.1:$PORT/metrics" >"$D/m3" &&
            [ "$(value "$D/m3" ckpt_recoveries_total "ckpt_job=\"$CKPT_JOB\",node=\"0\",how=\"standby\"")" = 1 ] && break
        sleep 0.1
    done
    promtool check metrics <"$D/m3"
    [ "$(value "$D/m3" ckpt_recoveries_total "ckpt_job=\"$CKPT_JOB\",node=\"0\",how=\"standby\"")" = 1 ] ||
        { cat "$D/m3" "$D/err"; return 1; }
    [ "$(value "$D/m3" ckpt_restarts_total "ckpt_job=\"$CKPT_JOB\",node=\"0\"")" = 1 ]
    local total
    total=$(value "$D/m3" ckpt_recovery_seconds "ckpt_job=\"$CKPT_JOB\",node=\"0\",how=\"standby\"")
    echo "recovery by the standby: $total s"
    awk -v t="$total" 'BEGIN { exit !(t > 0 && t < 60) }'
    # Counters never go back across the restart.
    [ "$(value "$D/m3" ckpt_snapshots_committed_total "$labels")" -ge "$b" ]
    wait $JOB || { grep -v ': snapshots [0-9]' "$D/err"; return 1; }
    JOB=
    grep -q "^ckpt-resume: done exit=0 restarts=1 (standby " "$D/err"
}

# Both ranks have committed and both standbys are on the page with a
# worker's memory (the trainer's, tens of MiB), not the Python launcher's alone.
standbys_on_page() {
    local r labels rss
    for r in 0 1; do
        labels="ckpt_job=\"$CKPT_JOB\",node=\"0\",rank=\"$r\""
        [ "$(value "$1" ckpt_snapshots_committed_total "$labels")" -gt 0 ] 2>/dev/null || return 1
        rss=$(value "$1" ckpt_standby_resident_bytes "$labels")
        [ -n "$rss" ] && [ "$rss" -gt $((1 << 20)) ] || return 1
    done
}

@test "under torchrun every worker is on the page, and each standby's CPU and memory are its worker's" {
    torchrun_standin "$D/torchrun"
    CKPT_METRICS_ADDR=127.0.0.1:$PORT CKPT_STANDBY=1 timeout -k 5 300 "$CKPT" -- "$D/torchrun" --nproc-per-node 2 \
        --no-python "$TRAIN" --iters 100000 --hidden 32 --layers 2 >"$D/out" 2>"$D/err" &
    JOB=$!
    local i
    # Each standby reports on its own channel, in its own time: wait for
    # both (a loaded machine, a sanitized build, can take tens of seconds).
    for i in $(seq 600); do
        scrape "$D/m" >/dev/null && standbys_on_page "$D/m" && break
        sleep 0.1
    done
    promtool check metrics <"$D/m"
    grep '^ckpt_standby' "$D/m"
    standbys_on_page "$D/m" || { cat "$D/m" "$D/err"; return 1; }
    kill "$JOB"
    wait "$JOB" || true
    JOB=
}

@test "a real Prometheus server scrapes a running job on loopback and answers a query on its metrics" {
    local web
    web=$(free_port)
    [ "$web" != "$PORT" ]
    cat >"$D/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: libckpt
    static_configs:
      - targets: ['127.0.0.1:$PORT']
EOF
    prometheus --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/tsdb" \
        --web.listen-address="127.0.0.1:$web" >"$D/prom.log" 2>&1 &
    PROM=$!
    CKPT_METRICS_ADDR=127.0.0.1:$PORT timeout -k 5 120 "$CKPT" --nproc 1 -- "$TRAIN" --iters 100000 --hidden 32 \
        --layers 2 >"$D/out" 2>"$D/err" &
    JOB=$!
    local i q="ckpt_snapshots_committed_total{ckpt_job=\"$CKPT_JOB\",rank=\"0\"}" got=""
    for i in $(seq 300); do
        got=$(curl -sf -G "http://127.0.0.1:$web/api/v1/query" --data-urlencode "query=$q" 2>/dev/null |
            python3 -c 'import json,sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null) || got=""
        [ -n "$got" ] && [ "$got" -gt 0 ] && break
        sleep 0.2
    done
    echo "Prometheus says rank 0 committed $got snapshots"
    [ -n "$got" ] && [ "$got" -gt 0 ] || { tail -n 20 "$D/prom.log"; cat "$D/err"; return 1; }
    # The target is up and a rate over the scraped counter is positive
    # (over 15 s: two scrapes at least, whatever a loaded machine delays).
    local up rate=0
    up=$(curl -sf -G "http://127.0.0.1:$web/api/v1/query" --data-urlencode 'query=up{job="libckpt"}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
    [ "$up" = 1 ]
    for _ in $(seq 150); do
        rate=$(curl -sf -G "http://127.0.0.1:$web/api/v1/query" \
            --data-urlencode "query=rate(ckpt_snapshots_committed_total{ckpt_job=\"$CKPT_JOB\"}[15s])" |
            python3 -c 'import json,sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else 0)') || rate=0
        awk -v r="$rate" 'BEGIN { exit !(r > 0) }' && break
        sleep 0.2
    done
    echo "committed snapshots per second, as Prometheus sees them: $rate"
    awk -v r="$rate" 'BEGIN { exit !(r > 0) }'
}

@test "an address the agent cannot listen on stops the job before it starts, naming CKPT_METRICS_ADDR" {
    local bad
    for bad in "nonsense" "127.0.0.1:" "999.1.1.1:$PORT"; do
        run -2 env CKPT_METRICS_ADDR="$bad" "$CKPT" --nproc 1 -- "$TRAIN" --iters 10
        [[ $output == *"CKPT_METRICS_ADDR=$bad: cannot serve metrics there ("* ]] || { echo "$output"; return 1; }
        [[ $output != *"started 1 rank"* ]]
    done
    # A port something else holds.
    python3 -c 'import socket,sys,time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(30)' "$PORT" &
    local holder=$!
    for _ in $(seq 200); do [ -n "$(ss -Htln "sport = :$PORT")" ] && break; sleep 0.05; done
    run -2 env CKPT_METRICS_ADDR="127.0.0.1:$PORT" "$CKPT" --nproc 1 -- "$TRAIN" --iters 10
    kill $holder
    [[ $output == *"CKPT_METRICS_ADDR=127.0.0.1:$PORT: cannot serve metrics there (Address already in use)"* ]] ||
        { echo "$output"; return 1; }
    [[ $output != *"started 1 rank"* ]]
}
