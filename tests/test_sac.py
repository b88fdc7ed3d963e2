"""SAC: the squashed Gaussian, target entropy, temperature, Polyak targets, transitions, HER."""
import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

import envs
from muzero.algorithms.her import EpisodeAssembler, HindsightRelabeller
from muzero.algorithms.sac.builder import BUILDER, GOAL_CONFIG, PENDULUM_CONFIG
from muzero.algorithms.sac.config import SACConfig, SACNetworkConfig, SACTrainingConfig
from muzero.algorithms.sac.learning import SACLearner, default_target_entropy, unroll_transitions
from muzero.algorithms.sac.networks import squashed_gaussian_log_prob
from muzero import algorithms
from muzero.config import ConfigError
from envs.base import EnvDescriptor

BOX = EnvDescriptor("box", (3,), "float32", 0, action_kind="continuous", action_shape=(2,),
                    action_low=(-2.0, -1.0), action_high=(2.0, 3.0))
DISCRETE = EnvDescriptor("vec", (3,), "float32", 4)
TINY = SACNetworkConfig(actor_hidden_sizes=(16,), critic_hidden_sizes=(16,))


def _learner(descriptor=BOX, **training):
    config = SACConfig(network=TINY, training=SACTrainingConfig(batch_size=8, replay_capacity=64, min_replay=1,
                                                                **training))
    return SACLearner(descriptor, config, seed=0)


def _batch(descriptor, n=8, seed=0):
    rng = np.random.default_rng(seed)
    if descriptor.is_continuous:
        action = rng.uniform(descriptor.action_low, descriptor.action_high, (n, 2)).astype(np.float32)
    else:
        action = rng.integers(0, descriptor.num_actions, n).astype(np.int32)
    return {"observation": rng.normal(size=(n, 3)).astype(np.float32), "action": action,
            "reward": rng.normal(size=n).astype(np.float32),
            "next_observation": rng.normal(size=(n, 3)).astype(np.float32),
            "discount": np.full(n, 0.99, np.float32)}


def test_squashed_gaussian_log_prob_by_hand():
    # u = 0.5, mean 0.2, std 0.5: z = 0.6; log N = -0.18 - ln 0.5 - 0.5 ln(2 pi) = -0.405792;
    # log(1 - tanh(0.5)^2) = ln(1 - 0.462117^2) = ln(0.786448) = -0.240229; log pi = -0.165563.
    got = squashed_gaussian_log_prob([[0.5]], [[0.2]], [[math.log(0.5)]]).numpy()
    assert got == pytest.approx([-0.165563], abs=1e-5)
    # Two dimensions add; the second: u = -1, mean 0, std 1: log N = -0.5 - 0.918939 = -1.418939,
    # log(1 - tanh(1)^2) = ln(1 - 0.761594^2) = ln(0.419974) = -0.867563; its term -0.551376.
    got = squashed_gaussian_log_prob([[0.5, -1.0]], [[0.2, 0.0]], [[math.log(0.5), 0.0]]).numpy()
    assert got == pytest.approx([-0.165563 - 0.551376], abs=1e-5)
    # Far in the tail the Jacobian term stays finite: log(1 - tanh(20)^2) = 2 (ln 2 - 20) exactly enough.
    got = squashed_gaussian_log_prob([[20.0]], [[20.0]], [[0.0]]).numpy()
    assert got == pytest.approx([-0.918939 - 2 * (math.log(2) - 20.0)], rel=1e-5)


def test_default_target_entropy():
    assert default_target_entropy(BOX) == -2.0
    assert default_target_entropy(envs.describe("gym:Pendulum-v1")) == -1.0
    assert default_target_entropy(DISCRETE) == pytest.approx(0.98 * math.log(4))
    assert _learner(target_entropy=0.5).target_entropy == 0.5


@pytest.mark.parametrize("descriptor", [BOX, DISCRETE], ids=["box", "discrete"])
def test_temperature_moves_toward_the_target_entropy(descriptor):
    batch = _batch(descriptor)
    # Entropy far below the target: alpha must rise; far above: it must fall.
    low = _learner(descriptor, target_entropy=50.0)
    before = float(tf.exp(low.log_alpha))
    metrics = low.train_on(batch)
    assert metrics["policy/entropy"] < 50.0 and float(tf.exp(low.log_alpha)) > before
    high = _learner(descriptor, target_entropy=-50.0)
    high.train_on(batch)
    assert float(tf.exp(high.log_alpha)) < before


def _constant_outputs(torso, head, values):
    """Zero weights and ``values`` as the head's bias: the module outputs ``values`` for any input."""
    for layer in torso.layers:
        layer.w.assign(tf.zeros_like(layer.w))
        layer.b.assign(tf.zeros_like(layer.b))
    head.w.assign(tf.zeros_like(head.w))
    head.b.assign(tf.constant(values, tf.float32))


def test_discrete_soft_targets_and_losses_by_hand():
    """Discrete SAC with the entropy term active, worked by hand.

    Policy logits ln[4, 2, 1, 1] -> pi = [0.5, 0.25, 0.125, 0.125],
    log pi = [-0.693147, -1.386294, -2.079442, -2.079442], entropy H = 1.213008.
    Both critics (online and target): Q1 = [1, 2, 3, 4], Q2 = [2, 1, 3, 5], min = [1, 1, 3, 4].
    alpha = 0.5. Soft value of the next state:
      V' = sum pi (min Q - alpha log pi)
         = 0.5 (1 + 0.346574) + 0.25 (1 + 0.693147) + 0.125 (3 + 1.039721) + 0.125 (4 + 1.039721)
         = 0.673287 + 0.423287 + 0.504965 + 0.629965 = 2.231504   (1.625 from Q, 0.606504 = alpha H)
    Critic target y = reward_scale r + discount V' with r = 1, scale 2, discount 0.5:
      y = 2 + 1.115752 = 3.115752.
    Critic loss, actions [0, 1, 2, 3] taken: Q1(a) = [1, 2, 3, 4], Q2(a) = [2, 1, 3, 5]:
      0.5 mean((Q1 - y)^2) + 0.5 mean((Q2 - y)^2)
      = 0.5 (4.476407 + 1.244903 + 0.013399 + 0.781895) / 4 + 0.5 (1.244903 + 4.476407 + 0.013399 + 3.550391) / 4
      = 0.814575 + 1.160638 = 1.975213
    Actor loss: sum pi (alpha log pi - min Q) = -0.606504 - 1.625 = -2.231504.
    Temperature loss with target entropy 1: ln(0.5) (H - 1) = -0.693147 x 0.213008 = -0.147646.
    """
    learner = _learner(DISCRETE, initial_alpha=0.5, reward_scale=2.0, target_entropy=1.0,
                       critic_learning_rate=1e-9, actor_learning_rate=1e-9, alpha_learning_rate=1e-9)
    net = learner.networks
    _constant_outputs(net.actor_torso, net.actor_head, np.log([4.0, 2.0, 1.0, 1.0]))
    for critics in (net.critics, net.target_critics):
        _constant_outputs(critics[0].torso, critics[0].head, [1.0, 2.0, 3.0, 4.0])
        _constant_outputs(critics[1].torso, critics[1].head, [2.0, 1.0, 3.0, 5.0])
    batch = dict(_batch(DISCRETE, n=4), action=np.arange(4, dtype=np.int32), reward=np.ones(4, np.float32),
                 discount=np.full(4, 0.5, np.float32))
    metrics = learner.train_on(batch)
    assert metrics["alpha"] == pytest.approx(0.5, abs=1e-6)
    assert metrics["policy/entropy"] == pytest.approx(1.213008, abs=1e-5)
    assert metrics["q/target_mean"] == pytest.approx(3.115752, abs=1e-5)
    assert metrics["q/mean"] == pytest.approx(2.5, abs=1e-5)
    assert metrics["loss/critic"] == pytest.approx(1.975213, abs=1e-5)
    assert metrics["loss/actor"] == pytest.approx(-2.231504, abs=1e-5)
    assert metrics["loss/alpha"] == pytest.approx(-0.147646, abs=1e-5)


def test_target_critics_follow_by_polyak_averaging():
    learner = _learner(tau=0.25)
    net = learner.networks
    targets = [v.numpy().copy() for v in net.target_variables]
    learner.train_on(_batch(BOX))
    for old, target, critic in zip(targets, net.target_variables, net.critic_variables):
        np.testing.assert_allclose(target.numpy(), 0.75 * old + 0.25 * critic.numpy(), rtol=1e-5, atol=1e-6)


def test_critic_target_uses_discount_and_reward_scale():
    """With discount 0 the critic target is reward_scale * r: the reported target mean equals it."""
    learner = _learner(reward_scale=3.0)
    batch = dict(_batch(BOX), discount=np.zeros(8, np.float32))
    metrics = learner.train_on(batch)
    assert metrics["q/target_mean"] == pytest.approx(3.0 * batch["reward"].mean(), rel=1e-5)


def test_policy_acts_within_bounds_and_deterministically_when_evaluating():
    learner = _learner()
    obs = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    evaluation = np.array([False, False, False, True, True, True])
    action, outputs, state = learner.policy.act(obs, None, None, {}, evaluation, np.arange(6))
    assert action.shape == (6, 2) and action.dtype == np.float32 and outputs == {} and state == {}
    assert (action >= np.array([-2, -1])).all() and (action <= np.array([2, 3])).all()
    again, _, _ = learner.policy.act(obs, None, None, {}, evaluation, np.arange(6))
    np.testing.assert_array_equal(action[3:], again[3:])           # evaluation rows: tanh(mean)
    assert not np.array_equal(action[:3], again[:3])               # training rows sample
    assert learner.policy.value(obs).shape == (6,)


def test_unroll_transitions_use_the_observation_an_episode_ended_on():
    # 4 steps; the transition into step 2 was truncated: its next state is final_observation[2].
    obs = np.arange(4, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    final = obs.copy()
    final[2] = 99.0
    unroll = {"observation": obs, "final_observation": final, "action": np.arange(4, dtype=np.int32),
              "reward": np.array([0, 1, 2, 3], np.float32), "terminated": np.array([0, 0, 0, 1], bool),
              "truncated": np.array([0, 0, 1, 0], bool)}
    tr = unroll_transitions(unroll)
    np.testing.assert_array_equal(tr["observation"][:, 0], [0, 1, 2])
    np.testing.assert_array_equal(tr["next_observation"][:, 0], [1, 99, 3])
    np.testing.assert_array_equal(tr["reward"], [1, 2, 3])
    np.testing.assert_array_equal(tr["terminated"], [False, False, True])
    np.testing.assert_array_equal(tr["end"], [False, True, True])


def test_her_relabelled_rewards_equal_compute_reward():
    env = envs.make("reach", seed=0, dims=2, threshold=0.1)
    slices = env.descriptor.goal_slices()
    rng = np.random.default_rng(0)
    length = 7
    path = np.cumsum(rng.normal(scale=0.05, size=(length + 1, 2)), axis=0)
    goal = np.array([0.3, -0.2])
    obs = np.concatenate([path, path, np.tile(goal, (length + 1, 1))], axis=1).astype(np.float32)
    episode = {"observation": obs[:-1], "next_observation": obs[1:],
               "action": rng.uniform(-1, 1, (length, 2)).astype(np.float32),
               "reward": env.compute_reward(obs[1:, 2:4], obs[1:, 4:6]),
               "discount": np.full(length, 0.95, np.float32)}
    her = HindsightRelabeller(slices, env.compute_reward, relabels=4, strategy="future",
                              rng=np.random.default_rng(1))
    out = her.relabel(episode)
    assert len(out["reward"]) == length * 5
    for k, v in episode.items():                                   # the originals come first, unchanged
        np.testing.assert_array_equal(out[k][:length], v)
    for j in range(1, 5):
        rows = slice(j * length, (j + 1) * length)
        goals = out["observation"][rows][:, 4:6]
        np.testing.assert_array_equal(goals, out["next_observation"][rows][:, 4:6])
        np.testing.assert_array_equal(out["action"][rows], episode["action"])
        # every substitute goal is a goal achieved at the transition's own next state or later
        for t in range(length):
            later = episode["next_observation"][t:, 2:4]
            assert any(np.array_equal(goals[t], g) for g in later)
        want = -(np.linalg.norm(out["next_observation"][rows][:, 2:4] - goals, axis=1) > 0.1).astype(np.float32)
        np.testing.assert_array_equal(out["reward"][rows], want.astype(np.float32))
    # A goal equal to the next achieved goal always gets the success reward 0.
    final = HindsightRelabeller(slices, env.compute_reward, 1, "final", np.random.default_rng(0)).relabel(episode)
    assert final["reward"][2 * length - 1] == 0.0
    np.testing.assert_array_equal(final["observation"][length:, 4:6], np.tile(obs[-1, 2:4], (length, 1)))


def test_episode_assembler_joins_unrolls_and_splits_at_episode_ends():
    asm = EpisodeAssembler()

    def part(values, ends):
        v = np.asarray(values, np.float32)
        return {"reward": v, "observation": v[:, None]}, np.asarray(ends, bool)
    assert asm.add(0, *part([1, 2], [0, 0])) == [] and asm.pending() == 2
    assert asm.add(1, *part([10], [0])) == []
    done = asm.add(0, *part([3, 4, 5], [1, 0, 1]))
    assert [list(e["reward"]) for e in done] == [[1, 2, 3], [4, 5]]
    assert asm.pending() == 1


def test_sac_learner_stores_relabelled_episodes_for_goal_envs():
    descriptor = envs.describe("reach", dims=2)
    config = dataclasses.replace(GOAL_CONFIG, network=TINY,
                                 training=dataclasses.replace(GOAL_CONFIG.training, replay_capacity=1000,
                                                              min_replay=1))
    learner = SACLearner(descriptor, config, seed=0, env="reach", env_options={"dims": 2})
    batch = envs.make_batch("reach", 1, seed=3, max_episode_steps=5, dims=2)
    step = batch.reset()
    steps = [step]
    for _ in range(5):
        step = batch.step(np.zeros((1, 2), np.float32))
        steps.append(step)
    unroll = {"observation": np.stack([s.observation[0] for s in steps]),
              "final_observation": np.stack([s.final_observation[0] for s in steps]),
              "action": np.zeros((6, 2), np.float32), "reward": np.stack([s.reward[0] for s in steps]),
              "terminated": np.zeros(6, bool), "truncated": np.array([s.truncated[0] for s in steps]),
              "env_id": np.int64(0)}
    assert learner.sink(unroll)
    assert len(learner.replay) == 5 * 5          # 5 transitions, each with 4 relabelled copies
    with pytest.raises(ConfigError, match="goal env"):
        SACLearner(envs.describe("gym:Pendulum-v1"), config, seed=0)
    learner.close()


def test_config_and_builder():
    with pytest.raises(ConfigError, match="SACTrainingConfig.tau"):
        SACTrainingConfig(tau=0.0)
    with pytest.raises(ConfigError, match="her_strategy"):
        SACTrainingConfig(her_strategy="episode")
    with pytest.raises(ConfigError, match="log_std_min"):
        SACNetworkConfig(log_std_min=3.0)
    assert BUILDER.default_settings("gym:Pendulum-v1").config == PENDULUM_CONFIG
    assert BUILDER.default_settings("reach").config.training.her_relabels == 4
    with pytest.raises(ValueError, match="sac has no defaults"):
        BUILDER.default_settings("tictactoe")
    algorithms.check_env(BUILDER, envs.describe("gym:Pendulum-v1"))
    algorithms.check_env(BUILDER, envs.describe("cartpole"))
    with pytest.raises(ConfigError, match=r"sac.*two-player.*muzero"):
        algorithms.check_env(BUILDER, envs.describe("tictactoe"))
    with pytest.raises(ConfigError, match="image observations"):
        algorithms.check_env(BUILDER, EnvDescriptor("img", (8, 8, 1), "uint8", 3, kind="image"))


def test_episode_assembler_drops_an_episode_its_run_did_not_finish():
    # Env 0's run 5 sends two steps of an episode, then run 6 (a restarted actor, or the env
    # id leased to another one) sends its own: the new run's episode is [7, 8], not
    # [1, 2, 7, 8]; the two dropped steps are counted. The same run continues as before.
    asm = EpisodeAssembler()
    v = np.asarray
    assert asm.add(0, {"reward": v([1.0, 2.0])}, v([False, False]), run_id=5) == []
    done = asm.add(0, {"reward": v([7.0, 8.0])}, v([False, True]), run_id=6)
    assert [list(e["reward"]) for e in done] == [[7.0, 8.0]] and asm.dropped == 2
    assert asm.add(0, {"reward": v([3.0])}, v([False]), run_id=6) == []
    done = asm.add(0, {"reward": v([4.0])}, v([True]), run_id=6)
    assert [list(e["reward"]) for e in done] == [[3.0, 4.0]] and asm.dropped == 2
