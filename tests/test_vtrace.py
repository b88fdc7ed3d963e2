"""V-trace (muzero.algorithms.vtrace): targets worked out by hand, loss signs, the learner's
training, checkpoints, export and fine-tuning, the acting policy, config and builder."""
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import envs
from envs.base import EnvDescriptor
from muzero import algorithms
from muzero.algorithms.policy_export import EXPORT_JSON, PolicyPlayer
from muzero.algorithms.vtrace.builder import BUILDER
from muzero.algorithms.vtrace.config import VTraceConfig, VTraceNetworkConfig, VTraceTrainingConfig
from muzero.algorithms.vtrace.learning import (VTraceLearner, entropy_loss, policy_gradient_loss,
                                               transition_rewards_and_discounts, vtrace_targets)
from muzero.algorithms.vtrace.networks import PolicyValueNetwork
from muzero.config import ConfigError
from muzero.settings import RunSettings

TOY = EnvDescriptor(name="toy", observation_shape=(3,), observation_dtype="float32", num_actions=2)


# -- V-trace targets --------------------------------------------------------------------------------

def test_vtrace_targets_by_hand_with_truncation_and_termination():
    # One env, an unroll of T = 3 transitions (4 steps); discount 0.9, lambda 0.5, both clips 1.
    # Step t of the unroll holds what arriving at t brought:
    #   reward     = [0, 1, 2, 3]
    #   truncated  = [F, T, F, F]   transition 0 (step 0 -> 1) was cut by a time limit,
    #   bootstrap  = [0, 5, 0, 0]   with behaviour value 5 of its final observation;
    #   terminated = [F, F, F, T]   transition 2 (step 2 -> 3) ended the episode.
    # Per transition (the truncation becomes a terminal step with reward r + 0.9 * 5):
    #   r = [1 + 0.9 * 5, 2, 3] = [5.5, 2, 3],  discounts d = [0, 0.9, 0]
    rewards, discounts = transition_rewards_and_discounts(
        np.array([[0.0], [1.0], [2.0], [3.0]], np.float32),
        np.array([[False], [False], [False], [True]]),
        np.array([[False], [True], [False], [False]]),
        np.array([[0.0], [5.0], [0.0], [0.0]], np.float32), discount=0.9)
    np.testing.assert_allclose(rewards.numpy()[:, 0], [5.5, 2.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(discounts.numpy()[:, 0], [0.0, 0.9, 0.0], rtol=1e-6)

    # Probabilities of the actions taken: mu (behaviour) = [0.25, 0.5, 0.4], pi (target) = [0.5, 0.25, 0.4]
    #   pi/mu = [2, 0.5, 1]
    #   rho_t = min(1, pi/mu)         = [1, 0.5, 1]
    #   c_t   = 0.5 * min(1, pi/mu)   = [0.5, 0.25, 0.5]
    # Values V(x_0..x_2) = [1, 2, 4], bootstrap V(x_3) = 10 (unused: d_2 = 0).
    #   delta_0 = 1   * (5.5 + 0   * 2  - 1) =  4.5
    #   delta_1 = 0.5 * (2   + 0.9 * 4  - 2) =  1.8
    #   delta_2 = 1   * (3   + 0   * 10 - 4) = -1.0
    # vs_t - V_t = delta_t + d_t c_t (vs_{t+1} - V_{t+1}), from the end:
    #   t=2: -1.0                        -> vs_2 = 4 - 1     = 3.0
    #   t=1: 1.8 + 0.9 * 0.25 * (-1.0)   =  1.575 -> vs_1 = 2 + 1.575 = 3.575
    #   t=0: 4.5 + 0 * 0.5 * 1.575       =  4.5   -> vs_0 = 1 + 4.5   = 5.5
    # pg_advantage_t = min(1, pi/mu) * (r_t + d_t vs_{t+1} - V_t), vs_3 = bootstrap:
    #   t=0: 1   * (5.5 + 0   * 3.575 - 1) =  4.5
    #   t=1: 0.5 * (2   + 0.9 * 3.0   - 2) =  1.35
    #   t=2: 1   * (3   + 0   * 10    - 4) = -1.0
    behaviour_logp = np.log([[0.25], [0.5], [0.4]]).astype(np.float32)
    target_logp = np.log([[0.5], [0.25], [0.4]]).astype(np.float32)
    values = np.array([[1.0], [2.0], [4.0]], np.float32)
    out = vtrace_targets(behaviour_logp, target_logp, rewards, discounts, values, np.array([10.0], np.float32),
                         clip_rho=1.0, clip_pg_rho=1.0, lambda_=0.5)
    np.testing.assert_allclose(out.vs.numpy()[:, 0], [5.5, 3.575, 3.0], rtol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy()[:, 0], [4.5, 1.35, -1.0], rtol=1e-5)


def test_vtrace_on_policy_lambda_one_is_the_n_step_return():
    rng = np.random.default_rng(3)
    t_len, b = 6, 4
    rewards = rng.normal(size=(t_len, b)).astype(np.float32)
    discounts = (0.95 * (rng.random((t_len, b)) > 0.2)).astype(np.float32)   # some episode ends
    values = rng.normal(size=(t_len, b)).astype(np.float32)
    bootstrap = rng.normal(size=b).astype(np.float32)
    logp = np.log(rng.uniform(0.1, 1.0, size=(t_len, b))).astype(np.float32)
    out = vtrace_targets(logp, logp, rewards, discounts, values, bootstrap, lambda_=1.0)
    # Plain-Python reference: G_T = V(x_T); G_t = r_t + d_t G_{t+1}; vs_t = G_t.
    expected = np.zeros((t_len, b))
    for j in range(b):
        g = float(bootstrap[j])
        for t in reversed(range(t_len)):
            g = float(rewards[t, j]) + float(discounts[t, j]) * g
            expected[t, j] = g
    np.testing.assert_allclose(out.vs.numpy(), expected, rtol=1e-4, atol=1e-5)
    next_vs = np.concatenate([expected[1:], bootstrap[None]], axis=0)
    np.testing.assert_allclose(out.pg_advantages.numpy(), rewards + discounts * next_vs - values,
                               rtol=1e-4, atol=1e-5)


# -- loss signs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_policy_gradient_step_follows_the_advantage(advantage):
    logits = tf.Variable([[[0.5, 0.0, -0.3]]])         # [T=1, B=1, A=3]
    action = tf.constant([[1]])
    before = tf.nn.log_softmax(logits)[0, 0, 1].numpy()
    with tf.GradientTape() as tape:
        loss = policy_gradient_loss(logits, action, tf.constant([[advantage]]))
    logits.assign_sub(0.1 * tape.gradient(loss, logits))
    after = tf.nn.log_softmax(logits)[0, 0, 1].numpy()
    assert (after - before) * advantage > 0


def test_entropy_loss_step_raises_the_entropy():
    logits = tf.Variable([[[2.0, 0.0, -1.0]]])
    def ent():
        p = tf.nn.softmax(logits)
        return float(-tf.reduce_sum(p * tf.math.log(p)))
    before = ent()
    with tf.GradientTape() as tape:
        loss = entropy_loss(logits)
    assert float(loss) == pytest.approx(-before, rel=1e-5)
    logits.assign_sub(0.1 * tape.gradient(loss, logits))
    assert ent() > before


# -- the learner ------------------------------------------------------------------------------------

def _settings(seed=0, **training):
    training = {"batch_size": 4, "unroll_length": 5, "learning_rate": 1e-2, **training}
    return RunSettings(env="cartpole", algo="vtrace", seed=seed,
                       config=VTraceConfig(network=VTraceNetworkConfig(mlp_hidden_sizes=(16,)),
                                           training=VTraceTrainingConfig(**training)))


def _toy_unroll(rng, t_len=5, num_actions=2):
    """A fixed uniform behaviour policy on a toy problem: random observations, reward 1 each
    step, no episode ends (the values to learn are 1 / (1 - discount))."""
    n = t_len + 1
    return {"observation": rng.normal(size=(n, 3)).astype(np.float32),
            "reward": np.ones(n, np.float32),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
            "bootstrap_value": np.zeros(n, np.float32),
            "action": rng.integers(0, num_actions, size=n).astype(np.int32),
            "policy_logits": np.zeros((n, num_actions), np.float32),
            "baseline": np.zeros(n, np.float32), "env_id": np.int64(0)}


def _feed(learner, rng, count):
    for _ in range(count):
        assert learner.queue.put(_toy_unroll(rng), timeout=1.0)


def _weights(module):
    return [v.numpy() for v in module.variables]


def test_learner_steps_reduce_the_baseline_loss():
    learner = VTraceLearner(_settings(discount=0.5), TOY)
    assert learner.step() is None            # nothing queued: waits ~0.1 s, no update
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(30):
        _feed(learner, rng, 4)
        metrics = learner.step()
        losses.append(metrics["loss/baseline"])
    assert learner.training_step == 30
    assert {"loss/total", "loss/policy", "loss/baseline", "loss/entropy", "policy/entropy"} <= set(metrics)
    assert all(isinstance(v, float) for v in metrics.values())
    # The values to learn are 1 / (1 - 0.5) = 2 from an initial ~0.
    assert np.mean(losses[-5:]) < 0.2 * np.mean(losses[:3])
    assert learner.progress() == {"queue_unrolls": 0}
    learner.close()


def test_learner_save_restore_export_and_init_from(tmp_path):
    learner = VTraceLearner(_settings(seed=1), TOY)
    rng = np.random.default_rng(1)
    for _ in range(3):
        _feed(learner, rng, 4)
        learner.step()
    learner.rng.random(5)                      # move the RNG away from its seed
    ckpt = str(tmp_path / "ckpt")
    learner.save(ckpt)

    other = VTraceLearner(_settings(seed=2), TOY)
    assert other.training_step == 0
    other.restore(ckpt)
    assert other.training_step == 3
    assert int(other.optimizer.iterations.numpy()) == int(learner.optimizer.iterations.numpy()) == 3
    for a, b in zip(_weights(learner.network), _weights(other.network)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_weights(other.network), _weights(other.serving)):   # restore publishes
        np.testing.assert_array_equal(a, b)
    for a, b in zip(learner.optimizer.variables, other.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert other.rng.random() == learner.rng.random()

    # init_from: the network only (step and optimiser stay fresh).
    fresh = VTraceLearner(_settings(seed=3), TOY)
    assert fresh.init_from(ckpt) == ckpt
    assert fresh.training_step == 0 and int(fresh.optimizer.iterations.numpy()) == 0
    for a, b in zip(_weights(learner.network), _weights(fresh.serving)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(FileNotFoundError):
        fresh.init_from(str(tmp_path / "nowhere"))

    # Export: the player (SavedModel only) plays the argmax of the network's logits.
    export_dir = str(tmp_path / "export")
    learner.export(export_dir)
    with open(os.path.join(export_dir, EXPORT_JSON)) as f:
        spec = json.load(f)
    assert spec["algo"] == "vtrace"
    assert spec["action"] == {"kind": "discrete", "num_actions": 2}
    assert spec["observation"] == {"shape": [3], "dtype": "float32"}
    with open(os.path.join(export_dir, "run.json")) as f:
        assert json.load(f)["env"] == "cartpole"
    obs = np.random.default_rng(5).normal(size=(16, 3)).astype(np.float32)
    logits, _ = learner.network(obs)
    player = PolicyPlayer(export_dir)
    np.testing.assert_array_equal(player.act(obs), np.argmax(logits.numpy(), axis=-1))
    np.testing.assert_allclose(player.outputs(obs)["policy_logits"], logits.numpy(), rtol=1e-5, atol=1e-6)


def test_learned_entropy_cost_moves_toward_the_target():
    # Target entropy far below the (near-uniform, ln 2) initial entropy: the cost must fall.
    learner = VTraceLearner(_settings(entropy_cost=0.1, target_entropy=0.01), TOY)
    rng = np.random.default_rng(4)
    costs = []
    for _ in range(3):
        _feed(learner, rng, 4)
        costs.append(learner.step()["policy/entropy_cost"])
    assert costs[0] == pytest.approx(0.1, rel=1e-4)
    assert costs[-1] < costs[0]


def test_policy_acts_greedily_on_evaluation_rows_and_samples_otherwise():
    learner = VTraceLearner(_settings(), TOY)
    policy = learner.make_policy(seed=0)
    assert policy.initial_state(4) == {}
    assert policy.action_shape == () and policy.action_dtype == np.int32 and policy.num_actions == 2
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    evaluation = np.arange(64) % 2 == 0
    action, outputs, state = policy.act(obs, np.zeros(64, np.int32), np.zeros(64, np.float32), {}, evaluation)
    assert state == {}
    assert action.shape == (64,) and action.dtype == np.int32
    assert outputs["policy_logits"].shape == (64, 2) and outputs["policy_logits"].dtype == np.float32
    assert outputs["baseline"].shape == (64,) and outputs["baseline"].dtype == np.float32
    greedy = outputs["policy_logits"].argmax(-1)
    np.testing.assert_array_equal(action[evaluation], greedy[evaluation])
    # The initial policy is near-uniform: sampled rows differ from greedy ones about half the time.
    assert 0 < np.sum(action[~evaluation] != greedy[~evaluation]) < 32
    np.testing.assert_allclose(policy.value(obs), outputs["baseline"], rtol=1e-5, atol=1e-6)


def test_atari_torso_on_small_frames():
    net = PolicyValueNetwork((20, 20, 1), np.uint8, 4, VTraceNetworkConfig(atari_dense_size=16), is_image=True)
    assert net.torso_kind == "atari"
    logits, baseline = net(np.zeros((2, 20, 20, 1), np.uint8))
    assert logits.shape == (2, 4) and baseline.shape == (2,)


# -- config and builder ----------------------------------------------------------------------------

def test_config_validation_names_field_value_and_range():
    with pytest.raises(ConfigError, match=r"VTraceTrainingConfig.batch_size=0 is invalid"):
        VTraceTrainingConfig(batch_size=0)
    with pytest.raises(ConfigError, match=r"lr_schedule='cosine'.*constant"):
        VTraceTrainingConfig(lr_schedule="cosine")
    with pytest.raises(ConfigError, match=r"discount=1.5.*\[0.0, 1.0\]"):
        VTraceTrainingConfig(discount=1.5)
    with pytest.raises(ConfigError, match=r"entropy_cost"):
        VTraceTrainingConfig(entropy_cost=0.0, target_entropy=0.5)
    with pytest.raises(ConfigError, match=r"mlp_hidden_sizes"):
        VTraceNetworkConfig(mlp_hidden_sizes=())
    config = VTraceConfig(training=VTraceTrainingConfig(target_entropy=0.3))
    assert VTraceConfig.from_dict(json.loads(config.to_json())) == config


def test_builder_defaults_and_env_checks():
    assert algorithms.get("vtrace") is BUILDER
    assert BUILDER.name == "vtrace" and BUILDER.ingestion == "streaming" and BUILDER.config_class is VTraceConfig
    for env in ("cartpole", "atari", "gym:CartPole-v1"):
        settings = BUILDER.default_settings(env)
        assert settings.algo == "vtrace" and settings.env == env
        assert isinstance(settings.config, VTraceConfig)
        assert algorithms.settings_from_dict(json.loads(settings.to_json())) == settings
    assert BUILDER.default_settings("atari").config.network.torso == "atari"
    with pytest.raises(ValueError, match="tictactoe"):
        BUILDER.default_settings("tictactoe")
    algorithms.check_env(BUILDER, envs.describe("cartpole"))
    with pytest.raises(ConfigError, match=r"vtrace.*two-player.*muzero"):
        algorithms.check_env(BUILDER, envs.describe("tictactoe"))
    continuous = dataclasses.replace(TOY, num_actions=0, action_kind="continuous", action_shape=(1,),
                                     action_low=(-2.0,), action_high=(2.0,))
    with pytest.raises(ConfigError, match=r"vtrace.*Box\(-2, 2, \(1,\)\).*discrete"):
        algorithms.check_env(BUILDER, continuous)
    with pytest.raises(ConfigError, match="trainable parts"):
        algorithms.check_trainable_parts(BUILDER, ["dynamics"])
