# The output of a job that was resumed, as its user reads it (awk -f).  A
# launch that restores iteration S prints from "iter S+1" on (what the
# program prints while it replays goes to the rank's arena), so the lines
# of each launch replace the earlier launches' from the first iteration
# they print; a clean restart, printing "iter 1" again, replaces them all.
$1 == "iter" && $2 + 0 <= last && ($2 + 0) in at {
    n = at[$2 + 0] - 1
    for (i in at)
        if (at[i] > n)
            delete at[i]
}
$1 == "iter" { at[$2 + 0] = n + 1; last = $2 + 0 }
{ line[++n] = $0 }
END { for (i = 1; i <= n; i++) print line[i] }
