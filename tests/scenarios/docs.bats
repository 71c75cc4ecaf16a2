#!/usr/bin/env bats
# The user-facing documentation stays true to the tools: the man pages
# render without warnings and name every option the tools' --help lists,
# docs/guide.md names only CKPT_* variables that runtime/config.def
# declares, and `make install` puts the binaries, libckpt.so and the man
# pages under PREFIX.

bats_require_minimum_version 1.5.0

setup() {
    BUILD=${BUILD:-$BATS_TEST_DIRNAME/../../build}
    ROOT=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    MAN=$ROOT/docs/man
}

# The options a --help text lists: every --long and -s token outside
# parentheses (where examples of other commands stand).
help_options() { # tool
    "$BUILD/bin/$1" --help | sed 's/([^)]*)//g' | grep -oE '(^|[ ,[])--?[a-z][a-z-]*' | sed 's/^[ ,[]//' | sort -u
}

# A man page as plain text for searching: \- is -, font escapes dropped.
man_text() { # page
    sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f\[[A-Z]*\]//g' "$1"
}

@test "every man page renders without warnings" {
    if command -v groff >/dev/null; then
        check() { groff -man -Tutf8 -ww -z "$1" 2>&1; }
    elif command -v man >/dev/null; then
        check() { man --warnings -l "$1" 2>&1 >/dev/null; }
    else
        skip "neither groff nor man is installed"
    fi
    local n=0 page out
    for page in "$MAN"/*.1; do
        out=$(check "$page")
        [ -z "$out" ] || { echo "$page: $out"; return 1; }
        n=$((n + 1))
    done
    [ "$n" -eq 3 ]
}

@test "every option a tool's --help lists is in its man page" {
    local tool opt missing=
    for tool in ckpt-resume ckpt-inspect ckpt-doctor; do
        [ -f "$MAN/$tool.1" ] || { echo "no man page for $tool"; return 1; }
        local opts
        opts=$(help_options "$tool")
        [ -n "$opts" ] || { echo "$tool --help lists no options"; return 1; }
        for opt in $opts; do
            man_text "$MAN/$tool.1" | grep -qE -- "(^|[^a-z-])$opt([^a-z-]|\$)" || missing="$missing $tool:$opt"
        done
    done
    [ -z "$missing" ] || { echo "not in the man pages:$missing"; return 1; }
}

@test "docs/guide.md names only CKPT_* variables that runtime/config.def declares" {
    local known named v unknown=
    known=$(sed -n 's/^CKPT_VAR(\([A-Z0-9_]*\),.*/CKPT_\1/p' "$ROOT/runtime/config.def")
    [ "$(echo "$known" | wc -l)" -gt 10 ]
    # Not configuration: what ckpt-resume gives the fence command (tools/ckpt-resume/fence.c).
    known=$(printf '%s\n' "$known" CKPT_FENCE_NODE CKPT_FENCE_ADDR)
    named=$(grep -oE 'CKPT_[A-Z0-9][A-Z0-9_]*' "$ROOT/docs/guide.md" | sort -u)
    [ -n "$named" ]
    for v in $named; do
        grep -qx "$v" <<<"$known" || unknown="$unknown $v"
    done
    [ -z "$unknown" ] || { echo "not in runtime/config.def:$unknown"; return 1; }
}

@test "make install PREFIX=... installs the tools, libckpt.so and the man pages" {
    local p=$BATS_TEST_TMPDIR/p tool page
    run make -C "$ROOT" --no-print-directory B="$(cd "$BUILD" && pwd)" install PREFIX="$p"
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    for tool in "$ROOT"/tools/*/; do
        tool=$(basename "$tool")
        [ -x "$p/bin/$tool" ] || { echo "missing $p/bin/$tool"; return 1; }
    done
    [ -x "$p/lib/libckpt.so" ]
    for page in ckpt-resume ckpt-inspect ckpt-doctor; do
        [ -f "$p/share/man/man1/$page.1" ]
        [ "$(stat -c %a "$p/share/man/man1/$page.1")" = 644 ]
        cmp "$ROOT/docs/man/$page.1" "$p/share/man/man1/$page.1"
    done
}
