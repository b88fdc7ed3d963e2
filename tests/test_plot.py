"""``python -m muzero.plot``: curves of one run and the comparison of several."""
import json
import os
import subprocess
import sys

import pytest

from e2e_helpers import ROOT
from e2e_helpers import subprocess_env as _env
from muzero import plot


def _run_dir(path, records):
    os.makedirs(path)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(path)


def _records(scale, resume_at=None):
    out = []
    for k in range(6):
        time = 10.0 * k if resume_at is None or k < resume_at else 10.0 * (k - resume_at)
        out.append({"time": time, "env_steps": 1000 * k, "training_step": 50 * k,
                    "return_train": scale * k, "return_eval": scale * k + 1 if k % 2 else None,
                    "loss/total": 1.0 / (k + 1)})
    return out


def test_wall_time_continues_across_resumes():
    # A resumed run restarts "time" at 0: 0, 10, 20 | 0, 10, 20 -> minutes 0, 1/6, 2/6, 2/6, 3/6, 4/6.
    minutes = plot._wall_time(_records(1.0, resume_at=3))
    assert minutes == pytest.approx([0, 10 / 60, 20 / 60, 20 / 60, 30 / 60, 40 / 60])


def test_compare_draws_several_runs_into_their_common_folder(tmp_path):
    from PIL import Image
    a = _run_dir(tmp_path / "runs" / "cartpole", _records(10.0))
    b = _run_dir(tmp_path / "runs" / "ppo_cartpole", _records(20.0, resume_at=2))
    assert plot._labels([a, b]) == ["cartpole", "ppo_cartpole"]
    proc = subprocess.run([sys.executable, "-m", "muzero.plot", "--compare", a, b], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = str(tmp_path / "runs" / "compare.png")
    assert proc.stdout.strip() == out
    with Image.open(out) as image:
        assert image.size == (1300, 450)
    single = plot.plot([a], str(tmp_path / "one.png"))
    with Image.open(single) as image:
        assert image.size == (1600, 450)


def test_compare_needs_two_runs_and_plot_refuses_stray_arguments(tmp_path):
    a = _run_dir(tmp_path / "a", _records(1.0))
    for args, needle in ((["--compare", a], "--compare needs at least two run directories"),
                         ([f"--logdir={a}", a], "unexpected arguments")):
        proc = subprocess.run([sys.executable, "-m", "muzero.plot", *args], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and needle in proc.stderr, proc.stderr[-2000:]
