"""End to end for the step-streaming learners: ``python -m muzero.learner --algo=<vtrace|ppo|sac>``
trains (CartPole; SAC on Pendulum's box actions) with local thin actors, checkpoints, resumes,
exports, and ``python -m muzero.eval`` plays the export without the training code."""
import json
import os
import re

import pytest

from e2e_helpers import error_lines as _error_lines
from e2e_helpers import records as _records
from e2e_helpers import run_module as _run

# (env, extra flags, env steps the first 8-second session must pass). SAC keeps one update
# per env step: smaller networks and batches (it makes about 1,000 steps in 8 s on 2 busy
# cores; PPO about 4,000 and V-trace many more), two evaluation envs instead of ten and
# Pendulum episodes cut at 50 steps (gymnasium.make's max_episode_steps), so that the
# training envs finish episodes early in the run even on a slow machine. The floors are
# about a quarter of those rates: a clean-clone CI run once saw PPO at 1,924 (start-up
# took most of its 8 s), and these are checks that the actors deliver, not speed figures.
_CASES = {"vtrace": ("cartpole", [], 1000), "ppo": ("cartpole", [], 1000),
          "sac": ("gym:Pendulum-v1", ["--set=network.actor_hidden_sizes=[32]", "--set=network.critic_hidden_sizes=[32]",
                                      "--set=training.batch_size=32", "--eval_envs_per_actor=2",
                                      '--env_options={"max_episode_steps": 50}'], 500)}


@pytest.mark.parametrize("algo", sorted(_CASES))
def test_streaming_learner_trains_checkpoints_resumes_and_exports(tmp_path, algo):
    env, extra, min_steps = _CASES[algo]
    logdir = str(tmp_path / algo)
    common = [f"--algo={algo}", f"--env={env}", f"--logdir={logdir}", "--num_actors=1", "--num_eval_actors=1",
              *extra]
    proc = _run("muzero.learner", [*common, "--max_seconds=8"], timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The final counts (printed at the stop; progress records come every 5 s).
    done = re.search(r"done: .*; training step (\d+), env steps (\d+)", proc.stdout)
    assert done and int(done[2]) > min_steps and int(done[1]) > 10, proc.stdout[-2000:]
    records = _records(logdir)
    losses = [v for r in records for k, v in r.items() if k.startswith("loss/") and v is not None]
    assert losses and all(abs(x) < 1e6 for x in losses)
    with open(os.path.join(logdir, "config.json")) as f:
        assert json.load(f)["algo"] == algo
    latest = open(os.path.join(logdir, "checkpoints", "latest")).read().strip()
    step = int(latest.split("-")[1])
    export = os.path.join(logdir, "export", f"step-{step}")
    with open(os.path.join(export, "muzero_export.json")) as f:
        assert json.load(f)["algo"] == algo

    # Resume: the clock and the step continue from the checkpoint (6 more seconds: one record,
    # 5 s into the session, on the continued clock).
    proc = _run("muzero.learner", [*common, "--max_seconds=14"], timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resumed from {os.path.join(logdir, 'checkpoints', latest)}: training step {step}" in proc.stdout
    new = _records(logdir)[len(records):]
    assert new and new[0]["time"] >= 8 and new[0]["env_steps"] >= int(done[2])
    again = re.search(r"done: .*; training step (\d+), env steps (\d+)", proc.stdout)
    assert again and int(again[1]) > step
    assert any(r["episodes_train"] > 0 for r in records + new)

    # The export plays: V-trace's through `python -m muzero.eval` in a fresh process (no
    # training code loaded), the others' through the function that command calls, in this
    # process (a second TensorFlow start would cost seconds per algorithm).
    if algo == "vtrace":
        proc = _run("muzero.eval", [f"--export_dir={export}", "--episodes=4", "--num_envs=4"], timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        mean = float([line for line in proc.stdout.splitlines() if "mean_return=" in line][-1].split("mean_return=")[1])
    else:
        from muzero.algorithms.policy_export import evaluate_policy
        mean = evaluate_policy(export, episodes=4, num_envs=4)["mean_return"]
    if env == "cartpole":
        assert 8 <= mean <= 500                          # a CartPole-v1 return
    else:
        assert -2000 <= mean <= 0                        # a Pendulum-v1 return (200 steps of cost <= 16.3)


def test_an_algorithm_that_does_not_fit_the_env_exits_with_one_line():
    proc = _run("muzero.learner", ["--algo=ppo", "--env=tictactoe"], timeout=120)
    lines = _error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "ppo" in lines[0]
    # A box action space with a discrete-action algorithm: the algorithm, the space and who accepts it.
    proc = _run("muzero.learner", ["--algo=ppo", "--env=gym:Pendulum-v1", "--max_seconds=5"], timeout=120)
    lines = _error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "--algo=ppo" in lines[0] and "Box(-2, 2, (1,))" in lines[0] and "accepting it: sac" in lines[0]
