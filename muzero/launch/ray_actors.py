"""Ray launcher: the run's actors as Ray actors, placed and restarted by Ray.

``--launcher=ray`` (needs the ``ray`` extra) runs the same actor entry point as the local
launcher (``builder.actor_target()`` with ``builder.actor_args(...)``), so MuZero's search
actors and the thin step-streaming actors both run on it. Each actor is one Ray actor
(:class:`_ActorHost`) whose constructor starts the acting loop in a thread of that Ray
worker process; if the loop ends without being asked to (a crash), the host exits its
process, and Ray restarts it (up to ``max_restarts`` times; -1 without limit) by running
the constructor again with the same arguments, which the constructor gives a fresh seed
(``core.reseeded``; the actor's run id is drawn per process anyway). ``stop`` asks every
host to stop its loop (:func:`muzero.process.request_stop`, which the actors watch like
SIGTERM), waits, then kills what is left.

Where Ray runs: ``address=""`` starts a Ray instance for this run pinned to 127.0.0.1
(Ray's loopback-only mode, which it uses by default on macOS and Windows), without the
dashboard, with as many logical CPUs as the actors reserve (so that all of them are placed
even on a 2-core machine); ``"auto"`` or ``host:port`` joins a running cluster, whose hosts
need this package installed and must reach the learner's address (a non-loopback bind needs
TLS and a token; see docs/SCALING.md). The actors' arguments carry the learner's
certificate and token as values, so those hosts need no credential files.

A monitor thread asks every host for ``info()`` twice a second and logs joins ("ray
actor 3 joined: pid 1234 on host-a (10.0.0.2), seed 7922"), losses (the host's process
died; Ray is restarting it), returns after a restart with the time the actor was away,
and actors not started 30 s after the start (Ray has no node with free CPUs, or their
start keeps failing). A lost actor is only counted, never replaced by the launcher:
restarting is Ray's job; one away for 30 s is asked every 5 s from then on, and logged
when it returns.

Imports Ray only when a launcher starts; never TensorFlow.
"""
from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import threading
import time
import traceback
import warnings
from typing import Any, Callable, Optional

from muzero import core
from muzero.config import ConfigError

# Seconds between the monitor's info() rounds.
MONITOR_INTERVAL_S = 0.5
# An actor whose info() calls keep failing for this long is reported lost, and then asked
# only every LOST_POLL_S (it may come back when a node with free CPUs joins).
LOST_AFTER_S = 30.0
LOST_POLL_S = 5.0
# An actor not placed this long after its start is reported (the cluster lacks free CPUs?).
UNPLACED_AFTER_S = 30.0


class _ActorHost:
    """Runs one actor's loop in a thread of a Ray worker process (the Ray actor class)."""

    def __init__(self, target: Callable[..., Any], args: tuple, index: int):
        if threading.current_thread() is threading.main_thread():
            # The learner decides when actors stop: Ctrl-C in its terminal, which reaches the
            # whole process group, must not end them (as for the local launcher's processes).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.index = index
        self.error: Optional[str] = None
        # Ray restarts an actor by running this constructor again with the arguments of its
        # first start; a fresh seed keeps the new process from replaying the old one's episodes.
        self.restarted = _reconstructed()
        if self.restarted:
            args = core.reseeded(args, secrets.randbits(31))
        self.seeds = [a.seed for a in args if hasattr(a, "seed")]
        self.node = _node_address()
        self._stop_requested = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(target, args), name=f"actor-{index}",
                                        daemon=True)
        self._thread.start()

    def _main(self, target, args) -> None:
        try:
            target(*args)
        except BaseException:  # noqa: BLE001 - anything that ends the loop is reported the same way
            self.error = traceback.format_exc(limit=5)
            print(f"actor {self.index} failed:\n{self.error}", flush=True)
        if not self._stop_requested.is_set():
            # The loop ended on its own: end the process so that Ray restarts this actor.
            os._exit(1)

    def info(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "running": self._thread.is_alive(),
                "error": self.error, "restarted": self.restarted, "node": self.node, "seeds": self.seeds}

    def stop(self, timeout: float) -> bool:
        """Asks the loop to stop; True if it ended within ``timeout`` seconds."""
        from muzero.process import request_stop
        self._stop_requested.set()
        request_stop()
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _reconstructed() -> bool:
    """True inside a Ray actor that Ray restarted (False outside Ray)."""
    try:
        import ray
        with warnings.catch_warnings():     # Ray 2.60's property reads a deprecated field itself
            warnings.simplefilter("ignore")
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - not in a Ray worker, or an older Ray without the field
        return False


def _node_address() -> str:
    """The address of the Ray node this process runs on ("" outside Ray)."""
    try:
        import ray
        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001
        return ""


class _Slot:
    """What the monitor knows about one actor."""

    def __init__(self, handle):
        self.handle = handle
        self.pending = None          # ObjectRef of the info() call in flight
        self.pid: Optional[int] = None
        self.where: Optional[tuple] = None        # (node address, pid) of the running process
        self.running = False
        self.down_since: Optional[float] = None   # monotonic time of the first failed info()
        self.last_error = ""                      # type of the last failed info()'s error
        self.lost = False
        self.sent_at = 0.0                        # monotonic time of the last info() sent
        self.unplaced_reported = False


# Ray reads this when imported: false makes a node's address the loopback address (Ray's
# default on macOS and Windows) instead of the interface address it would otherwise find and
# bind on all interfaces (checked with `ss -ltn`: every Ray port then listens on 127.0.0.1).
_LOOPBACK_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


_AUTH_MODE_ENV = "RAY_AUTH_MODE"


def _ray_token_available() -> bool:
    """Whether Ray's cluster token is set for this process: RAY_AUTH_TOKEN, the file
    RAY_AUTH_TOKEN_PATH names, or ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    return os.path.isfile(path)


def _import_ray(loopback_only: bool):
    """Imports Ray; ``loopback_only`` keeps a Ray instance this process starts (and its
    child processes) on 127.0.0.1."""
    if loopback_only:
        os.environ[_LOOPBACK_ONLY_ENV] = "0"
    elif _AUTH_MODE_ENV not in os.environ and _ray_token_available():
        # Joining a cluster whose token this host has: authenticate with it, as `ray start`
        # with RAY_AUTH_MODE=token does (Ray's own clients only use it when told to).
        os.environ[_AUTH_MODE_ENV] = "token"
    try:
        import ray
        from ray._private import ray_constants
    except ImportError:
        raise ConfigError("--launcher=ray needs Ray: pip install -e '.[ray]' (or pip install 'ray>=2.30')") from None
    if loopback_only:
        ray_constants.ENABLE_RAY_CLUSTER = False   # in case Ray was imported before the variable was set
    return ray


# Attempts at starting the run's own Ray instance. Its processes usually come up within a
# second; a start that stalls (the cause seen so far: forking beside the learner's busy
# threads, avoided by starting in prepare(), before they run) gets a second try in a fresh
# session directory, which is cheap next to failing the run.
LOCAL_START_ATTEMPTS = 2


def _one_line(e: BaseException) -> str:
    """``Type: first line of the message`` of an exception Ray raised (its messages run long)."""
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _start_local_ray(ray, cpus: int, log: Callable[[str], None]) -> None:
    """``ray.init`` for a Ray instance of this run only, tried ``LOCAL_START_ATTEMPTS`` times;
    raises :class:`core.LaunchError` (what failed, where Ray's logs are) if no try works."""
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=100 * 2 ** 20,
                     logging_level=logging.WARNING, log_to_driver=True)
            return
        except Exception as e:  # noqa: BLE001 - Ray raises RuntimeError, ConnectionError, ...
            reason = _one_line(e)
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001 - a half-started instance
                pass
            if attempt < LOCAL_START_ATTEMPTS:
                log(f"warning: starting the local Ray instance failed ({reason}); trying again")
                continue
            raise core.LaunchError(f"could not start a local Ray instance after {LOCAL_START_ATTEMPTS} tries "
                               f"({reason}); Ray's logs are under /tmp/ray/session_latest/logs (gcs_server.err, "
                               f"raylet.err); or join a running cluster with --ray_address") from e


class RayActors(core.Launcher):
    """Starts ``num_actors`` Ray actors running ``target(*args_fn(i))``; Ray restarts failed ones."""

    def __init__(self, num_actors: int, target: Callable[..., Any], args_fn: Callable[[int], tuple], *,
                 address: str = "", cpus_per_actor: float = 1.0, max_restarts: int = -1,
                 log: Optional[Callable[[str], None]] = None, stop_timeout: float = 10.0):
        self.num_actors = num_actors
        self._target = target
        self._args_fn = args_fn
        self._address = address
        self._cpus_per_actor = float(cpus_per_actor)
        self._max_restarts = int(max_restarts)
        self._log = log or (lambda message: None)
        self._stop_timeout = stop_timeout
        self._slots: list = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._monitor: Optional[threading.Thread] = None
        self._started_ray = False
        self._started_at = 0.0
        self.restarts = 0
        self._ray = None

    # -- core.Launcher --------------------------------------------------------------------------
    def prepare(self) -> None:
        """Starts (or joins) the Ray instance: ``ray.init`` forks Ray's processes with Python
        code run in the child, which is safe only before the learner's threads are busy."""
        if self._ray is not None:
            return
        ray = self._ray = _import_ray(loopback_only=not self._address)
        if not ray.is_initialized():
            if self._address:
                try:
                    ray.init(address=self._address, logging_level=logging.WARNING, log_to_driver=True)
                except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError, ...
                    raise core.LaunchError(f"could not join the Ray cluster at --ray_address={self._address} "
                                           f"({_one_line(e)}); start it first (ray start --head) "
                                           "or drop --ray_address for a local instance") from e
            else:
                cpus = max(os.cpu_count() or 1, int(self.num_actors * self._cpus_per_actor + 0.999))
                _start_local_ray(ray, cpus, self._log)
                self._started_ray = True
                node = ray.util.get_node_ip_address()
                if node != "127.0.0.1":
                    self._log(f"warning: the Ray instance runs on {node}, not 127.0.0.1 (was Ray started "
                              f"before the launcher could set {_LOOPBACK_ONLY_ENV}=0?)")

    def start(self) -> None:
        self.prepare()
        ray = self._ray
        host_class = ray.remote(_ActorHost)
        where = self._address or "a Ray instance on 127.0.0.1"
        self._log(f"starting {self.num_actors} Ray actor(s) on {where} ({self._cpus_per_actor:g} CPU each, "
                  f"max_restarts={self._max_restarts})")
        for i in range(self.num_actors):
            handle = host_class.options(num_cpus=self._cpus_per_actor, max_restarts=self._max_restarts).remote(
                self._target, self._args_fn(i), i)
            self._slots.append(_Slot(handle))
        self._started_at = time.monotonic()
        self._monitor = threading.Thread(target=self._monitor_loop, name="ray-actor-monitor", daemon=True)
        self._monitor.start()

    def poll(self) -> None:
        """Nothing to do: Ray restarts failed actors, the monitor thread watches them."""

    def alive(self) -> int:
        with self._lock:
            return sum(1 for s in self._slots if s.running and s.down_since is None)

    def pids(self) -> list:
        with self._lock:
            return [s.pid for s in self._slots]

    def stop(self, timeout: Optional[float] = None) -> None:
        """Asks every actor to stop, waits up to ``timeout`` seconds, kills the rest, and shuts
        down the Ray instance this launcher started."""
        if self._ray is None:
            return
        ray = self._ray
        timeout = self._stop_timeout if timeout is None else timeout
        self._stopping.set()
        if self._monitor is not None:
            self._monitor.join(2.0)
        refs = []
        for slot in self._slots:
            try:
                refs.append(slot.handle.stop.remote(timeout))
            except Exception:  # noqa: BLE001 - an actor Ray has already given up on
                pass
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout + 2.0)
        for slot in self._slots:
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self._started_ray:
            ray.shutdown()
        self._ray = None

    # -- monitoring ---------------------------------------------------------------------------------
    def _monitor_loop(self) -> None:
        while not self._stopping.wait(MONITOR_INTERVAL_S):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - the monitor must survive Ray hiccups
                self._log(f"ray actor monitor: {type(e).__name__}: {e}")

    def check(self) -> None:
        """One monitoring round: collects answered info() calls, logs what changed, sends new ones."""
        ray = self._ray
        if ray is None:
            return
        pending = [s.pending for s in self._slots if s.pending is not None]
        ready = set()
        if pending:
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            ready = set(done)
        now = time.monotonic()
        for i, slot in enumerate(self._slots):
            if slot.pending is not None and slot.pending in ready:
                ref, slot.pending = slot.pending, None
                try:
                    info = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - RayActorError and friends: the process died
                    self._on_failure(i, slot, now, e)
                else:
                    self._on_info(i, slot, now, info)
            if slot.pending is None and (not slot.lost or now - slot.sent_at >= LOST_POLL_S):
                slot.pending = slot.handle.info.remote()
                slot.sent_at = now
            if slot.pid is None and not slot.unplaced_reported and now - self._started_at >= UNPLACED_AFTER_S:
                slot.unplaced_reported = True
                if slot.last_error:     # placed, but its start keeps failing
                    self._log(f"ray actor {i} has not started {UNPLACED_AFTER_S:g} s after it was asked for: "
                              f"its start fails ({slot.last_error}; Ray's worker logs on its node say why: "
                              "is this package installed there, in the same Python?)")
                else:                   # its calls wait: Ray has not placed it
                    self._log(f"ray actor {i} has not started {UNPLACED_AFTER_S:g} s after it was asked for: "
                              f"Ray has no node with {self._cpus_per_actor:g} free CPU for it (the run asks "
                              f"for {len(self._slots)} actors; `ray status` shows what is free; give the "
                              "hosts more --num-cpus or lower --ray_cpus_per_actor)")

    def _on_info(self, i: int, slot: _Slot, now: float, info: dict) -> None:
        with self._lock:
            previous, away = slot.where, slot.down_since
            slot.pid, slot.running, slot.down_since = info["pid"], bool(info["running"]), None
            slot.where = (info.get("node"), info["pid"])
            slot.lost = False
        where = info["host"] + (f" ({info['node']})" if info.get("node") else "")
        seed = f", seed {info['seeds'][0]}" if info.get("seeds") else ""
        if previous is None:
            self._log(f"ray actor {i} joined: pid {info['pid']} on {where}{seed}")
        elif slot.where != previous:
            self.restarts += 1
            gone = f" after {now - away:.1f} s" if away is not None else ""
            self._log(f"ray actor {i} is back{gone}: restarted by Ray as pid {info['pid']} on {where}{seed}")

    def _on_failure(self, i: int, slot: _Slot, now: float, error: Exception) -> None:
        with self._lock:
            slot.last_error = type(error).__name__
            first = slot.down_since is None
            if first:
                slot.down_since = now
            slot.running = False
            lost = not slot.lost and now - slot.down_since >= LOST_AFTER_S
            if lost:
                slot.lost = True
        if first:
            limit = "without limit" if self._max_restarts < 0 else f"up to {self._max_restarts} times"
            self._log(f"ray actor {i} (pid {slot.pid}) was lost ({type(error).__name__}); Ray restarts it "
                      f"({limit})")
        if lost:
            self._log(f"ray actor {i} has not come back for {LOST_AFTER_S:g} s (its node is gone and no other "
                      f"has a free CPU, or its restarts are used up); asked again every {LOST_POLL_S:g} s")
