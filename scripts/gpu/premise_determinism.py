"""Premise check P2 (docs/gpu.md): is a training program's host side
deterministic enough to be replayed?

Restore by replay re-runs the program's host code and serves it, per thread
and in order, what the device told the first run.  That works only if two
runs of the same program with the same seeds make the same host decisions.
Without libckpt on the device nothing can be intercepted, so this compares
what Python can see: premise_gpt.py (2 layers, AdamW, a DataLoader with 2
workers and pin_memory, DDP over a 1-rank ProcessGroupNCCL, whose watchdog
runs) twice for 20 steps, recording per step the loss, torch.cuda.
memory_stats(), the caching allocator's segments and blocks, a few tensor
addresses and the threads alive (threading.enumerate(), /proc/self/task/*/
comm), and reports the first step where the two runs differ in each.  The
runs are under setarch -R when it works (addresses then mean something).
With --lib, the same pair runs again with LD_PRELOAD=libckpt.so and
CKPT_LOG=debug, and libckpt's exit statistics ("hooks: ..." lines) of the
two are compared, as are its runs' numbers with the runs without it.  The
pairs run side by side: without libckpt and with it, first the a runs, then
the b runs.

    premise_determinism.py main --out DIR [--budget S] [--lib libckpt.so] [--device cuda|cpu]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcommon as pc  # noqa: E402

GPT = os.path.join(pc.HERE, "premise_gpt.py")


def load(path):
    """(header, steps, end) of a premise_gpt.py record; steps by order."""
    head, steps, end = {}, [], {}
    try:
        with open(path) as f:
            for ln in f:
                try:
                    r = json.loads(ln)
                except ValueError:
                    continue
                if "header" in r:
                    head = r["header"]
                elif "end" in r:
                    end = r["end"]
                else:
                    steps.append(r)
    except OSError:
        pass
    return head, steps, end


def relative(snap):
    """Blocks as (segment index, offset, size, state): the layout whatever the base."""
    if not snap or "segments" not in snap:
        return None
    bases = [s[0] for s in snap["segments"]]
    out, i = [], 0
    for addr, size, state in snap["blocks"]:
        while i + 1 < len(bases) and addr >= bases[i + 1]:
            i += 1
        out.append((i, addr - bases[i] if bases else addr, size, state))
    return [(len(bases), [s[1] for s in snap["segments"]])] + out


def first_diff(sa, sb, f):
    """None when f(step) is the same for every step of both runs, else
    (step, a, b) of the first that differs ("missing" past a short run)."""
    for i in range(max(len(sa), len(sb))):
        if i >= len(sa) or i >= len(sb):
            return i + 1, "missing" if i >= len(sa) else "present", "missing" if i >= len(sb) else "present"
        va, vb = f(sa[i]), f(sb[i])
        if va != vb:
            return sa[i].get("step", i + 1), va, vb
    return None


def dict_diff(a, b):
    """The first key whose value differs between two dicts, with both values."""
    for k in sorted(set(a or {}) | set(b or {})):
        if (a or {}).get(k) != (b or {}).get(k):
            return "%s %s vs %s" % (k, (a or {}).get(k), (b or {}).get(k))
    return ""


def multiset_diff(a, b):
    """What b has that a has not (+) and the reverse (-), as name counts."""
    from collections import Counter
    ca, cb = Counter(a or []), Counter(b or [])
    plus = sorted((cb - ca).elements())
    minus = sorted((ca - cb).elements())
    return " ".join(["+" + x for x in plus] + ["-" + x for x in minus])


def names(threads):
    """Thread names with counts: 'python3 x3, pt_nccl_watchdg'."""
    from collections import Counter
    return ", ".join("%s x%d" % (n, c) if c > 1 else n for n, c in sorted(Counter(threads or []).items()))


def compare(ra, rb):
    """What differs between two runs, category by category: {category:
    (text, first differing step or None)}."""
    (_, sa, ea), (_, sb, eb) = ra, rb
    n = max(len(sa), len(sb))
    out = {}

    def cat(name, f, detail=None):
        d = first_diff(sa, sb, f)
        if d is None:
            out[name] = ("same in all %d steps" % n, None)
        else:
            step, va, vb = d
            extra = detail(va, vb) if detail and va not in ("missing", "present") else "%s vs %s" % (va, vb)
            out[name] = ("differ from step %s (%s)" % (step, str(extra)[:200]), step)

    cat("loss", lambda r: r.get("loss"), lambda a, b: "%s vs %s" % (float.fromhex(a), float.fromhex(b)))
    cat("boundary bytes", lambda r: r.get("boundary"), dict_diff)
    cat("memory_stats", lambda r: r.get("mem"), dict_diff)
    cat("segments", lambda r: [s[0] for s in (r.get("snap") or {}).get("segments", [])],
        lambda a, b: "%d vs %d segments, first %s vs %s" % (len(a), len(b), hex(a[0]) if a else "-", hex(b[0]) if b else "-"))
    cat("blocks", lambda r: (r.get("snap") or {}).get("blocks"),
        lambda a, b: "%d vs %d blocks" % (len(a or []), len(b or [])))
    cat("block layout", lambda r: relative(r.get("snap")),
        lambda a, b: "%d vs %d blocks" % (len(a or []), len(b or [])))
    cat("tensor addresses", lambda r: r.get("ptrs"),
        lambda a, b: " ".join("%x/%x" % (x, y) for x, y in zip(a or [], b or []) if x != y)[:120])
    cat("Python threads", lambda r: r.get("py_threads"), multiset_diff)
    cat("OS threads", lambda r: r.get("os_threads"), multiset_diff)
    out["digest"] = ("same" if ea.get("digest") and ea.get("digest") == eb.get("digest") else
                     "%s vs %s" % (ea.get("digest"), eb.get("digest")), None)
    return out


def hook_lines(text):
    """libckpt's CKPT_LOG=debug exit statistics, without their prefix."""
    return [ln.split("hooks: ", 1)[1].strip() for ln in text.splitlines() if "hooks: " in ln]


def main(a):
    c = pc.Check("determinism", a.out, a.budget)
    if a.device == "cuda" and a.torch != "cuda":
        why = {"absent": "no torch", "nocuda": "torch sees no CUDA device"}.get(a.torch, a.torch)
        c.row("premise determinism: two runs of a GPT with DataLoader workers and NCCL", "-", "-", "skipped: %s" % why)
        return 0
    py = sys.executable or "python3"
    prefix, why_not = pc.no_aslr_prefix()
    c.data["aslr"] = "off (setarch -R)" if prefix else "on: %s" % why_not
    pre = prefix or []
    lib = a.lib if a.lib and os.path.exists(a.lib) else None
    c.data["libckpt"] = lib or "not built: no runs under libckpt"

    def cmd(tag, preload):
        store = c.path(tag, "store")
        if os.path.exists(store):
            os.unlink(store)
        argv = [py, GPT, "--steps", str(a.steps), "--record", c.path(tag, "jsonl"), "--store", store,
                "--device", a.device]
        if preload:
            argv = ["env", "LD_PRELOAD=" + preload] + argv
        return pre + argv

    for run in ("a", "b"):
        procs = [c.spawn("plain." + run, cmd("plain." + run, None), pc.child_env())]
        if lib:
            env = pc.child_env({"CKPT_LOG": "debug", "CKPT_JOB": "gc-premise-p2-" + run,
                                "CKPT_STATS_FILE": c.path("ckpt." + run, "stats")})
            procs.append(c.spawn("ckpt." + run, cmd("ckpt." + run, lib), env))
        rcs = c.wait(procs, 120)
        c.data.setdefault("status", {}).update(rcs)
    rcs = c.data.get("status", {})

    plain = {r: load(c.path("plain." + r, "jsonl")) for r in ("a", "b")}
    bad = [t for t in ("plain.a", "plain.b") if rcs.get(t, 125) != 0]
    if bad:
        c.row("premise determinism: two runs without libckpt", "-", "-",
              "FAILED: %s %s: %s" % (bad[0], pc.why(rcs.get(bad[0], 125)), c.tail(bad[0])))
    if all(plain[r][1] for r in ("a", "b")):
        d = compare(plain["a"], plain["b"])
        c.data["plain"] = {k: v[0] for k, v in d.items()}
        last = plain["a"][1][-1]
        c.row("premise determinism: loss and digest, 2 runs", "-", "-",
              "loss %s; digest %s" % (d["loss"][0], d["digest"][0]))
        c.row("premise determinism: allocator (memory_stats, boundary bytes)", "-", "-",
              "memory_stats %s; boundary bytes %s" % (d["memory_stats"][0], d["boundary bytes"][0]))
        c.row("premise determinism: addresses (ASLR %s)" % ("off" if prefix else "on"), "-", "-",
              "segments %s; blocks %s; block layout within segments %s; tensors %s" %
              (d["segments"][0], d["blocks"][0], d["block layout"][0], d["tensor addresses"][0]))
        c.row("premise determinism: threads", "-", "-",
              "Python %s; OS %s; at the last step: %s" % (d["Python threads"][0], d["OS threads"][0],
                                                          names(last.get("os_threads"))))

    if not lib:
        c.row("premise determinism under libckpt", "-", "-", "skipped: no libckpt.so built")
    else:
        ck = {r: load(c.path("ckpt." + r, "jsonl")) for r in ("a", "b")}
        bad = [t for t in ("ckpt.a", "ckpt.b") if rcs.get(t, 125) != 0]
        hooks = {r: hook_lines(c.text("ckpt." + r)) for r in ("a", "b")}
        c.data["hooks"] = hooks
        snaps = []
        for r in ("a", "b"):
            try:
                with open(c.path("ckpt." + r, "stats")) as f:
                    snaps.append(sum(1 for _ in f))
            except OSError:
                snaps.append(0)
        if bad:
            c.row("premise determinism under libckpt", "-", "-",
                  "FAILED: %s %s: %s" % (bad[0], pc.why(rcs.get(bad[0], 125)), c.tail(bad[0])))
        if all(ck[r][1] for r in ("a", "b")):
            d = compare(ck["a"], ck["b"])
            c.data["ckpt"] = {k: v[0] for k, v in d.items()}
            parts = ["runs a/b: loss %s, memory_stats %s, block layout %s, OS threads %s" %
                     (d["loss"][0], d["memory_stats"][0], d["block layout"][0], d["OS threads"][0])]
            if plain["a"][1]:
                w = compare(plain["a"], ck["a"])
                c.data["plain_vs_ckpt"] = {k: v[0] for k, v in w.items()}
                parts.append("against the run without: loss %s, digest %s, memory_stats %s, OS threads %s" %
                             (w["loss"][0], w["digest"][0], w["memory_stats"][0], w["OS threads"][0]))
            parts.append("snapshots %d and %d" % tuple(snaps))
            c.row("premise determinism under libckpt (LD_PRELOAD)", "-", "-", "; ".join(parts))
        if not hooks["a"] and not hooks["b"]:
            c.row("premise determinism: libckpt hook statistics", "-", "-",
                  "none printed (CKPT_LOG=debug; logs/premise/determinism.ckpt.a.err)")
        elif hooks["a"] == hooks["b"]:
            c.row("premise determinism: libckpt hook statistics", "-", "-",
                  "equal in both runs: " + " | ".join(hooks["a"]))
        else:
            diff = [(x, y) for x, y in zip(hooks["a"], hooks["b"]) if x != y] or [(hooks["a"], hooks["b"])]
            c.row("premise determinism: libckpt hook statistics", "-", "-",
                  "differ: run a '%s', run b '%s'" % diff[0])
    c.save()
    return 0


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode")
    m = sub.add_parser("main")
    m.add_argument("--out", required=True)
    m.add_argument("--budget", type=float, default=150)
    m.add_argument("--torch", default="cuda", help="cuda, nocuda or absent (what gpu-check found)")
    m.add_argument("--lib", help="libckpt.so, for the runs under it")
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: test this check without a GPU")
    a = p.parse_args(argv)
    if a.mode != "main":
        p.error("mode: main")
    return a


if __name__ == "__main__":
    sys.exit(main(parse(sys.argv[1:])))
