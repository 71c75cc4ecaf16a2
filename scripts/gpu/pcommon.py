"""What the GPU premise checks share (scripts/gpu-check, docs/gpu.md): the
rows they hand to gpu-check's table, child processes bounded in time, the
JSON they leave, and small readers of /proc and of the CUDA driver.

A check is a program (premise_addresses.py, ...) that gpu-check runs under a
timeout.  It prints one line per table row on stdout,
    row<TAB>check<TAB>without libckpt<TAB>with libckpt<TAB>result
as soon as it knows it, and keeps <out>/<name>.json up to date with its rows
and its measurements, so a check cut short still leaves what it measured.
A row's result never starts with FAILED, DIFFERENT or NO unless the check
itself broke: the premise checks measure, they do not judge libckpt.

Nothing here imports torch; nothing here may write outside the output
directory it is given, or leave a child process running.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ADDR_NO_RANDOMIZE = 0x0040000


def emit(check, without="-", with_="-", result="-"):
    """One row for gpu-check's table, on stdout at once (tabs and newlines
    in a cell would break the table, so they become spaces)."""
    cells = [str(c if c not in (None, "") else "-").replace("\t", " ").replace("\n", " ")
             for c in (check, without, with_, result)]
    sys.stdout.write("row\t" + "\t".join(cells) + "\n")
    sys.stdout.flush()


def write_json(path, obj):
    """path replaced whole (written beside it, then renamed)."""
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


class Check:
    """One premise check: its budget, its rows, its JSON, its children.

    Every child runs in a session of its own, so that it and whatever it
    starts (DataLoader workers, torchrun, ckpt-resume's ranks) can be killed
    together; SIGTERM (gpu-check's timeout) kills them all and saves what
    was measured before the check exits."""

    def __init__(self, name, out_dir, budget):
        self.name = name
        self.out_dir = out_dir
        self.budget = float(budget)
        self.t0 = time.monotonic()
        self.rows = []
        self.data = {}
        self.live = {}
        os.makedirs(out_dir, exist_ok=True)
        self.json_path = os.path.join(out_dir, name + ".json")
        signal.signal(signal.SIGTERM, self._terminated)
        signal.signal(signal.SIGINT, self._terminated)

    def _terminated(self, signum, frame):
        self.kill_all()
        self.data["cut_short"] = "signal %d after %.0f s" % (signum, time.monotonic() - self.t0)
        self.save()
        os._exit(124)

    def left(self):
        return self.budget - (time.monotonic() - self.t0)

    def limit(self, want):
        """Seconds a child may take: want, cut to what is left (keeping 3 s
        to write the results); 0 when under 5 s are left."""
        t = min(float(want), self.left() - 3)
        return t if t >= 5 else 0

    def row(self, check, without="-", with_="-", result="-"):
        emit(check, without, with_, result)
        self.rows.append([check, without, with_, result])
        self.save()

    def save(self):
        write_json(self.json_path, {"check": self.name, "rows": self.rows, "data": self.data,
                                    "seconds": round(time.monotonic() - self.t0, 1)})

    def path(self, tag, ext):
        return os.path.join(self.out_dir, "%s.%s.%s" % (self.name, tag, ext))

    def spawn(self, tag, cmd, env=None, stdin=subprocess.DEVNULL, stdout=None):
        """Starts cmd with stdout (unless a pipe is asked for) and stderr in
        <out>/<name>.<tag>.out/.err; returns the Popen."""
        out = stdout if stdout is not None else open(self.path(tag, "out"), "w")
        err = open(self.path(tag, "err"), "w")
        with open(self.path(tag, "cmd"), "w") as f:
            f.write(" ".join(cmd) + "\n")
        p = subprocess.Popen(cmd, env=env, stdin=stdin, stdout=out, stderr=err, start_new_session=True)
        p.tag = tag
        p.started = time.monotonic()
        self.live[p.pid] = p
        if stdout is None:
            out.close()
        err.close()
        return p

    def wait(self, procs, want):
        """Waits for every Popen in procs, all together for at most
        limit(want) seconds; the ones still running then are killed (their
        status is 124).  Returns {tag: status}."""
        deadline = time.monotonic() + max(self.limit(want), 1)
        rcs = {}
        for p in procs:
            try:
                rcs[p.tag] = p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.kill(p)
                rcs[p.tag] = 124
            self.live.pop(p.pid, None)
        return rcs

    def run(self, tag, cmd, env=None, want=60):
        """cmd to its end or to limit(want); its status, 124 when it ran out
        of time, 125 when there was no time to start it."""
        if self.limit(want) == 0:
            return 125
        return self.wait([self.spawn(tag, cmd, env)], want)[tag]

    def kill(self, p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def kill_all(self):
        for p in list(self.live.values()):
            self.kill(p)
        self.live.clear()

    def tail(self, tag, ext="err", n=1, width=160):
        """The last n lines a child wrote, shortened, for a row."""
        try:
            with open(self.path(tag, ext), errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            return ""
        return " / ".join(lines[-n:])[:width]

    def text(self, tag, ext="err"):
        try:
            with open(self.path(tag, ext), errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def why(rc):
    """A word for a child's exit status."""
    return {124: "timed out", 125: "out of time", 137: "killed", 3: "no CUDA device"}.get(rc, "exit %s" % rc)


def child_env(extra=None, drop=("LD_PRELOAD",)):
    """The environment a child runs in: this one, without LD_PRELOAD (only a
    run that means to preload libckpt sets it), plus extra."""
    env = dict(os.environ)
    for k in drop:
        env.pop(k, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


# ---- address-space randomisation

def no_aslr_prefix():
    """(prefix, why): the command prefix that runs a program with
    randomisation off (setarch -R), or None and the reason it cannot."""
    arch = os.uname().machine
    cmd = ["setarch", arch, "-R"]
    try:
        r = subprocess.run(cmd + ["cat", "/proc/self/personality"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10, universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "setarch -R: %s" % e
    if r.returncode != 0:
        return None, "setarch -R: %s" % (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    try:
        if not int(r.stdout.strip(), 16) & ADDR_NO_RANDOMIZE:
            return None, "setarch -R ran, but the personality has no ADDR_NO_RANDOMIZE"
    except ValueError:
        return None, "setarch -R: unreadable personality %r" % r.stdout.strip()
    return cmd, ""


def randomize_va_space():
    try:
        with open("/proc/sys/kernel/randomize_va_space") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def personality():
    try:
        with open("/proc/self/personality") as f:
            v = int(f.read().strip(), 16)
        return {"value": "%08x" % v, "aslr_off": bool(v & ADDR_NO_RANDOMIZE)}
    except (OSError, ValueError):
        return {"value": None, "aslr_off": None}


# ---- /proc

def maps():
    """This process's mappings: [start, end, perms, path] ('' when anonymous)."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for ln in f:
                parts = ln.split(None, 5)
                lo, hi = parts[0].split("-")
                out.append([int(lo, 16), int(hi, 16), parts[1], parts[5].strip() if len(parts) > 5 else ""])
    except OSError:
        pass
    return out


def new_maps(before, after, limit=400):
    """Mappings in after that were not in before (same start, end and path)."""
    old = set((m[0], m[1], m[3]) for m in before)
    return [m for m in after if (m[0], m[1], m[3]) not in old][:limit]


def thread_names():
    """The OS threads of this process, by name (/proc/self/task/*/comm), sorted."""
    names = []
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open("/proc/self/task/%s/comm" % tid) as f:
                    names.append(f.read().strip())
            except OSError:
                pass
    except OSError:
        pass
    return sorted(names)


# ---- comparing two runs

def hits(a, b):
    """(exact, total): positions where two sequences hold the same value, of
    the longer length."""
    a, b = a or [], b or []
    return sum(1 for x, y in zip(a, b) if x == y), max(len(a), len(b))


def set_hits(a, b):
    """(common, union) of two collections taken as sets."""
    sa = set(tuple(x) if isinstance(x, list) else x for x in (a or []))
    sb = set(tuple(x) if isinstance(x, list) else x for x in (b or []))
    return len(sa & sb), len(sa | sb)


def rel_hits(a, b):
    """(same, total): positions whose offset from the sequence's first value
    is the same in both: the layout, whatever the base."""
    if not a or not b:
        return 0, max(len(a or []), len(b or []))
    return hits([x - a[0] for x in a], [y - b[0] for y in b])


def frac(h):
    return "%d/%d" % h


def gb(n):
    return "%.2f GB" % (n / 1e9) if isinstance(n, (int, float)) else "?"


# ---- the CUDA driver, through ctypes (no torch, no toolkit)

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemAllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):  # cuda.h, CUmemAllocationProp_v1: 32 bytes
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", CUmemAllocFlags)]


class CUmemAccessDesc(ctypes.Structure):  # 12 bytes
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


assert ctypes.sizeof(CUmemAllocationProp) == 32 and ctypes.sizeof(CUmemAccessDesc) == 12


class CudaError(Exception):
    pass


class Driver:
    """The few driver calls the checks make, typed.  Each call raises
    CudaError naming the call and the error unless told to return it."""

    def __init__(self, path="libcuda.so.1"):
        self.lib = ctypes.CDLL(path)
        u64, sz, p = ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER
        sig = {
            "cuInit": [ctypes.c_uint],
            "cuDriverGetVersion": [p(ctypes.c_int)],
            "cuDeviceGet": [p(ctypes.c_int), ctypes.c_int],
            "cuDevicePrimaryCtxRetain": [p(ctypes.c_void_p), ctypes.c_int],
            "cuCtxSetCurrent": [ctypes.c_void_p],
            "cuCtxSynchronize": [],
            "cuMemGetInfo_v2": [p(sz), p(sz)],
            "cuMemAlloc_v2": [p(u64), sz],
            "cuMemFree_v2": [u64],
            "cuMemsetD8_v2": [u64, ctypes.c_ubyte, sz],
            "cuMemcpyDtoH_v2": [ctypes.c_void_p, u64, sz],
            "cuMemGetAllocationGranularity": [p(sz), p(CUmemAllocationProp), ctypes.c_int],
            "cuMemAddressReserve": [p(u64), sz, sz, u64, ctypes.c_ulonglong],
            "cuMemAddressFree": [u64, sz],
            "cuMemCreate": [p(ctypes.c_ulonglong), sz, p(CUmemAllocationProp), ctypes.c_ulonglong],
            "cuMemRelease": [ctypes.c_ulonglong],
            "cuMemMap": [u64, sz, sz, ctypes.c_ulonglong, ctypes.c_ulonglong],
            "cuMemUnmap": [u64, sz],
            "cuMemSetAccess": [u64, sz, p(CUmemAccessDesc), sz],
            "cuGetErrorName": [ctypes.c_int, p(ctypes.c_char_p)],
        }
        for name, args in sig.items():
            f = getattr(self.lib, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        self.dev = None

    def err_name(self, rc):
        s = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
        return "CUresult %d" % rc

    def call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CudaError("%s: %s" % (name, self.err_name(rc)))

    def version(self):
        v = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def start(self, ordinal=0):
        """cuInit, the device's primary context made current (what the
        runtime, and so PyTorch, uses)."""
        self.call("cuInit", 0)
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.call("cuCtxSetCurrent", ctx)
        self.dev = dev.value

    def mem_info(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def prop(self):
        pr = CUmemAllocationProp()
        pr.type = CU_MEM_ALLOCATION_TYPE_PINNED
        pr.location.type = CU_MEM_LOCATION_TYPE_DEVICE
        pr.location.id = self.dev
        return pr

    def granularity(self):
        g = ctypes.c_size_t()
        pr = self.prop()
        self.call("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(pr), 0)
        return g.value

    def reserve(self, size, hint):
        """(CUresult, address) of cuMemAddressReserve(size, hint)."""
        ptr = ctypes.c_uint64()
        rc = self.lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, hint, 0)
        return rc, ptr.value

    def map_and_check(self, va, size):
        """Backs [va, va + size) with device memory, writes it on the device
        and reads a byte back: the reserved range is usable.  Unmaps and
        releases what it made; returns None, or what went wrong."""
        handle = ctypes.c_ulonglong()
        pr = self.prop()
        mapped = False
        try:
            self.call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(pr), 0)
            self.call("cuMemMap", va, size, 0, handle.value, 0)
            mapped = True
            acc = CUmemAccessDesc()
            acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE
            acc.location.id = self.dev
            acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            self.call("cuMemSetAccess", va, size, ctypes.byref(acc), 1)
            self.call("cuMemsetD8_v2", va, 0x5A, size)
            self.call("cuCtxSynchronize")
            b = ctypes.c_ubyte(0)
            self.call("cuMemcpyDtoH_v2", ctypes.byref(b), va + size - 1, 1)
            return None if b.value == 0x5A else "read back 0x%02x, not 0x5a" % b.value
        except CudaError as e:
            return str(e)
        finally:
            if mapped:
                self.lib.cuMemUnmap(va, size)
            if handle.value:
                self.lib.cuMemRelease(handle.value)


def try_reservations(drv, ranges, check_first=True):
    """Design (b)'s premise: cuMemAddressReserve(size, hint) for each
    (hint, size) in ranges; whether the driver returned the hint, and (for
    the first honoured one) whether the range can be backed and used.  Every
    reservation is freed before the next, so the hints do not collide."""
    out = []
    checked = not check_first
    gran = None
    for hint, size in ranges:
        rc, got = drv.reserve(size, hint)
        e = {"hint": hint, "size": size, "rc": drv.err_name(rc) if rc else "CUDA_SUCCESS", "got": got,
             "equal": rc == 0 and got == hint}
        if rc == 0 and e["equal"] and not checked:
            try:
                gran = gran or drv.granularity()
                e["usable"] = drv.map_and_check(got, gran) or "yes"
            except CudaError as err:
                e["usable"] = str(err)
            checked = True
        if rc == 0:
            drv.lib.cuMemAddressFree(got, size)
        out.append(e)
    return out
