"""A small GPT-like training program for the premise checks P2 (determinism)
and P4 (bytes per snapshot), written the way ordinary PyTorch scripts are:
a DataLoader with worker processes and pin_memory (its pin thread), DDP over
a 1-rank ProcessGroupNCCL (its watchdog thread), AdamW, bf16 autocast, and
the loss averaged over ranks and read back every step.  Nothing here knows
about libckpt.

Every step appends one JSON line to --record: the loss (exact, as hex), the
step's time, the memory at the iteration boundary (reserved, allocated, the
model's parameter, gradient and optimizer-state bytes), and, unless --light,
everything else the host can observe of the run: torch.cuda.memory_stats(),
the caching allocator's segments and blocks (memory_snapshot()), a few
tensor addresses, and the threads alive (Python's and the OS's).  Stdout has
`iter N loss X` per step and `digest D` at the end, as examples/pytorch/
train_gpt.py prints them.

--device cpu runs the same program on the CPU (gloo, no pinning, no CUDA
records), to test it where there is no GPU.  Exit status 3: no CUDA device.
"""

import argparse
import ctypes
import hashlib
import json
import math
import os
import sys
import threading
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcommon as pc  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--record", required=True, help="JSON lines, one per step")
    p.add_argument("--store", required=True, help="the FileStore of the 1-rank process group (a fresh path)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--light", action="store_true", help="record only the loss, the time and the boundary's bytes")
    a = p.parse_args(argv)
    if a.dim % a.heads or min(a.steps, a.layers, a.dim, a.heads, a.vocab, a.seq, a.batch) <= 0 or a.workers < 0:
        p.error("sizes must be positive, --dim a multiple of --heads")
    return a


class Block(nn.Module):
    def __init__(self, dim, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok = nn.Embedding(a.vocab, a.dim)
        self.pos = nn.Embedding(a.seq, a.dim)
        self.blocks = nn.ModuleList(Block(a.dim, a.heads, a.seq) for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.dim)
        self.head = nn.Linear(a.dim, a.vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class Tokens(torch.utils.data.Dataset):
    """Sample i is a function of (seed, i) only; targets follow a fixed rule."""

    def __init__(self, a, n):
        self.a, self.n = a, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.a.seed * 1_000_003 + i)
        x = torch.randint(0, self.a.vocab, (self.a.seq,), generator=g)
        return x, (x * 31 + torch.roll(x, 1) * 7 + 3) % self.a.vocab


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def boundary(model, opt, dev):
    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    b = {"param_bytes": nbytes(params),
         "grad_bytes": nbytes(p.grad for p in params if p.grad is not None),
         "opt_bytes": nbytes(t for t in state if t.device.type == dev.type),
         "opt_host_bytes": nbytes(t for t in state if t.device.type != dev.type)}
    if dev.type == "cuda":
        b["reserved"] = torch.cuda.memory_reserved()
        b["allocated"] = torch.cuda.memory_allocated()
    return b


def snapshot():
    """Segments [address, size] and blocks [address, size, state] in address
    order, or the reason there are none (cudaMallocAsync)."""
    try:
        snap = torch.cuda.memory_snapshot()
    except Exception as e:
        return {"error": "%s: %s" % (type(e).__name__, str(e)[:120])}
    segs, blocks = [], []
    for s in snap:
        off = s.get("address", 0)
        segs.append([off, s.get("total_size", 0)])
        for b in s.get("blocks", []):
            addr = b.get("address", off)
            blocks.append([addr, b.get("size", 0), b.get("state", "")])
            off = addr + b.get("size", 0)
    return {"segments": sorted(segs), "blocks": sorted(blocks)}


def observe(dev, x, model, opt):
    """What the host can see of the run besides the numbers."""
    o = {"py_threads": sorted(t.name for t in threading.enumerate()), "os_threads": pc.thread_names()}
    if dev.type == "cuda":
        o["mem"] = {k: v for k, v in torch.cuda.memory_stats().items() if isinstance(v, (int, float))}
        o["snap"] = snapshot()
        p0 = next(model.parameters())
        st = opt.state.get(p0, {})
        o["ptrs"] = [x.data_ptr(), p0.data_ptr(), p0.grad.data_ptr() if p0.grad is not None else 0,
                     st["exp_avg"].data_ptr() if "exp_avg" in st else 0]
    return o


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def digest(model, opt):
    """SHA-256 (16 hex digits) of every parameter, then every optimizer
    state entry, in order: as examples/pytorch/train_gpt.py computes it."""
    h = hashlib.sha256()
    params = list(model.parameters())
    for p in params:
        h.update(tensor_bytes(p))
    for p in params:
        state = opt.state.get(p, {})
        for key in sorted(state):
            v = state[key]
            h.update(key.encode())
            h.update(tensor_bytes(v) if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()[:16]


def main(argv=None):
    a = parse(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("premise_gpt: no CUDA device", file=sys.stderr)
        return 3
    dev = torch.device(a.device, 0) if a.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    rec = open(a.record, "w")

    def put(obj):
        rec.write(json.dumps(obj, sort_keys=True) + "\n")
        rec.flush()

    put({"header": {"pid": os.getpid(), "torch": torch.__version__, "personality": pc.personality(),
                    "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                    "ld_preload": os.environ.get("LD_PRELOAD", ""), "args": vars(a),
                    "os_threads": pc.thread_names()}})
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", store=dist.FileStore(a.store, 1),
                            rank=0, world_size=1)
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False

    model = GPT(a).to(dev)
    if dev.type == "cuda":
        ddp = DDP(model, device_ids=[dev.index])
    else:  # gloo broadcasts no bool tensors: the masks (the same everywhere) stay out
        DDP._set_params_and_buffers_to_ignore_for_model(model, [n for n, _ in model.named_buffers()])
        ddp = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    loader = torch.utils.data.DataLoader(
        Tokens(a, a.steps * a.batch), batch_size=a.batch, shuffle=True, drop_last=True,
        generator=torch.Generator().manual_seed(a.seed), num_workers=a.workers,
        pin_memory=dev.type == "cuda")

    step = 0
    for x, y in loader:
        step += 1
        t0 = time.perf_counter()
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        if dev.type == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = ddp(x)
        else:
            logits = ddp(x)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg)
        value = avg.item()
        ms = (time.perf_counter() - t0) * 1000
        r = {"step": step, "loss": float.hex(value), "ms": round(ms, 3), "boundary": boundary(model, opt, dev)}
        if not a.light:
            r.update(observe(dev, x, model, opt))
        put(r)
        print("iter %d loss %.9g" % (step, value), flush=True)
    d = digest(model, opt)
    put({"end": {"digest": d, "steps": step, "os_threads": pc.thread_names()}})
    print("digest %s" % d, flush=True)
    rec.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
