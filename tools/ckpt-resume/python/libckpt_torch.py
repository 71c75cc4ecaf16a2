"""libckpt's helper for PyTorch: tells libckpt which blocks of the caching
allocator's segments are free, so that a snapshot copies the tensors and
not the allocator's cache (include/libckpt.h).

ckpt-resume puts it on the ranks' PYTHONPATH (CKPT_TORCH_HELPER=0 leaves it
out), and its sitecustomize attaches it when the program imports torch.  A
program started otherwise can attach it itself:

    import torch, libckpt_torch
    libckpt_torch.attach(torch)

It answers on a thread of its own.  At every snapshot libckpt asks it,
while the thread that ended the iteration waits (at most
CKPT_DECLARE_WAIT), and it lists the inactive and pending-free blocks of
torch.cuda.memory_snapshot(): their bytes are dead to the program.  When
the iteration's thread holds the interpreter lock the answer needs, or no
answer comes in time, that snapshot copies whole segments.  Under
backend:cudaMallocAsync every tensor is an allocation of its own, and
there is nothing to answer.
"""
import ctypes
import os
import threading

_FREE = ("inactive", "active_pending_free")
_attached = []


def _uses_malloc_async():
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(var, "").replace(" ", "")
        if "backend:cudaMallocAsync" in conf.split(","):
            return True
    return False


def free_blocks(snapshot):
    """(address, bytes) of every block of a memory snapshot whose bytes
    the program will not read again, flattened into one list."""
    out = []
    for seg in snapshot:
        at = seg["address"]
        for block in seg["blocks"]:
            if block["state"] in _FREE:
                out += (at, block["size"])
            at += block["size"]
    return out


def attach(torch):
    """Answers libckpt's snapshots from now on.  Returns False (and does
    nothing) when libckpt is not in the process or the allocator is
    cudaMallocAsync."""
    if _attached or _uses_malloc_async():
        return bool(_attached)
    lib = ctypes.CDLL(None)  # its calls release the interpreter lock
    try:
        wait, answer = lib.ckpt_declare_wait, lib.ckpt_declare_answer
    except AttributeError:
        return False  # not under libckpt.so
    wait.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p]
    answer.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    wait.restype = answer.restype = ctypes.c_int
    holds_lock = ctypes.cast(ctypes.pythonapi.PyGILState_Check, ctypes.c_void_p)

    def serve():
        request = ctypes.c_uint64()
        while wait(ctypes.byref(request), holds_lock) == 0:
            try:
                pairs = free_blocks(torch.cuda.memory_snapshot())
            except Exception:
                continue  # no answer: that snapshot copies whole segments
            answer(request.value, (ctypes.c_uint64 * max(len(pairs), 1))(*pairs), len(pairs) // 2)

    thread = threading.Thread(target=serve, name="libckpt-declare", daemon=True)
    thread.start()
    _attached.append(thread)
    return True
