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
