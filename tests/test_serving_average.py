"""training.serving_ema_decay: the actors and exports play an exponential moving average of
the trained weights (muzero.network.layers.variable_averager, Trainer.served_network)."""
import dataclasses
import os

import numpy as np
import pytest

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import (MuZeroConfig, NetworkConfig, SupportConfig, TargetConfig,
                                             TrainingConfig)
from muzero.config import ConfigError
from replay_batches import replay_batch

K = 2
VECTOR = EnvDescriptor("cartpole", (4,), "float32", 2)
NETWORK = NetworkConfig(value_support=SupportConfig(-10.0, 10.0, 21, True),
                        reward_support=SupportConfig(-2.0, 2.0, 5, True),
                        mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, head_hidden_size=8)


def _batch(seed: int) -> dict:
    return replay_batch(seed, 8, K)


def _values(network) -> list:
    from muzero.algorithms.muzero.network.networks import PARTS
    return [v.numpy().copy() for p in PARTS for v in getattr(network, p).variables]


def test_variable_averager_worked_example():
    # decay 0.5: d = min(0.5, (1 + t) / (10 + t)).
    # t = 0: d = 0.1, 0.1 * 0 + 0.9 * 10 = 9; t = 5: d = 6/15 = 0.4, 0.4 * 9 + 0.6 * 20 = 15.6;
    # t = 100: d = 0.5, 0.5 * 15.6 + 0.5 * 0 = 7.8.
    import tensorflow as tf
    from muzero.network.layers import variable_averager
    source, average = tf.Variable([10.0, -10.0]), tf.Variable([0.0, 0.0])
    update = variable_averager([source], [average], 0.5)
    update(tf.constant(0, tf.int64))
    np.testing.assert_allclose(average.numpy(), [9.0, -9.0], rtol=1e-6)
    source.assign([20.0, -20.0])
    update(tf.constant(5, tf.int64))
    np.testing.assert_allclose(average.numpy(), [15.6, -15.6], rtol=1e-6)
    source.assign([0.0, 0.0])
    update(tf.constant(100, tf.int64))
    np.testing.assert_allclose(average.numpy(), [7.8, -7.8], rtol=1e-6)
    with pytest.raises(RuntimeError, match="differ in structure"):
        variable_averager([source], [tf.Variable([0.0])], 0.5)


def test_the_decay_is_checked():
    with pytest.raises(ConfigError, match="serving_ema_decay"):
        TrainingConfig(serving_ema_decay=1.0)
    with pytest.raises(ConfigError, match="serving_ema_decay"):
        TrainingConfig(serving_ema_decay=-0.1)


def test_the_serving_network_gets_the_average_of_the_trained_weights():
    # Reference in NumPy: the average starts at the initial weights; after training step t it
    # is d_t * average + (1 - d_t) * (weights after step t), d_t = min(0.9, (1 + t) / (10 + t)):
    # 0.1, 2/11, 0.25, 4/13 for t = 0..3.
    from muzero.algorithms.muzero.learning import Trainer
    config = MuZeroConfig(targets=TargetConfig(num_unroll_steps=K), network=NETWORK,
                          training=TrainingConfig(learning_rate=0.05, serving_ema_decay=0.9))
    trainer = Trainer(VECTOR, config, seed=4)
    reference = _values(trainer.network)
    np.testing.assert_array_equal(np.concatenate([v.ravel() for v in _values(trainer.average)]),
                                  np.concatenate([v.ravel() for v in reference]))
    for t in range(4):
        trainer.train(_batch(t))
        d = min(0.9, (1 + t) / (10 + t))
        reference = [d * a + (1 - d) * w for a, w in zip(reference, _values(trainer.network))]
    trainer.copy_to_serving()
    served, trained = _values(trainer.serving), _values(trainer.network)
    for s, r in zip(served, reference):
        np.testing.assert_allclose(s, r, rtol=1e-5, atol=1e-6)
    assert max(np.abs(s - w).max() for s, w in zip(served, trained)) > 1e-3   # not the trained weights
    # Without the average the serving network gets the trained weights.
    plain = Trainer(VECTOR, dataclasses.replace(config, training=TrainingConfig(learning_rate=0.05)), seed=4)
    assert plain.average is None and plain.served_network is plain.network
    plain.train(_batch(0))
    plain.copy_to_serving()
    for s, w in zip(_values(plain.serving), _values(plain.network)):
        np.testing.assert_array_equal(s, w)


def _learner(decay: float):
    from muzero import algorithms, core
    from muzero.algorithms.muzero.learning import MuZeroLearner
    settings = algorithms.get("muzero").default_settings("cartpole")
    config = dataclasses.replace(settings.config, network=NETWORK, training=dataclasses.replace(
        settings.config.training, serving_ema_decay=decay))
    return MuZeroLearner(dataclasses.replace(settings, config=config), VECTOR, core.RunContext())


def test_checkpoints_and_exports_keep_the_average(tmp_path):
    import tensorflow as tf
    learner = _learner(0.99)
    for v in learner.trainer.average.representation.variables:   # an average unlike the weights
        v.assign(tf.ones_like(v) * 0.25)
    average = _values(learner.trainer.average)
    learner.save(str(tmp_path / "with"))
    resumed = _learner(0.99)
    resumed.restore(str(tmp_path / "with"))
    for a, b in zip(_values(resumed.trainer.average), average):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_values(resumed.trainer.serving), average):
        np.testing.assert_array_equal(a, b)
    # An export holds the average: the SavedModel's values are the average network's.
    from muzero.algorithms.muzero.evaluator import load_saved_model
    resumed.export(str(tmp_path / "export"))
    obs = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    exported = load_saved_model(str(tmp_path / "export")).signatures["initial_inference"](
        observation=tf.constant(obs))["value"].numpy()
    np.testing.assert_allclose(exported, resumed.trainer.average.initial_inference(obs)["value"].numpy(), rtol=1e-5)
    trained = resumed.trainer.network.initial_inference(obs)["value"].numpy()
    assert np.abs(exported - trained).max() > 1e-4   # the trained weights would give other values
    # A checkpoint saved without the average: the average starts from the restored weights.
    plain = _learner(0.0)
    plain.save(str(tmp_path / "without"))
    assert not os.path.exists(tmp_path / "without" / "average.index")
    late = _learner(0.99)
    late.restore(str(tmp_path / "without"))
    for a, b in zip(_values(late.trainer.average), _values(plain.trainer.network)):
        np.testing.assert_array_equal(a, b)
    for learner_ in (learner, resumed, plain, late):
        learner_.close()
