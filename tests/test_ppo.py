"""PPO: GAE, the clipped surrogate, value scaling, Q-value baselines, the learner and its wiring."""
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from envs.base import EnvDescriptor
from muzero import algorithms
from muzero.algorithms.ppo import builder as ppo_builder
from muzero.algorithms.ppo.config import PPOConfig, PPONetworkConfig, PPOTrainingConfig
from muzero.algorithms.ppo.learning import (PPOLearner, gae, ppo_clip_loss, stack_unrolls, to_network_units,
                                            to_return_units, unroll_transitions, value_loss)
from muzero.algorithms.ppo.networks import PPONetworks, PPOPolicy, aggregate_q_values, value_scale
from muzero.config import ConfigError

VECTOR = EnvDescriptor("vec", (3,), "float32", 2)
TINY_NET = PPONetworkConfig(torso="mlp", policy_hidden_sizes=(8,), value_hidden_sizes=(8,))


def tiny_config(**training) -> PPOConfig:
    fields = dict(unroll_length=4, batch_size=2, epochs=2, num_minibatches=2, policy_learning_rate=0.05,
                  value_learning_rate=0.05, lr_schedule="constant", entropy_cost=0.0)
    fields.update(training)
    return PPOConfig(network=TINY_NET, training=PPOTrainingConfig(**fields))


# -- GAE ----------------------------------------------------------------------------------------

def test_gae_by_hand_with_a_truncation_and_a_termination():
    # gamma = 0.9, lambda = 0.5, one unroll of T = 3 transitions (4 steps), behaviour values
    # V = [1, 2, 3, 4]. Rewards on arriving at steps 1, 2, 3: 1, 2, 5.
    # Column 0: arriving at step 2 was a truncation with bootstrap value 10 (step 2 is the next
    # episode's first observation), arriving at step 3 a termination.
    #   delta_2 = 5 + 0 - 3            = 2      (terminated: no bootstrap)   A_2 = 2
    #   delta_1 = 2 + 0.9 * 10 - 2     = 9      (truncated: bootstrap 10)    A_1 = 9 (trace cut)
    #   delta_0 = 1 + 0.9 * 2 - 1      = 1.8                                 A_0 = 1.8 + 0.45 * 9 = 5.85
    # Column 1: the same rewards and values, no episode end.
    #   delta = [1 + 1.8 - 1, 2 + 2.7 - 2, 5 + 3.6 - 3] = [1.8, 2.7, 5.6]
    #   A_2 = 5.6, A_1 = 2.7 + 0.45 * 5.6 = 5.22, A_0 = 1.8 + 0.45 * 5.22 = 4.149
    # Returns (value targets) are A + V[:-1].
    def unroll(terminated, truncated, bootstrap):
        return dict(observation=np.zeros((4, 3), np.float32), reward=np.array([0, 1, 2, 5], np.float32),
                    terminated=np.array(terminated), truncated=np.array(truncated),
                    bootstrap_value=np.array(bootstrap, np.float32), action=np.zeros(4, np.int32),
                    policy_logits=np.zeros((4, 2), np.float32), value=np.array([1, 2, 3, 4], np.float32),
                    env_id=np.int64(0))
    batch = stack_unrolls([unroll([0, 0, 0, 1], [0, 0, 1, 0], [0, 0, 10, 0]),
                           unroll([0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0])])
    inputs = unroll_transitions(batch, discount=0.9)
    advantages, returns = gae(inputs["rewards"], inputs["values"], inputs["bootstrap_values"],
                              inputs["discounts"], 0.5, inputs["episode_ends"])
    np.testing.assert_allclose(advantages[:, 0], [5.85, 9.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(advantages[:, 1], [4.149, 5.22, 5.6], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], [6.85, 11.0, 5.0], rtol=1e-6)


def test_gae_matches_a_plain_python_loop_on_random_inputs():
    rng = np.random.default_rng(0)
    t_len, b, gamma, lam = 7, 5, 0.97, 0.9
    rewards = rng.normal(size=(t_len, b))
    values = rng.normal(size=(t_len + 1, b))
    bootstrap = rng.normal(size=(t_len, b))
    terminated = rng.random((t_len, b)) < 0.2
    truncated = (rng.random((t_len, b)) < 0.2) & ~terminated
    ends = terminated | truncated
    discounts = np.where(terminated, 0.0, gamma)
    advantages, returns = gae(rewards, values, bootstrap, discounts, lam, ends)
    for j in range(b):
        a_next = 0.0
        for t in reversed(range(t_len)):
            if terminated[t, j]:
                a = rewards[t, j] - values[t, j]
            elif truncated[t, j]:
                a = rewards[t, j] + gamma * bootstrap[t, j] - values[t, j]
            else:
                a = rewards[t, j] + gamma * values[t + 1, j] - values[t, j] + gamma * lam * a_next
            assert advantages[t, j] == pytest.approx(a, abs=1e-5)
            assert returns[t, j] == pytest.approx(a + values[t, j], abs=1e-5)
            a_next = a


# -- losses ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, advantage, loss, grad", [
    (1.5, 2.0, -2.4, 0.0),    # above 1 + eps with A > 0: clipped at 1.2 * 2, no gradient
    (0.5, -1.0, 0.8, 0.0),    # below 1 - eps with A < 0: clipped at 0.8 * -1, no gradient
    (1.1, 3.0, -3.3, -3.3),   # inside the range: -r * A, gradient d(-r A)/d log pi = -r * A
    (1.5, -1.0, 1.5, 1.5),    # above 1 + eps with A < 0: the unclipped (pessimistic) term
])
def test_clipped_surrogate_by_hand(ratio, advantage, loss, grad):
    new_logp = tf.Variable([np.log(ratio)], dtype=tf.float32)
    with tf.GradientTape() as tape:
        value = ppo_clip_loss(new_logp, tf.zeros([1]), tf.constant([advantage]), 0.2)
    assert float(value) == pytest.approx(loss, rel=1e-5)
    assert float(tape.gradient(value, new_logp)[0]) == pytest.approx(grad, abs=1e-5)


def test_value_loss_is_half_the_mean_squared_error():
    assert float(value_loss([1.0, 3.0], [0.0, 1.0])) == pytest.approx(0.5 * (1 + 4) / 2)


def test_value_scaling_round_trip():
    scale = value_scale(0.98, True)
    assert scale == pytest.approx(0.02)
    assert value_scale(0.98, False) == 1.0
    returns = np.array([0.0, 1.0, 50.0, -7.5])
    np.testing.assert_allclose(to_network_units(returns, scale), [0.0, 0.02, 1.0, -0.15])
    np.testing.assert_allclose(to_return_units(to_network_units(returns, scale), scale), returns)
    # The acting policy reports values in return units: the network's output / (1 - gamma).
    config = PPOConfig(network=TINY_NET, training=PPOTrainingConfig(discount=0.98, scale_value_targets=True))
    networks = PPONetworks((3,), "float32", 2, False, config, seed=1)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    _, raw = networks(obs)
    np.testing.assert_allclose(PPOPolicy(networks).value(obs), raw.numpy() / 0.02, rtol=1e-5)


# -- Q-value baselines ------------------------------------------------------------------------------

def test_q_value_aggregates_by_hand():
    q = tf.constant([[1.0, 3.0], [2.0, -1.0]])
    probs = tf.constant([[0.25, 0.75], [0.5, 0.5]])
    np.testing.assert_allclose(aggregate_q_values(q, "max"), [3.0, 2.0])
    # every action: the policy-weighted mean, 0.25 * 1 + 0.75 * 3 = 2.5 and 0.5 * 2 - 0.5 * 1 = 0.5
    np.testing.assert_allclose(aggregate_q_values(q, "mean", probs), [2.5, 0.5])
    np.testing.assert_allclose(aggregate_q_values(q, "mean"), [2.0, 0.5])   # sampled actions: plain mean


@pytest.mark.parametrize("aggregate", ["max", "mean"])
def test_all_actions_q_baseline_aggregates_the_q_function(aggregate):
    config = PPOConfig(network=TINY_NET, training=PPOTrainingConfig(
        q_value=True, q_value_all_actions=True, q_value_aggregate=aggregate))
    networks = PPONetworks((3,), "float32", 3, False, config, seed=2)
    obs = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    q = np.stack([networks(obs, np.full(4, a, np.int32))[1].numpy() for a in range(3)], axis=1)   # [4, 3]
    logits, baseline = networks.logits_and_baseline(obs, tf.zeros([4, 0, 3]))
    probs = tf.nn.softmax(logits).numpy()
    expected = q.max(axis=1) if aggregate == "max" else (q * probs).sum(axis=1)
    np.testing.assert_allclose(baseline.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_sampled_q_baseline_uses_the_sampled_actions():
    config = PPOConfig(network=TINY_NET, training=PPOTrainingConfig(q_value=True, q_value_n_samples=2,
                                                                    q_value_aggregate="max"))
    networks = PPONetworks((3,), "float32", 3, False, config, seed=2)
    obs = np.zeros((1, 3), np.float32)
    q = [float(networks(obs, np.array([a], np.int32))[1][0]) for a in range(3)]
    noise = np.full((1, 2, 3), -1e9, np.float32)
    noise[0, 0, 0] = noise[0, 1, 2] = 0.0          # the two samples are actions 0 and 2
    _, baseline = networks.logits_and_baseline(obs, noise)
    assert float(baseline[0]) == pytest.approx(max(q[0], q[2]), rel=1e-5)


# -- networks and policy ------------------------------------------------------------------------------

def test_shared_layers_are_one_set_of_weights_trained_by_the_policy_optimiser():
    config = PPOConfig(network=PPONetworkConfig(torso="mlp", policy_hidden_sizes=(8, 6), value_hidden_sizes=(8, 5),
                                                shared_layers=1))
    networks = PPONetworks((3,), "float32", 2, False, config, seed=0)
    assert len(networks.shared_layers) == 1
    shared = {id(v) for v in networks.shared_layers[0].trainable_variables}
    assert shared <= {id(v) for v in networks.policy_variables}
    assert not shared & {id(v) for v in networks.value_variables}
    assert len(networks.trainable_variables) == len(networks.policy_variables) + len(networks.value_variables)
    with pytest.raises(ConfigError, match="shared_layers"):
        PPONetworks((3,), "float32", 2, False, dataclasses.replace(config, network=dataclasses.replace(
            config.network, shared_layers=2)), seed=0)


def test_atari_torso_on_small_frames():
    config = PPOConfig(network=PPONetworkConfig(torso="auto", policy_hidden_sizes=(8,), value_hidden_sizes=(8,),
                                                shared_layers=4, activation="relu"))
    image = EnvDescriptor("img", (12, 12, 1), "uint8", 4, kind="image")
    policy = PPOPolicy(PPONetworks(image.observation_shape, "uint8", 4, True, config, seed=0))
    obs = np.random.default_rng(0).integers(0, 255, size=(2, 12, 12, 1), dtype=np.uint8)
    action, outputs, state = policy.act(obs, np.zeros(2, np.int32), np.zeros(2, np.float32), {}, np.zeros(2, bool))
    assert action.shape == (2,) and outputs["policy_logits"].shape == (2, 4) and state == {}
    assert not policy.networks.value_convs and not policy.networks.value_dense   # everything shared


def test_policy_act_contract():
    config = tiny_config()
    policy = PPOPolicy(PPONetworks((3,), "float32", 2, False, config, seed=0), seed=0)
    assert policy.initial_state(4) == {} and policy.action_shape == () and policy.num_actions == 2
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    evaluation = np.arange(64) % 2 == 0
    action, outputs, state = policy.act(obs, np.zeros(64, np.int32), np.zeros(64, np.float32), {}, evaluation)
    assert action.dtype == np.int32 and outputs["policy_logits"].dtype == np.float32
    assert outputs["value"].shape == (64,) and outputs["value"].dtype == np.float32 and state == {}
    np.testing.assert_array_equal(action[evaluation], outputs["policy_logits"][evaluation].argmax(-1))
    np.testing.assert_allclose(policy.value(obs), outputs["value"], rtol=1e-6)


# -- the learner ------------------------------------------------------------------------------------------

def bandit_unrolls(learner: PPOLearner, count: int, rng) -> list:
    """Unrolls of a one-state bandit: action 1 pays 1, action 0 pays 0; acted by the learner's policy."""
    t_len = learner.config.training.unroll_length
    out = []
    for i in range(count):
        obs = np.ones((t_len + 1, 3), np.float32)
        action, outputs, _ = learner.policy.act(obs, np.zeros(t_len + 1, np.int32), np.zeros(t_len + 1, np.float32),
                                                {}, np.zeros(t_len + 1, bool))
        reward = np.concatenate([[0.0], action[:-1] == 1]).astype(np.float32)
        out.append(dict(observation=obs, reward=reward, terminated=np.zeros(t_len + 1, bool),
                        truncated=np.zeros(t_len + 1, bool), bootstrap_value=np.zeros(t_len + 1, np.float32),
                        action=action, env_id=np.int64(i), **outputs))
    return out


def prob_of_action_1(learner: PPOLearner) -> float:
    logits = learner.networks.policy_logits(np.ones((1, 3), np.float32)).numpy()[0]
    return float(np.exp(logits[1]) / np.exp(logits).sum())


def test_learner_moves_the_policy_toward_the_advantaged_action(tmp_path):
    config = tiny_config()
    learner = PPOLearner(VECTOR, config, seed=0)
    rng = np.random.default_rng(0)
    assert learner.step() is None                    # no data yet
    before = prob_of_action_1(learner)
    for _ in range(6):
        for unroll in bandit_unrolls(learner, config.training.batch_size, rng):
            assert learner.sink(unroll)
        metrics = learner.step()
        learner.copy_to_serving()
    assert learner.training_step == 6 * config.training.updates_per_batch
    assert prob_of_action_1(learner) > before + 0.2
    for key in ("loss/total", "loss/policy", "loss/value", "loss/entropy", "policy/clip_fraction",
                "policy/approx_kl", "policy/entropy"):
        assert isinstance(metrics[key], float) and np.isfinite(metrics[key])
    assert metrics["loss/total"] == pytest.approx(
        metrics["loss/policy"] + metrics["loss/value"] + metrics["loss/entropy"], abs=1e-5)
    assert learner.progress() == {"unroll_queue": 0}

    # save -> restore into a new learner (another seed): identical weights, step, optimisers, RNG
    learner.save(str(tmp_path / "ckpt"))
    restored = PPOLearner(VECTOR, config, seed=5)
    restored.restore(str(tmp_path / "ckpt"))
    assert restored.training_step == learner.training_step
    for a, b in zip(learner.networks.variables, restored.networks.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(restored.serving.variables, learner.networks.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for opt_a, opt_b in ((learner.policy_optimizer, restored.policy_optimizer),
                         (learner.value_optimizer, restored.value_optimizer)):
        assert int(opt_a.iterations.numpy()) == int(opt_b.iterations.numpy()) == learner.training_step
        for a, b in zip(opt_a.variables, opt_b.variables):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    # ... so the next update on the same data is the same
    batch = bandit_unrolls(learner, config.training.batch_size, rng)
    m1, m2 = learner.train_on(batch), restored.train_on(batch)
    assert m1["loss/total"] == pytest.approx(m2["loss/total"], rel=1e-6)
    for a, b in zip(learner.networks.variables, restored.networks.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)

    # init_from a run's logdir (checkpoints written as the run loop does): weights only
    from muzero import checkpoints
    ckpt = checkpoints.save_checkpoint(str(tmp_path / "run"), learner.training_step, learner.save,
                                       {"algo": "ppo", "env": "vec"})
    fresh = PPOLearner(VECTOR, config, seed=9)
    assert fresh.init_from(str(tmp_path / "run")) == ckpt
    assert fresh.training_step == 0 and int(fresh.policy_optimizer.iterations.numpy()) == 0
    for a, b in zip(learner.networks.variables, fresh.serving.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with open(os.path.join(ckpt, "state.json"), "w") as f:
        json.dump({"algo": "vtrace"}, f)
    with pytest.raises(ValueError, match="vtrace"):
        fresh.init_from(ckpt)

    # export: PolicyPlayer plays the greedy action of the trained policy
    from muzero.algorithms import policy_export
    learner.export(str(tmp_path / "export"))
    player = policy_export.PolicyPlayer(str(tmp_path / "export"))
    obs = np.random.default_rng(3).normal(size=(6, 3)).astype(np.float32)
    np.testing.assert_array_equal(player.act(obs), learner.networks.policy_logits(obs).numpy().argmax(-1))
    assert player.algo == "ppo"
    learner.close()
    assert not learner.sink(batch[0])                # closed: the unroll is dropped


def test_learner_rejects_unrolls_of_the_wrong_length():
    learner = PPOLearner(VECTOR, tiny_config(), seed=0)
    unrolls = bandit_unrolls(learner, 2, np.random.default_rng(0))
    short = [{k: (v[:-1] if k != "env_id" else v) for k, v in u.items()} for u in unrolls]
    with pytest.raises(ValueError, match="unroll_length"):
        learner.train_on(short)


# -- config and builder ----------------------------------------------------------------------------------

@pytest.mark.parametrize("section, field, value", [
    ("training", "clip_epsilon", 0.0), ("training", "gae_lambda", 1.5), ("training", "num_minibatches", 3),
    ("training", "q_value_aggregate", "softmax"), ("training", "lr_schedule", "cosine"),
    ("training", "epochs", 0), ("network", "shared_layers", -1), ("network", "activation", "gelu"),
    ("network", "policy_hidden_sizes", ()),
])
def test_config_rejects_bad_values_naming_the_field(section, field, value):
    cls = PPOTrainingConfig if section == "training" else PPONetworkConfig
    with pytest.raises(ConfigError, match=field):
        cls(**{field: value})


def test_config_round_trips_through_json():
    config = ppo_builder.CARTPOLE_CONFIG
    assert PPOConfig.from_dict(json.loads(config.to_json())) == config


def test_builder_defaults_and_env_checks():
    builder = algorithms.get("ppo")
    assert builder.name == "ppo" and builder.ingestion == "streaming" and builder.config_class is PPOConfig
    cartpole = builder.default_settings("cartpole")
    t = cartpole.config.training
    assert cartpole.algo == "ppo" and cartpole.num_actors * cartpole.envs_per_actor == t.batch_size == 8
    assert t.unroll_length * t.batch_size == 256 and t.epochs == 20
    assert algorithms.settings_from_dict(json.loads(cartpole.to_json())) == cartpole
    assert builder.default_settings("atari").config.network.torso == "atari"
    assert builder.default_settings("gym:Acrobot-v1").env == "gym:Acrobot-v1"
    with pytest.raises(ValueError, match="cartpole"):
        builder.default_settings("tictactoe")
    algorithms.check_env(builder, VECTOR)
    with pytest.raises(ConfigError, match="ppo.*two-player.*muzero"):
        algorithms.check_env(builder, EnvDescriptor("tictactoe", (3, 3, 3), "uint8", 9, two_player=True, kind="board"))
    builder.check_settings(cartpole)
    with pytest.raises(ConfigError, match="publish_every_steps"):
        builder.check_settings(dataclasses.replace(cartpole, publish_every_steps=3))
    with pytest.raises(ConfigError, match="trainable parts"):
        algorithms.check_trainable_parts(builder, ["dynamics"])


def test_builder_wires_the_learner_into_the_streaming_service():
    from muzero.algorithms import streaming
    from muzero import core
    builder = algorithms.get("ppo")
    settings = dataclasses.replace(builder.default_settings("cartpole"), config=tiny_config())
    learner = builder.make_learner(settings, VECTOR, core.RunContext())
    service = builder.make_service(settings, VECTOR, learner, core.RunContext(), None)
    assert isinstance(service, streaming.StepStreamingService)
    assert isinstance(learner.policy, streaming.StreamingPolicy)
    assert sorted(service.output_spec) == ["policy_logits", "value"]
    assert service.unroll_length == 4 and service.num_train_envs == 8 and service.num_eval_envs == 4
    service.update_weights(learner.copy_to_serving, version=1)
    learner.close()
    service.close()
