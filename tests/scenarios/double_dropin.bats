#!/usr/bin/env bats
# The test double is a drop-in for NVIDIA's libraries: programs compiled
# against the real CUDA headers and linked against the real libcudart.so.13
# and libnccl.so.2 (with their sonames and symbol versions) run unchanged on
# build/fake when it comes first on the library path.  The programs live in
# tests/fake/dropin/ and are built here; the cases that build them against
# the toolkit skip when none ($CUDA_HOME, else /usr/local/cuda) is present.
# The first three cases check the double's own shape and need no toolkit.

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    FAKE=$(cd "$BUILD/fake" 2>/dev/null && pwd -P) || skip "no $BUILD/fake: build first"
    SRC=$BATS_TEST_DIRNAME/../fake/dropin
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    CUDA_LIB=$CUDA_HOME/lib64
}

need_toolkit() {
    [ -f "$CUDA_HOME/include/cuda_runtime_api.h" ] || skip "no CUDA toolkit at $CUDA_HOME"
    [ -e "$CUDA_LIB/libcudart.so" ] || skip "no libcudart.so in $CUDA_LIB"
}

# build NAME LIB: compiles dropin/NAME.c against the toolkit and the real -lLIB.
build() {
    gcc -Wall -Wextra -Werror -I"$CUDA_HOME/include" -o "$BATS_TEST_TMPDIR/$1" \
        "$SRC/$1.c" -L"$CUDA_LIB" -l"$2" -ldl
}

# build_on_double: the round-trip program, against the double's own headers.
build_on_double() {
    gcc -Wall -Wextra -Werror -I"$BATS_TEST_DIRNAME/../fake/include" \
        -I"$BATS_TEST_DIRNAME/../../interpose/abi" -o "$BATS_TEST_TMPDIR/roundtrip" \
        "$SRC/cudart_roundtrip.c" -L"$FAKE" -lcudart -ldl
}

# needs_version BIN FILE NODE: BIN needs FILE and binds its symbols to version NODE.
needs_version() {
    readelf -d "$1" | grep -q "(NEEDED).*\[$2\]" || {
        echo "$1 does not need $2"; return 1; }
    readelf -V -W "$1" | grep -A1 "File: $2 " | grep -q "Name: $3 " || {
        echo "$1 has no version need $3 of $2"; readelf -V -W "$1"; return 1; }
}

@test "the double's runtime exports the declared API under version node libcudart.so.13" {
    lib=$FAKE/libcudart.so.13
    [ -f "$lib" ] || skip "double not built"
    if readelf -d "$lib" | grep '(NEEDED).*libcuda'; then
        echo "libcudart.so.13 links against the driver"; return 1
    fi
    readelf -d "$lib" | grep -q '(SONAME).*\[libcudart.so.13\]'
    readelf --dyn-syms -W "$lib" | awk '$1 ~ /^[0-9]+:$/ && $5 != "LOCAL" && $7 != "UND" { print $8 }' \
        >"$BATS_TEST_TMPDIR/exports"
    # Every export is cuda* or __cuda*, tagged with the runtime's version node.
    if grep -v -E '^(__)?cuda[A-Za-z0-9_]*@@libcudart\.so\.13$|^libcudart\.so\.13$' \
        "$BATS_TEST_TMPDIR/exports"; then
        echo "exports outside cuda*@@libcudart.so.13 (above)"; return 1
    fi
    # Every function the project declares is there.
    declared=$(grep -o -E '\bcuda[A-Za-z0-9_]+\(' "$BATS_TEST_DIRNAME/../../interpose/abi/ckpt_cudart.h" |
               tr -d '(')
    [ -n "$declared" ]
    for fn in $declared; do
        grep -q "^$fn@@libcudart.so.13$" "$BATS_TEST_TMPDIR/exports" || {
            echo "missing export $fn"; return 1; }
    done
}

@test "the double's runtime loads the driver with dlopen and imports none of it" {
    [ -f "$FAKE/libcudart.so.13" ] && [ -f "$FAKE/libcuda.so.1" ] || skip "double not built"
    if readelf --dyn-syms -W "$FAKE/libcudart.so.13" | awk '$7 == "UND" { print $8 }' | grep '^cu'; then
        echo "libcudart.so.13 imports driver symbols (above)"; return 1
    fi
    build_on_double
    if readelf -d "$BATS_TEST_TMPDIR/roundtrip" | grep '(NEEDED).*libcuda\.'; then
        echo "the program itself needs the driver"; return 1
    fi
    run env LD_DEBUG=files LD_LIBRARY_PATH="$FAKE" "$BATS_TEST_TMPDIR/roundtrip"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ $output == *"file=libcuda.so.1 [0];  dynamically loaded by $FAKE/libcudart.so.13"* ]]
    [[ $output == *"round trip ok"* ]]
}

@test "without a driver the double's runtime fails as the real one does" {
    [ -f "$FAKE/libcudart.so.13" ] || skip "double not built"
    if /sbin/ldconfig -p | grep -q 'libcuda\.so\.1 '; then
        skip "this machine has a driver (libcuda.so.1 in the loader cache)"
    fi
    build_on_double
    mkdir "$BATS_TEST_TMPDIR/nodriver"
    cp "$FAKE/libcudart.so.13" "$BATS_TEST_TMPDIR/nodriver/"
    run env LD_LIBRARY_PATH="$BATS_TEST_TMPDIR/nodriver" "$BATS_TEST_TMPDIR/roundtrip"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ $output == *"runtime 13000"* ]]
    [[ $output == *"cudaMalloc: cudaErrorInsufficientDriver"* ]]
}

@test "a program linked against the real libcudart.so.13 runs on the double" {
    [ -f "$FAKE/libcudart.so.13" ] && [ -f "$FAKE/libcuda.so.1" ] || skip "double not built"
    need_toolkit
    build cudart_roundtrip cudart
    needs_version "$BATS_TEST_TMPDIR/cudart_roundtrip" libcudart.so.13 libcudart.so.13
    objdump -T "$BATS_TEST_TMPDIR/cudart_roundtrip" | grep -q "(libcudart.so.13) cudaMemcpy$"

    run env LD_LIBRARY_PATH="$FAKE" "$BATS_TEST_TMPDIR/cudart_roundtrip"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "runtime 13000" ]
    [ "${lines[1]}" = "cudaMemcpy from $FAKE/libcudart.so.13" ]
    [ "${lines[2]}" = "round trip ok" ]
}

@test "error names and messages of the double match the real runtime" {
    [ -f "$FAKE/libcudart.so.13" ] || skip "double not built"
    need_toolkit
    build cudart_errors cudart
    # Neither library needs a driver for these two calls.
    LD_LIBRARY_PATH="$CUDA_LIB" "$BATS_TEST_TMPDIR/cudart_errors" >"$BATS_TEST_TMPDIR/real.txt"
    LD_LIBRARY_PATH="$FAKE" "$BATS_TEST_TMPDIR/cudart_errors" >"$BATS_TEST_TMPDIR/fake.txt"
    [ -s "$BATS_TEST_TMPDIR/real.txt" ]
    diff -u "$BATS_TEST_TMPDIR/real.txt" "$BATS_TEST_TMPDIR/fake.txt"
}

@test "a program linked against the real libnccl.so.2 runs on the double" {
    [ -f "$FAKE/libnccl.so.2" ] || skip "no NCCL double in $FAKE"
    need_toolkit
    [ -e "$CUDA_LIB/libnccl.so" ] || skip "no libnccl.so in $CUDA_LIB"
    build nccl_version nccl
    readelf -d "$BATS_TEST_TMPDIR/nccl_version" | grep -q '(NEEDED).*\[libnccl.so.2\]'

    run env LD_LIBRARY_PATH="$FAKE" "$BATS_TEST_TMPDIR/nccl_version"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ ${lines[0]} =~ ^nccl\ [1-9][0-9]*$ ]]
    [ "${lines[1]}" = "ncclGetVersion from $FAKE/libnccl.so.2" ]
}
