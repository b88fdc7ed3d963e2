"""End to end faults a long run meets: a stop request delivered twice.

A scheduler (or ``make``, or a terminal) often delivers SIGTERM to the whole process group
and then forwards another copy to the learner itself. The second copy, moments after the
first, must not abort the final checkpoint and export: the learner exits 0, without a
traceback, with a final checkpoint at least as new as its last progress record and the
export of that step.
"""
import os
import signal
import subprocess
import sys
import time

from e2e_helpers import ROOT
from e2e_helpers import records as _records
from e2e_helpers import subprocess_env as _env


def run_duplicated_sigterm(logdir: str, second_after_s: float, start_timeout_s: float = 90.0) -> dict:
    """Starts the learner in its own process group, waits for training, SIGTERMs the group and,
    ``second_after_s`` later, the learner again. Returns what a caller checks."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "muzero.learner", "--env=cartpole", "--num_actors=1", "--num_eval_actors=0",
         "--envs_per_actor=16", "--set=replay.min_steps_to_sample=300", f"--logdir={logdir}"],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        started = False
        while proc.poll() is None and time.monotonic() < deadline:
            records = _records(logdir)
            if records and records[-1]["training_step"] > 0:
                started = True
                break
            time.sleep(0.2)
        if started:
            os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(second_after_s)
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    return {"started": started, "returncode": proc.returncode, "output": out, "records": _records(logdir)}


def test_sigterm_to_the_group_then_again_to_the_learner_stops_cleanly(tmp_path):
    logdir = str(tmp_path / "run")
    result = run_duplicated_sigterm(logdir, second_after_s=0.3)
    out = result["output"]
    assert result["started"], "training never started:\n" + out[-3000:]
    assert result["returncode"] == 0, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert "received SIGTERM" in out, out[-3000:]
    last_step = result["records"][-1]["training_step"]
    with open(os.path.join(logdir, "checkpoints", "latest")) as f:
        latest = f.read().strip()
    final_step = int(latest.split("-")[1])
    assert final_step >= last_step > 0, (final_step, last_step)
    assert os.path.isfile(os.path.join(logdir, "checkpoints", latest, "state.json"))
    assert os.path.isdir(os.path.join(logdir, "export", f"step-{final_step}")), out[-3000:]
