"""Trainer hooks that the learner wires into the replay."""
import numpy as np
import pytest

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import (MuZeroConfig, NetworkConfig, ReplayConfig, SupportConfig,
                                             TargetConfig)
from muzero.config import ConfigError
from muzero.mcts.config import SearchConfig
from muzero.algorithms.muzero.learning import Trainer
from muzero.algorithms.muzero.replay import Replay

VECTOR = EnvDescriptor("vec", (4,), "float32", 2)


def test_reanalysed_bootstrap_uses_the_trained_networks_value():
    # One truncated episode of 6 steps, observations [t, t, t, t] / 10, rewards 1, stored
    # root values 1000 (so a target that used them would be far off). With n = 2, g = 0.5,
    # the target at t = 0 is r0 + g r1 + g^2 v(obs_2) = 1 + 0.5 + 0.25 v(obs_2), where
    # v is the network's value of observation 2 computed here directly.
    targets = TargetConfig(num_unroll_steps=0, td_steps=2, stack_frames=1,
                           reanalyse_values=True)
    config = MuZeroConfig(search=SearchConfig(discount=0.5), targets=targets, network=NetworkConfig(
        value_support=SupportConfig(-10.0, 10.0, 21, True), reward_support=SupportConfig(-2.0, 2.0, 5, True),
        mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, head_hidden_size=8))
    trainer = Trainer(VECTOR, config, seed=3)
    obs = np.repeat(np.arange(6, dtype=np.float32)[:, None] / 10.0, 4, axis=1)
    replay = Replay(VECTOR, ReplayConfig(capacity_steps=64, min_steps_to_sample=1), targets, seed=0,
                    discount=config.search.discount)
    replay.insert(dict(episode_id=np.int64(1), start=np.int64(0), observations=obs,
                       actions=np.zeros(6, np.int32), rewards=np.ones(6, np.float32),
                       root_values=np.full(6, 1000.0, np.float32),
                       policies=np.full((6, 2), 0.5, np.float32), to_play=np.zeros(6, np.int8),
                       terminated=np.bool_(False), truncated=np.bool_(True)))
    values = trainer.network.initial_inference(obs)["value"].numpy()
    assert np.all(np.abs(values) < 100.0)
    batch = replay.sample(64, values_fn=trainer.bootstrap_values)
    for row, i in enumerate(batch["index"]):
        if i == 0:
            assert batch["target_value"][row, 0] == pytest.approx(1.5 + 0.25 * values[2], abs=1e-5)
        if i == 5:   # truncated at the last step: bootstrap from its own value
            assert batch["target_value"][row, 0] == pytest.approx(values[5], abs=1e-5)


def test_bootstrap_values_come_from_a_target_network_refreshed_every_n_steps():
    # N = 3: the first call (step 0) copies the trained weights; moving the trained weights
    # at step 1 and 2 leaves the bootstraps on the step-0 values, which the network gave
    # directly before the move; step 3 refreshes the target to the moved weights.
    import tensorflow as tf
    targets = TargetConfig(num_unroll_steps=0, td_steps=2, stack_frames=1,
                           reanalyse_values=True, value_target_update_steps=3)
    config = MuZeroConfig(search=SearchConfig(discount=0.5), targets=targets, network=NetworkConfig(
        value_support=SupportConfig(-10.0, 10.0, 21, True), reward_support=SupportConfig(-2.0, 2.0, 5, True),
        mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, head_hidden_size=8))
    trainer = Trainer(VECTOR, config, seed=3)
    obs = np.repeat(np.arange(6, dtype=np.float32)[:, None] / 10.0, 4, axis=1) - 0.2
    index = np.arange(6, dtype=np.int64)
    before = trainer.network.initial_inference(obs)["value"].numpy()
    np.testing.assert_allclose(trainer.bootstrap_values(obs, index), before, rtol=1e-6)
    for v in trainer.network.prediction.trainable_variables:
        v.assign(v + tf.random.stateless_normal(v.shape, seed=[1, 2]) * 0.5)
    after = trainer.network.initial_inference(obs)["value"].numpy()
    assert np.abs(after - before).max() > 0.05   # the move changes the values
    for step in (1, 2):
        trainer.step.assign(step)
        np.testing.assert_allclose(trainer.bootstrap_values(obs, index), before, rtol=1e-6)
    trainer.step.assign(3)
    np.testing.assert_allclose(trainer.bootstrap_values(obs, index), after, rtol=1e-6)


def test_a_target_network_needs_reanalysed_values():
    with pytest.raises(ConfigError, match="value_target_update_steps=5 is invalid: needs reanalyse_values=true"):
        TargetConfig(value_target_update_steps=5)


def test_reanalyse_values_must_be_a_bool():
    with pytest.raises(ConfigError, match="reanalyse_values"):
        TargetConfig(reanalyse_values=1)


def test_episode_reports_with_absurd_returns_are_refused():
    # A report of a 3e38 return once turned the progress line into a 39-digit number.
    import dataclasses
    from muzero import algorithms, core
    from muzero.algorithms.muzero.learning import MuZeroLearner
    settings = algorithms.get("muzero").default_settings("cartpole")
    settings = dataclasses.replace(settings, config=dataclasses.replace(
        settings.config, network=dataclasses.replace(settings.config.network, mlp_hidden_size=8, latent_size=4,
                                                     head_hidden_size=8)))
    context = core.RunContext()
    learner = MuZeroLearner(settings, EnvDescriptor("cartpole", (4,), "float32", 2), context)
    report = {"report": np.bool_(True), "episode_return": np.array([3e38], np.float32),
              "episode_length": np.array([10], np.int32), "evaluation": np.bool_(True)}
    with pytest.raises(ValueError, match="within 1e\\+06"):
        learner.push_segments([report])
    report["episode_return"] = np.array([12.0], np.float32)
    learner.push_segments([report])
    assert context.episodes.mean_return(True) == 12.0
    learner.close()


@pytest.mark.parametrize("env", ["cartpole", "gym:CartPole-v1"])
def test_augment_symmetries_on_cartpole_uses_its_mirror(env):
    import dataclasses
    from muzero import algorithms, core
    from muzero.algorithms.muzero.learning import MuZeroLearner
    algo = algorithms.get("muzero")
    settings = algo.default_settings(env)
    config = settings.config
    settings = dataclasses.replace(settings, config=dataclasses.replace(
        config, training=dataclasses.replace(config.training, augment_symmetries=True),
        network=dataclasses.replace(config.network, mlp_hidden_size=8, latent_size=4, head_hidden_size=8)))
    algo.check_settings(settings)   # accepted: both CartPoles register a mirror
    learner = MuZeroLearner(settings, EnvDescriptor(env, (4,), "float32", 2), core.RunContext())
    try:
        assert learner.symmetries is None and learner.mirror.tolist() == [1, 0]
    finally:
        learner.close()
