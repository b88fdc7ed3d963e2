"""Two "hosts" on one machine: network namespaces joined by a veth pair, for tests of what a
user runs across machines.

``TwoHosts(workdir)`` starts, under ``unshare -rn`` (a user namespace mapping us to root,
with its own network namespace: host A), a small manager (this module run as a script).
The manager brings up A's loopback, makes a veth pair, starts a second network namespace
(host B, a child ``unshare -n`` holding it open), moves one end there and gives the ends
the addresses ``A_ADDRESS`` and ``B_ADDRESS`` (a /24 that exists only between the two).
Nothing leaves the machine: neither namespace has any other interface or route. Each
host's loopback is its own, so a server bound to 127.0.0.1 on A is out of B's reach, as on
real machines.

The test talks to the manager over its stdin/stdout, one JSON object per line:

* ``spawn(host, argv, log, cwd)`` starts ``argv`` on host "A" or "B" (on B through
  ``nsenter`` into its namespace) in directory ``cwd``, stdout and stderr to the file
  ``log``; returns the pid.
* ``signal(pid, sig)``, ``poll(pid)`` (the exit code or None), ``wait(pid, timeout)``.
* ``link(up)``: brings A's end of the veth down or up (a cut cable; both hosts keep their
  addresses).

The filesystem is shared, so the test reads logs, logdirs and credentials directly.
``netns_problem()`` says why the harness cannot run here (None when it can); tests skip
with that reason. ``close()`` kills whatever is still running (each spawned program's process group) and
ends both namespaces.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

A_ADDRESS = "10.77.0.1"
B_ADDRESS = "10.77.0.2"
_VETH_A, _VETH_B = "mzA", "mzB"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def netns_problem():
    """None if namespaces with a veth pair can be made here, else the reason."""
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"needs the {tool} command (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "-rn", "sh", "-c", f"ip link add {_VETH_A} type veth peer name {_VETH_B}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a veth pair in a user network namespace: {probe.stderr.strip()[:200]}"
    return None


class TwoHosts:
    def __init__(self, workdir: str, env: dict = None):
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.proc = subprocess.Popen(["unshare", "-rn", sys.executable, os.path.abspath(__file__), "--manage"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=ROOT, env=env, start_new_session=True)
        ready = self._reply()
        if not ready.get("ready"):
            raise RuntimeError(f"the two-host manager did not start: {ready}")

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the two-host manager ended: " + self.proc.stderr.read()[-2000:])
        return json.loads(line)

    def _call(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if "error" in reply:
            raise RuntimeError(f"two-host manager: {reply['error']}")
        return reply

    def spawn(self, host: str, argv: list, log: str, cwd: str = ROOT) -> int:
        return self._call(op="spawn", host=host, argv=list(argv), log=log, cwd=cwd)["pid"]

    def signal(self, pid: int, sig: int = signal.SIGTERM) -> None:
        self._call(op="signal", pid=pid, sig=int(sig))

    def poll(self, pid: int):
        return self._call(op="poll", pid=pid)["code"]

    def wait(self, pid: int, timeout: float):
        """The exit code, or None if still running after ``timeout`` s."""
        return self._call(op="wait", pid=pid, timeout=timeout)["code"]

    def link(self, up: bool) -> None:
        self._call(op="link", up=bool(up))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._call(op="close")
            except (RuntimeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# -- the manager (runs inside the namespaces) -------------------------------------------------------

def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _own_namespace(pid: int, timeout: float = 10.0) -> bool:
    """Waits until ``pid`` runs in a network namespace other than ours."""
    mine = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != mine:
                return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def setup_hosts() -> tuple:
    """Run as root of a user namespace that has its own network namespace (host A): brings
    up A's loopback, makes host B (a child holding a new network namespace) and the veth pair
    between them with their addresses. Returns ``(holder, enter_b)``: the process holding B's
    namespace (kill it to end B) and the command prefix that runs a program on B. Raises
    OSError (or CalledProcessError) when a step fails, with nothing left behind."""
    holder = None
    try:
        _run("ip", "link", "set", "lo", "up")
        _run("ip", "link", "add", _VETH_A, "type", "veth", "peer", "name", _VETH_B)
        holder = subprocess.Popen(["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep infinity"])
        if not _own_namespace(holder.pid):
            raise OSError("host B's namespace did not appear within 10 s")
        _run("ip", "link", "set", _VETH_B, "netns", str(holder.pid))
        _run("ip", "addr", "add", f"{A_ADDRESS}/24", "dev", _VETH_A)
        _run("ip", "link", "set", _VETH_A, "up")
        enter_b = ["nsenter", "-t", str(holder.pid), "-n", "--preserve-credentials"]
        _run(*enter_b, "ip", "addr", "add", f"{B_ADDRESS}/24", "dev", _VETH_B)
        _run(*enter_b, "ip", "link", "set", _VETH_B, "up")
    except (subprocess.CalledProcessError, OSError):
        if holder is not None:
            holder.kill()
            holder.wait()
        raise
    return holder, enter_b


def set_link(up: bool) -> None:
    """Brings A's end of the veth up or down (a cut cable; both hosts keep their addresses)."""
    _run("ip", "link", "set", _VETH_A, "up" if up else "down")


def _manage() -> None:
    out = sys.stdout
    try:
        holder, enter_b = setup_hosts()
    except (subprocess.CalledProcessError, OSError) as e:
        out.write(json.dumps({"error": f"setting up the hosts failed: {getattr(e, 'stderr', '') or e}"}) + "\n")
        out.flush()
        return
    procs = {}
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        try:
            if op == "spawn":
                prefix = enter_b if request["host"] == "B" else []
                with open(request["log"], "ab") as log:
                    p = subprocess.Popen(prefix + request["argv"], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=request.get("cwd"), start_new_session=True)
                procs[p.pid] = p
                reply = {"pid": p.pid}
            elif op == "signal":
                p = procs[request["pid"]]
                if p.poll() is None:
                    p.send_signal(request["sig"])
                reply = {}
            elif op == "poll":
                reply = {"code": procs[request["pid"]].poll()}
            elif op == "wait":
                try:
                    reply = {"code": procs[request["pid"]].wait(request["timeout"])}
                except subprocess.TimeoutExpired:
                    reply = {"code": None}
            elif op == "link":
                set_link(request["up"])
                reply = {}
            elif op == "close":
                out.write(json.dumps({}) + "\n")
                out.flush()
                break
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as e:  # reported to the test, which raises it there
            reply = {"error": f"{op}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    for p in procs.values():           # each program's whole process group: nothing outlives the hosts
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs.values():
        p.wait()
    holder.kill()
    holder.wait()


if __name__ == "__main__" and sys.argv[1:] == ["--manage"]:
    _manage()
