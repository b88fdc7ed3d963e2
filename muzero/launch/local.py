"""Local launcher: N actor processes on this machine, spawned (never forked).

The learner owns a :class:`LocalActors`; it starts the processes, restarts any
that die (with back-off, so a crashing actor cannot spin) with fresh arguments (and a seed
moved by the restart count: ``core.reseeded``), and stops them all at
exit. Each child also watches its parent and exits if the parent disappears, so
no actor outlives a learner that was killed with SIGKILL.

Imports no TensorFlow (children import only what the actor needs).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any, Callable, Optional

from muzero import core

# A restarted actor's seed moves by this (a prime) times its restart count (core.reseeded).
RESEED_SALT = 104_729

def _watch_parent(parent_pid: int, interval: float = 1.0) -> None:
    """Ends this process when its parent is gone (re-parented to another pid)."""
    def loop():
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(interval)
    threading.Thread(target=loop, name="parent-watch", daemon=True).start()


def _child_main(target: Callable[..., Any], args: tuple, parent_pid: int) -> None:
    _watch_parent(parent_pid)
    # The learner decides when actors stop; Ctrl-C in the terminal reaches the whole
    # process group, so children ignore SIGINT and wait for SIGTERM from the learner.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


class LocalActors(core.Launcher):
    """Starts, watches and stops ``num_actors`` processes running ``target(*args_fn(i))``."""

    def __init__(self, num_actors: int, target: Callable[..., Any], args_fn: Callable[[int], tuple],
                 restart: bool = True, min_restart_interval: float = 5.0,
                 log: Optional[Callable[[str], None]] = None):
        self.num_actors = num_actors
        self._target = target
        self._args_fn = args_fn
        self._restart = restart
        self._min_restart_interval = min_restart_interval
        self._log = log or (lambda message: None)
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: list = [None] * num_actors
        self._started_at = [0.0] * num_actors
        self._restarts_of = [0] * num_actors
        self.restarts = 0
        self._stopping = False

    def _start(self, index: int, restart: int = 0) -> None:
        args = self._args_fn(index)
        if restart:
            args = core.reseeded(args, RESEED_SALT * restart)
        proc = self._ctx.Process(target=_child_main, name=f"actor-{index}",
                                 args=(self._target, args, os.getpid()), daemon=True)
        proc.start()
        self._procs[index] = proc
        self._started_at[index] = time.monotonic()

    def start(self) -> None:
        for i in range(self.num_actors):
            self._start(i)

    def pids(self) -> list:
        return [p.pid if p is not None else None for p in self._procs]

    def alive(self) -> int:
        return sum(1 for p in self._procs if p is not None and p.is_alive())

    def poll(self) -> None:
        """Restarts dead actors (at most once per ``min_restart_interval`` each)."""
        if self._stopping:
            return
        for i, proc in enumerate(self._procs):
            if proc is None or proc.is_alive():
                continue
            if not self._restart:
                continue
            if time.monotonic() - self._started_at[i] < self._min_restart_interval:
                continue
            self._log(f"actor {i} (pid {proc.pid}) exited with code {proc.exitcode}; restarting it")
            self.restarts += 1
            self._restarts_of[i] += 1
            self._start(i, self._restarts_of[i])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every actor, wait up to ``timeout`` seconds, then SIGKILL what is left."""
        self._stopping = True
        for proc in self._procs:
            if proc is not None and proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in self._procs:
            if proc is not None:
                proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc is not None and proc.is_alive():
                proc.kill()
                proc.join(2.0)
