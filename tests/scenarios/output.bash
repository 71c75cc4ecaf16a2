# The output of a job that was resumed, as its user reads it
# (scripts/resumed-output.awk).  Reads FILE, or stdin.
resumed_output() {
    awk -f "$BATS_TEST_DIRNAME/../../scripts/resumed-output.awk" "$@"
}

# restored_tail FULL PART: PART, what a launch that restored a snapshot
# printed, is exactly the end of FULL, what the uninterrupted run printed,
# from one of its "iter" lines on, never its first.
restored_tail() {
    local n
    [ -n "$2" ] || { echo "the restored run printed nothing"; return 1; }
    n=$(printf '%s\n' "$2" | wc -l)
    [ "$(printf '%s\n' "$1" | tail -n "$n")" = "$2" ] ||
        { echo "what the restored run printed is not the end of the plain run's output:"; echo "$2" | head; return 1; }
    case $2 in
    "iter 1 "*) echo "the restored run printed iteration 1 again: its replay was not held back"; return 1 ;;
    "iter "*) ;;
    *) echo "the restored run's output starts with: ${2%%$'\n'*}"; return 1 ;;
    esac
}

# fresh_ports ERR: every launch ckpt-resume's ERR names ("master ADDR:PORT")
# had a port of its own, and none is one of the kernel's ephemeral ports,
# from which outgoing connections take theirs.
fresh_ports() {
    local lo ports
    read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
    ports=$(sed -n 's/^ckpt-resume: started .*(process group [0-9]*, master [^:]*:\([0-9]*\))$/\1/p' "$1")
    [ -n "$ports" ] || { echo "$1 names no launch's port"; return 1; }
    [ "$(sort -u <<<"$ports" | wc -l)" -eq "$(wc -l <<<"$ports")" ] ||
        { echo "launches shared a port:" $ports; return 1; }
    for p in $ports; do
        [ "$p" -lt "$lo" ] || { echo "port $p is ephemeral (from $lo)"; return 1; }
    done
}

# free_port: a TCP port nothing on this machine uses, below the ephemeral ones.
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((10000 + RANDOM % 22000))
        [ -z "$(ss -Htan "sport = :$p")" ] && { echo "$p"; return 0; }
    done
    return 1
}

# live_pid RANK: the live process of RANK in job $CKPT_JOB (not its standby),
# a $PROG (else mlp-train).
live_pid() {
    local p env
    for p in $(pgrep -x "${PROG:-mlp-train}"); do
        env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
        grep -qx "CKPT_JOB=$CKPT_JOB" <<<"$env" && grep -qx "RANK=$1" <<<"$env" &&
            ! grep -q '^CKPT_FOLLOW=' <<<"$env" && { echo "$p"; return 0; }
    done
    return 1
}

# show_agents [N]: how each agent of the job in $D ended (err.TAG,
# rc.TAG), one line each, then the last N lines (30) each said, its banner
# left out: the cause of a failure first, where a cut log still has it.
show_agents() {
    local f t
    for f in "$D"/err.*; do
        t=${f##*/err.}
        echo "== $t: exit $(cat "$D/rc.$t" 2>/dev/null || echo none); last: $(grep -v '^libckpt' "$f" | tail -n 1)"
    done
    for f in "$D"/err.*; do
        echo "== $f"
        grep -v -e '^libckpt' -e '^placement: ' -e '^  node [0-9]* -> ' -e '^  [0-9]* nodes\? failed at once: ' \
            -e 'CKPT_JOB_KEY is not set' "$f" | tail -n "${1:-30}"
        grep '^libckpt\[rank [0-9]*\]: error: ' "$f" | tail -n 10
    done
}
