# Reading and damaging files byte by byte.

# u64 FILE OFFSET [VALUE]: the little-endian 64-bit integer there, or
# VALUE written there.
u64() {
    [ $# -eq 2 ] && { od -A n -t u8 -j "$2" -N 8 "$1" | tr -d ' '; return; }
    printf "$(printf '%016x' "$3" | sed 's/\(..\)/\1 /g' | awk '{for (i = NF; i > 0; i--) printf "\\x%s", $i}')" |
        dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# flip FILE OFFSET [MASK]: XORs the byte there with MASK (1), so the file
# always changes, whatever the byte held.
flip() {
    local byte
    byte=$(od -A n -t u1 -j "$2" -N 1 "$1" | tr -d ' ')
    [ -n "$byte" ] || { echo "flip: $1 has no byte $2"; return 1; }
    printf "$(printf '\\%03o' $(((byte ^ ${3:-1}) & 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
