#!/usr/bin/env bats
# scripts/gpu-check, the one script a GPU machine runs, kept from rotting:
# its --double mode runs the CUDA-trainer part of the flow on the CPU test
# double (plain run, run under libckpt, SIGKILL and resume) and prints the
# table, whose rows say the digests are equal and the resume bit-exact; a
# resume that is not bit-exact is reported and fails the run; the torch
# rows are skipped and say why.  Also: libckpt's CKPT_LOG=debug exit lines
# (what the GPU run proves the hooks with) count every kernel launch and
# every cuMemMap'ed range, and the PyTorch example at least compiles.

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    CHECK=$ROOT/scripts/gpu-check
    for f in "$BUILD/examples/mlp-train" "$BUILD/bin/ckpt-resume" "$BUILD/lib/libckpt.so" "$BUILD/bench/d2h_bw" \
        "$BUILD/tests/progs/statewriter"; do
        [ -x "$f" ] || { echo "missing $f: build first" >&2; return 1; }
    done
    D=$BATS_TEST_TMPDIR
    unset CKPT_JOB CKPT_RESTORE CKPT_LOG CKPT_EVERY CKPT_FAULT CKPT_STATS_FILE LD_PRELOAD GPU_CHECK_TRAINER
    export CKPT_ARENA_DIR=$D/arena
}

# result CHECK: the result column of the row named CHECK in the saved table.
result() { awk -F'\t' -v c="$1" '$1 == c { print $4 }' "$D/out/table.tsv"; }
column() { awk -F'\t' -v c="$1" -v k="$2" '$1 == c { print $k }' "$D/out/table.tsv"; }

@test "gpu-check --double: digests equal, kill and resume bit-exact, torch skipped, the table printed and saved" {
    run --separate-stderr env OUT="$D/out" BUILD="$BUILD" timeout 300 "$CHECK" --double
    [ "$status" -eq 0 ] || { echo "$output"; echo "$stderr"; return 1; }
    # The table on stdout is the one saved, and so is its markdown form;
    # six files in all, the logs packed in one.
    [ "$output" = "$(cat "$D/out/table.txt")" ]
    [ "$(ls "$D/out" | tr '\n' ' ')" = "env.txt logs.tar.gz progress.txt table.md table.tsv table.txt " ]
    tar -xzf "$D/out/logs.tar.gz" -C "$D/out"
    [ "$(grep -c '^| ' "$D/out/table.md")" -eq $(($(wc -l <"$D/out/table.tsv") + 1)) ]

    [ "$(result 'build')" = "ok: libckpt.so, ckpt-resume, ckpt-inspect, trainer" ]
    [[ $(result 'pinned D2H bandwidth (the limit)') =~ ^[0-9]+\.[0-9]+\ GB/s ]]

    # The same digest without and with libckpt, a real one, and "equal".
    row='mlp (double): digest and loss lines'
    [ "$(result "$row")" = equal ]
    [[ $(column "$row" 2) =~ ^[0-9a-f]{16}$ ]]
    [ "$(column "$row" 2)" = "$(column "$row" 3)" ]
    # It is the trainer's digest for these arguments.
    [ "$(column "$row" 2)" = "$("$BUILD/examples/mlp-train" --iters 30 --hidden 64 --layers 3 | sed -n 's/^digest //p')" ]

    # Killed at iteration 23, restored from the snapshot of 20, bit-exact.
    row='mlp (double): kill at iteration 23 and resume'
    [[ $(result "$row") == "bit-exact; restored iteration 20: replay took "*" s, copying back "*" GB/s)" ]]
    [ "$(column "$row" 2)" = "$(column "$row" 3)" ]
    grep -Eq '^ckpt-resume: done exit=0 restarts=1 \(cold [0-9]+\.[0-9]{3} s\)$' "$D/out/logs/mlp--double-.kill.err"
    grep -q 'CKPT_FAULT' "$D/out/logs/mlp--double-.kill.err"

    # Snapshots were taken at every iteration and measured against the limit.
    [[ $(result 'mlp (double): snapshot throughput') =~ ^[0-9]+\.[0-9]+\ of\ the\ limit$ ]]
    [ "$(wc -l <"$D/out/logs/mlp--double-.stats")" -ge 20 ]
    [[ $(result 'mlp (double): iteration time, CKPT_EVERY=1') =~ ^[-+][0-9.]+% ]]

    # Through a shadow in device memory: the same digest, and killed and resumed bit-exact.
    [[ $(result 'mlp (double): iteration time, CKPT_EVERY=1, CKPT_SHADOW_MB=256') =~ \(([1-9][0-9]*)\ snapshots\ through\ the\ shadow\)$ ]]
    [ "$(result 'mlp (double): kill at iteration 23 and resume, CKPT_SHADOW_MB=256')" = bit-exact ]

    # The kept arena verifies, and its timeline has GPU-timed collectives.
    [ "$(result 'mlp (double): newest snapshot verifies (ckpt-inspect)')" = yes ]
    [[ $(column 'mlp (double): newest snapshot verifies (ckpt-inspect)' 3) == *"(iteration 30) verified on all 1 rank" ]]
    [ "$(result 'mlp (double): collectives timed by the GPU (profiler events)')" = yes ]

    # The hooks rows, from libckpt's debug exit lines.
    [ "$(result 'mlp (double): kernel launches through the hooks')" = yes ]
    [[ $(column 'mlp (double): kernel launches through the hooks' 3) =~ ^libcudart.so.13\ [1-9][0-9]*$ ]]
    [ "$(result 'mlp (double): NCCL-internal driver calls hooked')" = yes ]
    [ "$(result 'mlp (double): NCCL profiler plugin from libckpt.so')" = yes ]

    # No torch here: each torch row says so.  (With torch, the double still runs none.)
    for r in 'torch default allocator: kill and resume' 'torch expandable segments: kill and resume' \
        'save: torch.save / DCP async_save / libckpt' 'hooks: cuBLAS launches, expandable segments'; do
        [[ $(result "$r") == "skipped: no torch" || $(result "$r") == "skipped: no GPU"* ]] || { echo "$r: $(result "$r")"; return 1; }
    done
    [ -s "$D/out/env.txt" ] && [ -s "$D/out/progress.txt" ]
}

@test "gpu-check --double: a resume that is not bit-exact is reported DIFFERENT and fails the run" {
    # The restarted launch trains with another learning rate: the restore
    # itself succeeds, the iterations after it differ.
    cat >"$D/trainer" <<EOF
#!/bin/sh
if [ -n "\${CKPT_RESTORE:-}" ]; then exec "$BUILD/examples/mlp-train" "\$@" --lr 0.002; fi
exec "$BUILD/examples/mlp-train" "\$@"
EOF
    chmod +x "$D/trainer"
    run --separate-stderr env OUT="$D/out" BUILD="$BUILD" GPU_CHECK_TRAINER="$D/trainer" timeout 300 "$CHECK" --double
    [ "$status" -eq 1 ] || { echo "$output"; echo "$stderr"; return 1; }
    [ "$(result 'mlp (double): digest and loss lines')" = equal ]
    [[ $(result 'mlp (double): kill at iteration 23 and resume') == "DIFFERENT loss lines or digest"* ]]
    [ "$(column 'mlp (double): kill at iteration 23 and resume' 2)" != "$(column 'mlp (double): kill at iteration 23 and resume' 3)" ]
}

@test "gpu-check refuses an unknown argument, and --help describes the modes" {
    run "$CHECK" --frobnicate
    [ "$status" -eq 2 ]
    [[ $output == *"unknown argument '--frobnicate'"* ]]
    run "$CHECK" --help
    [ "$status" -eq 0 ]
    [[ $output == *"--double"* && $output == *"--prepare"* && $output == *"GPU_CHECK_BUDGET"* ]]
}

# launches FILE: the kernel launches libckpt's debug exit line counts.
launches() { sed -n 's/.*hooks: kernel launches: libcudart.so.13 \([0-9]*\)$/\1/p' "$1"; }

@test "CKPT_LOG=debug: libckpt counts every kernel launch and NCCL's own allocations at exit, and only at that level" {
    for n in 5 10 15; do
        CKPT_LOG=debug LD_PRELOAD=$BUILD/lib/libckpt.so "$BUILD/examples/mlp-train" --iters $n --hidden 64 --layers 3 \
            >/dev/null 2>"$D/err.$n"
    done
    a=$(launches "$D/err.5") b=$(launches "$D/err.10") c=$(launches "$D/err.15")
    echo "launches: $a $b $c"
    [ -n "$a" ] && [ "$a" -gt 0 ]
    # The same number of launches per iteration: each one was counted.
    [ $((b - a)) -gt 0 ] && [ $((c - b)) -eq $((b - a)) ]
    grep -q 'hooks: allocations: .*libnccl.so.2 [0-9]* (NCCL-internal [1-9][0-9]*)' "$D/err.5"
    # NCCL's buffers are cuMem ranges, as NCCL makes them by default (two per communicator in the double).
    grep -q 'hooks: cuMemMap ranges: program 0 (0.0 MiB), NCCL-internal 2 (4.0 MiB); communicators that loaded libckpt as NCCL profiler plugin: 1$' "$D/err.5"
    LD_PRELOAD=$BUILD/lib/libckpt.so "$BUILD/examples/mlp-train" --iters 5 --hidden 64 --layers 3 >/dev/null 2>"$D/err.info"
    ( ! grep -q 'hooks:' "$D/err.info" )
}

@test "CKPT_LOG=debug: libckpt counts the cuMemCreate/cuMemMap ranges it tracks, as PyTorch's expandable segments make them" {
    # statewriter --churn maps new 2 MiB ranges as it goes (tests/progs/statewriter.c).
    for n in 3 6 9; do
        CKPT_LOG=debug CKPT_BOUNDARY=every:1 LD_PRELOAD=$BUILD/lib/libckpt.so "$BUILD/tests/progs/statewriter" \
            --iters $n --churn >/dev/null 2>"$D/err.$n"
        sed -n 's/.*hooks: cuMemMap ranges: program \([0-9]*\) (\([0-9]*\)\.0 MiB), NCCL-internal 0 .*/\1 \2/p' \
            "$D/err.$n" >"$D/vmm.$n"
    done
    read -r a amib <"$D/vmm.3"
    read -r b bmib <"$D/vmm.6"
    read -r c cmib <"$D/vmm.9"
    echo "ranges: $a $b $c; MiB: $amib $bmib $cmib"
    [ "$a" -gt 0 ] && [ $((b - a)) -gt 0 ] && [ $((c - b)) -eq $((b - a)) ]
    [ "$amib" -eq $((2 * a)) ] && [ "$cmib" -eq $((2 * c)) ]
}

@test "the PyTorch example compiles" {
    PYTHONPYCACHEPREFIX=$D/pycache python3 -m py_compile "$ROOT/examples/pytorch/train_gpt.py"
}
