"""Premise check P3 (docs/gpu.md): what a second process's CUDA context
costs, in device memory and in time to its first kernel.

The hot standby design runs, beside every rank, a process that follows the
rank's log with the device work suppressed and only "a context, no physical
memory"; the cold path restarts a process from nothing.  This check measures
both prices: this process holds a context of its own and reads the free
device memory (cuMemGetInfo) before and while a second process is alive,
and nvidia-smi's per-process figure; the second process is (1) one that
calls only the driver (cuInit, the primary context, a 2 MiB allocation and
a memset), (2) a torch process that runs one tiny kernel.  Each child says
when it started, when its imports were done, when its context was ready and
when its first device work finished; it then waits until told to exit, so
that its memory is counted while it lives.

    premise_context.py main --out DIR [--budget S] [--torch cuda|nocuda|absent]
"""

import argparse
import ctypes
import json
import os
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcommon as pc  # noqa: E402

MiB = 1 << 20


def ready(rec):
    """Says the child is measured, then waits for the parent to close stdin."""
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()
    sys.stdin.read()


def driver_child():
    t = {"start": time.time()}
    drv = pc.Driver()
    t["loaded"] = time.time()
    drv.start()
    t["context"] = time.time()
    p = ctypes.c_uint64()
    drv.call("cuMemAlloc_v2", ctypes.byref(p), 2 * MiB)
    drv.call("cuMemsetD8_v2", p.value, 1, 2 * MiB)
    drv.call("cuCtxSynchronize")
    t["work"] = time.time()
    ready({"pid": os.getpid(), "t": t, "own": 2 * MiB})
    return 0


def torch_child():
    t = {"start": time.time()}
    import torch
    t["loaded"] = time.time()
    if not torch.cuda.is_available():
        return 3
    torch.cuda.init()
    x = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    t["context"] = time.time()
    y = x + 1
    torch.cuda.synchronize()
    t["work"] = time.time()
    ready({"pid": os.getpid(), "t": t, "own": torch.cuda.memory_reserved(), "ok": y.item() == 2.0})
    return 0


def smi_used(pid):
    """(MiB nvidia-smi gives this pid, or None; what it listed)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=15, universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)[:80]
    seen = r.stdout.strip().replace("\n", "; ")
    for ln in r.stdout.splitlines():
        parts = [x.strip() for x in ln.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            try:
                return int(parts[1]), seen
            except ValueError:
                pass
    return None, seen or r.stderr.strip()[:80]


def measure(c, drv, kind, py, want):
    """Runs one child; its times and the device memory it cost."""
    free0 = drv.mem_info()[0]
    t_spawn = time.time()
    p = c.spawn(kind, [py, os.path.abspath(__file__), kind + "-child"], pc.child_env(),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = ""
    deadline = time.monotonic() + max(c.limit(want), 1)
    while time.monotonic() < deadline and p.poll() is None:
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            line = p.stdout.readline().decode(errors="replace")
            break
    try:
        rec = json.loads(line)
    except ValueError:
        c.kill(p)
        c.live.pop(p.pid, None)
        return {"error": "%s: %s" % ("timed out" if p.returncode is None or p.returncode < 0 else pc.why(p.returncode),
                                     c.tail(kind))}
    time.sleep(0.5)  # what the driver reserves lazily after the first work
    free1 = drv.mem_info()[0]
    used, seen = smi_used(rec["pid"])
    p.stdin.close()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        c.kill(p)
    c.live.pop(p.pid, None)
    time.sleep(1)
    free2 = drv.mem_info()[0]
    t = rec["t"]
    rec.update({"spawn": t_spawn, "free_before": free0, "free_alive": free1, "free_after": free2,
                "cost": free0 - free1, "context_cost": free0 - free1 - rec.get("own", 0),
                "smi_used_mib": used, "smi_listed": seen,
                "to_loaded_s": t["loaded"] - t_spawn, "to_context_s": t["context"] - t_spawn,
                "to_work_s": t["work"] - t_spawn, "python_start_s": t["start"] - t_spawn})
    return rec


def main(a):
    c = pc.Check("context", a.out, a.budget)
    py = sys.executable or "python3"
    try:
        drv = pc.Driver()
        drv.start()
        free, total = drv.mem_info()
    except (OSError, pc.CudaError) as e:
        c.row("premise context: a second process's CUDA context", "-", "-", "skipped: no CUDA driver (%s)" % e)
        return 0
    c.data["device_total"] = total
    c.data["free_with_own_context"] = free
    kinds = [("driver", "driver only: cuInit, primary context, 2 MiB cuMemAlloc + memset"),
             ("torch", "torch: import, torch.ones on the GPU, one kernel")]
    for kind, what in kinds:
        label = "premise context: second process, %s" % kind
        if kind == "torch" and a.torch != "cuda":
            c.row(label, "-", "-", "skipped: %s" % {"absent": "no torch", "nocuda": "torch sees no CUDA device"}.get(a.torch, a.torch))
            continue
        if c.limit(30) == 0:
            c.row(label, "-", "-", "FAILED: out of time")
            continue
        r = measure(c, drv, kind, py, 90)
        c.data[kind] = r
        if "error" in r:
            c.row(label, "-", "-", "FAILED: %s" % r["error"])
            continue
        smi = "nvidia-smi %s MiB" % r["smi_used_mib"] if r["smi_used_mib"] is not None else \
            "nvidia-smi: pid not listed (%s)" % (r["smi_listed"] or "nothing")[:60]
        c.row(label, "-", "-",
              "%.0f MiB of device memory (%.0f MiB besides its own allocations; %s; %.0f MiB free again after it "
              "ended); start to first device work done %.2f s (imports %.2f s, context %.2f s, work %.3f s)" %
              (r["cost"] / MiB, r["context_cost"] / MiB, smi, (r["free_after"] - r["free_alive"]) / MiB,
               r["to_work_s"], r["to_loaded_s"], r["to_context_s"] - r["to_loaded_s"],
               r["to_work_s"] - r["to_context_s"]))
    c.save()
    return 0


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode")
    m = sub.add_parser("main")
    m.add_argument("--out", required=True)
    m.add_argument("--budget", type=float, default=60)
    m.add_argument("--torch", default="cuda", help="cuda, nocuda or absent (what gpu-check found)")
    sub.add_parser("driver-child")
    sub.add_parser("torch-child")
    a = p.parse_args(argv)
    if not a.mode:
        p.error("a mode: main, driver-child or torch-child")
    return a


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    if args.mode == "main":
        sys.exit(main(args))
    sys.exit(driver_child() if args.mode == "driver-child" else torch_child())
