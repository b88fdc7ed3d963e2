"""The data-parallel learner: muzero.distribute, make_distributed_train_step, Trainer(devices=...).

Logical CPU devices can only be configured before TensorFlow initialises, which this
pytest process did long ago, so every check that needs two devices runs in ONE child
process (this file run as a script, GPUs hidden). The child prints its findings as JSON
on its last stdout line; the tests below assert on them against independent facts: the
single-device Trainer's step on the same batch with the same initial weights, the clip
norm, the checkpoint's values.
"""
import dataclasses
import json
import os
import sys
import tempfile

import numpy as np
import pytest

from e2e_helpers import ROOT
from replay_batches import replay_batch

K = 2          # unroll steps of the test batches
BATCH = 8      # split over 2 replicas: 4 samples each
SEED = 5
CLIP = 1e-2    # far below the raw gradient norm, so the SGD step is clipped
SGD_LR = 0.5


# ------------------------------------------------------------------------- child process

def _config(**training):
    from muzero.algorithms.muzero.config import (MuZeroConfig, NetworkConfig, SupportConfig, TargetConfig,
                                                 TrainingConfig)
    network = NetworkConfig(value_support=SupportConfig(-10.0, 10.0, 21, True),
                            reward_support=SupportConfig(-2.0, 2.0, 5, True),
                            mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, head_hidden_size=8)
    return MuZeroConfig(targets=TargetConfig(num_unroll_steps=K), network=network,
                        training=TrainingConfig(**training))


def _batch(seed: int, size: int = BATCH) -> dict:
    """A replay-shaped batch whose episodes end at different steps, so the two halves
    hold different numbers of unmasked rewards (the masked-mean metrics must weigh them)."""
    return replay_batch(seed, size, K)


def _state(trainer) -> list:
    """Every checkpointed value: network variables, optimiser variables, step."""
    variables = list(trainer.network.variables) + list(trainer.optimizer.variables) + [trainer.step]
    return [np.asarray(v.numpy()).tolist() for v in variables]


def _replicas_agree(trainer) -> bool:
    """Whether every mirrored variable holds the same value on every device."""
    strategy = trainer.strategy
    for v in list(trainer.network.variables) + [trainer.step]:
        parts = [p.numpy() for p in strategy.experimental_local_results(v)]
        if len(parts) != strategy.num_replicas_in_sync or any(not np.array_equal(parts[0], p) for p in parts):
            return False
    return True


def _train(trainer, batches) -> list:
    out = []
    for batch in batches:
        metrics, priorities = trainer.train(batch)
        out.append({"metrics": metrics, "priorities": priorities.tolist()})
    return out


def _child() -> dict:
    from muzero.config import ConfigError
    from muzero.distribute import configure_devices, make_strategy
    devices = configure_devices(2)   # before anything initialises TensorFlow
    import tensorflow as tf

    from envs.base import EnvDescriptor
    from muzero.algorithms.muzero.learning import Trainer
    from muzero.algorithms.muzero.network import export_saved_model
    vector = EnvDescriptor("vec", (4,), "float32", 2)
    res = {"devices": devices, "again": configure_devices(2),
           "logical_cpus": [d.name for d in tf.config.list_logical_devices("CPU")]}
    try:
        configure_devices(3)
        res["three"] = "no error"
    except ConfigError as e:
        res["three"] = str(e)

    # What a Keras 3 optimiser does with the gradients of 2 replicas (SGD, rate 1, gradient 1),
    # called in a replica context, outside the strategy's scope, and in its cross-replica context.
    strategy = make_strategy(devices)
    with strategy.scope():
        var = tf.Variable(0.0)
        sgd = tf.keras.optimizers.SGD(1.0)
        sgd.build([var])

    @tf.function
    def in_replica_context():
        strategy.run(lambda: sgd.apply_gradients([(tf.constant(1.0), var)]))

    @tf.function
    def outside_the_scope():
        sgd.apply_gradients([(tf.constant(1.0), var)])

    @tf.function
    def in_cross_replica_context():
        with strategy.scope():
            sgd.apply_gradients([(tf.constant(1.0), var)])
    for name, fn in (("replica_context", in_replica_context), ("outside_the_scope", outside_the_scope),
                     ("cross_replica_context", in_cross_replica_context)):
        var.assign(0.0)
        try:
            fn()
            res[f"keras_{name}"] = [float(p.numpy()) for p in strategy.experimental_local_results(var)]
        except Exception as e:
            res[f"keras_{name}"] = type(e).__name__

    # Adam with a cosine schedule: two steps on one device and on two.
    config = _config(learning_rate=1e-2, lr_decay_steps=10, weight_decay=1e-3)
    batches = [_batch(1), _batch(2)]
    one = Trainer(vector, config, seed=SEED)
    two = Trainer(vector, config, seed=SEED, devices=devices)
    res["initial_equal"] = _state(one) == _state(two)
    res["adam"] = {"one": _train(one, batches), "two": _train(two, batches),
                   "state_one": _state(one), "state_two": _state(two), "replicas_agree": _replicas_agree(two)}

    def serving_is_trained():
        return all(np.array_equal(s.numpy(), t.numpy()) for s, t in zip(two.serving.variables, two.network.variables))
    res["serving_before_copy"] = serving_is_trained()
    two.copy_to_serving()
    res["serving_after_copy"] = serving_is_trained()
    res["serving_devices"] = sorted({v.device for v in two.serving.variables})
    obs = batches[0]["observation"]
    res["bootstrap"] = {"one": one.bootstrap_values(obs, None).tolist(),
                        "two": two.bootstrap_values(obs, None).tolist()}
    try:
        two.train(_batch(3, size=BATCH - 1))
        res["odd_batch"] = "no error"
    except ValueError as e:
        res["odd_batch"] = str(e)

    # The SavedModel export of the mirrored network, and checkpoints both ways into trainers
    # with other initial weights.
    with tempfile.TemporaryDirectory() as tmp:
        export_saved_model(two.network, os.path.join(tmp, "export"))
        exported = tf.saved_model.load(os.path.join(tmp, "export")).signatures["initial_inference"]
        res["export"] = exported(observation=tf.constant(obs))["value"].numpy().tolist()
        two.checkpoint.write(os.path.join(tmp, "two"))
        one_restored = Trainer(vector, config, seed=SEED + 1)
        one_restored.checkpoint.read(os.path.join(tmp, "two")).assert_existing_objects_matched()
        one.checkpoint.write(os.path.join(tmp, "one"))
        two_restored = Trainer(vector, config, seed=SEED + 1, devices=devices)
        two_restored.checkpoint.read(os.path.join(tmp, "one")).assert_existing_objects_matched()
    res["restore"] = {"two_to_one": _state(one_restored) == _state(two),
                      "one_to_two": _state(two_restored) == _state(one),
                      "fresh_differs": _state(Trainer(vector, config, seed=SEED + 1)) != _state(one),
                      "replicas_agree": _replicas_agree(two_restored)}

    # Plain SGD with a clip norm that clips: one step each.
    config = _config(optimizer="sgd", momentum=0.0, learning_rate=SGD_LR, lr_schedule="constant",
                     gradient_clip_norm=CLIP)
    one = Trainer(vector, config, seed=SEED)
    two = Trainer(vector, config, seed=SEED, devices=devices)
    before = [v.numpy() for v in one.network.trainable_variables]
    res["sgd"] = {"one": _train(one, batches[:1]), "two": _train(two, batches[:1])}
    res["sgd"]["delta_one"] = [(v.numpy() - b).tolist() for v, b in zip(one.network.trainable_variables, before)]
    res["sgd"]["delta_two"] = [(v.numpy() - b).tolist() for v, b in zip(two.network.trainable_variables, before)]

    # test_consistency's two-device steps (layer skipping + consistency loss), in this same
    # child so that TensorFlow starts once.
    from test_consistency import two_device_steps
    res["consistency"] = two_device_steps(devices)
    return res


# ------------------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def child(two_device_child):
    """This file run as a script (conftest.two_device_child)."""
    return two_device_child


def _close(a, b, rtol=1e-5):
    """a == b to rtol, relative to the largest magnitude of b (entries near 0 included)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(float(np.abs(b).max(initial=0.0)), 1e-12))


def test_cpu_is_split_into_logical_devices(child):
    assert child["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert child["again"] == child["devices"]            # a second call finds them configured
    assert child["logical_cpus"] == child["devices"]
    # Once TensorFlow runs, the CPU cannot be split again: one line saying what to do.
    message = child["three"]
    assert "--learner_devices=3" in message and "already initialised with 2" in message
    assert "\n" not in message


def test_keras_optimizer_sums_over_replicas_in_a_replica_context(child):
    # SGD with rate 1 and a gradient of 1 on each of 2 replicas. In a replica context Keras 3
    # all-reduces (sums) the gradients itself: every copy moves by 2. Called outside the
    # strategy's scope it applies the given gradient once to every copy; in the scope's
    # cross-replica context it fails (its merge call needs a replica context). Hence the
    # distributed train step sums the gradients itself and applies them outside the scope.
    assert child["keras_replica_context"] == [-2.0, -2.0]
    assert child["keras_outside_the_scope"] == [-1.0, -1.0]
    assert child["keras_cross_replica_context"] == "AttributeError"


def test_two_device_steps_equal_the_single_device_steps(child):
    adam = child["adam"]
    assert child["initial_equal"]
    for one, two in zip(adam["one"], adam["two"]):
        assert set(two["metrics"]) == set(one["metrics"])
        assert {"loss/total", "loss/value", "loss/reward", "loss/policy", "loss/weight_decay", "gradient_norm",
                "learning_rate", "prediction/reward", "target/reward", "target/value"} <= set(one["metrics"])
        for key, value in one["metrics"].items():
            assert two["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
        _close(two["priorities"], one["priorities"])      # [B], in batch order
    # The learning rate follows the schedule (cosine over 10 steps), not a per-replica count.
    assert adam["one"][0]["metrics"]["learning_rate"] != adam["one"][1]["metrics"]["learning_rate"]
    # The halves hold different numbers of scored rewards: the reward means must be weighted.
    for seed in (1, 2):
        mask = _batch(seed)["reward_mask"][:, 1:]
        assert mask[:BATCH // 2].sum() != mask[BATCH // 2:].sum()
    # Network, Adam's moments (which scale with the gradient), iterations and step. Most agree
    # to ~1e-6; the policy bias's moments are sums of softmax residuals that nearly cancel
    # (they add up to 0 over the actions), so summation order shows there at ~2e-5 of them.
    assert len(adam["state_two"]) == len(adam["state_one"])
    for two, one in zip(adam["state_two"], adam["state_one"]):
        _close(two, one, rtol=1e-4)
    assert adam["replicas_agree"]


def test_serving_copy_reanalyse_and_export_read_the_trained_weights(child):
    assert [d.split("/")[-1] for d in child["serving_devices"]] == ["device:CPU:0"]   # the first device only
    assert child["serving_before_copy"] is False and child["serving_after_copy"] is True
    # Two Adam steps on two devices sum the replicas' gradients in another order; where a
    # gradient is near 0, Adam's first steps (about lr * g / |g|) turn that rounding into
    # update differences far above float32's, so the values agree to 1e-4 of their largest
    # magnitude (a clean CI run saw 1.5e-5), not 1e-5. Which weights the serving copy holds
    # is checked exactly above.
    _close(child["bootstrap"]["two"], child["bootstrap"]["one"], rtol=1e-4)
    _close(child["export"], child["bootstrap"]["two"])


def test_clipped_steps_agree(child):
    sgd = child["sgd"]
    one, two = sgd["one"][0]["metrics"], sgd["two"][0]["metrics"]
    assert one["gradient_norm"] > 10 * CLIP
    assert two["gradient_norm"] == pytest.approx(one["gradient_norm"], rel=1e-5)
    for d_two, d_one in zip(sgd["delta_two"], sgd["delta_one"]):
        _close(d_two, d_one)
    # Clipped to the global norm after the sum over replicas: the step's norm is rate * clip.
    change = np.sqrt(sum(np.sum(np.square(d)) for d in sgd["delta_two"]))
    assert change == pytest.approx(SGD_LR * CLIP, rel=1e-4)


def test_batch_not_divisible_by_the_devices_is_refused(child):
    assert "batch of 7 samples" in child["odd_batch"] and "2 replicas" in child["odd_batch"]


def test_checkpoints_move_between_one_and_two_devices(child):
    assert child["restore"] == {"two_to_one": True, "one_to_two": True, "fresh_differs": True,
                                "replicas_agree": True}


# ------------------------------------------------------------------------- in-process tests

def test_seeds():
    from muzero.distribute import host_seed
    assert host_seed(17, 0) == 17 and host_seed(0, 0) == 0
    hosts = [host_seed(17, h) for h in range(8)]
    assert len(set(hosts)) == 8 and all(0 <= s < 2**31 for s in hosts)
    assert hosts == [host_seed(17, h) for h in range(8)]            # deterministic
    assert host_seed(18, 1) != host_seed(17, 1)


def test_one_device_configures_nothing():
    from muzero.distribute import configure_devices
    assert configure_devices(1) is None


def test_check_settings_refuses_a_batch_the_devices_do_not_divide():
    from muzero import algorithms
    from muzero.config import ConfigError
    builder = algorithms.get("muzero")
    base = builder.default_settings("cartpole")

    def settings(batch, devices, jit=False):
        config = dataclasses.replace(base.config, training=dataclasses.replace(base.config.training,
                                                                              batch_size=batch, jit_compile=jit))
        return dataclasses.replace(base, config=config, learner_devices=devices)
    with pytest.raises(ConfigError, match=r"batch_size=33 does not split evenly over --learner_devices=2"):
        builder.check_settings(settings(33, 2))
    builder.check_settings(settings(32, 2))
    builder.check_settings(settings(33, 1))
    # An XLA-compiled step is for one device (XLA cannot read the replicas' mirrored variables).
    with pytest.raises(ConfigError, match=r"training.jit_compile applies to one learner device, not "
                                          r"--learner_devices=2"):
        builder.check_settings(settings(32, 2, jit=True))
    builder.check_settings(settings(32, 1, jit=True))


def test_other_algorithms_refuse_several_learner_devices(tmp_path):
    from muzero import algorithms
    from muzero.config import ConfigError
    from muzero.learner.loop import Run
    settings = dataclasses.replace(algorithms.get("ppo").default_settings("cartpole"), learner_devices=2)
    with pytest.raises(ConfigError, match=r"--learner_devices=2: --algo=ppo trains on one device \(several: muzero\)"):
        Run(settings, str(tmp_path), log=lambda line: None)


if __name__ == "__main__":
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    print(json.dumps(_child()))
