# The output of a job that was resumed, as its user reads it.  A launch
# that restores iteration S prints from "iter S+1" on (what the program
# prints while it replays goes to the arena, never to its stdout), so the
# lines of each launch replace the earlier launches' from the first
# iteration they print.  A clean restart, printing "iter 1" again,
# replaces all of them.  Reads FILE, or stdin.
resumed_output() {
    awk '$1 == "iter" && $2 + 0 <= last && ($2 + 0) in at {
             n = at[$2 + 0] - 1
             for (i in at) if (at[i] > n) delete at[i]
         }
         $1 == "iter" { at[$2 + 0] = n + 1; last = $2 + 0 }
         { line[++n] = $0 }
         END { for (i = 1; i <= n; i++) print line[i] }' "$@"
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
