"""libckpt's helper for PyTorch: tells libckpt which blocks of the caching
allocator's segments are free, so that a snapshot copies the tensors and
not the allocator's cache (include/libckpt.h).

ckpt-resume puts it on the ranks' PYTHONPATH (CKPT_TORCH_HELPER=0 leaves it
out), and its sitecustomize attaches it when the program imports torch.  A
program started otherwise can attach it itself:

    import torch, libckpt_torch
    libckpt_torch.attach(torch)

At every snapshot libckpt asks it, on the thread that ended the iteration
and only while that thread holds the interpreter lock (else the snapshot
copies whole segments), and it declares each segment of
torch.cuda.memory_snapshot() live, then its inactive and pending-free
blocks free: their bytes are dead to the program.  Under
backend:cudaMallocAsync every tensor is an allocation of its own, and
there is nothing to declare.
"""
import ctypes
import os

_attached = []  # the callback, kept alive as long as libckpt may call it


def _uses_malloc_async():
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(var, "").replace(" ", "")
        if "backend:cudaMallocAsync" in conf.split(","):
            return True
    return False


def attach(torch):
    """Declares torch's free blocks to libckpt from now on.  Returns False
    (and does nothing) when libckpt is not in the process or the allocator
    is cudaMallocAsync."""
    if _attached or _uses_malloc_async():
        return bool(_attached)
    lib = ctypes.CDLL(None)
    try:
        source, free, live = lib.ckpt_declare_source, lib.ckpt_declare_free, lib.ckpt_declare_live
    except AttributeError:
        return False  # not under libckpt.so
    for f in (free, live):
        f.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        f.restype = ctypes.c_int
    declaring = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    def declare(_arg):
        # Any failure: nonzero, and libckpt copies this snapshot whole.
        try:
            for seg in torch.cuda.memory_snapshot():
                at = seg["address"]
                if live(at, seg["total_size"]) != 0:
                    return 1
                for block in seg["blocks"]:
                    if block["state"] in ("inactive", "active_pending_free") and free(at, block["size"]) != 0:
                        return 1
                    at += block["size"]
            return 0
        except BaseException:
            return 1

    callback = declaring(declare)
    source.argtypes = [declaring, ctypes.c_void_p, ctypes.c_void_p]
    source.restype = ctypes.c_int
    holds_lock = ctypes.cast(ctypes.pythonapi.PyGILState_Check, ctypes.c_void_p)
    source(callback, holds_lock, None)
    _attached.append(callback)
    return True
