"""The test double of PyTorch, as much of it as libckpt's PyTorch helper
meets: ``import torch`` loads libc10_cuda.so (its caching allocator and a
few ops, tests/fake/torch/c10_cuda.c), tensors hand their blocks back when
they die, and ``torch.cuda.memory_snapshot()`` lists segments and blocks
as the real one does (address, total_size, blocks with size and state).
Calls into the library release the interpreter lock, as torch's ops do
(pybind11::gil_scoped_release in their bindings); FAKETORCH_ITEM_HOLDS_LOCK=1
makes .item() hold it while it waits, as a C extension may.
"""
import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "libc10_cuda.so"))
_lib.tl_alloc.restype = ctypes.c_void_p
_lib.tl_alloc.argtypes = [ctypes.c_size_t]
_lib.tl_free.argtypes = [ctypes.c_void_p]
_item = (ctypes.PyDLL if os.environ.get("FAKETORCH_ITEM_HOLDS_LOCK") == "1" else ctypes.CDLL)(_lib._name).tl_item
_item.restype = ctypes.c_uint32
_item.argtypes = [ctypes.c_void_p]
_lib.tl_fill.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
_lib.tl_act.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32]
_lib.tl_grad.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
_lib.tl_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_lib.tl_sum.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
if _lib.tl_init() != 0:
    raise RuntimeError("CUDA error: no stream")

__version__ = "0.0+double"


class Tensor:
    """A 1-d tensor of uint32 words on the device."""

    def __init__(self, words):
        self.words = words
        self.ptr = _lib.tl_alloc(4 * words)

    def __del__(self):
        _lib.tl_free(self.ptr)

    def data_ptr(self):
        return self.ptr

    def fill_(self, value):
        _lib.tl_fill(self.ptr, self.words, value)
        return self

    def item(self):
        return _item(self.ptr)


def empty(words):
    return Tensor(words)


def zeros(words):
    return Tensor(words).fill_(0)


def activation(w, words, seed):
    """A forward pass: an activation of `words` words made from w."""
    act = Tensor(words)
    _lib.tl_act(act.ptr, words, w.ptr, w.words, seed)
    return act


def grad_(g, act):
    _lib.tl_grad(g.ptr, g.words, act.ptr, act.words)


def step_(w, m, g):
    _lib.tl_step(w.ptr, m.ptr, g.ptr, w.words)


def digest(w):
    out = Tensor(1)
    _lib.tl_sum(out.ptr, w.ptr, w.words)
    return out


class cuda:
    _STATES = ("inactive", "active_allocated", "active_pending_free")

    @staticmethod
    def memory_snapshot():
        n = 4096
        seg_addr = (ctypes.c_size_t * 256)()
        seg_size = (ctypes.c_size_t * 256)()
        first = (ctypes.c_int * 257)()
        blk_size = (ctypes.c_size_t * n)()
        blk_state = (ctypes.c_int * n)()
        k = _lib.tl_snapshot(seg_addr, seg_size, first, blk_size, blk_state, n)
        if k < 0:
            raise RuntimeError("memory snapshot too large")
        out = []
        for s in range(k):
            addr, blocks = seg_addr[s], []
            for b in range(first[s], first[s + 1]):
                blocks.append({"address": addr, "size": blk_size[b], "requested_size": blk_size[b],
                               "state": cuda._STATES[blk_state[b]], "frames": []})
                addr += blk_size[b]
            out.append({"device": 0, "address": seg_addr[s], "total_size": seg_size[s], "stream": 0,
                        "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                        "frames": [], "blocks": blocks})
        return out
