#!/usr/bin/env bats
# Bad and hostile input: the whole list, in one place.  Each row is tested
# here unless it names the test that covers it already.
#
#   input                                          expected                                   where
#   every CKPT_* variable: malformed, out of       the job does not start; the error names    here (rows generated from
#     range, empty (generated from config.def)       the variable and what it accepts           `ckpt-inspect env`)
#   CKPT_ARENA_DIR missing, a file, unwritable,    no arena, said with the path; by hand      here
#     foreign-owned, a symlink; a symlink planted    the job trains on unprotected; no
#     for a slot or a rank directory                 symlink is followed
#   the same under ckpt-resume                     refused before training, naming the        here
#                                                    variable and the fix; with
#                                                    CKPT_ALLOW_UNPROTECTED=1 it trains, and
#                                                    the end-of-job line says UNPROTECTED
#   CKPT_PERSIST_DIRS missing, a file,             persisting refused, said with the path;    here
#     foreign-owned, its job directory a symlink     training goes on; nothing written there
#   persisted files and arena files                0600 in 0700 directories                   here
#   /dev/shm full                                  snapshot skipped and said; job unharmed    here (a 1 MiB tmpfs)
#   a low RLIMIT_MEMLOCK                           the job still checkpoints and restores     here
#   100,000 small allocations                      snapshot and restore bit-exact             here (tests/progs/manyallocs)
#   allocation inside graph capture                same results as without libckpt;           here (tests/progs/capalloc)
#                                                    a restart ends bit-exact
#   a global-mode capture begun while a snapshot   the capture stands; same results           here (capture_after_sync)
#     is in flight
#   a CUDA helper process the rank starts; a       a pass-through: the rank's arena is left   capture.bats: "a CUDA helper
#     second process as the same rank                alone, said                                the rank execs", "a second
#                                                                                                process as the same rank"
#   a program that forks children after CUDA init  children never checkpoint                  capture.bats: "a child forked
#                                                                                                after CUDA init never checkpoints"
#   a program that never reaches a boundary        no snapshot; a failure restarts from the   here
#                                                    beginning, saying why
#   two jobs of different users on one machine     each its own arena, unreadable by the      here (as root, with nobody)
#                                                    other; both bit-exact
#   an arena directory of another user             refused, the job still trains              capture.bats: "an arena directory
#                                                                                                that belongs to someone else"
#   a damaged snapshot, replay log, stripe,        detected, never loaded, fallback said      corruption.bats
#     manifest

load output
load etcd_cluster

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    LIB=$BUILD/lib/libckpt.so TRAIN=$BUILD/examples/mlp-train RESUME=$BUILD/bin/ckpt-resume
    INSPECT=$BUILD/bin/ckpt-inspect
    unset CKPT_RESTORE CKPT_FAULT CKPT_PERSIST_DIRS CKPT_JOB CKPT_EVERY CKPT_BOUNDARY LD_PRELOAD \
        FAKEGPU_CRASH_AT FAKEGPU_CRASH_RANK FAKEGPU_CRASH_ONCE
    D=$(mktemp -d /tmp/ckpt-hostile-XXXXXX)
    export CKPT_ARENA_DIR=$D/arena CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2
    ARGS="--iters 12 --hidden 32 --layers 3"
}

teardown() {
    etcd_down
    mountpoint -q "$D/shm" 2>/dev/null && umount "$D/shm"
    rm -rf "$D"
}

# What each kind of variable must refuse: malformed, out of range, empty.
bad_values() { # kind accepted default
    local kind=$1 acc=$2 def=$3 lo hi
    lo=${acc%%..*} hi=${acc##*..}
    case $kind in
    bool) printf '%s\n' maybe 2 '' ;;
    choice) printf '%s\n' no-such-choice 99 '' ;;
    integer) printf '%s\n' ten 0x10 ' 1' "$((hi + 1))" -1 '' ;;
    seconds) printf '%s\n' soon nan inf ' 1' +1 "$((hi + 1))" -1 '' ;;
    size)
        printf '%s\n' 5X ' 64M' "$((${hi%?} * 2))${hi: -1}" ''
        [ "$lo" = 0 ] || echo 1 ;; # below the least, where 0 is not it
    string)
        case $acc in
        path) printf '%s\n' '' ;;
        name) printf '%s\n' a/b .hidden "$(printf 'x%.0s' $(seq 64))" '' ;;
        boundary) printf '%s\n' every:0 every:1000001 nvtx: '' ;;
        fault) printf '%s\n' kill:rank=x:iter=1 kill:rank=0:iter=0 kill:rank=0:iter=3:phase=later ;;
        esac ;;
    esac
    [ -n "$lo" ] && [ "$lo" != "$acc" ] && [ "$kind" = integer ] && [ "$lo" -gt 0 ] && echo "$((lo - 1))"
    return 0
}

@test "every CKPT_* variable: malformed, out-of-range and empty values stop the job, naming the variable" {
    local rows=0 free=() var kind acc def v out
    while IFS= read -r line; do
        [[ $line =~ ^(CKPT_[A-Z_]+)\ \(([a-z]+)(:\ ([^,]*))?,\ default\ \'(.*)\'\)$ ]] || continue
        var=${BASH_REMATCH[1]} kind=${BASH_REMATCH[2]} acc=${BASH_REMATCH[4]} def=${BASH_REMATCH[5]}
        if [ "$kind" = string ] && [ -z "$acc" ]; then
            free+=("$var")
            continue
        fi
        while IFS= read -r v; do
            rows=$((rows + 1))
            # libckpt in the program: exit 2 before the first iteration
            local rc=0
            out=$(env "$var=$v" LD_PRELOAD="$LIB" "$TRAIN" --iters 2 --hidden 8 --layers 2 2>&1) || rc=$?
            [ $rc -eq 2 ] && [[ $out == *"$var='$v' is not valid: expected "* ]] && [[ $out != *"iter "* ]] ||
                { echo "libckpt, $var='$v': exit $rc: $out"; return 1; }
            # ckpt-resume: exit 2, no rank started
            rc=0
            out=$(env "$var=$v" "$RESUME" -- sh -c 'touch "$0/started"' "$D" 2>&1) || rc=$?
            [ $rc -eq 2 ] && [[ $out == *"$var='$v' is not valid: expected "* ]] && [ ! -e "$D/started" ] ||
                { echo "ckpt-resume, $var='$v': exit $rc: $out"; return 1; }
        done < <(bad_values "$kind" "$acc" "$def")
    done < <("$INSPECT" env)
    echo "$rows bad values refused by libckpt and by ckpt-resume"
    echo "free text, checked where used (rows below): ${free[*]}"
    [ $rows -ge 80 ]
}

# trains VAR=VALUE...: the trainer under libckpt with these settings ends
# with the digest of a plain run; its stderr is in $D/err.
trains() {
    local plain
    plain=$("$TRAIN" $ARGS 2>/dev/null | grep '^digest')
    env "$@" LD_PRELOAD="$LIB" timeout -k 5 60 "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    [ "$(grep '^digest' "$D/out")" = "$plain" ] || { echo "digest differs"; cat "$D/err"; return 1; }
}

@test "CKPT_ARENA_DIR missing, a file, unwritable, another user's, a symlink: no arena, said; the job trains on" {
    mkdir -p "$D/real" && touch "$D/file" && ln -s "$D/real" "$D/link"
    while IFS='|' read -r dir says; do
        trains CKPT_ARENA_DIR="$dir" || { echo "CKPT_ARENA_DIR=$dir"; return 1; }
        grep -q "no arena ($says" "$D/err" || { echo "CKPT_ARENA_DIR=$dir:"; cat "$D/err"; return 1; }
    done <<EOF
$D/no/such/dir|cannot create $D/no/such/dir: No such file or directory
$D/file|$D/file is not a directory (a symlink or a file is never followed)
/proc/ckpt-arena|cannot create /proc/ckpt-arena
$D/link|$D/link is not a directory (a symlink or a file is never followed)
EOF
    [ -z "$(ls -A "$D/real")" ] # the symlink was not followed
    [ "$(id -u)" -eq 0 ] || skip "the rest needs root (to give a directory to nobody)"
    mkdir -m 1777 "$D/theirs" && chown nobody "$D/theirs"
    trains CKPT_ARENA_DIR="$D/theirs"
    grep -q "no arena ($D/theirs belongs to uid $(id -u nobody): a shared directory must be this user's" "$D/err"
    mkdir -m 0777 "$D/open"
    trains CKPT_ARENA_DIR="$D/open"
    grep -q "no arena ($D/open is writable by others (mode 777) and not sticky" "$D/err"
}

@test "under ckpt-resume an arena that cannot be made is refused before training, naming CKPT_ARENA_DIR and the fix; allowed, the job trains and its last line says UNPROTECTED" {
    touch "$D/file"
    local plain dir rc
    plain=$("$TRAIN" $ARGS 2>/dev/null | grep '^digest')
    for dir in "$D/file" "$D/no/such/dir" /proc/ckpt-arena; do
        rc=0
        CKPT_ARENA_DIR=$dir timeout -k 5 60 "$RESUME" --nproc 1 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || rc=$?
        [ "$rc" -eq 2 ] || { echo "CKPT_ARENA_DIR=$dir: exit $rc"; cat "$D/err"; return 1; }
        grep -q "^ckpt-resume: error: CKPT_ARENA_DIR=$dir: .*$dir.*: the job would train with checkpointing off; point CKPT_ARENA_DIR at a directory on a tmpfs this user can write to (the default is /dev/shm/ckpt), or set CKPT_ALLOW_UNPROTECTED=1 to train without protection$" "$D/err" ||
            { echo "CKPT_ARENA_DIR=$dir"; cat "$D/err"; return 1; }
        ! grep -q "started" "$D/err" && [ ! -s "$D/out" ] || { echo "CKPT_ARENA_DIR=$dir: a rank started"; cat "$D/err"; return 1; }
    done
    CKPT_ALLOW_UNPROTECTED=1 CKPT_ARENA_DIR=$D/file timeout -k 5 60 "$RESUME" --nproc 1 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; return 1; }
    [ "$(grep '^digest' "$D/out")" = "$plain" ] || { cat "$D/err"; return 1; }
    grep -q "^ckpt-resume: warning: CKPT_ARENA_DIR=$D/file: .*: the job trains UNPROTECTED (CKPT_ALLOW_UNPROTECTED=1)" "$D/err" &&
        grep -q "^ckpt-resume: summary: no snapshot committed (UNPROTECTED); not persisted" "$D/err" &&
        [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=0 restarts=0 UNPROTECTED: rank 0 ran with checkpointing off (said above)" ] ||
        { cat "$D/err"; return 1; }
}

@test "under ckpt-resume a rank that cannot open its arena stops before training rather than train unprotected, and is not restarted; allowed, it trains and the job says so" {
    touch "$D/file"
    local rc=0 plain
    plain=$("$TRAIN" $ARGS 2>/dev/null | grep '^digest')
    # ckpt-resume's arena is fine; the rank's is not (the command changes it).
    timeout -k 5 60 "$RESUME" --nproc 1 -- env CKPT_ARENA_DIR="$D/file" "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || rc=$?
    [ "$rc" -eq 78 ] || { echo "exit $rc"; cat "$D/err"; return 1; }
    grep -q "^libckpt\[rank 0\]: error: no arena ($D/file is not a directory .*): the rank stops rather than train unprotected; make CKPT_ARENA_DIR a directory this user can write to, or set CKPT_ALLOW_UNPROTECTED=1$" "$D/err" &&
        grep -q "ckpt-resume: error: rank 0 stopped the job: it cannot have its arena on this host (said above); not restarted, as a restart would not either" "$D/err" &&
        [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=78 restarts=0" ] && ! grep -q "^iter" "$D/out" || { cat "$D/err"; return 1; }
    CKPT_ALLOW_UNPROTECTED=1 timeout -k 5 60 "$RESUME" --nproc 1 -- env CKPT_ARENA_DIR="$D/file" "$TRAIN" $ARGS >"$D/out" 2>"$D/err" ||
        { cat "$D/err"; return 1; }
    [ "$(grep '^digest' "$D/out")" = "$plain" ] &&
        [ "$(tail -n 1 "$D/err")" = "ckpt-resume: done exit=0 restarts=0 UNPROTECTED: rank 0 ran with checkpointing off (said above)" ] ||
        { cat "$D/err"; return 1; }
}

@test "the arena removed under a running job (another process took it away): every rank says so and trains on without checkpointing, at full speed; the job ends as uninterrupted and its last line says UNPROTECTED" {
    local plain job=$D/arena/$(id -u)-gone
    plain=$(CKPT_ARENA_DIR=$D/plain timeout -k 5 60 "$RESUME" --nproc 2 -- "$TRAIN" --iters 3000 --hidden 16 --layers 2 \
        2>/dev/null | grep '^digest')
    CKPT_JOB=gone CKPT_ARENA_DIR=$D/arena timeout -k 5 60 "$RESUME" --nproc 2 -- "$TRAIN" --iters 3000 --hidden 16 --layers 2 \
        >"$D/out" 2>"$D/err" &
    local pid=$!
    for _ in $(seq 200); do grep -q "^iter 100 " "$D/out" 2>/dev/null && break; sleep 0.05; done
    rm -rf "$job"/rank* 2>/dev/null || true # the ranks may write a file meanwhile: the slots are gone
    wait $pid || { cat "$D/err"; return 1; }
    [ "$(grep '^digest' "$D/out")" = "$plain" ] || { cat "$D/err"; return 1; }
    for r in 0 1; do
        grep -q "^libckpt\[rank $r\]: error: the arena $job/rank$r was removed while the job ran (by another process): checkpointing is off for the rest of this run, which trains on UNPROTECTED$" "$D/err" ||
            { cat "$D/err"; return 1; }
    done
    tail -n 1 "$D/err" | grep -qx "ckpt-resume: done exit=0 restarts=0 UNPROTECTED: rank [01] ran with checkpointing off (said above)" ||
        { cat "$D/err"; return 1; }
}

@test "a symlink planted for a slot or a rank directory is refused, never followed" {
    mkdir -p "$D/arena/$(id -u)-plant/rank0" "$D/elsewhere"
    chmod 0700 "$D/arena/$(id -u)-plant" "$D/arena/$(id -u)-plant/rank0"
    echo precious >"$D/elsewhere/target"
    ln -s "$D/elsewhere/target" "$D/arena/$(id -u)-plant/rank0/slot0"
    trains CKPT_JOB=plant
    grep -q "no arena (cannot open $D/arena/$(id -u)-plant/rank0/slot0: Too many levels of symbolic links)" "$D/err" ||
        { cat "$D/err"; return 1; }
    [ "$(cat "$D/elsewhere/target")" = precious ]
    rm -rf "$D/arena/$(id -u)-plant/rank0"
    ln -s "$D/elsewhere" "$D/arena/$(id -u)-plant/rank0"
    trains CKPT_JOB=plant
    grep -q "no arena ($D/arena/$(id -u)-plant/rank0 is not a directory (a symlink or a file is never followed))" \
        "$D/err" || { cat "$D/err"; return 1; }
    [ "$(ls "$D/elsewhere")" = target ]
}

@test "arena files are 0600 in 0700 directories; persisted files too" {
    mkdir -p "$D/ssd0" "$D/ssd1"
    CKPT_JOB=modes CKPT_KEEP_ARENA=1 CKPT_PERSIST_DIRS=$D/ssd0,$D/ssd1 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS \
        >/dev/null 2>&1
    local bad
    bad=$(find "$D/arena/$(id -u)-modes" "$D/ssd0/$(id -u)-modes" "$D/ssd1/$(id -u)-modes" \
        \( -type d ! -perm 0700 \) -o \( -type f ! -perm 0600 \) -o \( ! -user "$(id -u)" \))
    [ -z "$bad" ] || { ls -la $bad; return 1; }
    [ -n "$(find "$D/ssd1/$(id -u)-modes" -name 'stripe-1')" ]
}

@test "CKPT_PERSIST_DIRS missing, a file, another user's, a symlinked job directory: refused, said, training goes on" {
    mkdir -p "$D/elsewhere" "$D/ssd"
    touch "$D/file"
    ln -s "$D/elsewhere" "$D/ssd/$(id -u)-p"
    local rows="$D/none|persist directory $D/none: does not exist
$D/file|persist directory $D/file is not a directory
$D/ssd|$D/ssd/$(id -u)-p is not a directory (a symlink or a file is never followed)"
    if [ "$(id -u)" -eq 0 ]; then
        mkdir -m 0755 "$D/theirs" && chown nobody "$D/theirs"
        rows+="
$D/theirs|$D/theirs belongs to uid $(id -u nobody): a shared directory must be this user's"
    fi
    local plain
    plain=$("$TRAIN" $ARGS 2>/dev/null | grep '^digest')
    while IFS='|' read -r dir says; do
        CKPT_JOB=p CKPT_PERSIST_DIRS=$dir timeout -k 5 60 "$RESUME" -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err"
        [ "$(grep '^digest' "$D/out")" = "$plain" ] || { echo "$dir: digest"; cat "$D/err"; return 1; }
        grep -q "warning: cannot persist iteration [0-9]*: $says" "$D/err" || { echo "$dir:"; cat "$D/err"; return 1; }
    done <<<"$rows"
    [ -z "$(ls -A "$D/elsewhere")" ]
}

@test "/dev/shm full: the snapshot is skipped and said once, with the numbers and the fix, the job is unharmed" {
    mkdir -p "$D/shm"
    mount -t tmpfs -o size=1m,mode=1777 tmpfs "$D/shm" 2>/dev/null || skip "cannot mount a small tmpfs here"
    ARGS="--iters 6 --hidden 256 --layers 3" # 3.3 MiB of state
    trains CKPT_ARENA_DIR="$D/shm"
    grep -q "warning: iteration [0-9]*: cannot make room for a snapshot of [0-9.]* MiB in $D/shm/.*: its filesystem has [0-9.]* MiB free of 1.0 MiB, and every rank of this host needs 2 slots of its own size (CKPT_SLOTS); make it larger (Docker: --shm-size; Kubernetes: an emptyDir volume with medium: Memory .*) or set CKPT_ARENA_DIR to a larger tmpfs; snapshot skipped: this rank is not protected until there is room" \
        "$D/err" || { cat "$D/err"; return 1; }
    # every snapshot is skipped, and the warning is given once, not per iteration
    [ "$(grep -c "cannot make room" "$D/err")" -eq 1 ] || { cat "$D/err"; return 1; }
    grep -q "snapshots 0 (skipped [2-9]" "$D/err" || { cat "$D/err"; return 1; }
}

@test "/dev/shm too small for the arena under ckpt-resume: the rank stops at its first snapshot, with the numbers and the fix, and is not restarted" {
    mkdir -p "$D/shm"
    mount -t tmpfs -o size=1m,mode=1777 tmpfs "$D/shm" 2>/dev/null || skip "cannot mount a small tmpfs here"
    ARGS="--iters 6 --hidden 256 --layers 3" # 3.3 MiB of state
    local rc=0
    CKPT_ARENA_DIR=$D/shm timeout -k 5 60 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || rc=$?
    [ "$rc" -eq 78 ] || { echo "exit $rc"; cat "$D/err"; return 1; }
    grep -Eq "error: iteration [0-9]+: this host cannot hold the arena: a snapshot of this rank is [0-9.]+ MiB, and 2 ranks x 2 slots need [0-9.]+ MiB in $D/shm/.*, whose filesystem has [0-9.]+ MiB free of 1.0 MiB .*; make it larger \(Docker: --shm-size; .*, or set CKPT_SLOTS=1 .*; the rank stops rather than train unprotected" "$D/err" ||
        { cat "$D/err"; return 1; }
    grep -Eq "ckpt-resume: error: rank [01] stopped the job: it cannot have its arena on this host" "$D/err" || { cat "$D/err"; return 1; }
    grep -q "ckpt-resume: done exit=78 restarts=0" "$D/err" || { cat "$D/err"; return 1; }
}

@test "/dev/shm too small on a node of several: the coordinator ends the job with that rank's reason, not restarted" {
    mkdir -p "$D/shm"
    mount -t tmpfs -o size=1m,mode=1777 tmpfs "$D/shm" 2>/dev/null || skip "cannot mount a small tmpfs here"
    ARGS="--iters 6 --hidden 256 --layers 3" # 3.3 MiB of state
    etcd_up 1
    local i
    for i in 0 1; do
        CKPT_ARENA_DIR=$D/shm/node$i CKPT_NODE_TIMEOUT=10 timeout -k 5 60 "$RESUME" --coord "etcd://$ENDPOINTS" \
            --nnodes 2 --node-rank $i --nproc 1 -- "$TRAIN" $ARGS >"$D/out.$i" 2>"$D/err.$i" &
    done
    wait
    for i in 0 1; do
        grep -q "ckpt-resume: done exit=78 restarts=0" "$D/err.$i" || { cat "$D/err.0" "$D/err.1"; return 1; }
    done
    grep -Eq "ckpt-resume: the coordinator ends the job: rank [01] on node [01] cannot have its arena on that node \(said there\): not restarted, as a restart would not either" "$D/err.0" ||
        { cat "$D/err.0"; return 1; }
}

@test "a usage error on a node of several (the same exit status before any boundary, twice): the coordinator ends the job, saying so, without using up the restarts" {
    etcd_up 1
    local i
    for i in 0 1; do
        CKPT_ARENA_DIR=$D/node$i CKPT_NODE_TIMEOUT=10 timeout -k 5 60 "$RESUME" --coord "etcd://$ENDPOINTS" \
            --nnodes 2 --node-rank $i --nproc 1 --max-restarts 5 -- "$TRAIN" --no-such-option >"$D/out.$i" 2>"$D/err.$i" &
    done
    wait
    for i in 0 1; do
        [ "$(tail -n 1 "$D/err.$i")" = "ckpt-resume: done exit=2 restarts=1" ] || { cat "$D/err.0" "$D/err.1"; return 1; }
        grep -Eq "^ckpt-resume: the coordinator ends the job: rank [01] on node [01] exited with status 2 before any rank reached an iteration boundary, on two launches in a row: an error in the command or its set-up \(its output on that node says which\), which a restart would repeat; not restarted again$" "$D/err.$i" ||
            { cat "$D/err.$i"; return 1; }
    done
}

@test "CKPT_HOST_MEM: ckpt-resume refuses to start ranks the arena's filesystem cannot hold, naming the numbers; CKPT_SLOTS=1 needs half" {
    mkdir -p "$D/shm"
    mount -t tmpfs -o size=6m,mode=1777 tmpfs "$D/shm" 2>/dev/null || skip "cannot mount a small tmpfs here"
    CKPT_ARENA_DIR=$D/shm CKPT_HOST_MEM=4M run "$RESUME" --nproc 1 -- sh -c 'touch "$0/started"' "$D"
    [ "$status" -eq 2 ] && [ ! -e "$D/started" ] || { echo "$output"; false; }
    echo "$output" | grep -q "error: this host cannot hold the job's arena: 1 rank x 2 slots x CKPT_HOST_MEM=4.0 MiB need 8.0 MiB in $D/shm, whose filesystem has [0-9.]* MiB free of 6.0 MiB; make it larger .*, or set CKPT_SLOTS=1" ||
        { echo "$output"; false; }
    CKPT_ARENA_DIR=$D/shm CKPT_HOST_MEM=4M CKPT_SLOTS=1 run "$RESUME" --nproc 1 -- sh -c 'touch "$0/started"' "$D"
    [ "$status" -eq 0 ] && [ -e "$D/started" ] || { echo "$output"; false; }
}

@test "CKPT_SLOTS=1: a job whose two slots would not fit trains in one, its snapshots committed, bit-exact" {
    mkdir -p "$D/shm"
    mount -t tmpfs -o size=5m,mode=1777 tmpfs "$D/shm" 2>/dev/null || skip "cannot mount a small tmpfs here"
    # The logs of an arena in memory would go under /var/tmp, and stay there with the kept arena.
    mkdir -p "$D/logs"
    export CKPT_REPLAY_LOG_DIR=$D/logs
    ARGS="--iters 8 --hidden 256 --layers 3" # 3.3 MiB of state: one slot fits, two do not
    local plain rc=0
    plain=$("$TRAIN" $ARGS 2>/dev/null | grep '^digest')
    CKPT_ARENA_DIR=$D/shm timeout -k 5 60 "$RESUME" --nproc 1 -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || rc=$?
    [ "$rc" -eq 78 ] || { echo "two slots: exit $rc"; cat "$D/err"; return 1; }
    CKPT_ARENA_DIR=$D/shm CKPT_SLOTS=1 CKPT_KEEP_ARENA=1 CKPT_JOB=one timeout -k 5 60 "$RESUME" --nproc 1 -- "$TRAIN" $ARGS \
        >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    [ "$(grep '^digest' "$D/out")" = "$plain" ] || { cat "$D/err"; return 1; }
    ! grep -q "cannot make room\|cannot hold" "$D/err" || { cat "$D/err"; return 1; }
    CKPT_ARENA_DIR=$D/shm run "$INSPECT" --job one list
    echo "$output" | grep -Eq "^  arena +0 +0 +[0-9]+ +[0-9]+ .* verified$" || { echo "$output"; false; }
    [ ! -s "$D/shm/$(id -u)-one/rank0/slot1" ] || { ls -l "$D/shm/$(id -u)-one/rank0"; false; }
}

# restarts_exact OUT ERR N PLAIN: the job was restarted once and ended as PLAIN.
restarts_exact() {
    grep -q "restored iteration" "$2" || { echo "no restore"; cat "$2"; return 1; }
    diff <(resumed_output "$1") "$4" || { echo "output differs"; cat "$2"; return 1; }
}

@test "a low RLIMIT_MEMLOCK: the job still checkpoints and restores bit-exact" {
    "$RESUME" --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    # FAKEGPU_MEMLOCK=1: the double refuses registrations past the limit.
    (ulimit -l 16 && FAKEGPU_MEMLOCK=1 CKPT_FAULT=kill:rank=1:iter=8 timeout -k 5 60 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS \
        >"$D/out" 2>"$D/err")
    restarts_exact "$D/out" "$D/err" 2 "$D/plain"
    grep -q "cannot pin the arena" "$D/err" || { echo "the registration did not fail: the fallback was not tested"; cat "$D/err"; return 1; }
}

# bats test_tags=long
@test "100,000 small allocations: snapshot, restore and the end state bit-exact" {
    local P=$BUILD/tests/progs/manyallocs
    "$P" --iters 3 >"$D/plain" 2>/dev/null
    grep -q '^checked 100000 allocations$' "$D/plain"
    # two host syncs an iteration and before the first; snapshots at boundaries 2 and 4; then a restart
    # from 2 (after iteration 1)
    export CKPT_BOUNDARY=every:2 CKPT_EVERY=2 CKPT_JOB=many CKPT_KEEP_ARENA=1
    timeout -k 5 200 "$RESUME" -- "$P" --iters 3 >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    CKPT_RESTORE=2 timeout -k 5 200 "$RESUME" -- "$P" --iters 3 >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    grep -q "restored iteration 2 " "$D/err" || { cat "$D/err"; return 1; }
    diff "$D/out" "$D/plain"
}

@test "allocation inside graph capture: results as without libckpt, and a restart ends bit-exact" {
    local P=$BUILD/tests/progs/capalloc
    "$P" --iters 10 >"$D/plain" 2>/dev/null
    grep -q '^global-mode alloc: [1-9]' "$D/plain" # CUDA refuses it; libckpt must not change that
    LD_PRELOAD=$LIB "$P" --iters 10 >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    diff "$D/out" "$D/plain"
    CKPT_FAULT=kill:rank=0:iter=6 timeout -k 5 60 "$RESUME" -- "$P" --iters 10 >"$D/out" 2>"$D/err"
    restarts_exact "$D/out" "$D/err" 1 "$D/plain"
}

@test "a global-mode graph captured while a snapshot is in flight: the capture stands, results as without libckpt" {
    local P=$BUILD/tests/progs/capture_after_sync
    "$P" --iters 6 >"$D/plain" 2>/dev/null
    grep -q '^digest ' "$D/plain"
    # Each capture begins right after the sync that ends an iteration.  The
    # snapshot it starts must be finished first: its committer's event waits
    # would invalidate the capture (CUDA's global mode), its copies join it.
    CKPT_BOUNDARY=every:1 CKPT_STATS_FILE=$D/stats LD_PRELOAD=$LIB "$P" --iters 6 >"$D/out" 2>"$D/err" ||
        { cat "$D/out" "$D/err"; return 1; }
    diff "$D/out" "$D/plain"
    [ "$(wc -l <"$D/stats")" -ge 6 ] || { cat "$D/err"; return 1; }
    ! grep -q "warning" "$D/err" || { cat "$D/err"; return 1; }
}

@test "a program that never reaches a boundary: no snapshot, and a failure restarts from the beginning, said" {
    "$RESUME" -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    CKPT_BOUNDARY=every:1000000 FAKEGPU_CRASH_AT=10 FAKEGPU_CRASH_RANK=0 FAKEGPU_CRASH_ONCE=$D/crashed \
        timeout -k 5 60 "$RESUME" -- "$TRAIN" $ARGS >"$D/out" 2>"$D/err" || { cat "$D/err"; return 1; }
    grep -q "restarting from the beginning: rank 0 has no verified snapshot" "$D/err" || { cat "$D/err"; return 1; }
    ( ! grep -q "snapshots [1-9]" "$D/err" )
    [ "$(tail -n "$(wc -l <"$D/plain")" "$D/out")" = "$(cat "$D/plain")" ]
}

@test "two jobs of different users on one machine: separate arenas, unreadable by the other, both bit-exact" {
    [ "$(id -u)" -eq 0 ] || skip "needs root to run a job as another user"
    command -v runuser >/dev/null || skip "needs runuser"
    runuser -u nobody -- test -x "$TRAIN" || skip "the build is not reachable by nobody"
    mkdir -m 1777 "$D/shared" && chmod 0755 "$D"
    "$RESUME" --nproc 2 -- "$TRAIN" $ARGS >"$D/plain" 2>/dev/null
    local env=(CKPT_ARENA_DIR=$D/shared CKPT_JOB=same CKPT_KEEP_ARENA=1)
    env "${env[@]}" CKPT_FAULT=kill:rank=1:iter=6 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS >"$D/root.out" 2>"$D/root.err" &
    local pid=$!
    runuser -u nobody -- env "${env[@]}" CKPT_FAULT=kill:rank=0:iter=7 "$RESUME" --nproc 2 -- "$TRAIN" $ARGS \
        >"$D/nobody.out" 2>"$D/nobody.err"
    wait $pid
    restarts_exact "$D/root.out" "$D/root.err" 2 "$D/plain"
    restarts_exact "$D/nobody.out" "$D/nobody.err" 2 "$D/plain"
    local nb
    nb=$(id -u nobody)
    [ "$(stat -c '%u %a' "$D/shared/0-same")" = "0 700" ]
    [ "$(stat -c '%u %a' "$D/shared/$nb-same")" = "$nb 700" ]
    ! runuser -u nobody -- cat "$D/shared/0-same/rank0/slot0" >/dev/null 2>&1
    ! runuser -u nobody -- touch "$D/shared/0-same/rank0/injected" 2>/dev/null
    ! runuser -u nobody -- env CKPT_ARENA_DIR="$D/shared" "$INSPECT" --job same list 2>/dev/null | grep -q "0-same"
}
