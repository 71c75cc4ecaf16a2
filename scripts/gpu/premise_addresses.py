"""Premise check P1 (docs/gpu.md): does a restarted process get the device
addresses the first one had?

Restore by replay needs every allocation back at the address the failed run
had, since the program (and device memory) hold pointers.  Two designs:
(a) record the addresses and run the job with address-space randomisation
off, trusting the same program to get the same addresses again; (b)
libckpt owns the address space: cuMemAddressReserve at fixed addresses,
which it then maps.  This check runs, twice each, with randomisation on
and off (setarch -R):
  - a torch process that makes a fixed sequence of allocations, a matmul
    (cuBLAS's workspace), a 1-rank ProcessGroupNCCL with one all_reduce, and
    a few allocations after it, under the native caching allocator,
    expandable segments and cudaMallocAsync, recording every tensor address,
    every segment of torch.cuda.memory_snapshot() and what NCCL's set-up
    added to /proc/self/maps (NCCL's own cuMem buffers are not visible to
    torch: the mappings are what can be seen of them);
  - a process that calls only the driver (ctypes, libcuda.so.1): its
    cuMemAlloc and unhinted cuMemAddressReserve addresses, reservations at
    fixed hints, and, in the second round, reservations at the exact ranges
    the first round's torch processes got;
and counts exact hits between the two runs of each.  Round 2 starts when
round 1 has ended, as a restart follows a death.

    premise_addresses.py main --out DIR [--budget S] [--torch cuda|nocuda|absent]
"""

import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcommon as pc  # noqa: E402

KINDS = [
    ("native", None),
    ("expandable", "expandable_segments:True"),
    ("async", "backend:cudaMallocAsync"),
]

# Fixed hints for design (b): far from where Linux puts mmap()s (just below
# the 47-bit top, growing down) and from the heap; 64 GiB each.
HINTS = [0x7E0000000000, 0x600000000000, 0x400000000000, 0x100000000000, 0x20000000000]
HINT_SIZE = 64 << 30

# The allocation sequence: ("a", bytes) allocates, ("f", i) frees the i-th
# allocation.  Small (< 1 MiB: the caching allocator's 2 MiB small-pool
# segments), large, and huge (own segments) sizes, with frees between.
SEQUENCE = [("a", 512), ("a", 4096), ("a", 65536), ("a", 1 << 20), ("a", 3 << 20), ("a", 10 << 20),
            ("a", 25 << 20), ("a", 100 << 20), ("a", 1 << 30), ("f", 1), ("f", 4), ("a", 2048),
            ("a", 5 << 20), ("f", 7), ("a", 200 << 20), ("a", 8 << 20), ("a", 12345)]
AFTER_NCCL = [1 << 20, 64 << 20, 4096, 300 << 20]


def segments(torch):
    """memory_snapshot()'s segments [address, size, type] and blocks
    [address, size, state], or {"error": ...} (cudaMallocAsync has none)."""
    try:
        snap = torch.cuda.memory_snapshot()
    except Exception as e:
        return {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else "")}
    segs, blocks = [], []
    for s in snap:
        base = s.get("address", 0)
        segs.append([base, s.get("total_size", 0), s.get("segment_type", "")])
        off = base
        for b in s.get("blocks", []):
            addr = b.get("address", off)
            blocks.append([addr, b.get("size", 0), b.get("state", "")])
            off = addr + b.get("size", 0)
    return {"segments": sorted(segs), "blocks": sorted(blocks)}


def torch_child(a):
    rec = {"kind": a.kind, "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "pid": os.getpid(),
           "personality": pc.personality()}
    maps0 = pc.maps()
    import torch
    import torch.distributed as dist
    rec["torch"] = torch.__version__
    if not torch.cuda.is_available():
        rec["error"] = "torch sees no CUDA device"
        pc.write_json(a.out, rec)
        return 3
    torch.cuda.set_device(0)
    try:
        rec["backend"] = torch.cuda.get_allocator_backend()
    except Exception:
        rec["backend"] = "?"
    made, keep = [], {}
    for op, n in SEQUENCE:
        if op == "a":
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
            keep[len(made)] = t
            made.append(t.data_ptr())
        else:
            keep.pop(n, None)
    torch.cuda.synchronize()
    rec["tensors"] = made
    rec["after_tensors"] = segments(torch)
    pc.write_json(a.out, rec)  # after each phase: a child that hangs later still leaves these
    x = torch.randn(512, 512, device="cuda")
    y = x @ x
    torch.cuda.synchronize()
    rec["matmul"] = [x.data_ptr(), y.data_ptr()]
    rec["after_matmul"] = segments(torch)

    maps1, segs1 = pc.maps(), segments(torch)
    rec["cuda_maps"] = pc.new_maps(maps0, maps1)
    pc.write_json(a.out, rec)
    try:
        dist.init_process_group("nccl", store=dist.FileStore(a.store, 1), rank=0, world_size=1)
        z = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(z)
        w = torch.ones(16 << 20, device="cuda")
        dist.all_reduce(w)
        torch.cuda.synchronize()
        segs2 = segments(torch)
        rec["nccl"] = {
            "tensors": [z.data_ptr(), w.data_ptr()],
            "ok": z[0].item() == 1.0,
            "new_maps": pc.new_maps(maps1, pc.maps()),
            "new_segments": [s for s in segs2.get("segments", []) if s not in segs1.get("segments", [])],
            "threads": pc.thread_names(),
        }
    except Exception as e:
        rec["nccl"] = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")}
    rec["after_nccl"] = []
    for n in AFTER_NCCL:
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        keep[len(made) + len(rec["after_nccl"])] = t
        rec["after_nccl"].append(t.data_ptr())
    torch.cuda.synchronize()
    rec["final"] = segments(torch)
    pc.write_json(a.out, rec)

    # Design (b) in a process that already holds torch's and NCCL's memory.
    try:
        drv = pc.Driver()
        drv.start()
        rec["reserve"] = pc.try_reservations(drv, [(h, HINT_SIZE) for h in HINTS])
    except (OSError, pc.CudaError) as e:
        rec["reserve_error"] = str(e)
    pc.write_json(a.out, rec)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def free_gaps(limit=6):
    """The largest unmapped gaps of this process's address space below the
    47-bit top: [start, end], largest first."""
    m = sorted((lo, hi) for lo, hi, _, _ in pc.maps() if hi <= 0x7FFFFFFFF000)
    gaps, prev = [], 0x10000
    for lo, hi in m:
        if lo > prev:
            gaps.append([prev, lo])
        prev = max(prev, hi)
    if prev < 0x7FFFFFFFF000:
        gaps.append([prev, 0x7FFFFFFFF000])
    return sorted(gaps, key=lambda g: g[0] - g[1])[:limit]


def driver_child(a):
    rec = {"pid": os.getpid(), "personality": pc.personality()}
    try:
        drv = pc.Driver()
        rec["driver_version"] = drv.version()
        drv.start()
    except (OSError, pc.CudaError) as e:
        rec["error"] = str(e)
        pc.write_json(a.out, rec)
        return 3
    try:
        rec["granularity"] = drv.granularity()
        rc, got = drv.reserve(2 << 30, 0)
        rec["unhinted_reserve"] = got if rc == 0 else drv.err_name(rc)
        if rc == 0:
            drv.lib.cuMemAddressFree(got, 2 << 30)
        p = ctypes.c_uint64()
        rc = drv.lib.cuMemAlloc_v2(ctypes.byref(p), 2 << 20)
        rec["cuMemAlloc"] = p.value if rc == 0 else drv.err_name(rc)
        if rc == 0:
            drv.lib.cuMemFree_v2(p.value)
        rec["hints"] = pc.try_reservations(drv, [(h, HINT_SIZE) for h in HINTS])
        if a.ranges:
            want = pc.read_json(a.ranges, [])
            rec["ranges"] = pc.try_reservations(drv, [(r[0], r[1]) for r in want], check_first=False)
        rec["gaps"] = free_gaps()
    except pc.CudaError as e:
        rec["error"] = str(e)
    pc.write_json(a.out, rec)
    return 0


# ---- the orchestrator

def seg_addrs(rec, key="final"):
    s = (rec or {}).get(key) or {}
    return None if "error" in s or "segments" not in s else [x[0] for x in s["segments"]]


def main(a):
    c = pc.Check("addresses", a.out, a.budget)
    py = sys.executable or "python3"
    me = os.path.abspath(__file__)
    prefix, why_not = pc.no_aslr_prefix()
    rvs = pc.randomize_va_space()
    c.data["aslr"] = {"randomize_va_space": rvs, "setarch": why_not or "ok"}
    modes = [("on", [])] + ([("off", prefix)] if prefix else [])
    kinds = KINDS if a.torch == "cuda" else []
    res = {}

    for rnd in (1, 2):
        if c.limit(60) == 0:
            c.data["round%d" % rnd] = "out of time"
            break
        procs = []
        ranges = None
        if rnd == 2:
            # What round 1's torch processes got, to be asked for exactly.
            want = []
            for k, _ in kinds:
                r = res.get((k, "on", 1)) or {}
                want += [[s[0], max(s[1], 2 << 20)] for s in ((r.get("final") or {}).get("segments") or [])][:8]
            if want:
                ranges = c.path("round1-ranges", "json")
                pc.write_json(ranges, want)
        for aslr, pre in modes:
            for k, conf in kinds:
                tag = "%s.%s.%d" % (k, aslr, rnd)
                store = c.path(tag, "store")
                if os.path.exists(store):
                    os.unlink(store)
                env = pc.child_env({"PYTORCH_CUDA_ALLOC_CONF": conf})
                procs.append(c.spawn(tag, pre + [py, me, "torch-child", "--kind", k, "--out", c.path(tag, "json"),
                                                 "--store", store], env))
            tag = "driver.%s.%d" % (aslr, rnd)
            procs.append(c.spawn(tag, pre + [py, me, "driver-child", "--out", c.path(tag, "json")] +
                                 (["--ranges", ranges] if ranges else []), pc.child_env()))
        rcs = c.wait(procs, 120)
        for tag, rc in rcs.items():
            k, aslr, _ = tag.split(".")
            rec = pc.read_json(c.path(tag, "json"))
            if rec is None:
                rec = {"error": "%s: %s" % (pc.why(rc), c.tail(tag))}
            rec["rc"] = rc
            res[(k, aslr, rnd)] = rec
        c.data["status_round%d" % rnd] = rcs
        c.save()
    report(c, res, modes, kinds, prefix, why_not, a.torch)
    return 0


def report(c, res, modes, kinds, prefix, why_not, torch_state):
    """The rows, from res {(who, aslr, round): a child's record}."""
    def pair(k, aslr):
        """Both runs' records, when both got as far as their first
        measurement (a run that stopped later is compared on what it had)."""
        need = "hints" if k == "driver" else "tensors"
        r1, r2 = res.get((k, aslr, 1)), res.get((k, aslr, 2))
        for r in (r1, r2):
            if r is None:
                return None, "no second run (out of time)"
            if need not in r:
                return None, "%s" % (r.get("error") or pc.why(r.get("rc")))
        return (r1, r2), ""

    summary = {}
    if not kinds:
        why = {"absent": "no torch", "nocuda": "torch sees no CUDA device"}.get(torch_state, torch_state)
        c.row("premise addresses: torch allocators", "-", "-", "skipped: %s" % why)
    for k, conf in kinds:
        parts = []
        for aslr, _ in modes:
            p, why = pair(k, aslr)
            if not p:
                parts.append("ASLR %s: no result (%s)" % (aslr, why))
                continue
            r1, r2 = p
            t, rel = pc.hits(r1["tensors"], r2["tensors"]), pc.rel_hits(r1["tensors"], r2["tensors"])
            n = pc.hits(r1.get("after_nccl"), r2.get("after_nccl"))
            s1, s2 = seg_addrs(r1), seg_addrs(r2)
            seg = pc.frac(pc.set_hits(s1, s2)) if s1 is not None and s2 is not None else "n/a"
            summary.setdefault(k, {})[aslr] = {"tensors": t, "relative": rel, "after_nccl": n, "segments": seg}
            stopped = ", ".join("run %d %s" % (i + 1, pc.why(r["rc"])) for i, r in enumerate(p) if r.get("rc"))
            parts.append("ASLR %s: tensors %s exact (%s same offsets), segments %s, after NCCL %s%s" %
                         (aslr, pc.frac(t), pc.frac(rel), seg, pc.frac(n), " (%s)" % stopped if stopped else ""))
        if not prefix:
            parts.append("ASLR off: skipped: %s" % why_not)
        c.row("premise addresses: %s%s" % (k, " (%s)" % conf if conf else ""), "-", "-", "; ".join(parts))
        if k == "async":
            r = res.get((k, "on", 1)) or {}
            if "error" in (r.get("final") or {}):
                c.data["async_snapshot"] = r["final"]["error"]

    # NCCL: what can be seen of its buffers, under the native allocator.
    if kinds:
        parts = []
        for aslr, _ in modes:
            p, why = pair("native", aslr)
            if not p:
                parts.append("ASLR %s: no result (%s)" % (aslr, why))
                continue
            n1, n2 = p[0].get("nccl", {}), p[1].get("nccl", {})
            if n1.get("error") or n2.get("error"):
                parts.append("ASLR %s: NCCL failed: %s" % (aslr, n1.get("error") or n2.get("error")))
                continue
            mk = lambda n: [[m[0], m[1]] for m in n.get("new_maps", [])]  # noqa: E731
            parts.append("ASLR %s: all_reduce tensors %s exact; new mappings %d and %d, %s at the same range; "
                         "new torch segments %d" % (aslr, pc.frac(pc.hits(n1["tensors"], n2["tensors"])),
                                                    len(n1.get("new_maps", [])), len(n2.get("new_maps", [])),
                                                    pc.frac(pc.set_hits(mk(n1), mk(n2))),
                                                    len(n1.get("new_segments", []))))
        c.row("premise addresses: NCCL init + all_reduce (1 rank)", "-", "-",
              "; ".join(parts) + " (NCCL's cuMem buffers are not visible to torch: these are /proc/self/maps)")

    # Design (b): fixed-address reservations.
    parts, honoured = [], {}
    drivers = [r for (k, _, _), r in res.items() if k == "driver"]
    if drivers and all(r.get("rc") == 3 for r in drivers):
        modes_b = []
        parts.append("skipped: no CUDA driver (%s)" % drivers[0].get("error", "?"))
    else:
        modes_b = modes
    for aslr, _ in modes_b:
        p, why = pair("driver", aslr)
        if not p:
            parts.append("ASLR %s: %s" % (aslr, why))
            continue
        r1, r2 = p
        h = [sum(1 for e in r.get("hints", []) if e["equal"]) for r in (r1, r2)]
        use = [e.get("usable") for e in r1.get("hints", []) if "usable" in e]
        rg = r2.get("ranges") or []
        honoured[aslr] = {"hints": [h[0] + h[1], 2 * len(HINTS)], "ranges": [sum(1 for e in rg if e["equal"]), len(rg)]}
        parts.append("ASLR %s: hints honoured %d/%d (mapped and used: %s), round 1's torch ranges %d/%d, "
                     "cuMemAlloc %s, unhinted reserve %s" %
                     (aslr, h[0] + h[1], 2 * len(HINTS), use[0] if use else "not tried",
                      honoured[aslr]["ranges"][0], len(rg),
                      "same" if r1.get("cuMemAlloc") == r2.get("cuMemAlloc") else "differs",
                      "same" if r1.get("unhinted_reserve") == r2.get("unhinted_reserve") else "differs"))
    c.row("premise addresses: fixed-address reserve, driver only", "-", "-", "; ".join(parts) or "no result")
    if kinds:
        parts = []
        for k, _ in kinds:
            for aslr, _ in modes:
                r = res.get((k, aslr, 1)) or {}
                rs = r.get("reserve")
                if rs is None:
                    parts.append("%s/%s: %s" % (k, aslr, r.get("reserve_error") or r.get("error") or "no result"))
                else:
                    parts.append("%s/%s %d/%d" % (k, aslr, sum(1 for e in rs if e["equal"]), len(rs)))
        c.row("premise addresses: fixed-address reserve after torch + NCCL", "-", "-", "hints honoured: " + ", ".join(parts))

    # The answer, in one row.
    a_ok = [k for k in summary if "off" in summary[k] and
            all(v[0] == v[1] for v in (summary[k]["off"]["tensors"], summary[k]["off"]["after_nccl"]))]
    a_no = [k for k in summary if k not in a_ok]
    verdict = []
    if kinds and not prefix:
        verdict.append("(a) ASLR off, same addresses: untested (%s)" % why_not)
    elif summary:
        verdict.append("(a) ASLR off, same addresses: %s%s" % ("holds for " + ", ".join(a_ok) if a_ok else "holds for none",
                                                              "; not for " + ", ".join(a_no) if a_no else ""))
    if honoured:
        verdict.append("(b) fixed-address reservations: " + ", ".join(
            "ASLR %s hints %s, earlier ranges %s" % (aslr, pc.frac(tuple(b["hints"])), pc.frac(tuple(b["ranges"])))
            for aslr, b in sorted(honoured.items(), reverse=True)))
    c.data["summary"] = {"tensors": summary, "reservations": honoured, "a_holds_for": a_ok}
    c.row("premise addresses: verdict", "-", "-", "; ".join(verdict) or (
        "no answer (logs/premise/addresses.*)" if res and (kinds or modes_b) else "skipped: nothing could be measured"))
    c.data["runs"] = {"%s.%s.%d" % key: {kk: v for kk, v in rec.items() if kk in ("error", "rc", "backend", "conf")}
                      for key, rec in res.items()}
    c.save()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode")
    m = sub.add_parser("main")
    m.add_argument("--out", required=True)
    m.add_argument("--budget", type=float, default=150)
    m.add_argument("--torch", default=None, help="cuda, nocuda or absent (probed when not given)")
    t = sub.add_parser("torch-child")
    t.add_argument("--kind", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--store", required=True)
    d = sub.add_parser("driver-child")
    d.add_argument("--out", required=True)
    d.add_argument("--ranges")
    a = p.parse_args(argv)
    if not a.mode:
        p.error("a mode: main, torch-child or driver-child")
    return a


def probe_torch():
    try:
        import torch
    except Exception:
        return "absent"
    return "cuda" if torch.cuda.is_available() else "nocuda"


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    if args.mode == "main":
        if args.torch is None:
            args.torch = probe_torch()
        sys.exit(main(args))
    sys.exit(torch_child(args) if args.mode == "torch-child" else driver_child(args))
