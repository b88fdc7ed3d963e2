"""Pretraining (--pretrain) and fine-tuning's partial restore: objectives against worked
examples and a NumPy reference, augmentations, the random acting policy, the trained
parts of a pretraining step, and the restored / skipped / new summary."""
from __future__ import annotations

import math
import os
import types

import numpy as np
import pytest
import tensorflow as tf

import envs
from envs.base import EnvDescriptor
from muzero.algorithms.muzero.acting import RandomPolicy
from muzero.algorithms.muzero.learning import init_network_from
from muzero.algorithms.muzero.pretraining import PretrainTrainer
from muzero.algorithms.muzero.config import MuZeroConfig, NetworkConfig, PretrainConfig, TrainingConfig
from muzero.config import ConfigError
from muzero import checkpoints
from muzero.algorithms.muzero.network import make_network
from muzero.algorithms.muzero.network.pretrain import (add_gaussian_noise, augment_images, augment_views, nt_xent,
                                     scale_brightness, shift_images, simsiam_loss)

SMALL_NET = NetworkConfig(mlp_hidden_size=16, mlp_num_layers=1, latent_size=8, head_hidden_size=8,
                          projection_hidden=16, projection_size=8, predictor_hidden=8)


# ------------------------------------------------------------------ objectives

def test_nt_xent_worked_example():
    # B = 2 observations, 2-d embeddings, temperature 0.5. Rows of z = [a; b] after L2
    # normalisation: z1 = (1, 0), z2 = (0, 1), z3 = (1, 1)/sqrt2, z4 = (0, 1).
    # Cosines: c12 = 0, c13 = 1/sqrt2, c14 = 0, c23 = 1/sqrt2, c24 = 1, c34 = 1/sqrt2;
    # logits = cosines / 0.5: s12 = 0, s13 = sqrt2, s14 = 0, s23 = sqrt2, s24 = 2, s34 = sqrt2.
    # Positives: 1<->3, 2<->4; each row's softmax runs over the three other rows.
    a = [[1.0, 0.0], [0.0, 1.0]]
    b = [[1.0, 1.0], [0.0, 2.0]]          # unnormalised on purpose
    r2, e = math.sqrt(2.0), math.exp
    row1 = -r2 + math.log(e(0) + e(r2) + e(0))        # others: z2 (0), z3 (sqrt2, +), z4 (0)
    row2 = -2 + math.log(e(0) + e(r2) + e(2))         # others: z1 (0), z3 (sqrt2), z4 (2, +)
    row3 = -r2 + math.log(e(r2) + e(r2) + e(r2))      # others: z1 (sqrt2, +), z2 (sqrt2), z4 (sqrt2) -> log 3
    row4 = -2 + math.log(e(0) + e(2) + e(r2))         # others: z1 (0), z2 (2, +), z3 (sqrt2)
    expected = (row1 + row2 + row3 + row4) / 4
    assert expected == pytest.approx(0.63667, abs=1e-5)
    assert float(nt_xent(tf.constant(a), tf.constant(b), 0.5)) == pytest.approx(expected, rel=1e-5)


def test_contrastive_accuracy_counts_rows_whose_nearest_other_row_is_their_partner():
    from muzero.algorithms.muzero.network.pretrain import contrastive_accuracy
    a = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    # z = [a; b]: nearest other row of z1 = (1, 0) is z3 = (1, .1), of z2 is z4, and back: 4 of 4.
    assert float(contrastive_accuracy(a, tf.constant([[1.0, 0.1], [0.1, 1.0]]))) == 1.0
    # Partners swapped: z1's nearest is z4 = (1, .1), not its partner z3; 0 of 4.
    assert float(contrastive_accuracy(a, tf.constant([[0.1, 1.0], [1.0, 0.1]]))) == 0.0


def _nt_xent_numpy(a, b, temperature):
    z = np.concatenate([a, b]).astype(np.float64)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    n = len(z)
    losses = []
    for i in range(n):
        positive = (i + n // 2) % n
        logits = [z[i] @ z[j] / temperature for j in range(n) if j != i]
        others = [j for j in range(n) if j != i]
        losses.append(-logits[others.index(positive)] + np.log(np.sum(np.exp(logits))))
    return float(np.mean(losses))


def test_nt_xent_matches_a_numpy_reference():
    rng = np.random.default_rng(3)
    for batch, dim, temperature in ((5, 7, 0.1), (16, 3, 1.0), (1, 4, 0.2)):
        a, b = rng.normal(size=(batch, dim)), rng.normal(size=(batch, dim))
        got = float(nt_xent(tf.constant(a, tf.float32), tf.constant(b, tf.float32), temperature))
        assert got == pytest.approx(_nt_xent_numpy(a, b, temperature), rel=1e-4)


def test_simsiam_worked_example_and_stop_gradient():
    # cos((1, 0), (1, 1)) = 1/sqrt2; cos((0, 1), (0, -3)) = -1.
    # loss = ((-1/sqrt2) + (+1)) / 2 = 0.146447
    online1, projected1 = tf.Variable([[1.0, 0.0]]), tf.Variable([[0.0, -3.0]])
    online2, projected2 = tf.Variable([[0.0, 1.0]]), tf.Variable([[1.0, 1.0]])
    with tf.GradientTape() as tape:
        loss = simsiam_loss(online1, projected1, online2, projected2)
    assert float(loss) == pytest.approx((1 - 1 / math.sqrt(2)) / 2, rel=1e-6)
    grads = tape.gradient(loss, [online1, online2, projected1, projected2])
    assert grads[2] is None and grads[3] is None                       # target branch: no gradient
    assert np.abs(grads[0].numpy()).sum() > 0                           # online branch: a gradient


# ---------------------------------------------------------------- augmentations

def test_shift_moves_content_by_the_offset_and_repeats_edges():
    image = np.zeros((1, 12, 12, 2), np.uint8)
    image[0, 5, 6, 0] = 200
    image[0, :, 0, 1] = 9                                 # left edge column of channel 1
    out = shift_images(image, np.array([[2, -1]]), pad=2)   # out[y, x] = in[y + 2, x - 1]
    assert out.dtype == np.uint8
    assert out[0, 3, 7, 0] == 200 and out[0, ..., 0].sum() == 200
    assert (out[0, :, :2, 1] == 9).all() and (out[0, :, 2:, 1] == 0).all()   # edge repeated once


def test_augment_images_offsets_and_brightness_stay_in_bounds():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(6, 10, 10, 3), dtype=np.uint8)
    out = augment_images(images, np.random.default_rng(1), shift_pixels=2, brightness=0.0, frame_channels=3)
    for i in range(len(images)):     # each view is the image shifted by some offset in [-2, 2]^2
        assert any(np.array_equal(out[i], shift_images(images[i:i + 1], np.array([[dy, dx]]), 2)[0])
                   for dy in range(-2, 3) for dx in range(-2, 3))
    flat = np.full((200, 4, 4, 3), 200, np.uint8)
    flat[..., 2] = 77                                      # an action plane: never scaled
    out = augment_images(flat, np.random.default_rng(2), shift_pixels=0, brightness=0.15, frame_channels=2)
    frames = out[..., :2].astype(int)
    assert frames.min() >= 170 and frames.max() <= 230 and (out[..., 2] == 77).all()
    assert frames.max() - frames.min() > 40                 # factors spread over the range
    assert (frames[:, 0, 0, 0][:, None, None] == frames[..., 0]).all()   # one factor per view


def test_brightness_saturates_uint8_instead_of_wrapping():
    image = np.full((2, 3, 3, 1), 250, np.uint8)
    out = scale_brightness(image, np.array([1.2, 0.5]), frame_channels=1)
    assert out.dtype == np.uint8 and (out[0] == 255).all() and (out[1] == 125).all()


def test_gaussian_noise_scale_and_determinism():
    zeros = np.zeros((4000, 5), np.float32)
    noisy = add_gaussian_noise(zeros, np.random.default_rng(0), 0.5)
    assert noisy.dtype == np.float32 and noisy.std() == pytest.approx(0.5, rel=0.02)
    kwargs = dict(is_image=False, frame_channels=0, shift_pixels=0, brightness=0.0, noise_std=0.1)
    v1 = augment_views(zeros[:8], np.random.default_rng(5), **kwargs)
    v2 = augment_views(zeros[:8], np.random.default_rng(5), **kwargs)
    v3 = augment_views(zeros[:8], np.random.default_rng(6), **kwargs)
    assert np.array_equal(v1[0], v2[0]) and np.array_equal(v1[1], v2[1])   # same seed, same views
    assert not np.array_equal(v1[0], v1[1]) and not np.array_equal(v1[0], v3[0])


def test_pretrain_config_rejects_bad_values_in_one_line():
    with pytest.raises(ConfigError, match=r"^PretrainConfig.objective='byol' is invalid: must be one of"):
        PretrainConfig(objective="byol")
    with pytest.raises(ConfigError, match=r"^PretrainConfig.temperature=0 is invalid"):
        PretrainConfig(temperature=0)


# ------------------------------------------------------------------ random policy

def test_random_policy_is_uniform_over_legal_actions():
    num_envs, num_actions, steps = 50, 5, 400
    legal = np.zeros((num_envs, num_actions), bool)
    legal[:25, [0, 2, 4]] = True                          # 3 legal actions in half the envs
    legal[25:, :] = True                                  # all 5 in the other half
    policy = RandomPolicy(num_actions, np.random.default_rng(0))
    counts = np.zeros((2, num_actions))
    for _ in range(steps):
        actions, result = policy.act(legal)
        assert legal[np.arange(num_envs), actions].all()
        counts[0] += np.bincount(actions[:25], minlength=num_actions)
        counts[1] += np.bincount(actions[25:], minlength=num_actions)
    np.testing.assert_allclose(result.policy_target[0], [1 / 3, 0, 1 / 3, 0, 1 / 3])
    np.testing.assert_allclose(result.policy_target[30], [0.2] * 5)
    assert (result.root_value == 0).all()
    # Chi-square against uniform: df 2 and 4, 99.9% quantiles 13.8 and 18.5.
    for row, cells in ((0, [0, 2, 4]), (1, [0, 1, 2, 3, 4])):
        observed = counts[row, cells]
        expected = observed.sum() / len(cells)
        assert ((observed - expected) ** 2 / expected).sum() < (13.8 if len(cells) == 3 else 18.5)


# ------------------------------------------------------------------ train step, restore

@pytest.fixture(scope="module")
def cartpole():
    return envs.describe("cartpole")


def _config(objective="ntxent", network=SMALL_NET):
    return MuZeroConfig(network=network, training=TrainingConfig(batch_size=8, learning_rate=0.01),
                        pretrain=PretrainConfig(enabled=True, objective=objective))


@pytest.mark.parametrize("objective", ["ntxent", "simsiam"])
def test_a_pretraining_step_changes_only_representation_and_pretrain_head(cartpole, objective):
    trainer = PretrainTrainer(cartpole, _config(objective), seed=0)
    before = {p: [v.numpy().copy() for v in vs] for p, vs in trainer.network.variables_by_part().items()}
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    metrics = trainer.train(obs, np.random.default_rng(1))
    assert np.isfinite(metrics["loss/total"]) and f"pretrain/{objective}" in metrics
    after = trainer.network.variables_by_part()
    changed = {p: any(not np.array_equal(b, v.numpy()) for b, v in zip(before[p], after[p])) for p in before}
    assert changed == {"representation": True, "pretrain_head": True, "dynamics": False, "prediction": False}
    trainer.copy_to_serving()
    for s, t in zip(trainer.serving.representation.variables, trainer.network.representation.variables):
        np.testing.assert_array_equal(s.numpy(), t.numpy())


def test_a_pretraining_step_on_uint8_images():
    descriptor = EnvDescriptor(name="synthetic", observation_shape=(8, 8, 1), observation_dtype="uint8",
                               num_actions=3, kind="image", frame_layout="HWC")
    network = NetworkConfig(conv_channels=4, conv_num_blocks=1, conv_downsample=False, conv_reduced_channels=2,
                            head_hidden_size=8, projection_hidden=16, projection_size=8, predictor_hidden=8)
    config = _config(network=network)
    config = MuZeroConfig(**{**{f: getattr(config, f) for f in ("search", "replay", "network", "training",
                                                                 "pretrain")},
                             "targets": config.targets.__class__(stack_frames=2)})
    trainer = PretrainTrainer(descriptor, config, seed=0)
    assert trainer.network.input_shape == (8, 8, 4) and trainer.frame_channels == 2
    obs = np.random.default_rng(0).integers(0, 256, size=(8, 8, 8, 4), dtype=np.uint8)
    assert np.isfinite(trainer.train(obs, np.random.default_rng(1))["loss/total"])


def _write_checkpoint(directory, **objects):
    os.makedirs(directory)
    tf.train.Checkpoint(**objects).write(os.path.join(directory, "model"))
    with open(os.path.join(directory, "state.json"), "w") as f:
        f.write("{}")
    return directory


def test_fine_tuning_restores_the_pretrained_parts_and_reports_the_rest(cartpole, tmp_path):
    pre = PretrainTrainer(cartpole, _config(), seed=0)
    pre.train(np.zeros((8, 4), np.float32), np.random.default_rng(0))
    ckpt = _write_checkpoint(str(tmp_path / "ckpt-1"), network=pre.checkpoint.network,
                             optimizer=pre.optimizer, step=pre.step)
    fresh = make_network(cartpole, SMALL_NET, 1, seed=7)          # an RL network: no pretrain head
    dynamics_before = [v.numpy().copy() for v in fresh.dynamics.variables]
    summary = init_network_from(types.SimpleNamespace(network=fresh, copy_to_serving=lambda: None), ckpt)
    count = lambda group: {p: len(n) for p, n in group.items() if n}   # noqa: E731
    # SMALL_NET's MLP representation: one hidden layer (w, b), its norm (scale, offset), the
    # output layer (w, b) = 6 variables.
    assert count(summary.restored) == {"representation": 6}
    assert count(summary.skipped) == {"pretrain_head": len(pre.network.pretrain_head.trainable_variables)}
    assert count(summary.new) == {"dynamics": len(fresh.dynamics.trainable_variables),
                                  "prediction": len(fresh.prediction.trainable_variables)}
    for a, b in zip(fresh.representation.variables, pre.network.representation.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(fresh.dynamics.variables, dynamics_before):
        np.testing.assert_array_equal(a.numpy(), b)
    text = "\n".join(summary.lines())
    assert "restored: representation 6 (6 variables)" in text and "new (in this network" in text
    # A network with the head restores it too; an RL checkpoint restores every part.
    with_head = make_network(cartpole, SMALL_NET, 1, seed=8, with_ssl_head=True)
    summary = init_network_from(types.SimpleNamespace(network=with_head, copy_to_serving=lambda: None), ckpt)
    assert sorted(count(summary.restored)) == ["pretrain_head", "representation"] and not count(summary.skipped)
    rl_ckpt = _write_checkpoint(str(tmp_path / "ckpt-2"), network=fresh)
    summary = init_network_from(types.SimpleNamespace(network=make_network(cartpole, SMALL_NET, 1, seed=9),
                                                      copy_to_serving=lambda: None), rl_ckpt)
    assert sorted(count(summary.restored)) == ["dynamics", "prediction", "representation"]
    assert not count(summary.new) and not count(summary.skipped)


def test_a_shape_mismatch_names_the_variable_and_both_shapes(cartpole, tmp_path):
    ckpt = _write_checkpoint(str(tmp_path / "ckpt-1"), network=make_network(cartpole, SMALL_NET, 1, seed=0))
    wider = make_network(cartpole, NetworkConfig(**{**SMALL_NET.__dict__, "latent_size": 6}), 1, seed=0)
    before = [v.numpy().copy() for v in wider.variables]
    with pytest.raises(ConfigError) as info:     # the command line prints it as one line
        init_network_from(types.SimpleNamespace(network=wider, copy_to_serving=lambda: None), ckpt)
    message = str(info.value)
    assert "\n" not in message
    # The first mismatch in path order: the output bias, latent 8 saved, 6 here.
    assert "network/representation/torso/out/b has shape [8] in the checkpoint but [6] in this network" in message
    for a, b in zip(wider.variables, before):       # nothing was assigned
        np.testing.assert_array_equal(a.numpy(), b)
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        init_network_from(types.SimpleNamespace(network=wider, copy_to_serving=lambda: None), str(tmp_path / "no"))


# ---------------------------------------------------- learner, builder, actor pushes

def test_push_chunks_stay_within_the_message_limits():
    from muzero.algorithms.muzero.actor import PUSH_MAX_BYTES, PUSH_MAX_TENSORS, push_chunk_length
    segment = {f"t{i}": np.zeros(10, np.float32) for i in range(10)}     # 10 tensors, 400 bytes
    # 4 tensors are kept for the report: 4 + 10 k <= 2048 -> k = 204.
    assert PUSH_MAX_TENSORS == 2048 and push_chunk_length([segment] * 1000) == 204
    assert push_chunk_length([segment] * 3) == 3 and push_chunk_length([]) == 0
    big = {"observations": np.zeros(PUSH_MAX_BYTES // 2 + 1, np.uint8)}
    assert push_chunk_length([big] * 5) == 1                             # bytes bound (one always goes)


def _random_segments(descriptor, count, seed):
    from muzero.algorithms.muzero.segments import SegmentBuilder
    rng, builder, out = np.random.default_rng(seed), SegmentBuilder(4, (4,), np.float32, 2, 10, False), []
    policy = RandomPolicy(2, rng)
    while len(out) < count:
        actions, result = policy.act(np.ones((4, 2), bool))
        out += builder.add(rng.normal(size=(4, 4)).astype(np.float32), actions, np.ones(4, np.float32),
                           result.root_value, result.policy_target, np.zeros(4, np.int64), None,
                           np.zeros(4, bool), np.zeros(4, bool))
    return out


def test_the_builder_picks_the_pretraining_learner_which_resumes_and_hands_over(cartpole, tmp_path):
    import dataclasses

    from muzero import core
    from muzero.algorithms.muzero.builder import BUILDER
    from muzero.algorithms.muzero.learning import MuZeroLearner
    from muzero.algorithms.muzero.pretraining import PretrainLearner
    from muzero.algorithms.muzero.config import ReplayConfig
    from muzero.settings import RunSettings
    config = dataclasses.replace(_config(), replay=ReplayConfig(capacity_steps=1000, segment_length=10,
                                                                min_steps_to_sample=20))
    settings = RunSettings(env="cartpole", algo="muzero", config=config)
    learner = BUILDER.make_learner(settings, cartpole, core.RunContext())
    assert isinstance(learner, PretrainLearner)
    assert BUILDER.actor_args(settings, 0, "127.0.0.1:1", None, 0)[0].random_policy
    with pytest.raises(ConfigError, match="does not apply to a pretraining run"):
        BUILDER.make_learner(settings, cartpole, core.RunContext(trainable_parts=("dynamics",)))
    assert learner.step() is None                                        # replay still empty
    learner.push_segments(_random_segments(cartpole, 4, 0))
    assert "pretrain/ntxent" in learner.step() and learner.training_step == 1
    os.makedirs(tmp_path / "ckpt-1")
    learner.save(str(tmp_path / "ckpt-1"))
    with open(tmp_path / "ckpt-1" / "state.json", "w") as f:
        f.write("{}")
    resumed = BUILDER.make_learner(settings, cartpole, core.RunContext())
    resumed.restore(str(tmp_path / "ckpt-1"))
    assert resumed.training_step == 1 and resumed.replay.num_steps == learner.replay.num_steps
    with pytest.raises(RuntimeError, match="no SavedModel"):
        learner.export(str(tmp_path / "export"))
    # Fine-tuning: a MuZero learner restores the representation and says what it did.
    rl = BUILDER.make_learner(dataclasses.replace(settings, config=dataclasses.replace(
        config, pretrain=PretrainConfig())), cartpole, core.RunContext())
    assert isinstance(rl, MuZeroLearner)
    assert rl.init_from(str(tmp_path)) == str(tmp_path / "ckpt-1")
    assert {p for p, n in rl.init_summary.restored.items() if n} == {"representation"}
    for a, b in zip(rl.trainer.serving.representation.variables, learner.trainer.network.representation.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for learner_ in (learner, resumed, rl):
        learner_.close()


def test_pretraining_defaults_fitted_to_the_env():
    from muzero.algorithms.muzero.builder import BUILDER
    from muzero.algorithms.muzero.defaults import run_defaults
    settings = run_defaults("cartpole")
    image = EnvDescriptor(name="cartpole", observation_shape=(10, 10, 4), observation_dtype="uint8",
                          num_actions=3, kind="image", frame_layout="HWC")
    fitted, notes = BUILDER.fit_to_env(settings, image, {"pretrain": {"enabled": True}})
    # 10 / 24 rounds to 0, at least 1 pixel; no evaluation actors.
    assert fitted.config.pretrain.shift_pixels == 1 and fitted.num_eval_actors == 0 and len(notes) == 2
    fitted, _ = BUILDER.fit_to_env(settings, image, {"pretrain": {"enabled": True, "shift_pixels": 3}})
    assert fitted.config.pretrain.shift_pixels == 4            # the user's 3 is applied after fitting
    fitted, notes = BUILDER.fit_to_env(settings, image, {})
    assert fitted.num_eval_actors == settings.num_eval_actors and not notes
