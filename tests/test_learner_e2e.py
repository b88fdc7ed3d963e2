"""End to end: ``python -m muzero.learner`` trains, checkpoints, resumes, survives a killed actor.

These run the real command in subprocesses (the learner, its server and spawned actor
processes), with short time budgets.
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from e2e_helpers import ROOT
from e2e_helpers import records as _records
from e2e_helpers import run_module as _run
from e2e_helpers import subprocess_env as _env

def _learner(args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "muzero.learner", *args], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def _children(pid):
    """Pids whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _actor_children(pid):
    pids = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"multiprocessing" in cmd and b"resource_tracker" not in cmd:
            pids.append(child)
    return pids


@pytest.mark.parametrize("args,needle", [
    (["--env=pacman"], "--env='pacman' is not a known env"),
    (["--simulations=0"], "SearchConfig.num_simulations=0"),
    (["--envs_per_actor=0"], "envs_per_actor=0"),
    (["--logdir=/proc/forbidden"], "is not writable"),
    (["--set=search.bogus=1"], "search has no field 'bogus'"),
    (["--env=gym:MountainCar-v0", "--set=training.augment_symmetries=true"],
     "env 'gym:MountainCar-v0' registers no symmetries"),
    (["--algo=nope"], "--algo='nope' is not a known algorithm; known: muzero, ppo, r2d2, sac, vtrace"),
    (["--trainable_parts=foo"], "--trainable_parts=foo is invalid"),
    (["--set=bogus.x=1"], "section in search, targets, replay, network, training"),
    (['--set=network.value_support={"lo": 1}'], "network.value_support takes keys low, high, num_bins"),
    (["--env=gym:nosuchmodule:Foo-v0"], "--env='gym:nosuchmodule:Foo-v0'"),
    (["--config=/nonexistent.json"], "--config='/nonexistent.json' cannot be read"),
])
def test_bad_flags_exit_nonzero_with_one_line(args, needle):
    proc = subprocess.run([sys.executable, "-m", "muzero.learner", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: ") and needle in lines[-1], proc.stderr[-2000:]
    assert sum(line.startswith("error: ") for line in lines) == 1


def test_bad_config_files_exit_with_one_line(tmp_path):
    bad_json, partial = tmp_path / "bad.json", tmp_path / "partial.json"
    bad_json.write_text("{not json")
    partial.write_text('{"env": "cartpole"}')
    for path, needle in ((bad_json, "is not valid JSON"), (partial, "missing field(s) ['config']")):
        proc = subprocess.run([sys.executable, "-m", "muzero.learner", f"--config={path}"], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=120)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]


def test_cartpole_trains_checkpoints_resumes_and_survives_a_killed_actor(tmp_path):
    logdir = str(tmp_path / "cartpole")
    common = [f"--logdir={logdir}", "--env=cartpole", "--num_actors=2", "--num_eval_actors=0",
              "--envs_per_actor=16", "--set=replay.min_steps_to_sample=300", "--checkpoint_every_secs=15"]
    proc = _learner([*common, "--max_seconds=35"])
    killed = None
    deadline = time.monotonic() + 150
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1.0)
        records = _records(logdir)
        # Kill as soon as training has begun, so that most of the run lies after the kill even
        # on a slow machine (a clean-clone CI run that waited for step 20 logged one record after it).
        if killed is None and records and records[-1]["training_step"] > 0:
            actors = _actor_children(proc.pid)
            assert len(actors) >= 2, f"expected 2 actor processes, found {actors}"
            os.kill(actors[0], signal.SIGKILL)
            killed = (actors[0], records[-1]["training_step"], records[-1]["env_steps"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    assert killed is not None, "training never started:\n" + out[-3000:]

    records = _records(logdir)
    assert records[-1]["training_step"] >= killed[1] + 20, "training stopped after an actor was killed"
    assert records[-1]["env_steps"] > killed[2], "no env steps after an actor was killed"
    assert "restarting it" in out
    assert records[-1]["env_steps"] > 1000 and records[-1]["replay_steps"] > 1000
    losses = [r for r in records if r.get("loss/value") is not None]
    assert all(np.isfinite(r["loss/total"]) for r in losses)
    assert losses[-1]["loss/value"] < losses[0]["loss/value"], "value loss did not fall"
    assert os.path.isfile(os.path.join(logdir, "config.json"))
    assert json.load(open(os.path.join(logdir, "config.json")))["env"] == "cartpole"
    latest = open(os.path.join(logdir, "checkpoints", "latest")).read().strip()
    final_step = int(latest.split("-")[1])
    assert final_step >= records[-1]["training_step"]  # the final checkpoint is taken after the last record
    events = os.listdir(os.path.join(logdir, "tensorboard"))
    assert any(name.startswith("events.out.tfevents") for name in events)
    assert os.path.isdir(os.path.join(logdir, "export", f"step-{final_step}"))
    replay_before = records[-1]["replay_steps"]

    # The export plays through `python -m muzero.eval` in a fresh process: the search with the
    # export's own settings, no training code. CartPole pays one point per step survived, so
    # a mean return lies between 8 (the shortest possible episode) and 500.
    # Given the logdir, it plays the newest export; --video records the first env's games.
    video = str(tmp_path / "eval.gif")
    played = _run("muzero.eval", [f"--export_dir={logdir}", "--episodes=4", "--num_envs=4", "--simulations=8",
                                  f"--video={video}"], timeout=120)
    assert played.returncode == 0, played.stderr[-2000:]
    lines = played.stdout.strip().splitlines()
    assert f"playing {os.path.join(logdir, 'export', f'step-{final_step}')}" in lines
    line = [x for x in lines if x.startswith("episodes=")][-1]
    assert line.startswith("episodes=4 mean_return=") and 8 <= float(line.split("mean_return=")[1]) <= 500, line
    assert lines[-1].startswith(f"video={video} frames=") and int(lines[-1].split("frames=")[1].split()[0]) > 8
    from PIL import Image
    with Image.open(video) as gif:
        assert gif.size == (360, 216)

    # The export's play recorded as a dataset, then a run that trains on it alone: no env
    # steps, the recorded steps in its replay, training steps taken.
    if importlib.util.find_spec("minari") is not None:
        os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "minari")
        try:
            recorded = _run("muzero.record", [f"--export_dir={logdir}", "--episodes=3", "--epsilon=0.5",
                                              "--num_envs=3", "--simulations=8", "--out=test/cartpole-v0"], timeout=120)
            assert recorded.returncode == 0, recorded.stderr[-2000:]
            summary = dict(item.split("=", 1) for item in recorded.stdout.strip().splitlines()[-1].split())
            assert summary["episodes"] == "3" and 0.3 < float(summary["random_moves"]) < 0.7
            steps = int(summary["steps"])
            offline = str(tmp_path / "offline")
            proc = _learner([f"--logdir={offline}", "--env=cartpole", "--dataset=test/cartpole-v0", "--preset=offline",
                             "--num_eval_actors=0", "--max_train_steps=5", "--export=false",
                             f"--set=replay.min_steps_to_sample={min(steps, 100)}", "--set=training.batch_size=16"])
            out, _ = proc.communicate(timeout=150)
            assert proc.returncode == 0, out[-3000:]
            assert f"dataset test/cartpole-v0: 3 episodes, {steps} steps" in out
            final = _records(offline)[-1]
            assert final["env_steps"] == 0 and final["replay_steps"] == steps and final["training_step"] >= 5
            # The run's own replay as a dataset: CartPole pays 1 per step, so the episodes'
            # returns add up to their steps.
            kept = _run("muzero.record", [f"--from_logdir={logdir}", "--out=test/run-v0"], timeout=120)
            assert kept.returncode == 0, kept.stderr[-2000:]
            summary = dict(item.split("=", 1) for item in kept.stdout.strip().splitlines()[-1].split())
            episodes, kept_steps = int(summary["episodes"]), int(summary["steps"])
            assert episodes >= 1 and float(summary["mean_return"]) * episodes == pytest.approx(kept_steps, abs=0.01 * episodes)
        finally:
            del os.environ["MINARI_DATASETS_PATH"]

    # The same command again resumes: the step continues and the replay comes back.
    # --max_seconds bounds the whole run across resumes: 47 leaves ~12 s for this session.
    proc = _learner([*common, "--max_seconds=47"])
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, out[-3000:]
    assert f"resumed from {os.path.join(logdir, 'checkpoints', latest)}" in out
    new = _records(logdir)[len(records):]
    assert new and new[0]["training_step"] >= final_step
    assert new[0]["replay_steps"] >= replay_before
    assert new[-1]["training_step"] > final_step
    # The clock continued from the first session (a fresh clock would start near 0), and the run
    # stopped at the whole-run limit: the last record lies within a progress period (5 s) of 47 s,
    # or past it by at most one slow training step (the first step after a resume traces the graph).
    assert new[0]["time"] >= 35
    assert 47 - 6 <= new[-1]["time"] < 47 + 15


def test_atari_tiny_network_runs_on_cpu(tmp_path):
    logdir = str(tmp_path / "atari")
    # Stops after the second training step (60 s is only a cap): the run ends once training runs.
    # No export at the end (the conv export is tic-tac-toe's test below), and a small replay: a
    # checkpoint writes the whole preallocated ring (1.8 GB of frames at the default capacity).
    proc = _learner([f"--logdir={logdir}", "--env=atari", "--max_train_steps=2", "--max_seconds=60", "--num_actors=1",
                     "--export=false",
                     "--num_eval_actors=0", "--envs_per_actor=4", "--simulations=4", "--batch_size=8",
                     "--set=targets.stack_frames=2", "--set=network.conv_channels=8",
                     "--set=network.conv_reduced_channels=4", "--set=network.head_hidden_size=16",
                     "--set=replay.min_steps_to_sample=100", "--set=replay.segment_length=20",
                     "--set=replay.capacity_steps=5000",
                     "--set=network.value_support={\"low\": -20, \"high\": 20, \"num_bins\": 41}",
                     "--set=network.reward_support={\"low\": -5, \"high\": 5, \"num_bins\": 11}",
                     '--env_options={"game": "Pong"}'])
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    records = _records(logdir)
    assert records and records[-1]["env_steps"] > 100
    assert records[-1]["training_step"] > 0, out[-3000:]


def test_tictactoe_defaults_train_with_sampled_openings_and_symmetries(tmp_path):
    logdir = str(tmp_path / "tictactoe")
    proc = _learner([f"--logdir={logdir}", "--env=tictactoe", "--max_train_steps=3", "--max_seconds=60", "--num_actors=1",
                     "--envs_per_actor=8", "--simulations=8", "--batch_size=16",
                     "--set=replay.min_steps_to_sample=100"])
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    with open(os.path.join(logdir, "config.json")) as f:
        config = json.load(f)["config"]
    assert config["training"]["augment_symmetries"] is True
    assert config["search"]["greedy_after_moves"] == 4
    records = _records(logdir)
    assert records and records[-1]["training_step"] > 0, out[-3000:]
    exports = os.listdir(os.path.join(logdir, "export"))
    assert exports
    # Against the perfect player through `python -m muzero.eval`: every game is counted once,
    # and a perfect player never loses, whoever moves first.
    played = _run("muzero.eval", [f"--export_dir={os.path.join(logdir, 'export', exports[0])}", "--episodes=4",
                                  "--num_envs=4", "--simulations=4", "--opponent=minimax",
                                  f"--video={tmp_path / 'games.gif'}"], timeout=120)
    assert played.returncode == 0, played.stderr[-2000:]
    counts = dict(item.split("=") for item in played.stdout.strip().splitlines()[-2].split())
    assert os.path.isfile(tmp_path / "games.gif")     # the first env's games, both players' moves
    assert int(counts["wins"]) == 0 and sum(int(counts[k]) for k in ("wins", "draws", "losses")) == 4, counts
