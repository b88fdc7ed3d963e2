"""The K-step MuZero loss: a hand-computed case, masks, gradient flow and scaling, train step."""
import math

import numpy as np
import pytest
import tensorflow as tf

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import NetworkConfig, SupportConfig, TrainingConfig
from muzero.algorithms.muzero.network import compute_loss, make_network, make_train_step

THREE = SupportConfig(low=-1.0, high=1.0, num_bins=3, use_transform=False)  # bins -1, 0, 1
CONFIG = NetworkConfig(value_support=THREE, reward_support=THREE, mlp_hidden_size=8,
                       mlp_num_layers=1, latent_size=6, head_hidden_size=8)
CARTPOLE = EnvDescriptor("cartpole", (4,), "float32", 2)
LN2, LN3 = math.log(2.0), math.log(3.0)


def _fixed_head_network():
    """A network whose heads ignore the hidden state: final weights 0, logits = biases.

    value logits [0, 0, 0] (uniform), reward logits [0, ln 2, 0] (probs 1/4, 1/2, 1/4),
    policy logits [0, 0] (uniform over 2 actions).
    """
    net = make_network(CARTPOLE, CONFIG, 1, seed=0)
    heads = {net.prediction.value_head.out: [0.0, 0.0, 0.0],
             net.dynamics.reward_head.out: [0.0, LN2, 0.0],
             net.prediction.policy_head.out: [0.0, 0.0]}
    for layer, bias in heads.items():
        layer.w.assign(tf.zeros_like(layer.w))
        layer.b.assign(bias)
    return net


def _hand_batch():
    """B = 2, K = 2. Sample 0 is inside its episode; sample 1 ends after one step."""
    garbage = 1e6
    return {
        "observation": np.array([[0.1, -0.2, 0.3, 0.0], [1.0, 0.5, -0.5, 2.0]], np.float32),
        "actions": np.array([[0, 1], [1, 0]], np.int32),
        "target_value": np.array([[0.7, 0.2, -1.0], [-0.4, 0.3, garbage]], np.float32),
        # index 0 is never scored; sample 1's last reward is past the end (masked).
        "target_reward": np.array([[garbage, 1.0, 0.0], [garbage, 0.5, garbage]], np.float32),
        "target_policy": np.array([[[1, 0], [0.5, 0.5], [0, 1]],
                                   [[0.3, 0.7], [garbage, 0], [0, garbage]]], np.float32),
        "value_mask": np.array([[1, 1, 1], [1, 1, 0]], np.float32),
        "reward_mask": np.array([[1, 1, 1], [0, 1, 0]], np.float32),
        "policy_mask": np.array([[1, 1, 1], [1, 0, 0]], np.float32),
        "importance_weight": np.array([1.0, 0.5], np.float32),
        "index": np.array([10, 11], np.int64),
    }


@pytest.fixture(scope="module")
def fixed_net():
    return _fixed_head_network()


def test_hand_computed_loss_paper_scaling(fixed_net):
    # Cross-entropies: value = ln 3 for any target (uniform over 3 bins); policy = ln 2 for
    # any target (uniform over 2). Reward probs (1/4, 1/2, 1/4): target 1 -> two-hot (0,0,1)
    # -> ln 4; target 0 -> (0,1,0) -> ln 2; target 0.5 -> (0,.5,.5) -> 1.5 ln 2.
    # Weights: value 0.25, reward 1, policy 1; steps scaled (1, 1/2, 1/2).
    #   sample 0: value 0.25 ln3 (1 + .5 + .5) = 0.5 ln3; reward (ln4 + ln2)/2 = 1.5 ln2;
    #             policy ln2 (1 + .5 + .5) = 2 ln2                 -> 0.5 ln3 + 3.5 ln2
    #   sample 1: value 0.25 ln3 (1 + .5) = 0.375 ln3; reward 1.5 ln2 / 2 = 0.75 ln2;
    #             policy ln2                                         -> 0.375 ln3 + 1.75 ln2
    #   mean of (1 * s0, 0.5 * s1) = 0.34375 ln3 + 2.1875 ln2
    cfg = TrainingConfig(weight_decay=0.0, value_loss_weight=0.25)
    total, metrics, priorities = compute_loss(fixed_net, _hand_batch(), cfg)
    assert float(total) == pytest.approx(0.34375 * LN3 + 2.1875 * LN2, rel=1e-5)
    # The per-head metrics are IS-weighted means without the head weights.
    assert float(metrics["loss/value"]) == pytest.approx((2 * LN3 + 0.5 * 1.5 * LN3) / 2,
                                                         rel=1e-5)
    assert float(metrics["loss/reward"]) == pytest.approx((1.5 * LN2 + 0.5 * 0.75 * LN2) / 2,
                                                          rel=1e-5)
    assert float(metrics["loss/policy"]) == pytest.approx((2 * LN2 + 0.5 * LN2) / 2, rel=1e-5)
    assert float(metrics["loss/weight_decay"]) == 0.0
    # Uniform value distribution over (-1, 0, 1) predicts 0: priority = |0 - z| = |z|.
    np.testing.assert_allclose(priorities.numpy(), [0.7, 0.4], atol=1e-6)
    assert np.isfinite([float(v) for v in metrics.values()]).all()


def test_xla_train_step_scores_the_hand_batch():
    # training.jit_compile: the whole step compiled by XLA returns the hand-computed total
    # of test_hand_computed_loss_paper_scaling (the garbage entries stay masked) and its
    # priorities, for the weights it started from.
    net = _fixed_head_network()
    step = make_train_step(net, tf.keras.optimizers.SGD(learning_rate=0.1),
                           TrainingConfig(weight_decay=0.0, value_loss_weight=0.25, jit_compile=True))
    before = [v.numpy().copy() for v in net.trainable_variables]
    batch = {k: tf.constant(v) for k, v in _hand_batch().items()}
    total, metrics, priorities = step(batch)
    assert "HloModule" in step.experimental_get_compiler_ir(batch, None)(stage="hlo")   # only XLA functions have one
    assert float(total) == pytest.approx(0.34375 * LN3 + 2.1875 * LN2, rel=1e-5)
    assert float(metrics["loss/policy"]) == pytest.approx((2 * LN2 + 0.5 * LN2) / 2, rel=1e-5)
    np.testing.assert_allclose(priorities.numpy(), [0.7, 0.4], atol=1e-6)
    assert any(not np.array_equal(v.numpy(), b) for v, b in zip(net.trainable_variables, before))   # it stepped


def test_hand_computed_loss_seed_scaling(fixed_net):
    # SEED scales recurrent steps by 1 / max(number of unmasked recurrent steps, 1) per head:
    #   sample 0 has 2 unmasked recurrent steps for every head -> same as the paper case.
    #   sample 1: value 1 step -> 0.25 ln3 (1 + 1) = 0.5 ln3; reward 1 step -> 1.5 ln2;
    #             policy 0 steps -> ln2                             -> 0.5 ln3 + 2.5 ln2
    #   mean of (s0, 0.5 s1) = (0.5 ln3 + 3.5 ln2 + 0.25 ln3 + 1.25 ln2) / 2
    cfg = TrainingConfig(weight_decay=0.0, recurrent_loss_scaling="seed")
    total, _, _ = compute_loss(fixed_net, _hand_batch(), cfg)
    assert float(total) == pytest.approx(0.375 * LN3 + 2.375 * LN2, rel=1e-5)


def test_weight_decay_is_half_sum_of_squares(fixed_net):
    cfg0 = TrainingConfig(weight_decay=0.0)
    cfg1 = TrainingConfig(weight_decay=1e-3)
    total0, _, _ = compute_loss(fixed_net, _hand_batch(), cfg0)
    total1, metrics, _ = compute_loss(fixed_net, _hand_batch(), cfg1)
    expected = 1e-3 * sum(float(np.sum(v.numpy().astype(np.float64) ** 2)) / 2
                          for v in fixed_net.trainable_variables)
    assert float(metrics["loss/weight_decay"]) == pytest.approx(expected, rel=1e-5)
    assert float(total1) - float(total0) == pytest.approx(expected, rel=1e-3)


# ------------------------------------------------------------- random-weight network

@pytest.fixture(scope="module")
def net():
    return make_network(CARTPOLE, CONFIG, 1, seed=7)


def _random_batch(k: int, batch: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    policy = rng.random((batch, k + 1, 2)).astype(np.float32)
    return {
        "observation": rng.normal(size=(batch, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, (batch, k)).astype(np.int32),
        "target_value": rng.uniform(-1, 1, (batch, k + 1)).astype(np.float32),
        "target_reward": rng.uniform(-1, 1, (batch, k + 1)).astype(np.float32),
        "target_policy": policy / policy.sum(-1, keepdims=True),
        "value_mask": np.ones((batch, k + 1), np.float32),
        "reward_mask": np.ones((batch, k + 1), np.float32),
        "policy_mask": np.ones((batch, k + 1), np.float32),
        "importance_weight": rng.uniform(0.5, 1, batch).astype(np.float32),
        "index": np.arange(batch, dtype=np.int64),
    }


def _loss_and_grads(network, batch, cfg, variables=None):
    variables = network.trainable_variables if variables is None else variables
    with tf.GradientTape() as tape:
        total, metrics, priorities = compute_loss(network, batch, cfg)
    return total, tape.gradient(total, variables), priorities


def test_gradients_reach_every_variable(net):
    _, grads, _ = _loss_and_grads(net, _random_batch(k=2), TrainingConfig())
    names = [v.name for v in net.trainable_variables]
    for name, g in zip(names, grads):
        assert g is not None, f"no gradient for {name}"
        assert float(tf.reduce_sum(tf.abs(g))) > 0, f"zero gradient for {name}"


def test_masked_positions_contribute_nothing(net):
    # Sample 0 ends after step 1: everything at step 2 is masked, so its targets and the
    # action leading to it may hold anything without changing the loss or the gradients.
    batch = _random_batch(k=2, seed=1)
    for key in ("value_mask", "reward_mask", "policy_mask"):
        batch[key][0, 2] = 0.0
    other = {k: v.copy() for k, v in batch.items()}
    other["target_value"][0, 2] = 1e9
    other["target_reward"][0, 2] = -1e9
    other["target_policy"][0, 2] = [np.nan, 7.0]
    other["actions"][0, 1] = 1 - batch["actions"][0, 1]
    cfg = TrainingConfig()
    total_a, grads_a, _ = _loss_and_grads(net, batch, cfg)
    total_b, grads_b, _ = _loss_and_grads(net, other, cfg)
    assert float(total_a) == pytest.approx(float(total_b), rel=1e-6)
    for ga, gb in zip(grads_a, grads_b):
        np.testing.assert_allclose(ga.numpy(), gb.numpy(), rtol=1e-5, atol=1e-7)
    # ...whereas changing an unmasked target does change the loss.
    other["target_value"][0, 1] += 0.5
    assert float(_loss_and_grads(net, other, cfg)[0]) != pytest.approx(float(total_a), rel=1e-6)


def test_hidden_gradient_scale(net):
    # With only step-1 terms unmasked, the representation's gradient flows solely through
    # the scaled hidden state, so it is exactly proportional to the scale.
    batch = _random_batch(k=1, seed=2)
    for key in ("value_mask", "policy_mask"):
        batch[key][:, 0] = 0.0
    rep = net.representation.trainable_variables
    _, g_full, _ = _loss_and_grads(net, batch, TrainingConfig(hidden_gradient_scale=1.0,
                                                              weight_decay=0.0), rep)
    _, g_half, _ = _loss_and_grads(net, batch, TrainingConfig(hidden_gradient_scale=0.5,
                                                              weight_decay=0.0), rep)
    for gf, gh in zip(g_full, g_half):
        np.testing.assert_allclose(gh.numpy(), 0.5 * gf.numpy(), rtol=1e-4, atol=1e-8)


def test_priorities_equal_abs_value_error(net):
    batch = _random_batch(k=1, seed=3)
    _, _, priorities = compute_loss(net, batch, TrainingConfig())
    value = net.initial_inference(batch["observation"])["value"].numpy()
    np.testing.assert_allclose(priorities.numpy(), np.abs(value - batch["target_value"][:, 0]),
                               rtol=1e-5, atol=1e-6)


def test_missing_batch_key_is_named(net):
    batch = _random_batch(k=1)
    del batch["policy_mask"]
    with pytest.raises(KeyError, match="policy_mask"):
        compute_loss(net, batch, TrainingConfig())


def test_train_step_clips_to_global_norm():
    # Plain SGD with learning rate 1: the parameter change is minus the clipped gradient,
    # so its global norm equals the clip norm whenever the raw norm exceeds it.
    network = make_network(CARTPOLE, CONFIG, 1, seed=11)
    clip = 1e-3
    step = make_train_step(network, tf.keras.optimizers.SGD(learning_rate=1.0),
                           TrainingConfig(gradient_clip_norm=clip))
    before = [v.numpy().copy() for v in network.trainable_variables]
    batch = {k: tf.constant(v) for k, v in _random_batch(k=2, seed=4).items()}
    total, metrics, priorities = step(batch)
    change = math.sqrt(sum(float(np.sum((v.numpy() - b) ** 2))
                           for v, b in zip(network.trainable_variables, before)))
    assert float(metrics["gradient_norm"]) > clip
    assert change == pytest.approx(clip, rel=1e-3)
    assert priorities.shape == (4,) and np.isfinite(float(total))


def test_train_step_reports_the_scheduled_learning_rate():
    # Cosine decay from 0.1 to alpha * 0.1 = 0.01 over 4 steps; after k steps the rate for
    # the next one is 0.01 + 0.09 * (1 + cos(pi * k / 4)) / 2:
    # k=1: 0.01 + 0.045 * (1 + 0.70711) = 0.086820; k=2: 0.055; k=4 and later: 0.01.
    from muzero.algorithms.muzero.learning import make_optimizer
    network = make_network(CARTPOLE, CONFIG, 1, seed=12)
    optimizer = make_optimizer(TrainingConfig(learning_rate=0.1, lr_schedule="cosine", lr_decay_steps=4,
                                              lr_alpha=0.1))
    step = make_train_step(network, optimizer, TrainingConfig())
    batch = {k: tf.constant(v) for k, v in _random_batch(k=2, seed=5).items()}
    rates = [float(step(batch)[1]["learning_rate"]) for _ in range(5)]
    assert rates == pytest.approx([0.086820, 0.055, 0.023180, 0.01, 0.01], abs=1e-5)
