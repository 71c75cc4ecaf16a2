#!/usr/bin/env bats
# The benchmark harness itself (bench/run, `make bench`): it must parse,
# every row it lists must exist, and a row must come out as a line of the
# table.  The numbers are not judged here: benchmarks measure, tests check.

setup() {
    ROOT=$BATS_TEST_DIRNAME/../..
    export BUILD=${BUILD:-$ROOT/build}
}

@test "bench/run parses, and every row it lists is a function of it or of a file it sources" {
    bash -n "$ROOT/bench/run"
    bash -n "$ROOT/bench/nodes.sh"
    local rows missing=
    rows=$(sed -n '/^ROWS=(/,/)/p' "$ROOT/bench/run" | tr -d '()' | sed 's/ROWS=//' | tr -s ' \n' '\n' | grep .)
    [ "$(echo "$rows" | wc -l)" -ge 10 ]
    for r in $rows; do
        grep -q "^$r() {" "$ROOT/bench/run" "$ROOT/bench/nodes.sh" || missing+=" $r"
    done
    [ -z "$missing" ] || { echo "rows without a function:$missing"; return 1; }
}

@test "bench/run memcpy prints the table with the memcpy row, and saves it" {
    run "$ROOT/bench/run" memcpy
    [ "$status" -eq 0 ]
    [[ $output == *"name "*"value"*"unit"* ]]
    echo "$output" | grep -Eq '^memcpy +[0-9]+\.[0-9]+ +GB/s'
    grep -Eq '^memcpy +[0-9]+\.[0-9]+ +GB/s' "$BUILD/bench/results.txt"
}
