#!/usr/bin/env bats
# ckpt-doctor's verdicts, from the files alone: the trainer built against
# the double (shared runtime, NCCL linked), nvcc's static runtime, a program
# without CUDA, programs LD_PRELOAD cannot enter (static, set-user-ID), a
# missing library and LD_LIBRARY_PATH, what only limits protection (an own
# dlsym, NCCL linked in statically), what is out of reach (libraries opened
# at run time, RTLD_DEEPBIND), torch for a Python interpreter, and --json.
# Exit status: 0 protected, 1 with limits, 2 not protected, 3 not checked.
# Small programs are built here, with cc (and nvcc where a toolkit is).

bats_require_minimum_version 1.5.0

BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
BUILD=$(cd "$BUILD" && pwd)
DOCTOR=$BUILD/bin/ckpt-doctor
FAKE=$BUILD/fake
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

# replay-check runs programs: built with a sanitizer they need the path
# make check-sanitize gives them (ASan hides the double's RUNPATH).
RUN_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}

setup() {
    [ -x "$DOCTOR" ] || { echo "missing $DOCTOR: build first" >&2; return 1; }
    D=$BATS_TEST_TMPDIR
    unset LD_LIBRARY_PATH PYTHONPATH CKPT_DISABLE
}

# An object using the double's runtime: cc_cuda OUT [cc args...]; the
# args name the sources with main, or $D/main.c.
cc_cuda() {
    local out=$1
    shift
    cat >"$D/uses_cuda.c" <<'EOF'
int cudaMalloc(void **p, unsigned long n);
int uses_cuda(void) { void *p; return cudaMalloc(&p, 16); }
EOF
    echo 'int main(void) { return 0; }' >"$D/main.c"
    cc -o "$out" "$D/uses_cuda.c" "$@" -L"$FAKE" -lcudart -Wl,-rpath,"$FAKE"
}

@test "the trainer on the double: shared runtime, NCCL linked, protected" {
    run -0 "$DOCTOR" "$BUILD/examples/mlp-train"
    echo "$output"
    [[ $output == *"shared runtime: libcudart.so.13 => $BUILD/examples/../fake/libcudart.so.13"* ]]
    [[ $output == *"NCCL:        libnccl.so.2 => $BUILD/examples/../fake/libnccl.so.2"* ]]
    [[ $output == *"libcuda.so.1 would be opened from $BUILD/examples/../fake/libcuda.so.1 (found through RUNPATH)"* ]]
    [ "${lines[-1]}" = "  verdict:     protected" ]
}

@test "an arena filesystem too small for snapshots (a container's 64 MiB /dev/shm) is named, with the fix; a large one is not" {
    mkdir -p "$D/shm"
    mount -t tmpfs -o size=64m tmpfs "$D/shm" 2>/dev/null || skip "cannot mount a small tmpfs here"
    run -0 env CKPT_ARENA_DIR="$D/shm/ckpt" "$DOCTOR" "$BUILD/examples/mlp-train"
    echo "$output"
    [[ $output == *"note:        CKPT_ARENA_DIR=$D/shm/ckpt is on a filesystem of 64.0 MiB (64.0 MiB free): every rank of a node needs CKPT_SLOTS=2 snapshot slots"* ]]
    [[ $output == *"fix:       make it larger (Docker: --shm-size; Kubernetes: an emptyDir volume with medium: Memory"* ]]
    [ "${lines[-1]}" = "  verdict:     protected" ] # a note: what a job needs is known only when it runs
    # With the snapshot's size declared (CKPT_HOST_MEM), a problem.
    run env CKPT_ARENA_DIR="$D/shm/ckpt" CKPT_HOST_MEM=48M "$DOCTOR" "$BUILD/examples/mlp-train"
    umount "$D/shm"
    echo "$output"
    [[ $output == *"CKPT_ARENA_DIR=$D/shm/ckpt has 64.0 MiB free: not even one rank's 2 slots of CKPT_HOST_MEM=48.0 MiB fit"* ]]
    [ "${lines[-1]}" != "  verdict:     protected" ]
    mkdir -p "$D/big"
    mount -t tmpfs -o size=4g tmpfs "$D/big" || return 1
    run -0 env CKPT_ARENA_DIR="$D/big/ckpt" "$DOCTOR" "$BUILD/examples/mlp-train"
    [[ $output != *"CKPT_ARENA_DIR="* ]] || { echo "$output"; false; }
    run -0 env CKPT_ARENA_DIR="$D/big/ckpt" CKPT_HOST_MEM=1G CKPT_SLOTS=1 "$DOCTOR" "$BUILD/examples/mlp-train"
    umount "$D/big"
    [[ $output == *"CKPT_ARENA_DIR=$D/big/ckpt has room for 4 ranks of 1 slot of CKPT_HOST_MEM=1024.0 MiB"* ]] ||
        { echo "$output"; false; }
}

@test "nvcc's static runtime (the toolkit's trainer): reached through dlsym and cuGetProcAddress, protected" {
    [ -x "$BUILD/examples/mlp-train-cuda" ] || skip "no CUDA toolkit: build/examples/mlp-train-cuda not built"
    run -0 "$DOCTOR" "$BUILD/examples/mlp-train-cuda"
    echo "$output"
    [[ $output == *"static runtime: mlp-train-cuda itself"* ]]
    [[ $output == *"through dlsym and cuGetProcAddress"* ]]
    [[ $output != *"shared runtime"* ]]
    # The toolkit's NCCL names its version in its banner.
    [[ $output =~ NCCL:\ +libnccl.so.2\ =\>\ [^,]+,\ version\ [0-9]+\.[0-9]+\.[0-9]+ ]]
    [ "${lines[-1]}" = "  verdict:     protected" ]
}

@test "a stripped binary with the static runtime, built here by nvcc, is still recognised" {
    [ -x "$CUDA_HOME/bin/nvcc" ] || skip "no CUDA toolkit at $CUDA_HOME"
    cat >"$D/k.cu" <<'EOF'
__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }
int main() { float *x; cudaMalloc(&x, 64); k<<<1, 16>>>(x); return cudaDeviceSynchronize(); }
EOF
    "$CUDA_HOME/bin/nvcc" -arch=sm_90 -o "$D/k" "$D/k.cu"
    strip "$D/k"
    run -0 "$DOCTOR" "$D/k"
    echo "$output"
    [[ $output == *"carries device code"* ]]
    [[ $output == *"static runtime: k itself"* ]]
    [[ $output != *"NCCL:"* ]]
    [ "${lines[-1]}" = "  verdict:     protected" ]
}

@test "a program with no CUDA is not protected: nothing to protect" {
    run -2 "$DOCTOR" true
    echo "$output"
    [[ $output == *"no CUDA: nothing in true or the libraries it needs links or opens the CUDA runtime or driver"* ]]
    [ "${lines[-1]}" = "  verdict:     not protected" ]
}

@test "a statically linked program is not protected: LD_PRELOAD cannot work" {
    echo 'int main(void) { return 0; }' >"$D/st.c"
    cc -static -o "$D/st" "$D/st.c" 2>/dev/null || skip "no static C library"
    run -2 "$DOCTOR" "$D/st"
    echo "$output"
    [[ $output == *"st is statically linked: it has no dynamic loader, so LD_PRELOAD cannot work"* ]]
    [[ $output == *"fix:       link it dynamically"* ]]
}

@test "a set-user-ID program is not protected: the loader ignores LD_PRELOAD" {
    cc_cuda "$D/suid" "$D/main.c"
    run -0 "$DOCTOR" "$D/suid"
    chmod u+s "$D/suid"
    run -2 "$DOCTOR" "$D/suid"
    echo "$output"
    [[ $output == *"secure-execution mode"* ]]
}

@test "RTLD_DEEPBIND: libraries opened at run time are named as out of reach; -Bgroup is said, not feared" {
    cat >"$D/plug.c" <<'EOF'
#include <dlfcn.h>
int main(void) { return !dlopen("libplugin.so", RTLD_NOW | RTLD_DEEPBIND); }
EOF
    cc_cuda "$D/plug" "$D/plug.c" -ldl
    run -0 "$DOCTOR" "$D/plug"
    echo "$output"
    [[ $output == *"out of reach: libraries opened at run time by plug; one opened with RTLD_DEEPBIND"* ]]
    cc_cuda "$D/libgroup.so" -shared -fPIC -Wl,-Bgroup
    run -0 "$DOCTOR" "$D/libgroup.so"
    echo "$output"
    [[ $output == *"64-bit x86-64 shared object"* ]]
    [[ $output == *"libgroup.so is linked with -Bgroup (DF_1_GROUP)"*"glibc ignores the flag"* ]]
}

@test "a program that defines its own dlsym is protected with limits (exit 1)" {
    cat >"$D/own.c" <<'EOF'
void *dlsym(void *handle, const char *name) { (void)handle; (void)name; return 0; }
int main(void) { return 0; }
EOF
    cc_cuda "$D/own" "$D/own.c"
    run -1 "$DOCTOR" "$D/own"
    echo "$output"
    [[ $output == *"own defines its own dlsym: it comes before libckpt's"* ]]
    [ "${lines[-1]}" = "  verdict:     protected with limits" ]
}

@test "NCCL linked in statically is a limit, and its banner gives the version" {
    cat >"$D/snccl.c" <<'EOF'
__attribute__((used)) static const char banner[] = "NCCL version 2.99.1+cuda13.0";
int main(void) { return 0; }
EOF
    cc_cuda "$D/snccl" "$D/snccl.c"
    run -1 "$DOCTOR" "$D/snccl"
    echo "$output"
    [[ $output == *"snccl carries its own copy of NCCL 2.99.1, linked in statically"* ]]
}

@test "a library that is not found makes the program not protected; LD_LIBRARY_PATH finds it" {
    mkdir "$D/lib"
    echo 'int helper(void) { return 0; }' >"$D/helper.c"
    cc -shared -fPIC -o "$D/lib/libhelper.so" "$D/helper.c"
    echo 'int helper(void); int main(void) { return helper(); }' >"$D/needs.c"
    cc_cuda "$D/needs" "$D/needs.c" -L"$D/lib" -lhelper
    run -2 "$DOCTOR" "$D/needs"
    echo "$output"
    [[ $output == *"libhelper.so (needed by needs) is not found: the program would not start"* ]]
    LD_LIBRARY_PATH=$D/nothing:$D/lib run -0 "$DOCTOR" -v "$D/needs"
    echo "$output"
    [[ $output == *"libhelper.so => $D/lib/libhelper.so (LD_LIBRARY_PATH, needed by needs)"* ]]
}

@test "CKPT_DISABLE=1 or a bad CKPT_* value would leave the job unprotected" {
    CKPT_DISABLE=1 run -2 "$DOCTOR" "$BUILD/examples/mlp-train"
    [[ $output == *"CKPT_DISABLE is set"* ]]
    CKPT_EVERY=0 run -2 "$DOCTOR" "$BUILD/examples/mlp-train"
    echo "$output"
    [[ $output == *"libckpt would stop the job before training: "*CKPT_EVERY* ]]
}

# A torch installation as the CUDA wheels lay it out: torch/lib/libtorch_cuda.so
# with a RUNPATH into site-packages' nvidia/*/lib (here the double's libraries).
fake_torch() {
    local site=$D/site
    mkdir -p "$site/torch/lib" "$site/nvidia/cuda_runtime/lib" "$site/nvidia/nccl/lib"
    cp "$FAKE/libcudart.so.13" "$site/nvidia/cuda_runtime/lib/"
    cp "$FAKE/libnccl.so.2" "$site/nvidia/nccl/lib/"
    touch "$site/torch/__init__.py"
    echo "__version__ = '2.9.0+cu130'" >"$site/torch/version.py"
    cat >"$D/torch_cuda.c" <<'EOF'
int cudaMalloc(void **p, unsigned long n);
int ncclGetVersion(int *v);
int torch_cuda(void) { void *p; int v; return ncclGetVersion(&v) + cudaMalloc(&p, 16); }
EOF
    cc -shared -fPIC -o "$site/torch/lib/libtorch_cuda.so" "$D/torch_cuda.c" -L"$FAKE" -lcudart -lnccl \
        -Wl,-rpath,'$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/nccl/lib'
}

@test "python3 script.py: torch's libtorch_cuda.so and its CUDA wheels are checked" {
    command -v python3 >/dev/null || skip "no python3"
    fake_torch
    echo 'import torch' >"$D/train.py"
    PYTHONPATH=$D/site run -0 "$DOCTOR" python3 "$D/train.py"
    echo "$output"
    [[ $output == *"torch:       $D/site/torch (2.9.0+cu130)"* ]]
    [[ $output == *"shared runtime: libcudart.so.13 => $D/site/torch/lib/../../nvidia/cuda_runtime/lib/libcudart.so.13"* ]]
    [[ $output == *"NCCL:        libnccl.so.2 => $D/site/torch/lib/../../nvidia/nccl/lib/libnccl.so.2"* ]]
    # A script that names python3 in its #! line is checked the same way.
    printf '#!/usr/bin/env python3\nimport torch\n' >"$D/launcher"
    chmod +x "$D/launcher"
    PYTHONPATH=$D/site run -0 "$DOCTOR" "$D/launcher" --nproc 2
    [[ $output == *"libtorch_cuda.so"* ]]
}

@test "python3 without torch: nothing to check" {
    command -v python3 >/dev/null || skip "no python3"
    ! python3 -c 'import torch' 2>/dev/null || skip "torch is installed for python3 here"
    run -2 "$DOCTOR" python3 "$D/train.py"
    echo "$output"
    [[ $output == *"torch not installed for this interpreter"*"nothing to check"* ]]
}

@test "--json is one object that parses, with the verdict and the exit status" {
    command -v python3 >/dev/null || skip "no python3"
    fake_torch
    check() { # exit-status args...
        local want=$1
        shift
        run "$DOCTOR" --json "$@"
        [ "$status" -eq "$want" ] || { echo "$* exited $status"; return 1; }
        echo "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
names = {0: "protected", 1: "protected with limits", 2: "not protected"}
assert d["verdict"] == names[int(sys.argv[1])] and d["exit"] == int(sys.argv[1]), d
assert isinstance(d["libraries"], list) and isinstance(d["findings"], list), d
' "$want"
    }
    check 0 "$BUILD/examples/mlp-train"
    check 2 true
    PYTHONPATH=$D/site check 0 python3 "$D/train.py"
    # Names that need escaping: quotes, a backslash, a tab, bytes that are not UTF-8.
    odd=$D/$'we"ird\\na\tme\xff'
    cc_cuda "$odd" "$D/main.c"
    check 0 "$odd"
    "$DOCTOR" --json "$odd" | python3 -m json.tool >/dev/null
}

@test "usage errors, a missing program and a file that is not ELF: exit 3, nothing checked" {
    run -3 "$DOCTOR"
    run -3 "$DOCTOR" --bogus true
    run -3 "$DOCTOR" "$D/absent"
    echo 'not a program' >"$D/text"
    run -3 "$DOCTOR" "$D/text"
    [[ $output == *"not an ELF file"* ]]
    printf '#!/bin/sh\nexec true\n' >"$D/wrapper.sh"
    run -3 "$DOCTOR" "$D/wrapper.sh"
    [[ $output == *"is a script for /bin/sh: run ckpt-doctor on the program it starts"* ]]
    run -0 "$DOCTOR" --help
    [[ $output == *"exit status: 0 protected, 1 protected with limits, 2 not protected"* ]]
}

# replay-check runs the program: killed at iteration N, restored, checked.
@test "replay-check says yes for the trainer, and that the resumed run was verified" {
    unset CKPT_ARENA_DIR CKPT_JOB CKPT_FAULT CKPT_RESTORE
    [ -z "$RUN_LD_LIBRARY_PATH" ] || export LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH
    run "$DOCTOR" replay-check --iters 4 -- "$BUILD/examples/mlp-train" --iters 10 --hidden 32 --layers 2
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    [[ $output == *"replay-check: yes: this job can be restored by replay (the run restored from iteration 3 matched the failed run over the "*" observations it made after that point"* ]]
}

@test "replay-check says no for a program that seeds from the clock, naming the divergence" {
    unset CKPT_ARENA_DIR CKPT_JOB CKPT_FAULT CKPT_RESTORE
    [ -z "$RUN_LD_LIBRARY_PATH" ] || export LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH
    run "$DOCTOR" replay-check --iters 4 -- "$BUILD/tests/progs/clockseed" --iters 10
    [ "$status" -eq 1 ] || { echo "$output"; return 1; }
    [[ $output == *"replay-check: no: the program diverged from its recorded run: it made allocation "*" bytes where the recorded run made allocation "* ]] ||
        { echo "$output"; return 1; }
}

@test "replay-check on a program that ends before the iteration to kill at cannot tell, and says why" {
    unset CKPT_ARENA_DIR CKPT_JOB CKPT_FAULT CKPT_RESTORE
    [ -z "$RUN_LD_LIBRARY_PATH" ] || export LD_LIBRARY_PATH=$RUN_LD_LIBRARY_PATH
    run "$DOCTOR" replay-check --iters 50 -- "$BUILD/examples/mlp-train" --iters 5 --hidden 32 --layers 2
    [ "$status" -eq 3 ]
    [[ $output == *"cannot tell: the program ended before iteration 50"* ]]
}
