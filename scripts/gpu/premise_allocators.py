"""Premise check P4 (docs/gpu.md): how many bytes a snapshot must hold, and
what an iteration costs, under PyTorch's three allocator settings.

A snapshot of "all device memory the program holds" is as large as what
the caching allocator reserved, not what the model needs.  For a model
whose parameter and optimizer-state bytes are known (premise_gpt.py, 4
layers of width 1024: the sum of numel * element_size over the parameters
and AdamW's state tensors), this reports at the iteration boundary
torch.cuda.memory_reserved() and memory_allocated() against those bytes,
and the median iteration time, under the native caching allocator,
expandable segments and cudaMallocAsync; then, when libckpt.so and
ckpt-resume are built, the same run under ckpt-resume (CKPT_EVERY=5) with
the bytes each snapshot held (its CKPT_STATS_FILE lines) and the
iteration time with it.  Runs are one at a time, so the times are the
GPU's alone.

    premise_allocators.py main --out DIR [--budget S] [--lib libckpt.so --resume ckpt-resume]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcommon as pc  # noqa: E402
from premise_addresses import KINDS  # noqa: E402
from premise_determinism import load  # noqa: E402

GPT = os.path.join(pc.HERE, "premise_gpt.py")
MODEL = ["--layers", "4", "--dim", "1024", "--heads", "16", "--vocab", "16384", "--seq", "256", "--batch", "8"]


def median(xs):
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 2] if xs else None


def iter_ms(steps):
    """Median step time after the first fifth (warm-up, the boundary being learned)."""
    ms = [s["ms"] for s in steps[len(steps) // 5 + 1:]]
    return median(ms)


def stats_bytes(path):
    """(count, median bytes, median copy ms) of a CKPT_STATS_FILE."""
    b, ms = [], []
    try:
        with open(path) as f:
            for ln in f:
                try:
                    r = json.loads(ln)
                except ValueError:
                    continue
                b.append(r.get("bytes", 0))
                ms.append(r.get("copy_ms", 0))
    except OSError:
        pass
    return len(b), median(b), median(ms)


def ratio(a, b):
    return "%.2fx" % (a / b) if a is not None and b else "-"


def main(a):
    c = pc.Check("allocators", a.out, a.budget)
    if a.device == "cuda" and a.torch != "cuda":
        why = {"absent": "no torch", "nocuda": "torch sees no CUDA device"}.get(a.torch, a.torch)
        c.row("premise bytes: native, expandable segments, cudaMallocAsync", "-", "-", "skipped: %s" % why)
        return 0
    py = sys.executable or "python3"
    lib = a.lib if a.lib and os.path.exists(a.lib) else None
    resume = a.resume if a.resume and os.access(a.resume, os.X_OK) else None
    model = MODEL if a.device == "cuda" else ["--layers", "1", "--dim", "64", "--heads", "2", "--vocab", "256",
                                             "--seq", "32", "--batch", "4"]
    summary = {}
    for kind, conf in KINDS:
        label = "premise bytes: %s%s" % (kind, " (%s)" % conf if conf else "")
        if a.device == "cpu" and kind != "native":
            continue
        res = {}
        for mode in ("plain", "ckpt") if lib and resume else ("plain",):
            tag = "%s.%s" % (mode, kind)
            store = c.path(tag, "store")
            if os.path.exists(store):
                os.unlink(store)
            argv = [py, GPT, "--light", "--steps", str(a.steps), "--record", c.path(tag, "jsonl"), "--store", store,
                    "--device", a.device] + model
            extra = {"PYTORCH_CUDA_ALLOC_CONF": conf}
            if mode == "ckpt":
                argv = [resume, "--nproc", "1", "--"] + argv
                extra.update({"CKPT_LIB": lib, "CKPT_EVERY": "5", "CKPT_STATS_FILE": c.path(tag, "stats"),
                              "CKPT_JOB": "gc-premise-p4-" + kind})
            rc = c.run(tag, argv, pc.child_env(extra), want=100)
            _, steps, end = load(c.path(tag, "jsonl"))
            res[mode] = {"rc": rc, "steps": len(steps), "last": steps[-1]["boundary"] if steps else {},
                         "ms": iter_ms(steps)}
            if mode == "ckpt":
                res[mode]["snapshots"] = stats_bytes(c.path(tag, "stats"))
        summary[kind] = res
        c.data["summary"] = summary
        p = res["plain"]
        if p["rc"] != 0 or not p["steps"]:
            c.row(label, pc.why(p["rc"]), "-", "FAILED: %s" % c.tail("plain." + kind))
            continue
        b = p["last"]
        need = b.get("param_bytes", 0) + b.get("opt_bytes", 0)
        without = "allocated %s, reserved %s, %.1f ms/iter" % (pc.gb(b.get("allocated")), pc.gb(b.get("reserved")),
                                                               p["ms"] or 0)
        result = "param+opt %s (grads %s): reserved %s of it, allocated %s" % (
            pc.gb(need), pc.gb(b.get("grad_bytes", 0)), ratio(b.get("reserved"), need), ratio(b.get("allocated"), need))
        with_ = "-"
        if "ckpt" in res:
            k = res["ckpt"]
            n, nb, cms = k["snapshots"]
            if k["rc"] != 0:
                with_ = pc.why(k["rc"])
                result += "; under libckpt FAILED: %s" % c.tail("ckpt." + kind)
            elif n == 0:
                with_ = "no snapshot"
                result += "; under libckpt: no snapshot taken (logs/premise/allocators.ckpt.%s.err)" % kind
            else:
                with_ = "snapshot %s x%d (copy %.1f ms), %.1f ms/iter" % (pc.gb(nb), n, cms or 0, k["ms"] or 0)
                result += "; snapshot %s of it, %s of reserved; iteration %s" % (
                    ratio(nb, need), ratio(nb, b.get("reserved")),
                    "%+.1f%%" % ((k["ms"] / p["ms"] - 1) * 100) if k["ms"] and p["ms"] else "-")
        elif not lib or not resume:
            result += "; no runs under libckpt (libckpt.so or ckpt-resume not built)"
        c.row(label, without, with_, result)
    c.save()
    return 0


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode")
    m = sub.add_parser("main")
    m.add_argument("--out", required=True)
    m.add_argument("--budget", type=float, default=200)
    m.add_argument("--torch", default="cuda", help="cuda, nocuda or absent (what gpu-check found)")
    m.add_argument("--lib", help="libckpt.so")
    m.add_argument("--resume", help="ckpt-resume")
    m.add_argument("--steps", type=int, default=30)
    m.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: test this check without a GPU")
    a = p.parse_args(argv)
    if a.mode != "main":
        p.error("mode: main")
    return a


if __name__ == "__main__":
    sys.exit(main(parse(sys.argv[1:])))
