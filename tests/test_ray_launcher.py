"""The Ray launcher (``--launcher=ray``) end to end, inside a loopback-only network namespace.

Ray moves to the machine's interface address unless told otherwise; so that no test can
talk to anything but loopback, each learner runs in a network namespace this test creates
(``unshare -rn``: a user namespace mapping us to root, holding a network namespace with
only ``lo``, brought up with ``ip``). Where the machine does not permit that, or Ray is not
installed, those tests skip and say why; the flag checks need neither and always run.
"""
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import importlib.util

import pytest

from tests.e2e_helpers import ROOT, subprocess_env


def _netns_problem():
    if importlib.util.find_spec("ray") is None:
        return "the ray extra is not installed (pip install -e '.[ray]')"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs the unshare and ip commands (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unprivileged network namespaces are not permitted here ({probe.stderr.strip()[:120]})"
    return None


_PROBLEM = _netns_problem()
needs_ray_in_netns = pytest.mark.skipif(_PROBLEM is not None, reason=f"Ray runs in a loopback-only network "
                                        f"namespace, which cannot be had here: {_PROBLEM}")


class NetnsLearner:
    """``python -m muzero.learner ARGS`` in a fresh loopback-only network namespace; its output
    lines are collected by a thread (``wait_for`` looks for one)."""

    def __init__(self, args: list):
        command = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                   sys.executable, "-m", "muzero.learner", *args]
        self.proc = subprocess.Popen(command, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if text in line:
                return line
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout:g} s; output:\n" + "\n".join(self.lines[-40:]))

    def finish(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError("the learner did not stop in time; output:\n" + "\n".join(self.lines[-40:]))


def _final_counts(output: str) -> tuple:
    """(training steps, env steps) from the learner's last line, ``done: ...; training step N, env steps M``."""
    done = re.search(r"done: .*; training step (\d+), env steps (\d+)", output)
    assert done, output[-2000:]
    return int(done.group(1)), int(done.group(2))


@needs_ray_in_netns
def test_thin_streaming_actors_run_on_ray(tmp_path):
    # Two PPO batches (20 updates each on CartPole, 8 unrolls of 32 steps): the run ends on
    # that event; --max_seconds is only a ceiling for a broken run.
    logdir = str(tmp_path / "ppo")
    learner = NetnsLearner(["--algo=ppo", "--env=cartpole", "--launcher=ray", "--num_actors=1",
                            "--num_eval_actors=1", "--ray_cpus_per_actor=0.5", "--max_train_steps=40",
                            "--max_seconds=150", "--export=false", f"--logdir={logdir}"])
    learner.wait_for("ray actor 1 joined: pid", timeout=90)
    assert learner.finish(timeout=180) == 0, "\n".join(learner.lines[-40:])
    output = "\n".join(learner.lines)
    assert "starting 2 Ray actor(s) on a Ray instance on 127.0.0.1 (0.5 CPU each" in output
    assert "stopping: max_train_steps=40 reached" in output, output[-2000:]
    steps, env_steps = _final_counts(output)
    assert env_steps >= 2 * 8 * 32 and steps >= 40, output[-2000:]


def test_ray_flags_without_the_ray_launcher_are_refused_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "muzero.learner", "--env=cartpole", "--ray_address=auto",
                           f"--logdir={tmp_path}"], cwd=ROOT, env=subprocess_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].endswith("applies to launcher='ray' only (this run has launcher='local'): "
                              "add --launcher=ray or drop it"), proc.stderr
