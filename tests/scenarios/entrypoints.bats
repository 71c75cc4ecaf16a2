#!/usr/bin/env bats
# Every driver entry point NVIDIA's CUDA 13 runtime resolves through
# cuGetProcAddress (docs/cudart13-entry-points.txt, a copy of the traced
# list) is hooked by libckpt, taints replay, or is shown harmless in the
# table of docs/entry-points.md, and the table is true to
# interpose/hooks.def: an entry point called hooked has a wrapper row there
# (any kind but USE and UNFOLLOWED), one that taints replay an UNFOLLOWED
# row, and every UNFOLLOWED row is in the table; every call of NCCL's that
# takes a communicator is wrapped.  Then, end to end, one
# entry point libckpt does not follow (cuMemsetD8_v2, the double
# runtime's synchronous cudaMemset): a program that calls it has every
# restore past its first call refused, naming it, and older snapshots
# come back exactly.

load output

bats_require_minimum_version 1.5.0

setup() {
    ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    BUILD=${BUILD:-$ROOT/build}
    LIST=$ROOT/docs/cudart13-entry-points.txt
    TABLE=$ROOT/docs/entry-points.md
    HOOKS=$ROOT/interpose/hooks.def
    D=$(mktemp -d /tmp/ckpt-entrypoints-bats-XXXXXX)
}

teardown() {
    rm -rf "$D"
}

# hooks.def's rows as "KIND NAME", a DRV_PT/RT_PT row giving both names;
# KIND is hook, use or unfollowed.
hook_rows() { # hooks.def
    awk -F', *' '
        /^(DRV|RT|NCCL|USE|UNFOLLOWED|PROMOTE|QUERY|DRV_PT|RT_PT)\(/ {
            kind = substr($1, 1, index($1, "(") - 1)
            k = kind == "USE" ? "use" : kind == "UNFOLLOWED" ? "unfollowed" : "hook"
            print k, $2
            if (kind ~ /_PT$/)
                print k, $2 $3
        }' "$1"
}

# The table's rows as "NAME<tab>WHAT".
table_rows() { # entry-points.md
    sed -n 's/^| `\(cu[A-Za-z0-9_]*\)` | \(.*\) |$/\1\t\2/p' "$1"
}

# Says every way the table fails the list and hooks.def; fails if any.
check_table() { # list table hooks.def
    hook_rows "$3" >"$D/hooks"
    table_rows "$2" >"$D/rows"
    grep -v '^#' "$1" | awk 'NF' >"$D/list"
    [ -s "$D/hooks" ] && [ -s "$D/rows" ] && [ -s "$D/list" ] || { echo "nothing read from $1, $2 or $3"; return 1; }
    awk -F'\t' '
        FILENAME == ARGV[1] { split($0, f, " "); kind[f[2]] = f[1]; if (f[1] == "unfollowed") unf[f[2]] = 1; next }
        FILENAME == ARGV[2] { split($0, f, " "); listed[f[1]] = 1; if (f[3] == 2) pt[f[1]] = 1; else plain[f[1]] = 1; next }
        {
            name = $1; what = $2
            if (name in row) { print name ": two rows"; bad = 1 }
            row[name] = what
            if (!(name in listed)) { print name ": in the table, not in the list"; bad = 1 }
            if (what ~ /^harmless: [^ ]/) {
                harmless[name] = 1
                next
            }
            n = split(what, clause, "; ")
            havept = haveplain = 0
            for (i = 1; i <= n; i++) {
                if (clause[i] ~ /^hooked: /) { want = "hook"; syms = substr(clause[i], 9) }
                else if (clause[i] ~ /^taints replay: /) { want = "unfollowed"; syms = substr(clause[i], 16) }
                else { print name ": \"" clause[i] "\" is neither hooked, taints replay nor harmless: REASON"; bad = 1; continue }
                m = split(syms, sym, ", ")
                for (j = 1; j <= m; j++) {
                    s = sym[j]
                    if (s !~ /^`[A-Za-z0-9_]+`$/) { print name ": \"" s "\" is not an entry point in backquotes"; bad = 1; continue }
                    s = substr(s, 2, length(s) - 2)
                    if (s !~ ("^" name "(_v[0-9]+)?(_pt(sz|ds))?$")) { print name ": " s " is not one of its versions"; bad = 1 }
                    if (!(s in kind)) { print name ": " s " is said to be " (want == "hook" ? "hooked" : "an UNFOLLOWED row") ", hooks.def has no row for it"; bad = 1 }
                    else if (kind[s] != want) { print name ": " s " is a " kind[s] " row of hooks.def, not what the table says"; bad = 1 }
                    if (s ~ /_pt(sz|ds)$/) havept = 1; else haveplain = 1
                    named[s] = 1
                }
            }
            if ((name in pt) && !havept) { print name ": asked for with the per-thread flag, no _ptsz/_ptds form named"; bad = 1 }
            if ((name in plain) && !haveplain) { print name ": asked for with the default flag, no plain form named"; bad = 1 }
        }
        END {
            for (name in listed)
                if (!(name in row)) { print name ": in the list, no row in the table"; bad = 1 }
            for (s in unf)
                if (!(s in named)) { print s ": an UNFOLLOWED row of hooks.def the table does not name"; bad = 1 }
            for (s in kind) {
                base = s
                sub(/_pt(sz|ds)$/, "", base)
                sub(/_v[0-9]+$/, "", base)
                if (kind[s] == "hook" && (base in harmless)) { print base ": said harmless, hooks.def wraps " s; bad = 1 }
            }
            exit bad
        }' "$D/hooks" "$D/list" "$D/rows"
}

@test "every entry point of the CUDA 13 runtime is hooked, taints replay, or is shown harmless, true to hooks.def" {
    run check_table "$LIST" "$TABLE" "$HOOKS"
    echo "$output"
    [ "$status" -eq 0 ]
    # The list is the whole trace: 345 names, as docs/entry-points.md rows.
    [ "$(grep -v '^#' "$LIST" | awk 'NF {print $1}' | sort -u | wc -l)" -eq "$(table_rows "$TABLE" | wc -l)" ]
}

@test "the table check fails on a name without a row, a hooked or tainting entry point hooks.def lacks, a stray UNFOLLOWED row" {
    # A name of the list with no row.
    grep -v '^| `cuMemcpyPeer` ' "$TABLE" >"$D/t1"
    run check_table "$LIST" "$D/t1" "$HOOKS"
    [ "$status" -ne 0 ] && [[ $output == *"cuMemcpyPeer: in the list, no row in the table"* ]] || { echo "$output"; false; }
    # Hooked, says the table; hooks.def has no wrapper of that name.
    sed 's/^| `cuEventQuery` | hooked: `cuEventQuery` |$/| `cuEventQuery` | hooked: `cuEventQuery_v2` |/' "$TABLE" >"$D/t2"
    run check_table "$LIST" "$D/t2" "$HOOKS"
    [ "$status" -ne 0 ] && [[ $output == *"cuEventQuery_v2 is said to be hooked, hooks.def has no row"* ]] || { echo "$output"; false; }
    # Taints replay, says the table; hooks.def lost the UNFOLLOWED row.
    grep -v '^UNFOLLOWED(CUresult, cuStreamAddCallback,' "$HOOKS" >"$D/h3"
    run check_table "$LIST" "$TABLE" "$D/h3"
    [ "$status" -ne 0 ] && [[ $output == *"cuStreamAddCallback is said to be an UNFOLLOWED row, hooks.def has no row"* ]] || { echo "$output"; false; }
    # A USE row is not a hook.
    sed 's/^| `cuPointerGetAttribute` | harmless: .*|$/| `cuPointerGetAttribute` | hooked: `cuPointerGetAttribute` |/' "$TABLE" >"$D/t4"
    run check_table "$LIST" "$D/t4" "$HOOKS"
    [ "$status" -ne 0 ] && [[ $output == *"cuPointerGetAttribute is a use row"* ]] || { echo "$output"; false; }
    # A wrapper the table calls harmless.
    sed 's/^| `cuStreamGetCtx` | hooked: .*|$/| `cuStreamGetCtx` | harmless: reads a stream'"'"'s properties |/' "$TABLE" >"$D/t6"
    run check_table "$LIST" "$D/t6" "$HOOKS"
    [ "$status" -ne 0 ] && [[ $output == *"cuStreamGetCtx: said harmless, hooks.def wraps cuStreamGetCtx"* ]] || { echo "$output"; false; }
    # Neither class, and a name asked for per-thread with no per-thread form.
    sed -e 's/^| `cuDeviceGetName` | harmless: .*|$/| `cuDeviceGetName` | fine |/' \
        -e 's/^| `cuMemcpyPeer` | taints replay: .*|$/| `cuMemcpyPeer` | taints replay: `cuMemcpyPeer` |/' "$TABLE" >"$D/t5"
    run check_table "$LIST" "$D/t5" "$HOOKS"
    [ "$status" -ne 0 ] && [[ $output == *'cuDeviceGetName: "fine" is neither'* ]] &&
        [[ $output == *"cuMemcpyPeer: asked for with the per-thread flag"* ]] &&
        [[ $output == *"cuMemcpyPeer_ptds: an UNFOLLOWED row of hooks.def the table does not name"* ]] || { echo "$output"; false; }
}

@test "libckpt.so exports a wrapper for every UNFOLLOWED row" {
    local lib=$BUILD/lib/libckpt.so missing=
    [ -f "$lib" ] || { echo "missing $lib: build first"; return 1; }
    nm -D --defined-only "$lib" | awk '{print $3}' | sort >"$D/exports"
    for s in $(hook_rows "$HOOKS" | awk '$1 == "unfollowed" {print $2}'); do
        grep -qx "$s" "$D/exports" || missing="$missing $s"
    done
    [ -z "$missing" ] || { echo "not exported:$missing"; false; }
}

@test "every call of NCCL's that takes a communicator (docs/nccl-comm-api.txt) has a row in hooks.def and a wrapper in libckpt.so: a standby's virtual handle never reaches NCCL" {
    local lib=$BUILD/lib/libckpt.so missing= n=0
    [ -f "$lib" ] || { echo "missing $lib: build first"; return 1; }
    nm -D --defined-only "$lib" | awk '{print $3}' | sort >"$D/exports"
    for s in $(grep -v '^#' "$ROOT/docs/nccl-comm-api.txt"); do
        n=$((n + 1))
        grep -q "^NCCL([^,]*, $s," "$HOOKS" || missing="$missing $s (no row)"
        grep -qx "$s" "$D/exports" || missing="$missing $s (not exported)"
    done
    [ "$n" -ge 37 ] && [ -z "$missing" ] || { echo "$n names; missing:$missing"; false; }
}

# The job: build/tests/progs/fid_memset under ckpt-resume with libckpt,
# killed once after iteration $1, a snapshot every third iteration; more
# arguments go to the program.  Output in $D/out, $D/err; the job's exit
# status in $D/rc.
memset_job() { # die-at [args...]
    local k=$1
    shift
    local rc=0
    env -u CKPT_JOB -u CKPT_RESTORE -u CKPT_BOUNDARY -u CKPT_FALLBACK -u LD_PRELOAD \
        CKPT_ARENA_DIR="$D/arena" CKPT_RESTART_BACKOFF=0 CKPT_KILL_GRACE=2 CKPT_EVERY=3 CKPT_LOG=info \
        FID_DIE_ONCE="$D/died" LD_PRELOAD="$BUILD/lib/libckpt.so" \
        timeout -k 5 120 "$BUILD/bin/ckpt-resume" --nproc 1 -- "$BUILD/tests/progs/fid_memset" --die-at "$k" "$@" \
        >"$D/out" 2>"$D/err" || rc=$?
    echo "$rc" >"$D/rc"
    [ -e "$D/died" ] || { echo "the program never got to the end of iteration $k"; tail -n 30 "$D/err"; return 1; }
}

@test "a program clearing its gradients with cudaMemset (cuMemsetD8_v2, followed) every iteration: restored exactly" {
    [ -x "$BUILD/tests/progs/fid_memset" ] || { echo "missing fid_memset: build first"; return 1; }
    "$BUILD/tests/progs/fid_memset" >"$D/plain"
    memset_job 14
    [ "$(cat "$D/rc")" -eq 0 ] || { cat "$D/err"; false; }
    grep -q '^libckpt\[rank 0\]: restored iteration ' "$D/err" || { cat "$D/err"; false; }
    grep -v -e '^libckpt' -e '^ckpt-resume' "$D/out" | resumed_output | diff "$D/plain" -
}

@test "a program calling cuStreamAddCallback every iteration: every restore is refused, naming it" {
    [ -x "$BUILD/tests/progs/fid_memset" ] || { echo "missing fid_memset: build first"; return 1; }
    "$BUILD/tests/progs/fid_memset" --callback-from 1 >"$D/plain"
    memset_job 14 --callback-from 1
    grep -q '^libckpt\[rank 0\]: warning: snapshots from iteration [0-9]* on cannot be restored by replay: cuStreamAddCallback: libckpt does not follow this call' "$D/err" ||
        { cat "$D/err"; false; }
    grep -E '^libckpt\[rank 0\]: error: restore of iteration [0-9]+ refused: .*cuStreamAddCallback' "$D/err" || { cat "$D/err"; false; }
    ! grep -q '^libckpt\[rank 0\]: restored iteration ' "$D/err" || { cat "$D/err"; false; }
    # No clean start without CKPT_FALLBACK=clean: the job stops, and what it
    # printed before it died is the plain run's.
    [ "$(cat "$D/rc")" -ne 0 ] || { cat "$D/err"; false; }
    head -n 14 "$D/plain" | diff - <(grep -v -e '^libckpt' -e '^ckpt-resume' "$D/out" | head -n 14)
}

@test "the same call only from iteration 11 on: newer snapshots are refused, an older one is restored exactly" {
    [ -x "$BUILD/tests/progs/fid_memset" ] || { echo "missing fid_memset: build first"; return 1; }
    "$BUILD/tests/progs/fid_memset" --callback-from 11 >"$D/plain"
    memset_job 14 --callback-from 11
    [ "$(cat "$D/rc")" -eq 0 ] || { cat "$D/err"; false; }
    local from restored
    from=$(sed -n 's/^libckpt\[rank 0\]: warning: snapshots from iteration \([0-9]*\) on cannot be restored by replay: cuStreamAddCallback: .*/\1/p' "$D/err" | head -n 1)
    restored=$(sed -n 's/^libckpt\[rank 0\]: restored iteration \([0-9]*\) .*/\1/p' "$D/err" | tail -n 1)
    [ -n "$from" ] && [ -n "$restored" ] && [ "$restored" -lt "$from" ] || { cat "$D/err"; false; }
    # The launches together printed exactly the plain run.
    grep -v -e '^libckpt' -e '^ckpt-resume' "$D/out" | resumed_output | diff "$D/plain" -
}
