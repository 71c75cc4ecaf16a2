"""Premise check (docs/gpu.md): which driver entry points the real runtime's
cudaMemcpy, cudaMemcpyAsync and cudaEventElapsedTime reach.

The runtime resolves its driver table through cuGetProcAddress and does not
say which entry point a given call ends in; replay must serve every one
that writes host memory or reports a time.  scripts/gpu/entrypoints.cu
makes one kind of call REPS (7) times per case; each case runs under
LD_PRELOAD=libckpt.so with CKPT_LOG=debug, and its "hooks: TABLE: name N,
..." exit lines are compared with those of the "none" case: a count that
grew by exactly REPS belongs to the call under test.  libckpt's tables name
what they count (today kernel launches and allocations by calling library,
cuMemMap ranges); when none of them is a table of driver entry points, the
row says so instead of guessing.

    premise_entrypoints.py main --out DIR --bin entrypoints --lib libckpt.so [--budget S]
"""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcommon as pc  # noqa: E402

REPS = 7
ITEM = re.compile(r"^\s*(\S+(?: \S+)*?) (\d+)(?: \(NCCL-internal \d+\))?\s*$")


def counts(text):
    """{(table, item): count} from libckpt's "hooks: TABLE: item N, item N" lines."""
    out = {}
    for ln in text.splitlines():
        if "hooks: " not in ln:
            continue
        body = ln.split("hooks: ", 1)[1]
        for part in body.split(";"):
            if ":" not in part:
                continue
            table, items = part.split(":", 1)
            for it in items.split(","):
                m = ITEM.match(it)
                if m:
                    out[(table.strip(), m.group(1))] = int(m.group(2))
    return out


def main(a):
    c = pc.Check("entrypoints", a.out, a.budget)
    label = "premise entry points: cudaMemcpy, cudaMemcpyAsync, cudaEventElapsedTime"
    if not a.bin or not os.access(a.bin, os.X_OK):
        c.row(label, "-", "-", "skipped: scripts/gpu/entrypoints.cu was not built (no nvcc?)")
        return 0
    if not a.lib or not os.path.exists(a.lib):
        c.row(label, "-", "-", "skipped: no libckpt.so built")
        return 0
    try:  # the libcuda.so.1 the program will load (the double's with --double)
        pc.Driver().start()
    except (OSError, pc.CudaError) as e:
        c.row(label, "-", "-", "skipped: no CUDA driver or device (%s)" % e)
        return 0
    try:
        cases = subprocess.run([a.bin, "list"], stdout=subprocess.PIPE, timeout=10,
                               universal_newlines=True).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as e:
        c.row(label, "-", "-", "FAILED: %s list: %s" % (a.bin, e))
        return 0
    got, failed = {}, []
    for case in cases:
        tag = case
        rc = c.run(tag, ["env", "LD_PRELOAD=" + a.lib, a.bin, case],
                   pc.child_env({"CKPT_LOG": "debug", "CKPT_JOB": "gc-premise-ep"}), want=30)
        if rc != 0:
            failed.append("%s (%s: %s)" % (case, pc.why(rc), c.tail(tag)))
            if rc == 125:
                break
            continue
        got[case] = counts(c.text(tag))
    c.data["counts"] = {k: {"%s: %s" % t: n for t, n in v.items()} for k, v in got.items()}
    c.data["failed"] = failed
    base = got.get("none")
    if base is None:
        c.row(label, "-", "-", "FAILED: the none case did not run: %s" % (failed[0] if failed else "?"))
        return 0
    tables = sorted(set(t for v in got.values() for t, _ in v))
    answer, found = {}, False
    for case in cases[1:]:
        if case not in got:
            continue
        delta = {k: n - base.get(k, 0) for k, n in got[case].items() if n != base.get(k, 0)}
        exact = sorted("%s (%s)" % (k[1], k[0]) for k, d in delta.items() if d == REPS)
        other = sorted("%s %+d" % (k[1], d) for k, d in delta.items() if d != REPS)
        answer[case] = {"reps": exact, "other": other}
        found = found or bool(exact)
    c.data["answer"] = answer
    named = [t for t in tables if re.search(r"entry|driver", t)]
    if found:
        c.row(label, "-", "-", "; ".join("%s -> %s%s" % (k, ", ".join(v["reps"]) or "nothing counted",
                                                         " (also %s)" % ", ".join(v["other"]) if v["other"] else "")
                                         for k, v in answer.items()))
    else:
        c.row(label, "-", "-",
              "unanswered: %d cases ran, but libckpt's debug statistics count no driver entry point by name "
              "(its tables: %s)%s; interpose/hookstats.c needs a table of entry points reached" %
              (len(got), ", ".join(tables) or "none", "; tables that might: " + ", ".join(named) if named else ""))
    if failed:
        c.row("premise entry points: cases that failed", "-", "-", "FAILED: " + "; ".join(failed)[:300])
    c.save()
    return 0


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode")
    m = sub.add_parser("main")
    m.add_argument("--out", required=True)
    m.add_argument("--budget", type=float, default=45)
    m.add_argument("--bin")
    m.add_argument("--lib")
    a = p.parse_args(argv)
    if a.mode != "main":
        p.error("mode: main")
    return a


if __name__ == "__main__":
    sys.exit(main(parse(sys.argv[1:])))
