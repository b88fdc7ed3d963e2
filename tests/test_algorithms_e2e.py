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

# (env, extra flags, env steps the first session runs to). SAC keeps one update per env step:
# smaller networks and batches, two evaluation envs instead of ten and Pendulum episodes cut
# at 50 steps (gymnasium.make's max_episode_steps), so that the training envs finish episodes
# early in the run. Each session ends on an event (env steps delivered, training steps made);
# --max_seconds is only a ceiling for a broken run, far above what a loaded machine needs.
_CASES = {"vtrace": ("cartpole", [], 1000), "ppo": ("cartpole", [], 1000),
          "sac": ("gym:Pendulum-v1", ["--set=network.actor_hidden_sizes=[32]", "--set=network.critic_hidden_sizes=[32]",
                                      "--set=training.batch_size=32", "--eval_envs_per_actor=2",
                                      '--env_options={"max_episode_steps": 50}'], 500)}
_CEILING = "--max_seconds=300"
_DONE = r"done: (.*); training step (\d+), env steps (\d+)"


@pytest.mark.parametrize("algo", sorted(_CASES))
def test_streaming_learner_trains_checkpoints_resumes_and_exports(tmp_path, algo):
    env, extra, env_steps = _CASES[algo]
    logdir = str(tmp_path / algo)
    common = [f"--algo={algo}", f"--env={env}", f"--logdir={logdir}", "--num_actors=1", "--num_eval_actors=1",
              _CEILING, *extra]
    proc = _run("muzero.learner", [*common, f"--max_env_steps={env_steps}"], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The actors delivered and the learner trained on what they sent; the last record of
    # metrics.jsonl holds the final counts and why the run stopped.
    done = re.search(_DONE, proc.stdout)
    assert done and done[1] == f"max_env_steps={env_steps} reached", proc.stdout[-2000:]
    assert int(done[3]) >= env_steps and int(done[2]) >= 1, proc.stdout[-2000:]
    records = _records(logdir)
    # (Actors may deliver a few more steps while the run shuts down, after that record.)
    assert records[-1]["stop_reason"] == done[1] and env_steps <= records[-1]["env_steps"] <= int(done[3])
    losses = [v for r in records for k, v in r.items() if k.startswith("loss/") and v is not None]
    assert losses and all(abs(x) < 1e6 for x in losses)
    with open(os.path.join(logdir, "config.json")) as f:
        assert json.load(f)["algo"] == algo
    latest = open(os.path.join(logdir, "checkpoints", "latest")).read().strip()
    step = int(latest.split("-")[1])
    assert step == int(done[2])
    export = os.path.join(logdir, "export", f"step-{step}")
    with open(os.path.join(export, "muzero_export.json")) as f:
        assert json.load(f)["algo"] == algo

    # Resume until ten more training steps: the clock and the counts continue from the checkpoint.
    proc = _run("muzero.learner", [*common, f"--max_train_steps={step + 10}"], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resumed from {os.path.join(logdir, 'checkpoints', latest)}: training step {step}" in proc.stdout
    again = re.search(_DONE, proc.stdout)
    assert again and again[1] == f"max_train_steps={step + 10} reached", proc.stdout[-2000:]
    new = _records(logdir)[len(records):]
    assert new and new[0]["time"] >= records[-1]["time"] and new[0]["env_steps"] >= int(done[3])
    assert new[-1]["training_step"] >= step + 10
    assert any(r["episodes_train"] > 0 for r in records + new)

    # The export plays: V-trace's through `python -m muzero.eval` in a fresh process (no
    # training code loaded), the others' through the function that command calls, in this
    # process (a second TensorFlow start would cost seconds per algorithm).
    if algo == "vtrace":
        proc = _run("muzero.eval", [f"--export_dir={export}", "--episodes=4", "--num_envs=4"], timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        mean = float([line for line in proc.stdout.splitlines() if "mean_return=" in line][-1].split("mean_return=")[1])
        assert 8 <= mean <= 500                          # a CartPole-v1 return
        return
    from muzero.algorithms.policy_export import evaluate_policy
    result = evaluate_policy(export, episodes=4, num_envs=4)
    if env == "cartpole":
        # One point per step survived: the returns are the lengths, 8 to 500 steps.
        assert result["returns"] == pytest.approx(result["lengths"]) and 8 <= result["mean_return"] <= 500
    else:
        # Pendulum's episodes end at the 50-step limit the run was given; a step costs 0 to
        # 16.27 (theta^2 + 0.1 theta_dot^2 + 0.001 u^2 at most pi^2 + 6.4 + 0.004), so a return
        # lies in [-813.5, 0]. SAC's deterministic action is tanh-squashed into the bounds, so
        # the env batch never has to clip one; an export with a lost action scale would.
        assert result["lengths"] == [50] * 4 and -813.5 <= result["mean_return"] <= 0
        assert result["clipped_actions"] == 0


def test_an_algorithm_that_does_not_fit_the_env_exits_with_one_line():
    proc = _run("muzero.learner", ["--algo=ppo", "--env=tictactoe"], timeout=120)
    lines = _error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "ppo" in lines[0]
    # A box action space with a discrete-action algorithm: the algorithm, the space and who accepts it.
    proc = _run("muzero.learner", ["--algo=ppo", "--env=gym:Pendulum-v1", "--max_seconds=5"], timeout=120)
    lines = _error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "--algo=ppo" in lines[0] and "Box(-2, 2, (1,))" in lines[0] and "accepting it: sac" in lines[0]
