"""The generic run loop with a tiny fake algorithm: resume, fallbacks, refusals, failures.

The fake learner counts steps and saves its counter in a file; nothing here knows
MuZero, which is the point: the loop drives any ``core.Builder``.
"""
import json
import os

import numpy as np
import pytest

from muzero import algorithms, core
from muzero.config import ConfigError, check_int
from muzero import checkpoints
from muzero.learner.loop import Run
from muzero.settings import RunSettings
import dataclasses


@dataclasses.dataclass(frozen=True)
class CounterTraining:
    increment: int = 1

    def __post_init__(self):
        check_int(self, "increment", 1)


@dataclasses.dataclass(frozen=True)
class CounterConfig:
    training: CounterTraining = CounterTraining()


class CounterLearner(core.Learner):
    def __init__(self, context):
        self.context = context
        self.count = 0
        self.published = []
        self.fail_saves = 0     # the next N saves raise OSError (a full disk)

    @property
    def training_step(self):
        return self.count

    def step(self):
        self.count += 1
        self.context.add_env_steps(10)
        return {"loss/total": 1.0 / self.count}

    def copy_to_serving(self, _model=None):
        self.published.append(self.count)

    def save(self, directory):
        if self.fail_saves:
            self.fail_saves -= 1
            raise OSError(28, "No space left on device")
        with open(os.path.join(directory, "counter.json"), "w") as f:
            json.dump({"count": self.count}, f)

    def restore(self, directory):
        with open(os.path.join(directory, "counter.json")) as f:
            self.count = int(json.load(f)["count"])

    def export(self, directory):
        os.makedirs(directory)
        with open(os.path.join(directory, "muzero_export.json"), "w") as f:
            json.dump({"algo": "counter"}, f)


class CounterService(core.InferenceService):
    def bind(self, server):
        server.bind_unary("ping", lambda t, c: {}, service="test.Counter")

    def update_weights(self, fn, version):
        fn()


class CounterBuilder(core.Builder):
    name = "counter"
    two_player = True          # it learns nothing, so any env will do (the tests use tictactoe too)
    config_class = CounterConfig
    ingestion = "streaming"

    def default_settings(self, env):
        return RunSettings(env=env, algo="counter", config=CounterConfig(), num_actors=0, num_eval_actors=0,
                           progress_every_s=0.0)

    def make_learner(self, settings, descriptor, context):
        self.learner = CounterLearner(context)
        return self.learner

    def make_service(self, settings, descriptor, learner, context, server_config):
        return CounterService()

    def actor_target(self):
        raise AssertionError("no actors in these tests")

    def actor_args(self, settings, index, address, client_config, training_step):
        raise AssertionError("no actors in these tests")


BUILDER = CounterBuilder()


@pytest.fixture(autouse=True)
def counter_algorithm(monkeypatch):
    monkeypatch.setitem(algorithms._BUILDERS, "counter", f"{__name__}:BUILDER")


def _run(logdir, lines=None, **changes):
    settings = dataclasses.replace(BUILDER.default_settings("cartpole"), **changes)
    log = lines.append if lines is not None else (lambda m: None)
    return Run(settings, str(logdir), log=log)


def test_trains_checkpoints_exports_and_resumes_where_it_stopped(tmp_path):
    run = _run(tmp_path, max_train_steps=5)
    record = run.run()
    assert record["stop_reason"] == "max_train_steps=5 reached"
    assert BUILDER.learner.published[:5] == [1, 2, 3, 4, 5]      # publish_every_steps=1
    assert checkpoints.resolve_checkpoint(str(tmp_path)).endswith("ckpt-5")
    state = checkpoints.read_state(checkpoints.resolve_checkpoint(str(tmp_path)))
    assert state["env_steps"] == 50 and state["algo"] == "counter" and state["env"] == "cartpole"
    with open(tmp_path / "export" / "step-5" / "run.json") as f:   # the env an evaluator plays
        run_json = json.load(f)
    # ... and how far training was (the counter learner makes 10 env steps per training step)
    assert run_json["env"] == "cartpole" and run_json["training_step"] == 5 and run_json["env_steps"] == 50
    # metrics.jsonl ends with the counts at the stop and why it came, though the run was shorter
    # than one progress period.
    with open(tmp_path / "metrics.jsonl") as f:
        last = json.loads(f.readlines()[-1])
    assert (last["training_step"], last["env_steps"], last["stop_reason"]) == (5, 50, "max_train_steps=5 reached")
    lines = []
    run = _run(tmp_path, lines, max_train_steps=8)
    run.run()
    assert any(line.startswith(f"resumed from {tmp_path}/checkpoints/ckpt-5: training step 5") for line in lines)
    assert BUILDER.learner.count == 8 and run.env_steps == 80
    # Resumed with its limit already reached: no further step, and the end's export is the
    # checkpoint's network (how to export a checkpoint of a run made with --export=false).
    lines = []
    record = _run(tmp_path, lines, max_train_steps=8).run()
    assert BUILDER.learner.count == 8 and record["stop_reason"] == "max_train_steps=8 reached"
    assert "stopping: max_train_steps=8 reached" in lines
    assert (tmp_path / "export" / "step-8" / "muzero_export.json").is_file()


def test_progress_records_mean_return_and_length_over_the_recent_episodes(tmp_path):
    """Training means cover the last 100 episodes, evaluation ones the last 20; summaries get
    each episode once."""
    run = _run(tmp_path, max_train_steps=2)
    episodes = run.context.episodes
    episodes.add(np.arange(150.0), np.arange(150) + 1000, evaluation=False)   # returns 0..149
    episodes.add(np.array([-3.0, 5.0]), np.array([7, 9]), evaluation=True)
    record = run.run()
    # last 100 of 0..149: 50..149, mean 99.5; lengths 1050..1149, mean 1099.5
    assert record["return_train"] == 99.5 and record["length_train"] == 1099.5
    assert record["return_eval"] == 1.0 and record["length_eval"] == 8.0
    with open(tmp_path / "metrics.jsonl") as f:
        assert json.loads(f.readlines()[-1])["length_eval"] == 8.0
    episodes.add(np.array([2.0]), np.array([4]), evaluation=True)
    assert episodes.take_since_summary(True) == [(2.0, 4)]   # the earlier ones went into a summary
    assert episodes.take_since_summary(True) == []


def test_a_corrupt_newest_checkpoint_falls_back_to_the_older_one(tmp_path):
    _run(tmp_path, max_train_steps=3).run()
    _run(tmp_path, max_train_steps=6).run()
    newest = os.path.join(tmp_path, "checkpoints", "ckpt-6", "counter.json")
    with open(newest, "w") as f:
        f.write('{"cou')                                           # truncated mid-write
    os.makedirs(tmp_path / "checkpoints" / ".tmp-ckpt-7-123-456")  # an interrupted write
    lines = []
    _run(tmp_path, lines, max_train_steps=9).run()
    assert any("ckpt-6 cannot be restored (JSONDecodeError" in line for line in lines)
    assert any(line.startswith(f"resumed from {tmp_path}/checkpoints/ckpt-3") for line in lines)
    assert any("removed 1 unfinished checkpoint write(s): .tmp-ckpt-7-123-456" in line for line in lines)
    names = os.listdir(tmp_path / "checkpoints")
    assert not [d for d in names if d.startswith(".tmp")]
    # The damaged one is set aside, so pruning keeps two restorable ones (it used to keep the
    # damaged ckpt-6 as one of the two and delete ckpt-3).
    assert "damaged-ckpt-6" in names and sorted(d for d in names if d.startswith("ckpt-")) == ["ckpt-3", "ckpt-9"]


def test_a_kill_between_the_renames_of_a_same_step_save_loses_nothing(tmp_path):
    _run(tmp_path, max_train_steps=3).run()
    root = tmp_path / "checkpoints"
    # What a kill leaves between "move the old ckpt-3 aside" and "rename the new one in":
    # both complete copies under .tmp- names, no ckpt-3.
    os.replace(root / "ckpt-3", root / ".tmp-ckpt-3-99-1-previous")
    lines = []
    _run(tmp_path, lines, max_train_steps=4).run()
    assert any("recovered 1 complete checkpoint(s) from an interrupted save: .tmp-ckpt-3-99-1-previous -> ckpt-3"
               in line for line in lines)
    assert any(line.startswith(f"resumed from {root}/ckpt-3: training step 3") for line in lines)


def test_a_full_disk_while_writing_metrics_does_not_stop_training(tmp_path, monkeypatch):
    import builtins
    real_open = builtins.open
    failures = {"left": 3}

    def flaky_open(path, mode="r", *args, **kwargs):
        if str(path).endswith("metrics.jsonl") and "a" in mode and failures["left"]:
            failures["left"] -= 1
            raise OSError(28, "No space left on device")
        return real_open(path, mode, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", flaky_open)
    lines = []
    record = _run(tmp_path, lines, max_train_steps=300).run()
    assert record["stop_reason"] == "max_train_steps=300 reached"
    assert sum("cannot write metrics (No space left on device)" in line for line in lines) == 1   # said once
    assert os.path.getsize(tmp_path / "metrics.jsonl") > 0                                    # then resumed


def test_a_logdir_of_another_env_is_refused_before_anything_is_written(tmp_path):
    _run(tmp_path, max_train_steps=2).run()
    before = (tmp_path / "config.json").read_text()
    other = dataclasses.replace(BUILDER.default_settings("tictactoe"), max_train_steps=2)
    with pytest.raises(ConfigError, match=r"holds a run with env=\"cartpole\"; this run has env=\"tictactoe\""):
        Run(other, str(tmp_path), log=lambda m: None).run()
    assert (tmp_path / "config.json").read_text() == before


def test_a_failed_periodic_checkpoint_keeps_training_and_the_previous_checkpoint(tmp_path, monkeypatch):
    import muzero.learner.loop as loop
    monkeypatch.setattr(loop, "CHECKPOINT_RETRY_S", 0.0)
    lines = []
    run = _run(tmp_path, lines, max_train_steps=400, checkpoint_every_secs=1e-6)
    original = BUILDER.make_learner

    def make_failing(*args, **kwargs):
        learner = original(*args, **kwargs)
        learner.fail_saves = 2
        return learner
    monkeypatch.setattr(BUILDER, "make_learner", make_failing)
    record = run.run()
    assert record["stop_reason"] == "max_train_steps=400 reached"
    failures = [line for line in lines if line.startswith("checkpoint failed (OSError")]
    assert len(failures) == 2 and "No space left on device" in failures[0]
    assert checkpoints.resolve_checkpoint(str(tmp_path)).endswith("ckpt-400")


def test_time_limit_counts_across_resumes(tmp_path):
    run = _run(tmp_path, max_train_steps=3)
    run.run()
    state_path = os.path.join(checkpoints.resolve_checkpoint(str(tmp_path)), "state.json")
    state = json.load(open(state_path))
    state["elapsed_s"] = 1000.0                         # as if the run had already used 1000 s
    json.dump(state, open(state_path, "w"))
    record = _run(tmp_path, max_seconds=1000.0).run()
    assert record["stop_reason"] == "max_seconds=1000 reached"
    assert BUILDER.learner.count == 3                   # stopped at once, not after another 1000 s


def test_failing_tensorboard_writes_do_not_stop_training(tmp_path, monkeypatch):
    # On a full disk TensorFlow's summary ops raise their own errors (not OSError).
    import tensorflow as tf
    real = tf.summary.scalar
    failures = {"left": 5}

    def flaky_scalar(*args, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
        return real(*args, **kwargs)
    monkeypatch.setattr(tf.summary, "scalar", flaky_scalar)
    lines = []
    record = _run(tmp_path, lines, max_train_steps=300, summary_every_steps=1).run()
    assert record["stop_reason"] == "max_train_steps=300 reached"
    assert sum("cannot write TensorBoard summaries (ResourceExhaustedError" in line for line in lines) == 1


def test_periodic_exports_are_complete_numbered_and_pruned_to_the_newest(tmp_path, monkeypatch):
    # Every loop iteration exports (export_every_secs tiny); one export fails (a full disk) and
    # training goes on; only the newest keep_exports=2 step directories stay, by step number.
    lines = []
    run = _run(tmp_path, lines, max_train_steps=12, export_every_secs=1e-6, keep_exports=2)
    original = BUILDER.make_learner
    calls = []

    def make_learner(*args, **kwargs):
        learner = original(*args, **kwargs)
        export = learner.export

        def flaky_export(directory):
            calls.append(os.path.basename(directory))
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            export(directory)
        learner.export = flaky_export
        return learner
    monkeypatch.setattr(BUILDER, "make_learner", make_learner)
    os.makedirs(tmp_path / "export" / ".partial-step-7")        # a cut-short export of an earlier run
    os.makedirs(tmp_path / "export" / "step-9")                 # step 9 < 10 although "step-9" > "step-10"
    record = run.run()
    assert record["stop_reason"] == "max_train_steps=12 reached"
    assert calls[0] == ".partial-step-1" and len(calls) >= 12     # written under a hidden name first
    assert sum(line.startswith("periodic export failed (OSError") for line in lines) == 1
    assert sorted(os.listdir(tmp_path / "export")) == ["step-11", "step-12"]
    for step in (11, 12):
        with open(tmp_path / "export" / f"step-{step}" / "run.json") as f:
            assert json.load(f)["env"] == "cartpole"


def test_exports_each_time_env_steps_pass_a_multiple_and_again_after_a_resume(tmp_path):
    # The fake learner adds 10 env steps a step: with a multiple of 30 the count passes 30, 60,
    # 90 and 120 at steps 3, 6, 9 and 12 (12 is also the final export).
    _run(tmp_path, max_train_steps=12, export_every_env_steps=30, keep_exports=0).run()
    names = sorted(os.listdir(tmp_path / "export"), key=lambda n: int(n.split("-")[1]))
    assert names == ["step-3", "step-6", "step-9", "step-12"]
    with open(tmp_path / "export" / "step-6" / "run.json") as f:
        assert json.load(f)["env_steps"] == 60
    # Resumed at 120 env steps with a multiple of 50: the next ones are at 150 and 200 (steps 15, 20).
    _run(tmp_path, max_train_steps=21, export_every_env_steps=50, keep_exports=0).run()
    names = sorted(os.listdir(tmp_path / "export"), key=lambda n: int(n.split("-")[1]))
    assert names == ["step-3", "step-6", "step-9", "step-12", "step-15", "step-20", "step-21"]
    with pytest.raises(ConfigError, match="export_every_env_steps=-1 is invalid"):
        _run(tmp_path, export_every_env_steps=-1)


def test_no_periodic_exports_by_default_and_none_at_all_with_export_off(tmp_path):
    run = _run(tmp_path / "a", max_train_steps=5)
    run.run()
    assert os.listdir(tmp_path / "a" / "export") == ["step-5"]
    settings = dataclasses.replace(BUILDER.default_settings("cartpole"), max_train_steps=5, export_every_secs=1e-6)
    Run(settings, str(tmp_path / "b"), export=False, log=lambda m: None).run()
    assert not os.path.exists(tmp_path / "b" / "export")


def test_a_checkpoint_these_settings_cannot_resume_is_refused_not_set_aside(tmp_path, monkeypatch):
    # A ConfigError from restore (MuZero: a changed consistency-loss setting) means the
    # checkpoint is intact but the settings differ: fail in one line, keep the checkpoint.
    _run(tmp_path, max_train_steps=3).run()

    def refuse(directory):
        raise ConfigError("training.x=1 but the checkpoint was trained with x=0")
    monkeypatch.setattr(CounterLearner, "restore", lambda self, directory: refuse(directory))
    with pytest.raises(ConfigError, match="trained with x=0"):
        _run(tmp_path, max_train_steps=6).run()
    names = os.listdir(tmp_path / "checkpoints")
    assert "ckpt-3" in names and not [n for n in names if n.startswith("damaged-")]


def test_pushes_stop_being_limited_before_the_actors_stop_and_the_final_checkpoint(tmp_path, monkeypatch):
    # An actor blocked on a push (the replay ratio waiting for the trainer) would otherwise
    # hold the shutdown until its SIGKILL timeout, and its data would miss the checkpoint.
    events = []
    saves = CounterLearner.save
    monkeypatch.setattr(CounterLearner, "stop_limiting", lambda self: events.append("stop_limiting"))
    monkeypatch.setattr(CounterLearner, "save", lambda self, d: (events.append("save"), saves(self, d)))

    class Actors:   # a launcher that only records its stop
        def poll(self):
            pass

        def alive(self):
            return 0

        def start(self):
            pass

        def stop(self):
            events.append("actors.stop")

    monkeypatch.setattr(Run, "_prepare_actors", lambda self: setattr(self, "actors", Actors()))
    _run(tmp_path, max_train_steps=3, checkpoint_every_secs=3600.0).run()
    assert events == ["stop_limiting", "actors.stop", "save"]


def test_the_launcher_prepares_before_the_server_exists_and_starts_its_actors_after(tmp_path, monkeypatch):
    # Ray's start forks with Python code run in the child, which can hang beside the busy
    # threads of a running server: the launcher gets its prepare() call before the build.
    seen = []

    class Actors(core.Launcher):
        def __init__(self, count, target, args_fn, log=None):
            self.count, self.run = count, run

        def prepare(self):
            seen.append(("prepare", self.run.service is None and self.run.address is None))

        def start(self):
            seen.append(("start", self.count, self.run.service is not None and self.run.address is not None))

        def poll(self):
            pass

        def alive(self):
            return 0

        def stop(self):
            seen.append(("stop",))

    monkeypatch.setattr("muzero.learner.loop.LocalActors", Actors)
    monkeypatch.setattr(CounterBuilder, "actor_target", lambda self: print)
    run = _run(tmp_path, max_train_steps=2, num_actors=2, num_eval_actors=1)
    run.run()
    assert seen == [("prepare", True), ("start", 3, True), ("stop",)]


def test_a_muzero_run_from_before_mlp_bias_resumes_only_with_mlp_bias_false(tmp_path):
    # Its config.json has no network.mlp_bias: its MLPs had no hidden biases, so the default
    # (true) would build other variables than its checkpoints hold.
    muzero = algorithms.get("muzero")
    settings = muzero.default_settings("cartpole")
    biased = dataclasses.replace(settings.config.network, mlp_bias=True)   # as gym: ids have it
    settings = dataclasses.replace(settings, config=dataclasses.replace(settings.config, network=biased))
    old = settings.to_dict()
    del old["config"]["network"]["mlp_bias"]
    del old["config"]["network"]["init_seed"]   # nor network.init_seed, which came later
    (tmp_path / "config.json").write_text(json.dumps(old))
    with pytest.raises(ConfigError, match=r"\"mlp_bias\": false.*\"mlp_bias\": true.*"
                                          r"resume with --set=network.mlp_bias=false\)$"):
        Run(settings, str(tmp_path), log=lambda m: None)._check_same_run(["ckpt-1"])
    network = dataclasses.replace(settings.config.network, mlp_bias=False)
    legacy = dataclasses.replace(settings, config=dataclasses.replace(settings.config, network=network))
    Run(legacy, str(tmp_path), log=lambda m: None)._check_same_run(["ckpt-1"])   # accepted
    # The initial weights' seed does not matter to a resume: another one is accepted too.
    other_init = dataclasses.replace(legacy.config.network, init_seed=7)
    Run(dataclasses.replace(legacy, config=dataclasses.replace(legacy.config, network=other_init)), str(tmp_path),
        log=lambda m: None)._check_same_run(["ckpt-1"])   # accepted
    # Image and board networks are the same either way: an old MinAtar or tic-tac-toe run resumes as it is.
    board = muzero.default_settings("tictactoe")
    old = board.to_dict()
    del old["config"]["network"]["mlp_bias"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    Run(board, str(tmp_path), log=lambda m: None)._check_same_run(["ckpt-1"])


def test_the_pace_line_a_minute_in_gives_the_rates_of_the_half_minute_before():
    # Marked at 30 s (1,000 env steps, step 0), reported at the first record at or after
    # 60 s (2,200 env steps, step 90): 1,200 / 30 = 40 env steps/s, 90 / 30 = 3.0 steps/s,
    # and 100,000 / 40 = 2,500 s = 41m40s. Once only.
    from muzero.learner.loop import _Pace
    pace = _Pace(start=100.0)
    assert pace.line(110.0, 0, 0) is None
    assert pace.line(130.0, 1_000, 0) is None
    assert pace.line(150.0, 1_800, 40) is None
    assert pace.line(160.0, 2_200, 90) == ("pace over the last 30 s: acting 40 env steps/s, training 3.0 steps/s; "
                                           "100k env steps take about 41m40s at this pace")
    assert pace.line(200.0, 9_000, 400) is None
    # No training step by then, or no env steps (an offline run), are said as such.
    waiting = _Pace(start=0.0)
    waiting.line(30.0, 500, 0)
    assert waiting.line(60.0, 1_700, 0) == ("pace over the last 30 s: acting 40 env steps/s, no training step yet; "
                                            "100k env steps take about 41m40s at this pace")
    offline = _Pace(start=0.0)
    offline.line(31.0, 0, 100)
    assert offline.line(61.0, 0, 250) == "pace over the last 30 s: training 5.0 steps/s"


def test_the_eta_rates_cover_the_last_minute_of_progress_samples():
    # Actors that deliver 6,400 env steps at a time make 5-second rates swing between 1,280/s
    # and 0; the window averages over at least 60 s. Samples every 5 s; a delivery every 30 s.
    from muzero.learner.loop import _RateWindow
    window = _RateWindow(span_s=60.0)
    assert window.add(0.0, 0, 0) == (0.0, 0.0)
    assert window.add(5.0, 6_400, 10) == (1280.0, 2.0)
    assert window.add(10.0, 6_400, 20) == (640.0, 2.0)
    for t in range(15, 65, 5):
        window.add(float(t), 6_400 if t < 35 else 12_800, 2 * t)
    # At 65 s the oldest sample kept is the newest one at least 60 s old: t = 5 (6,400 env
    # steps, step 10): (12,800 - 6,400) / 60 = 106.7 env steps/s, (130 - 10) / 60 = 2.0 steps/s.
    env_rate, step_rate = window.add(65.0, 12_800, 130)
    assert env_rate == pytest.approx(6_400 / 60) and step_rate == pytest.approx(2.0)
