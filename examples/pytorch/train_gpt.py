"""A small GPT-like model trained the way an ordinary PyTorch script does it.

DDP over NCCL, AdamW, bf16 autocast, a seeded synthetic token stream; run
with `torchrun --nproc-per-node N train_gpt.py`.  Nothing here knows about
libckpt: it is the unmodified program libckpt is checked on (scripts/gpu-check).
Rank 0 prints `iter <i> loss <value>` after every optimizer step and, at the
end, `digest <hex>`: a hash of every parameter, every optimizer state tensor
and the step counts.  The same arguments on the same GPU and world size give
the same lines and digest: deterministic algorithms are on, the data is a
function of (seed, step, rank), and nothing is random after the seeded
initialisation.

--save-bench DIR then times torch.save and torch.distributed.checkpoint's
async_save of the same model and optimizer state into DIR (rank 0 prints
`save <method> <seconds> <bytes>` lines), after the digest, so the training
lines never depend on it.
"""

import argparse
import ctypes
import hashlib
import math
import os
import shutil
import sys
import time

# cuBLAS is deterministic only with a fixed workspace configuration, which
# must be in the environment before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=50, help="optimizer steps (default 50)")
    p.add_argument("--seed", type=int, default=1, help="seed of the weights and the data (default 1)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    p.add_argument("--dim", type=int, default=512, help="model width (default 512)")
    p.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary size (default 8192)")
    p.add_argument("--seq", type=int, default=256, help="tokens per sample (default 256)")
    p.add_argument("--batch", type=int, default=8, help="samples per rank and step (default 8)")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    p.add_argument("--save-bench", metavar="DIR", help="after training, time torch.save and DCP async_save into DIR")
    a = p.parse_args(argv)
    for name in ("iters", "layers", "dim", "heads", "vocab", "seq", "batch"):
        if getattr(a, name) <= 0:
            p.error(f"--{name} must be positive")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


class Block(nn.Module):
    """Pre-norm attention and MLP.  Attention is written out (matmuls and a
    masked softmax) rather than a fused kernel, whose backward may not be
    deterministic."""

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


def batch_for(a, step, rank):
    """This rank's tokens for one step: a function of (seed, step, rank)
    only, so a run that starts over sees the same data.  Targets follow a
    fixed rule of the inputs, so there is something to learn."""
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    y = (x * 31 + torch.roll(x, 1, dims=1) * 7 + 3) % a.vocab
    return x.pin_memory(), y.pin_memory()


def tensor_bytes(t):
    """The raw bytes of a tensor, read back to the host (no numpy needed)."""
    t = t.detach().contiguous().cpu()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def digest(model, opt):
    """SHA-256 (first 16 hex digits) over every parameter in order, then
    every optimizer state entry in parameter order and key order."""
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


def save_bench(model, opt, where, rank):
    """Times torch.save and DCP async_save of the same state into where:
    the model's and the optimizer's state dicts, keyed by parameter name
    as DCP wants them."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    nbytes += sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    os.makedirs(where, exist_ok=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.save(state, os.path.join(where, f"torch-save.{rank}.pt"))
    t_save = time.perf_counter() - t0
    if rank == 0:
        print(f"save torch.save {t_save:.4f} {nbytes}", flush=True)

    path = os.path.join(where, "dcp")
    t0 = time.perf_counter()
    fut = dcp.async_save(state, checkpoint_id=path)
    t_return = time.perf_counter() - t0
    # A Future, or (with a stager) a response holding two of them.
    getattr(fut, "upload_completion", fut).result()
    t_done = time.perf_counter() - t0
    if rank == 0:
        print(f"save dcp.async_save.blocking {t_return:.4f} {nbytes}", flush=True)
        print(f"save dcp.async_save.total {t_done:.4f} {nbytes}", flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(where, ignore_errors=True)


def main(argv=None):
    a = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if not torch.cuda.is_available():
        print("train_gpt: no CUDA device", file=sys.stderr)
        return 1
    torch.cuda.set_device(local % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    # DCP's async_save needs a CPU backend beside NCCL; training uses NCCL either way.
    backend = "cpu:gloo,cuda:nccl" if a.save_bench else "nccl"
    dist.init_process_group(backend, rank=rank, world_size=world, device_id=dev)

    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False

    model = GPT(a).to(dev)
    ddp = DDP(model, device_ids=[dev.index])
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    if rank == 0:
        # What a snapshot must hold at the boundary (after opt.step()):
        # parameters, their gradients and AdamW's two moments.
        pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        print(f"state {4 * pbytes} bytes", flush=True)

    for step in range(1, a.iters + 1):
        x, y = batch_for(a, step, rank)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = ddp(x)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        if rank == 0:
            print(f"iter {step} loss {value:.9g}", flush=True)

    d = digest(model, opt)
    if rank == 0:
        print(f"digest {d}", flush=True)
    if a.save_bench:
        try:
            save_bench(model, opt, a.save_bench, rank)
        except Exception as e:  # a baseline that fails must not fail the training run
            print(f"train_gpt: --save-bench failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
