"""Run settings across algorithms: sections applied together, algo in config.json, addresses."""
import dataclasses

import pytest

from muzero import algorithms
from muzero.algorithms.unroll_queue import UnrollQueue
from muzero.config import ConfigError
from muzero.settings import replace_sections, sections


def _muzero_cartpole():
    return algorithms.get("muzero").default_settings("cartpole")


def test_config_json_round_trip_keeps_the_algorithm():
    settings = _muzero_cartpole()
    data = settings.to_dict()
    assert data["algo"] == "muzero" and data["config"]["search"]["num_simulations"] == 25
    assert algorithms.settings_from_dict(data) == settings
    data.pop("algo")                      # config.json files written before algo existed
    assert algorithms.settings_from_dict(data).algo == "muzero"
    with pytest.raises(ConfigError, match="'nope' is not a known algorithm; known: muzero, ppo, r2d2, sac, vtrace"):
        algorithms.settings_from_dict(dict(data, algo="nope"))
    with pytest.raises(ConfigError, match="missing field"):
        algorithms.settings_from_dict({"env": "cartpole"})


def test_sections_of_the_muzero_config():
    assert list(sections(_muzero_cartpole().config)) == ["search", "targets", "replay", "network", "training", "pretrain"]


def test_run_level_checks_name_the_field():
    with pytest.raises(ConfigError, match="RunSettings.checkpoint_every_secs=0"):
        dataclasses.replace(_muzero_cartpole(), checkpoint_every_secs=0)
    with pytest.raises(ConfigError, match="RunSettings.seed=-1"):
        dataclasses.replace(_muzero_cartpole(), seed=-1)


def test_search_nodes_are_simulations_plus_root():
    settings = replace_sections(_muzero_cartpole(), {"search": {"num_simulations": 7}})
    assert settings.config.search.num_nodes == 8


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(algorithms.UnknownAlgorithmError, match="known: muzero, ppo, r2d2, sac, vtrace"):
        algorithms.get("nope")


def test_server_address_brackets_ipv6_and_maps_loopback():
    from muzero.learner.loop import server_address
    assert server_address("::1", 5) == "[::1]:5"
    assert server_address("[::1]", 5) == "[::1]:5"
    assert server_address("localhost", 5) == "127.0.0.1:5"
    assert server_address("10.1.2.3", 5) == "10.1.2.3:5"


def test_unroll_queue_back_pressure_and_close():
    import threading
    q = UnrollQueue(2)
    assert q.put({"i": 0}) and q.put({"i": 1})
    assert not q.put({"i": 2}, timeout=0.05)          # full: the producer waits, then gives up
    assert q.get_batch(3, timeout=0.05) is None       # not enough yet
    assert [u["i"] for u in q.get_batch(2, timeout=0.05)] == [0, 1]
    q.put({"i": 3}); q.put({"i": 4})
    blocked = []
    t = threading.Thread(target=lambda: blocked.append(q.put({"i": 5})))
    t.start()
    t.join(0.1)
    assert t.is_alive()                                # blocked on the full queue
    q.close()
    t.join(2)
    assert blocked == [False] and q.dropped == 1       # close wakes it; the unroll is dropped


def test_a_put_blocked_on_a_full_queue_gives_up_when_the_run_stops():
    # At shutdown the learner takes no more batches: a blocked put (an actor's inference
    # call) must return within a poll period, not hold the actors until they are killed.
    import threading
    import time
    stop = threading.Event()
    q = UnrollQueue(1, stop)
    assert q.put({"i": 0})
    result = []
    t = threading.Thread(target=lambda: result.append(q.put({"i": 1})))
    t.start()
    t.join(0.3)
    assert t.is_alive()                                # full and running: it waits
    begin = time.monotonic()
    stop.set()
    t.join(2)
    assert result == [False] and q.dropped == 1 and time.monotonic() - begin < 1.0
    assert len(q) == 1 and not q.put({"i": 2})         # later puts on the full queue drop too


def _cli_settings(argv: list):
    from absl import flags

    from muzero.learner import __main__ as cli
    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS(["learner", *argv])
        return cli.build_settings()[0]
    finally:
        flags.FLAGS.unparse_flags()


def test_preset_sits_over_the_defaults_and_under_the_users_flags():
    from muzero.algorithms.muzero.defaults import FEW_ENV_STEPS
    plain = _cli_settings(["--env=cartpole"])
    preset = _cli_settings(["--env=cartpole", "--preset=few_env_steps"])
    for section, fields in FEW_ENV_STEPS.sections.items():
        for field, value in fields.items():
            assert getattr(getattr(preset.config, section), field) == value, (section, field)
    for field, value in FEW_ENV_STEPS.top.items():
        assert getattr(preset, field) == value != getattr(plain, field)
    # Untouched fields keep the env's defaults.
    assert preset.config.training.learning_rate == plain.config.training.learning_rate
    assert dataclasses.replace(preset.config.network, mlp_bias=plain.config.network.mlp_bias) == plain.config.network
    mine = _cli_settings(["--env=cartpole", "--preset=few_env_steps", "--simulations=7",
                          "--set=replay.samples_per_insert=3", "--envs_per_actor=5"])
    assert mine.config.search.num_simulations == 7 and mine.envs_per_actor == 5
    assert mine.config.replay.samples_per_insert == 3.0
    assert mine.config.replay.segment_length == FEW_ENV_STEPS.sections["replay"]["segment_length"]


def test_small_network_preset_is_for_image_envs_only():
    from muzero.learner.__main__ import UsageError
    plain = _cli_settings(["--env=atari"])
    small = _cli_settings(["--env=atari", "--preset=small_network"])
    assert (plain.config.network.conv_channels, plain.config.targets.stack_frames) == (32, 8)
    assert (small.config.network.conv_channels, small.config.network.conv_reduced_channels,
            small.config.targets.stack_frames) == (16, 8, 4)
    assert small.config.search == plain.config.search and small.config.training == plain.config.training
    with pytest.raises(UsageError, match=r"^--preset=small_network is for image envs; --env=cartpole is a "
                                         r"vector env$"):
        _cli_settings(["--env=cartpole", "--preset=small_network"])


def test_evaluation_actors_take_eval_env_options_over_env_options():
    from muzero.algorithms.muzero.builder import BUILDER
    from muzero.learner.__main__ import UsageError
    settings = _cli_settings(["--env=minatar:Breakout", '--env_options={"sticky_actions": 0.0}'])
    assert settings.eval_env_options == {"max_episode_steps": 2500}        # MinAtar's default
    assert settings.env_options_for(evaluation=False) == {"sticky_actions": 0.0}
    assert settings.env_options_for(evaluation=True) == {"sticky_actions": 0.0, "max_episode_steps": 2500}
    # actor 0 trains, actor 1 (num_actors=1) evaluates
    train_actor, = BUILDER.actor_args(settings, 0, "127.0.0.1:1", None, 0)
    eval_actor, = BUILDER.actor_args(settings, 1, "127.0.0.1:1", None, 0)
    assert (train_actor.evaluation, eval_actor.evaluation) == (False, True)
    assert train_actor.env_options == {"sticky_actions": 0.0}
    assert eval_actor.env_options == {"sticky_actions": 0.0, "max_episode_steps": 2500}
    # MinAtar also evaluates by Gumbel's root; the training actors search by pUCT.
    assert train_actor.search.for_evaluation().root_selection == "gumbel"
    assert (train_actor.search.root_selection, eval_actor.search.root_selection) == ("puct", "puct")
    # The flag replaces the default; '{}' turns it off; other envs have none.
    assert _cli_settings(["--env=minatar:Breakout", '--eval_env_options={"max_episode_steps": 900}']
                         ).eval_env_options == {"max_episode_steps": 900}
    assert _cli_settings(["--env=minatar:Breakout", "--eval_env_options={}"]).eval_env_options == {}
    assert _cli_settings(["--env=cartpole"]).eval_env_options == {}
    with pytest.raises(UsageError, match=r"^--eval_env_options=\{\"max_episode_steps\": 0\} for --env=minatar:Breakout: "
                                         r"max_episode_steps=0 must be an integer >= 1$"):
        _cli_settings(["--env=minatar:Breakout", '--eval_env_options={"max_episode_steps": 0}'])
    with pytest.raises(ConfigError, match=r"RunSettings.eval_env_options=\[\] is invalid: must be a JSON object"):
        dataclasses.replace(settings, eval_env_options=[])


def test_unknown_preset_names_the_known_ones():
    from muzero.learner.__main__ import UsageError
    with pytest.raises(UsageError, match=r"--preset='fast' is not a preset of --algo=muzero \(its presets: "
                                         r"few_env_steps, offline, small_network\)"):
        _cli_settings(["--env=cartpole", "--preset=fast"])
    with pytest.raises(UsageError, match=r"not a preset of --algo=ppo \(its presets: none\)"):
        _cli_settings(["--algo=ppo", "--env=cartpole", "--preset=few_env_steps"])
