"""A run directory written by an earlier version of the package (commit 39c62ab, before
MuZero's modules moved into ``muzero/algorithms/muzero/``) resumes with today's code.

``tests/data/muzero_cartpole_39c62ab`` was made by that commit's
``python -m muzero.learner --env=cartpole --num_actors=1 --envs_per_actor=4
--num_eval_actors=0 --max_train_steps=40 --export=false`` with a small network and replay
(its config.json holds every setting); its TensorBoard files were removed.
"""
import json
import os
import shutil
import subprocess
import sys

from e2e_helpers import ROOT
from e2e_helpers import records as _records
from e2e_helpers import subprocess_env as _env

FIXTURE = os.path.join(ROOT, "tests", "data", "muzero_cartpole_39c62ab")


def test_a_checkpoint_from_before_the_move_resumes(tmp_path):
    logdir = str(tmp_path / "run")
    shutil.copytree(FIXTURE, logdir)
    latest = open(os.path.join(logdir, "checkpoints", "latest")).read().strip()
    saved_step = int(latest.split("-")[1])
    with open(os.path.join(logdir, "checkpoints", latest, "state.json")) as f:
        saved_env_steps = json.load(f)["env_steps"]
    assert saved_step >= 40 and saved_env_steps > 200
    proc = subprocess.run([sys.executable, "-m", "muzero.learner", f"--logdir={logdir}",
                           f"--config={os.path.join(logdir, 'config.json')}",
                           f"--max_train_steps={saved_step + 10}", "--export=false", "--max_seconds=300"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resumed from {os.path.join(logdir, 'checkpoints', latest)}" in proc.stdout
    records = _records(logdir)
    assert records[0]["training_step"] >= saved_step
    assert records[-1]["training_step"] >= saved_step + 10
    assert records[-1]["env_steps"] >= saved_env_steps
    assert records[0]["replay_steps"] > 0     # the replay snapshot came back


def test_its_replay_snapshot_keeps_the_discount_it_was_written_with():
    # Its manifest holds the discount inside target_config (0.99, CartPole's), where the
    # targets' copy of the discount lived then; Replay keeps one discount of its own now.
    from muzero.algorithms.muzero.replay import Replay
    replay = Replay.restore(os.path.join(FIXTURE, "checkpoints", "ckpt-40", "replay"))
    assert replay.discount == 0.99 and replay.target_config.td_steps == 10
    assert replay.num_steps > 200
