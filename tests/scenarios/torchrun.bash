# The torchrun stand-in the launcher tests share (resume.bats, standby.bats).

# torchrun_standin FILE: a stand-in for torchrun as it runs a job, in
# FILE: a Python script named torchrun that touches the driver (torchrun
# counts the GPUs), serves its agent store on MASTER_PORT (--master-port
# or PET_MASTER_PORT when given, else a free port, as --standalone picks)
# and starts --nproc-per-node workers with the variables torchrun sets
# them, TORCHELASTIC_USE_AGENT_STORE=True among them; the first that fails
# has the others stopped, and it exits 1.  It writes the restarts it was
# asked for (PET_MAX_RESTARTS or --max-restarts) to $D/pet.
torchrun_standin() {
    cat >"$1" <<SCRIPT
#!/usr/bin/env python3
import ctypes, os, signal, socket, subprocess, sys, time
args, nproc, restarts = sys.argv[1:], 1, os.environ.get("PET_MAX_RESTARTS", "unset")
port = int(os.environ.get("PET_MASTER_PORT", "0"))
while args and args[0].startswith("--"):
    key, eq, value = args.pop(0).partition("=")
    if key in ("--standalone", "--no-python", "--no_python"):
        continue
    value = value if eq else args.pop(0)
    if key in ("--nproc-per-node", "--nproc_per_node"):
        nproc = int(value)
    elif key in ("--max-restarts", "--max_restarts"):
        restarts = value
    elif key in ("--master-port", "--master_port"):
        port = int(value)
open("$D/pet", "a").write(restarts + "\\n")
assert ctypes.CDLL("$BUILD/fake/libcuda.so.1").cuInit(0) == 0
store = socket.socket()
store.bind(("127.0.0.1", port))
store.listen()
env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.getsockname()[1]), WORLD_SIZE=str(nproc),
           LOCAL_WORLD_SIZE=str(nproc), TORCHELASTIC_RUN_ID="bats", TORCHELASTIC_USE_AGENT_STORE="True",
           TORCHELASTIC_RESTART_COUNT="0")
workers = [subprocess.Popen(args, env=dict(env, RANK=str(r), LOCAL_RANK=str(r), GROUP_RANK="0")) for r in range(nproc)]
rc = 0
while workers:
    for w in [w for w in workers if w.poll() is not None]:
        workers.remove(w)
        if w.returncode and not rc:
            rc = 1
            for other in workers:
                other.send_signal(signal.SIGTERM)
    time.sleep(0.05)
sys.exit(rc)
SCRIPT
    chmod +x "$1"
}
