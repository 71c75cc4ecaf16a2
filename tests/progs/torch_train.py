"""torch_train: the model of tests/progs/alloc_train.c, written as a
PyTorch script is: tensors from torch's caching allocator, activations
that die every iteration, the loss read with .item().

    python3 torch_train.py [--iters N] [--die-at K]

Prints "model N bytes", "iter I loss X" per iteration and "digest D" at
the end.  --die-at K: right after iteration K, SIGKILL itself, once
(FID_DIE_ONCE names the file that says it happened).
"""
import os
import signal
import sys

import torch

WORDS = (65536, 4096, 32768, 1024, 16384, 8192)


def main(argv):
    iters, die_at = 50, 0
    args = iter(argv)
    for a in args:
        if a == "--iters":
            iters = int(next(args))
        elif a == "--die-at":
            die_at = int(next(args))
        else:
            sys.exit("usage: torch_train.py [--iters N] [--die-at K]")
    w = [torch.zeros(n) for n in WORDS]
    g = [torch.empty(n) for n in WORDS]
    m = [torch.zeros(n) for n in WORDS]
    print("model %d bytes" % (3 * 4 * sum(WORDS)))
    for it in range(1, iters + 1):
        for t, n in enumerate(WORDS):
            act = torch.activation(w[t], n * (1 + (it + t) % 3), (it * 2654435761) & 0xFFFFFFFF)
            torch.grad_(g[t], act)
            del act  # back to the allocator, reused once its event says so
            torch.step_(w[t], m[t], g[t])
        print("iter %d loss 0x%08x" % (it, torch.digest(w[0]).item()))
        if it == die_at:
            once = os.environ.get("FID_DIE_ONCE")
            if once and not os.path.exists(once):
                open(once, "w").close()
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
    h = 0
    for t in range(len(WORDS)):
        h = (h * 1000003 + torch.digest(w[t]).item() * 31 + torch.digest(m[t]).item()) & 0xFFFFFFFFFFFFFFFF
    print("digest %016x" % h)


if __name__ == "__main__":
    main(sys.argv[1:])
