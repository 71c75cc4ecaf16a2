# scripts/gpu/premise.sh: the premise checks of scripts/gpu-check, which
# sources it and calls premise_part first, before the rest (docs/gpu.md,
# "Premise checks").  Each check is a program in scripts/gpu/ that prints
# its table rows as it goes (scripts/gpu/pcommon.py) and leaves its JSON in
# logs/premise/; this file runs them under gpu-check's timeouts (run, limit),
# turns their rows into gpu-check's (row), builds and runs the fidelity
# programs, and merges the JSON into $OUT/premise.json after every check.
# It uses gpu-check's functions and variables and defines only premise_*.
# Without python3, torch or CUDA a check's rows say "skipped: <why>"; a check
# that breaks or hangs costs its own rows and time, never the rest of the run.
# shellcheck shell=bash

# premise_torch: what the premise checks are told of PyTorch (cuda, nocuda, absent).
premise_torch() {
    case "$TORCH_INFO" in
    absent) echo absent ;;
    *nocuda) echo nocuda ;;
    *) echo cuda ;;
    esac
}

# premise_py NAME WANT SCRIPT ARGS...: runs scripts/gpu/SCRIPT main under a
# timeout of limit(WANT), telling it that budget less a margin, and adds the
# rows it printed; a check that printed none, or stopped early, gets a row
# that says why.
premise_py() {
    local name=$1 want=$2 script=$3 t rc n=0 tag a b c d
    shift 3
    t=$(limit "$want")
    if [ "$t" -eq 0 ]; then
        row "premise $name" "" "" "skipped: out of time (GPU_CHECK_PREMISE_BUDGET=$PREMISE_BUDGET)"
        return
    fi
    LD_LIBRARY_PATH=$P_LD PYTHONDONTWRITEBYTECODE=1 run "premise.$name" "$t" \
        python3 "$ROOT/scripts/gpu/$script" main --out "$LOGS/premise" --budget $((t > 20 ? t - 8 : t - 2)) "$@"
    rc=$?
    while IFS=$'\t' read -r tag a b c d; do
        [ "$tag" = row ] || continue
        row "$a" "$b" "$c" "$d"
        n=$((n + 1))
    done < <(cat "$LOGS/premise.$name.out" 2>/dev/null)
    if [ "$rc" -ne 0 ] && [ "$n" -eq 0 ]; then
        row "premise $name" "" "" "FAILED: $(why "$rc"): $(err "premise.$name") (logs/premise.$name.err)"
    elif [ "$rc" -ne 0 ]; then
        row "premise $name: cut short" "" "" "FAILED: $(why "$rc") after $n rows (logs/premise.$name.err)"
    fi
    premise_json
}

# premise_json: $OUT/premise.json, rewritten whole: every premise row of the
# table and each check's JSON (logs/premise/NAME.json: rows, measurements).
premise_json() {
    command -v python3 >/dev/null || return 0
    python3 - "$OUT/table.tsv" "$LOGS/premise" "$OUT/premise.json" "$MODE" "$PREMISE_BUDGET" "$((SECONDS - P_START))" <<'PY' 2>>"$LOGS/premise.json.err" || true
import glob, json, os, sys
tsv, d, out, mode, budget, took = sys.argv[1:7]
rows = []
with open(tsv) as f:
    for ln in f:
        cells = ln.rstrip("\n").split("\t")
        if cells and cells[0].startswith("premise"):
            rows.append(cells)
checks = {}
for p in sorted(glob.glob(os.path.join(d, "*.json"))):
    name = os.path.basename(p)[:-5]
    if "." in name:  # a child's record, in the logs only
        continue
    try:
        with open(p) as f:
            checks[name] = json.load(f)
    except (OSError, ValueError) as e:
        checks[name] = {"error": str(e)}
with open(out + ".part", "w") as f:
    json.dump({"mode": mode, "budget_s": int(budget), "seconds": int(took), "rows": rows, "checks": checks},
              f, indent=1, sort_keys=True)
    f.write("\n")
os.replace(out + ".part", out)
PY
}

# premise_unportable FILE: why FILE cannot be built by nvcc as it is (the
# double's kernel convention: kernels that are host functions taking the
# launch's void **args, or the double's own interface), or nothing.
# examples/common/kernels.h's KERNEL() is what makes one source build for both.
premise_unportable() {
    local f=$1
    if grep -qE 'fakegpu_[a-z]|#[[:space:]]*include[[:space:]]*[<"][^>"]*fakegpu' "$f"; then
        echo "uses the double's own interface (fakegpu_*)"
    elif grep -qE '(^|[^A-Za-z0-9_])void[[:space:]]+[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\([[:space:]]*void[[:space:]]*\*[[:space:]]*\*[[:space:]]*[A-Za-z_0-9]*[[:space:]]*\)' "$f" &&
        grep -qE 'cudaLaunchKernel|cuLaunchKernel' "$f" && ! grep -qE '__CUDACC__|KERNEL\(' "$f" &&
        ! grep -qE '#[[:space:]]*include[[:space:]]*"kernels.h"' "$f"; then
        echo "its kernels are host functions taking void **args (the double's convention), not KERNEL() of examples/common/kernels.h"
    fi
}

# premise_fid_case PROG: "K FROM EXPECT" for a fidelity program, from its
# line in tests/scenarios/fidelity.bats ("fidelity PROG EXPECT LOW HIGH
# [FROM]"), K the middle of LOW..HIGH; "14 0 restore" for one not there.
# (The expectation comes last: it may hold spaces.)
premise_fid_case() {
    local f=() line
    # xargs splits the line as the shell would (an expectation is quoted
    # and may hold spaces).
    line=$(grep -m 1 -E "^[[:space:]]*fidelity $1 " "$ROOT/tests/scenarios/fidelity.bats" 2>/dev/null)
    [ -n "$line" ] && mapfile -t f < <(xargs -n 1 printf '%s\n' <<<"$line" 2>/dev/null)
    if [ ${#f[@]} -ge 5 ]; then
        echo "$(((f[3] + f[4]) / 2)) ${f[5]:-0} ${f[2]}"
    else
        echo "14 0 restore"
    fi
}

# premise_fid_build NAME FILE: nvcc FILE -> $P_BIN/NAME (the real headers
# and libraries, as examples/mlp is built), in at most P_FID_T seconds; its
# log in logs/.
premise_fid_build() {
    local name=$1 f=$2 libs=(-ldl -lpthread -lm) log=$LOGS/premise.fid.$1.build.log
    grep -q '<nccl.h>' "$f" && libs+=(-lnccl)
    if grep -qE '(^|[^A-Za-z0-9_])cu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' "$f"; then
        [ -n "$CUDA_HOME" ] && libs+=(-L"$CUDA_HOME/lib64/stubs")
        libs+=(-lcuda)
    fi
    echo "nvcc $f -> $P_BIN/$name" >"$log"
    CPATH=$P_INC${CPATH:+:$CPATH} LIBRARY_PATH=$P_LIBP${LIBRARY_PATH:+:$LIBRARY_PATH} timeout -k 5 "$P_FID_T" \
        "$NVCC" -O2 -arch=sm_90 -Iexamples/common -Itests/progs -x cu "$f" -o "$P_BIN/$name" "${libs[@]}" >>"$log" 2>&1
}

# premise_fid: each fidelity program (tests/progs/fid_*.c, as
# tests/scenarios/fidelity.bats runs them on the double): built by nvcc when
# it is portable (all at once), run twice without libckpt (the same output,
# or it cannot be judged here), then under ckpt-resume, killing itself once
# after iteration K (--die-at K, FID_DIE_ONCE), a snapshot every third
# iteration.  A program expected to be restored must come back from a
# snapshot with exactly the plain run's output; one expected to be refused
# (the host reads managed or mapped memory) must have its restore refused
# with the reason.  One that nvcc cannot build as it is, is listed "not
# portable to nvcc yet" with nvcc's first error; that is not a failure.
# The programs named in GPU_CHECK_FID_LAZY (default fid_ptrtable) run a
# second time with CUDA_MODULE_LOADING=LAZY ("NAME.lazy" rows).
premise_fid() {
    local f name why bin rc files=() expect k from plain out lines last restored pids=() notp=()
    local glob=${GPU_CHECK_FID_GLOB:-tests/progs/fid_*.c}
    for f in $glob; do
        [ -f "$f" ] && files+=("$f")
    done
    if [ ${#files[@]} -eq 0 ]; then
        row "premise fidelity programs ($glob)" "" "" "skipped: none in this tree"
        return
    fi
    mkdir -p "$P_BIN"
    P_FID_T=$(limit 60)
    if [ "$P_FID_T" -eq 0 ]; then
        row "premise fidelity programs ($glob)" "" "" "skipped: out of time (GPU_CHECK_PREMISE_BUDGET=$PREMISE_BUDGET)"
        return
    fi
    declare -A WHY=()
    for f in "${files[@]}"; do
        name=$(basename "$f" .c)
        WHY[$name]=$(premise_unportable "$f")
        if [ -z "${WHY[$name]}" ] && [ "$MODE" = gpu ]; then
            if [ -z "$NVCC" ]; then
                WHY[$name]="no nvcc here to build it"
            else
                premise_fid_build "$name" "$f" &
                pids+=($!)
            fi
        fi
    done
    [ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
    # Then each of GPU_CHECK_FID_LAZY again under lazy module loading, which
    # the user may choose (ckpt-resume's ranks load eagerly by default):
    # replay must load what its suppressed launches would have.
    local cases=() pre lazy
    for f in "${files[@]}"; do cases+=("$(basename "$f" .c)"); done
    for lazy in ${GPU_CHECK_FID_LAZY-fid_ptrtable}; do
        [ -n "${WHY[$lazy]+set}" ] && cases+=("$lazy.lazy")
    done
    for name in "${cases[@]}"; do
        pre=()
        [ "$name" != "${name%.lazy}" ] && pre=(env CUDA_MODULE_LOADING=LAZY)
        why=${WHY[${name%.lazy}]}
        bin=$P_BIN/${name%.lazy}
        [ "$MODE" = double ] && bin=$BUILD/tests/progs/${name%.lazy}
        if [ -z "$why" ] && [ ! -x "$bin" ]; then
            if [ "$MODE" = double ]; then
                why="not built for the double ($bin)"
            else
                why="nvcc: $(grep -m 1 -E 'error|undefined' "$LOGS/premise.fid.$name.build.log" | sed 's#^[^ ]*tests/progs/##' |
                    cut -c1-150) (logs/premise.fid.$name.build.log)"
            fi
        fi
        if [ -n "$why" ]; then
            notp+=("$name")
            row "premise fidelity: $name" "" "" "not portable to nvcc yet: $why"
            continue
        fi
        if [ "$(limit 30)" -eq 0 ]; then
            row "premise fidelity: $name" "" "" "skipped: out of time (GPU_CHECK_PREMISE_BUDGET=$PREMISE_BUDGET)"
            continue
        fi
        read -r k from expect <<<"$(premise_fid_case "${name%.lazy}")"
        # A program that writes files of its own (fid_files) gets a fresh
        # directory for each run; they are compared with the output.
        mkdir -p "$SCRATCH/fidfiles/$name."{plain,plain2,job}
        FID_FILES_DIR=$SCRATCH/fidfiles/$name.plain run "premise.fid.$name.plain" 30 "${pre[@]}" "$bin"
        rc=$?
        plain=$LOGS/premise.fid.$name.plain.out
        if [ "$rc" -ne 0 ]; then
            row "premise fidelity: $name" "$(why "$rc")" "" "FAILED without libckpt: $(err "premise.fid.$name.plain")"
            continue
        fi
        FID_FILES_DIR=$SCRATCH/fidfiles/$name.plain2 run "premise.fid.$name.plain2" 30 "${pre[@]}" "$bin"
        if ! diff -q "$plain" "$LOGS/premise.fid.$name.plain2.out" >/dev/null ||
            ! diff -qr "$SCRATCH/fidfiles/$name.plain" "$SCRATCH/fidfiles/$name.plain2" >/dev/null; then
            row "premise fidelity: $name" "$(digest_of "$plain")" "" \
                "not judged: two plain runs differ on this GPU (logs/premise.fid.$name.plain*.out)"
            continue
        fi
        out=$LOGS/premise.fid.$name.job
        rm -f "$SCRATCH/fid-$name.died"
        FID_FILES_DIR=$SCRATCH/fidfiles/$name.job FID_DIE_ONCE=$SCRATCH/fid-$name.died CKPT_EVERY=3 CKPT_LOG=info CKPT_JOB=gc-fid-$name \
            run "premise.fid.$name.job" 90 "${pre[@]}" "$RESUME" --nproc 1 -- "$bin" --die-at "$k"
        rc=$?
        lines=$(grep -v -e '^libckpt' -e '^ckpt-resume' "$out.out")
        last=$(awk -f "$ROOT/scripts/resumed-output.awk" <<<"$lines")
        restored=$(sed -n 's/^libckpt\[rank 0\]: restored iteration \([0-9]*\) .*/\1/p' "$out.err" | tail -n 1)
        if [ ! -e "$SCRATCH/fid-$name.died" ]; then
            row "premise fidelity: $name" "$(digest_of "$plain")" "$(why "$rc")" "FAILED: never killed itself (--die-at $k; logs/premise.fid.$name.job.err)"
        elif [ "$rc" -eq 0 ] && [ "$last" != "$(cat "$plain")" ]; then
            row "premise fidelity: $name" "$(digest_of "$plain")" "$(digest_of <(echo "$last"))" \
                "DIFFERENT: WRONG STATE: the job exited 0 with other output than the plain run (killed after $k)"
        elif [ "$rc" -eq 0 ] && ! diff -qr "$SCRATCH/fidfiles/$name.plain" "$SCRATCH/fidfiles/$name.job" >/dev/null; then
            row "premise fidelity: $name" "$(digest_of "$plain")" "$(digest_of <(echo "$last"))" \
                "DIFFERENT: WRONG STATE: the job exited 0 with other files than the plain run wrote (killed after $k)"
        elif [ "${expect%%:*}" = either ] && [ -z "$restored" ]; then
            # Either restored exactly (the branch below) or refused for this reason.
            local reason
            reason=$(grep -E '^(libckpt|ckpt-resume)' "$out.err" | grep -i 'refused' | grep -iE -m 1 -- "${expect#either:}" | cut -c1-140)
            if [ -n "$reason" ]; then
                row "premise fidelity: $name" "$(digest_of "$plain")" "refused" "refused as it may be: $reason"
            else
                row "premise fidelity: $name" "$(digest_of "$plain")" "$(why "$rc")" "FAILED: neither restored nor refused matching '${expect#either:}' (logs/premise.fid.$name.job.err)"
            fi
        elif [ "${expect%%:*}" = refuse ]; then
            local reason
            reason=$(grep -E '^(libckpt|ckpt-resume)' "$out.err" | grep -iE 'refus|unrestorable|not restorable|cannot be restored|cannot restore' |
                grep -iE -m 1 -- "${expect#refuse:}" | cut -c1-140)
            if [ -n "$restored" ]; then
                row "premise fidelity: $name" "$(digest_of "$plain")" "restored $restored" "FAILED: restored, but libckpt cannot replay it (expected: $expect)"
            elif [ -n "$reason" ]; then
                row "premise fidelity: $name" "$(digest_of "$plain")" "refused" "refused as expected: $reason"
            else
                row "premise fidelity: $name" "$(digest_of "$plain")" "$(why "$rc")" "FAILED: no refusal matching '${expect#refuse:}' (logs/premise.fid.$name.job.err)"
            fi
        elif [ "$rc" -ne 0 ]; then
            row "premise fidelity: $name" "$(digest_of "$plain")" "$(why "$rc")" "FAILED under libckpt: $(err "premise.fid.$name.job")"
        elif [ -z "$restored" ] || [ "$restored" -lt "$from" ]; then
            row "premise fidelity: $name" "$(digest_of "$plain")" "$(digest_of <(echo "$last"))" \
                "FAILED: killed after $k, $([ -n "$restored" ] && echo "restored iteration $restored, before $from" || echo "no snapshot restored")"
        else
            row "premise fidelity: $name" "$(digest_of "$plain")" "$(digest_of <(echo "$last"))" \
                "restored iteration $restored after a kill at $k: output identical"
        fi
    done
    [ ${#notp[@]} -gt 0 ] && say "premise: not portable to nvcc yet: ${notp[*]}"
    return 0
}

# premise_part: the premise checks, in the order of what they decide.
premise_part() {
    local torch ep
    say "premise checks: budget ${PREMISE_BUDGET}s"
    mkdir -p "$LOGS/premise"
    # PyTorch's own CUDA and NCCL; the double's driver for --double (so the
    # checks that need only a driver run on it there).
    P_LD=$LD_TORCH
    [ "$MODE" = double ] && P_LD=$BUILD/fake${LD_TORCH:+:$LD_TORCH}
    P_BIN=$SCRATCH/premise-bin
    build_paths "$SCRATCH"
    # shellcheck disable=SC2153 # set by build_paths (scripts/gpu-check)
    P_INC=$BP_INC P_LIBP=$BP_LIB
    if ! command -v python3 >/dev/null; then
        row "premise checks" "" "" "skipped: no python3"
        premise_fid
        return
    fi
    torch=$(premise_torch)
    # On the double, a CPU-only torch can stand in for the torch checks
    # (GPU_CHECK_PREMISE_CPU=1, for testing this script; few steps).
    local cpu=()
    [ "$MODE" = double ] && [ "${GPU_CHECK_PREMISE_CPU:-0}" = 1 ] && [ "$torch" = nocuda ] && cpu=(--device cpu --steps 3)

    # What judges libckpt itself first, then the cheap checks, then the
    # long ones: when the budget is short, what is cut is the last.
    premise_fid

    # The entry points: the program built with the rest (build_into), else
    # prebuilt; for the double, built here against it.
    ep=""
    if [ "$MODE" = double ]; then
        mkdir -p "$P_BIN"
        "${CC:-cc}" -x c -std=gnu11 -O2 -D_GNU_SOURCE -Iinterpose/abi -Itests/fake/include -Iexamples/common \
            -o "$P_BIN/entrypoints" scripts/gpu/entrypoints.cu -L"$BUILD/fake" -lcudart -Wl,-rpath,"$BUILD/fake" \
            -pthread >"$LOGS/premise.entrypoints.build.log" 2>&1 && ep=$P_BIN/entrypoints
    elif [ -x "$FRESH/gpu/entrypoints" ]; then
        ep=$FRESH/gpu/entrypoints
    elif [ -x "$BUILD/gpu/entrypoints" ]; then
        ep=$BUILD/gpu/entrypoints
    fi
    premise_py entrypoints 30 premise_entrypoints.py --bin "$ep" --lib "$LIB"

    premise_py context 45 premise_context.py --torch "$torch"
    premise_py addresses 120 premise_addresses.py --torch "$torch"
    premise_py determinism 100 premise_determinism.py --torch "$torch" --lib "$LIB" ${cpu[@]+"${cpu[@]}"}
    if [ ${#cpu[@]} -gt 0 ]; then
        premise_py allocators 120 premise_allocators.py --torch "$torch" --lib "$LIB" --resume "$RESUME" --device cpu --steps 6
    else
        premise_py allocators 180 premise_allocators.py --torch "$torch" --lib "$LIB" --resume "$RESUME"
    fi
    premise_json
    # The arenas the runs under LD_PRELOAD alone (no ckpt-resume to remove them) left.
    rm -rf "${CKPT_ARENA_DIR:?}/$(id -u)-gc-premise-"* "${CKPT_ARENA_DIR:?}/$(id -u)-gc-fid-"*
    say "premise checks: done in $((SECONDS - P_START)) s"
}
