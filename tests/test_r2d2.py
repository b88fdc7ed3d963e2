"""R2D2: value rescaling, n-step double-Q targets with burn-in, priorities, exploration rates,
the no-memory switch, config validation, and one end-to-end run (train, resume, export, eval).

Expected numbers are worked out by hand in the comments, not by the code under test."""
import dataclasses
import json
import os
import re

import numpy as np
import pytest

from muzero import algorithms
from muzero.algorithms.r2d2.builder import BUILDER, CARTPOLE_CONFIG
from muzero.algorithms.r2d2.config import (R2D2ActingConfig, R2D2Config, R2D2NetworkConfig, R2D2ReplayConfig,
                                           R2D2TrainingConfig)
from muzero.config import ConfigError

from e2e_helpers import records as _records
from e2e_helpers import run_module as _run



# -- value rescaling -------------------------------------------------------------------------------

def test_value_rescaling_hand_values_and_exact_inverse():
    from muzero.algorithms.r2d2.learning import inverse_value_rescale, value_rescale
    # h(3) = sqrt(4) - 1 + 0.003 = 1.003;  h(-8) = -(sqrt(9) - 1) - 0.008 = -2.008;  h(0) = 0;
    # h(99) = sqrt(100) - 1 + 0.099 = 9.099.
    x = np.array([3.0, -8.0, 0.0, 99.0])
    np.testing.assert_allclose(value_rescale(x, 1e-3).numpy(), [1.003, -2.008, 0.0, 9.099], atol=1e-12)
    np.testing.assert_allclose(inverse_value_rescale(np.array([1.003, -2.008, 0.0, 9.099]), 1e-3).numpy(),
                               [3.0, -8.0, 0.0, 99.0], rtol=1e-12, atol=1e-12)
    # Without epsilon: h(8) = 2, h^-1(2) = (2 + 1)^2 - 1 = 8.
    assert value_rescale(np.array(8.0), 0.0).numpy() == pytest.approx(2.0)
    assert inverse_value_rescale(np.array(2.0), 0.0).numpy() == pytest.approx(8.0)
    # Round trip over many magnitudes, both signs, float64 and float32.
    mags = np.logspace(-6, 6, 61)
    values = np.concatenate([-mags, [0.0], mags])
    back = inverse_value_rescale(value_rescale(values, 1e-3), 1e-3).numpy()
    np.testing.assert_allclose(back, values, rtol=1e-9, atol=1e-12)
    back32 = inverse_value_rescale(value_rescale(values.astype(np.float32), 1e-3), 1e-3).numpy()
    np.testing.assert_allclose(back32, values, rtol=2e-5, atol=1e-6)


# -- targets and priorities ------------------------------------------------------------------------

# One sequence (B = 1), burn_in = 1, unroll_length T = 3, L = 5 steps, n = 2, discount 0.5, no
# rescaling. Trained transitions: s = 1, 2, 3 (s = 0 -> 1 is burn-in; x_4 only bootstraps).
REWARD = [9.0, 9.0, 1.0, 2.0, 4.0]            # reward[s]: on arriving at x_s
ACTION = [1, 0, 1, 0, 1]                      # a_s taken at x_s
Q_ONLINE = [[1000.0, -1000.0], [3.0, 0.0], [0.0, 1.0], [1.0, 5.0], [7.0, 2.0]]
Q_TARGET = [[-500.0, 500.0], [0.0, 0.0], [0.0, 0.0], [100.0, 8.0], [4.0, 40.0]]


def _td(terminated=(), truncated=(), bootstrap_value=None, n_step=2, discount=0.5, epsilon=None):
    from muzero.algorithms.r2d2.learning import sequence_td_errors

    def col(x, dtype):
        return np.asarray(x, dtype)[:, None]
    term = np.zeros(5, bool)
    term[list(terminated)] = True
    trunc = np.zeros(5, bool)
    trunc[list(truncated)] = True
    bv = np.zeros(5) if bootstrap_value is None else np.asarray(bootstrap_value, float)
    td, targets, q_taken = sequence_td_errors(
        np.asarray(Q_ONLINE, np.float32)[:, None], np.asarray(Q_TARGET, np.float32)[:, None], col(ACTION, np.int32),
        col(REWARD, np.float32), col(term, bool), col(trunc, bool), col(bv, np.float32), burn_in=1,
        discount=discount, n_step=n_step, rescaling_epsilon=epsilon)
    return td.numpy()[:, 0], targets.numpy()[:, 0], q_taken.numpy()[:, 0]


def test_n_step_double_q_targets_with_burn_in():
    # Double Q: a*(x_3) = argmax Q_online(x_3) = [1, 5] -> 1, so boot(x_3) = Q_target(x_3)[1] = 8 (not
    # max Q_target = 100); a*(x_4) = argmax [7, 2] = 0 -> boot(x_4) = Q_target(x_4)[0] = 4 (not 40).
    # s=1: k=2: r2 + .5 r3 + .25 boot(x_3) = 1 + 1 + 2 = 4
    # s=2: k=2: r3 + .5 r4 + .25 boot(x_4) = 2 + 2 + 1 = 5
    # s=3: k=min(2, 4 - 3)=1: r4 + .5 boot(x_4) = 4 + 2 = 6
    # Q taken: Q_online(x_1)[0] = 3, Q_online(x_2)[1] = 1, Q_online(x_3)[0] = 1 -> td = [1, 4, 5].
    td, targets, q_taken = _td()
    np.testing.assert_allclose(targets, [4.0, 5.0, 6.0])
    np.testing.assert_allclose(q_taken, [3.0, 1.0, 1.0])
    np.testing.assert_allclose(td, [1.0, 4.0, 5.0])


def test_n_step_targets_stop_at_a_termination():
    # terminated[3]: transition x_2 -> x_3 ended the episode (x_3 is the next episode's first step).
    # s=1: r2 + .5 r3, then nothing (terminal)        = 1 + 1 = 2
    # s=2: r3, then nothing                           = 2
    # s=3: a transition of the new episode: r4 + .5 boot(x_4) = 4 + 2 = 6
    _, targets, _ = _td(terminated=[3])
    np.testing.assert_allclose(targets, [2.0, 2.0, 6.0])
    # terminated[2] (x_1 -> x_2 ends): s=1 is r2 = 1; s=2 and s=3 are unaffected (5, 6).
    _, targets, _ = _td(terminated=[2])
    np.testing.assert_allclose(targets, [1.0, 5.0, 6.0])


def test_n_step_targets_bootstrap_from_the_stored_value_at_a_truncation():
    # truncated[3] with bootstrap_value[3] = 10 (the behaviour value of the final observation,
    # in return units): s=1: 1 + .5 * 2 + .25 * 10 = 4.5;  s=2: 2 + .5 * 10 = 7;  s=3: 6.
    _, targets, _ = _td(truncated=[3], bootstrap_value=[0, 0, 0, 10.0, 0])
    np.testing.assert_allclose(targets, [4.5, 7.0, 6.0])


def test_rescaled_one_step_target():
    # n = 1, discount 1, eps 1e-3, transition s=1: a*(x_2) = argmax Q_online(x_2) = argmax [0, 1] = 1;
    # Q_target(x_2)[1] := h(3) = 1.003, so boot(x_2) = h^-1(1.003) = 3 and
    # target = h(r2 + boot) = h(1 + 3) = h(4) = sqrt(5) - 1 + 0.004.
    from muzero.algorithms.r2d2.learning import sequence_td_errors
    q_target = np.asarray(Q_TARGET, np.float32)[:, None].copy()
    q_target[2, 0, 1] = 1.003
    zeros = np.zeros((5, 1))
    _, targets, _ = sequence_td_errors(np.asarray(Q_ONLINE, np.float32)[:, None], q_target,
                                       np.asarray(ACTION)[:, None], np.asarray(REWARD)[:, None],
                                       zeros.astype(bool), zeros.astype(bool), zeros, burn_in=1,
                                       discount=1.0, n_step=1, rescaling_epsilon=1e-3)
    assert targets.numpy()[0, 0] == pytest.approx(np.sqrt(5.0) - 1.0 + 0.004, abs=1e-5)


def test_priority_eta_mix():
    from muzero.algorithms.r2d2.learning import sequence_priorities
    # td [1, 4, -5]: 0.9 * 5 + 0.1 * (1 + 4 + 5) / 3 = 4.5 + 0.3333 = 4.8333
    p = sequence_priorities(np.array([[1.0], [4.0], [-5.0]]), 0.9).numpy()
    assert p[0] == pytest.approx(4.5 + 1.0 / 3.0, abs=1e-5)


# -- the learner: initial priorities, refresh, one training step -----------------------------------

def _tiny_settings(**replay):
    from muzero.settings import RunSettings
    config = R2D2Config(
        network=R2D2NetworkConfig(torso="mlp", mlp_hidden_sizes=(8,), lstm_size=8, head_hidden_size=0),
        replay=R2D2ReplayConfig(**{"capacity": 16, "min_size": 4, "samples_per_insert": 0.0, **replay}),
        training=R2D2TrainingConfig(unroll_length=3, burn_in=1, batch_size=4, n_step=2, discount=0.5,
                                    value_rescaling=False, learning_rate=1e-3, target_update_period=1))
    return RunSettings(env="cartpole", algo="r2d2", config=config, num_actors=1, envs_per_actor=2)


@pytest.fixture(scope="module")
def learner():
    import envs
    from muzero.algorithms.r2d2.learning import R2D2Learner
    return R2D2Learner(_tiny_settings(), envs.describe("cartpole"))


def _unroll(q_values=None, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(5, 2)).astype(np.float32) if q_values is None else np.asarray(q_values, np.float32)
    return {"observation": rng.normal(size=(5, 4)).astype(np.float32), "action": np.asarray(ACTION, np.int32),
            "prev_action": np.asarray([0] + ACTION[:-1], np.int32), "reward": np.asarray(REWARD, np.float32),
            "terminated": np.zeros(5, bool), "truncated": np.zeros(5, bool),
            "bootstrap_value": np.zeros(5, np.float32), "q_values": q,
            "state/h": np.zeros(8, np.float32), "state/c": np.zeros(8, np.float32), "env_id": np.int64(0)}


def test_initial_priority_from_the_stored_behaviour_q_values(learner):
    # The stored Q_ONLINE values serve as online AND target values: boot(x_3) = max [1, 5] = 5,
    # boot(x_4) = max [7, 2] = 7 (n = 2, discount .5, burn-in 1, no rescaling):
    # s=1: 1 + .5*2 + .25*5 = 3.25, Q taken 3 -> td .25
    # s=2: 2 + .5*4 + .25*7 = 5.75, Q taken 1 -> td 4.75
    # s=3: 4 + .5*7         = 7.5,  Q taken 1 -> td 6.5
    # priority = .9 * 6.5 + .1 * (.25 + 4.75 + 6.5) / 3 = 5.85 + 0.38333 = 6.23333
    assert learner.initial_priority(_unroll(Q_ONLINE)) == pytest.approx(5.85 + 11.5 / 30.0, abs=1e-4)


def test_priority_refresh_changes_the_sampling_distribution(learner):
    replay = learner.replay
    priorities = []
    for i in range(4):
        u = _unroll(seed=i)
        priorities.append(learner.initial_priority(u))
        assert learner.sink(u)
    want = np.asarray(priorities) ** 0.9
    np.testing.assert_allclose(replay.sampling_probabilities(), want / want.sum(), rtol=1e-6)

    # Raise item 2's priority: P(2) = 50^.9 / (50^.9 + the others), and sampling follows it.
    index_of_2 = 2 + replay.capacity * int(replay._generation[2])     # ItemReplay's sampled-index form
    replay.update_priorities(np.array([index_of_2]), np.array([50.0]))
    want[2] = 50.0 ** 0.9
    expected = want / want.sum()
    np.testing.assert_allclose(replay.sampling_probabilities(), expected, rtol=1e-6)
    draws = np.concatenate([replay.sample(64)[0] % replay.capacity for _ in range(40)])
    assert np.mean(draws == 2) == pytest.approx(expected[2], abs=0.04)
    assert expected[2] > 0.6

    # A training step refreshes the sampled sequences' priorities from the fresh TD errors.
    step = learner.training_step
    metrics = learner.step()
    assert metrics is not None and learner.training_step == step + 1
    assert all(np.isfinite(v) for v in metrics.values())
    indices, fresh = learner.last_sample
    leaves = replay.sampling_probabilities() * replay._tree.total
    np.testing.assert_allclose(leaves[indices % replay.capacity], fresh ** 0.9, rtol=1e-5)


# -- acting ----------------------------------------------------------------------------------------

def _network(use_memory=True, seed=0):
    from muzero.algorithms.r2d2.networks import R2D2Network
    config = R2D2NetworkConfig(torso="mlp", mlp_hidden_sizes=(16,), lstm_size=16, head_hidden_size=16,
                               use_memory=use_memory)
    return R2D2Network((3,), np.float32, 2, config, seed=seed)


def test_epsilon_per_env_and_evaluation_rows():
    from muzero.algorithms.r2d2.learning import R2D2Policy, training_epsilons
    # N = 4: 0.4^(1 + 7 i / 3): 0.4, 0.4^(10/3), 0.4^(17/3), 0.4^8
    np.testing.assert_allclose(training_epsilons(4, 0.4, 7.0),
                               [0.4, 0.4 ** (10 / 3), 0.4 ** (17 / 3), 0.4 ** 8], rtol=1e-12)
    np.testing.assert_allclose(training_epsilons(1), [0.4])
    policy = R2D2Policy(_network(), 4, R2D2ActingConfig(eval_epsilon=0.001), seed=1)
    eps = policy.epsilons(np.array([0, 3, 4, 5, 1]), np.array([False, False, True, True, False]))
    np.testing.assert_allclose(eps, [0.4, 0.4 ** 8, 0.001, 0.001, 0.4 ** (10 / 3)], rtol=1e-12)

    # Acting: env 0 (epsilon .4) takes a random action 40% of the time, half of which is the greedy
    # one (2 actions): ~20% non-greedy; evaluation rows (epsilon .001) almost never.
    n = 4000
    obs = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    state = policy.initial_state(n)
    zeros = np.zeros(n, np.float32)
    for evaluation, lo, hi in ((False, 0.17, 0.23), (True, 0.0, 0.004)):
        action, outputs, new_state = policy.act(obs, np.zeros(n, np.int32), zeros, state,
                                                np.full(n, evaluation), np.zeros(n, np.int32))
        greedy = outputs["q_values"].argmax(axis=1)
        assert lo <= np.mean(action != greedy) <= hi
        assert outputs["q_values"].shape == (n, 2) and new_state["h"].shape == (n, 16)
    assert policy.value(obs[:5]).shape == (5,)


def test_use_memory_false_resets_the_state_every_step():
    import tensorflow as tf

    def q_after(net, history, last):
        h, c = net.initial_state(1)
        prev_a, prev_r = tf.zeros([1], tf.int32), tf.zeros([1])
        for obs, a, r in history:
            _, h, c = net.step(tf.constant([obs], tf.float32), prev_a, prev_r, h, c)
            prev_a, prev_r = tf.constant([a], tf.int32), tf.constant([r], tf.float32)
        q, _, _ = net.step(tf.constant([last], tf.float32), prev_a, prev_r, h, c)
        return q.numpy()[0]

    one = [([1.0, -2.0, 0.5], 0, 1.0), ([0.3, 0.3, 0.3], 1, 0.0)]
    two = [([-1.0, 2.0, 3.0], 1, -1.0), ([2.0, 0.0, -1.0], 0, 0.5), ([0.1, 0.2, 0.3], 1, 1.0)]
    last = [0.5, 0.5, -0.5]
    without = _network(use_memory=False)
    np.testing.assert_allclose(q_after(without, one, last), q_after(without, two, last), rtol=1e-6)
    np.testing.assert_allclose(q_after(without, one, last), q_after(without, [], last), rtol=1e-6)
    with_memory = _network(use_memory=True)
    assert np.abs(q_after(with_memory, one, last) - q_after(with_memory, two, last)).max() > 1e-4


def test_unroll_matches_stepping_with_episode_resets():
    import tensorflow as tf
    net = _network()
    rng = np.random.default_rng(3)
    t_len, b = 6, 2
    obs = rng.normal(size=(t_len, b, 3)).astype(np.float32)
    prev_a = rng.integers(0, 2, (t_len, b)).astype(np.int32)
    prev_r = rng.normal(size=(t_len, b)).astype(np.float32)
    reset = np.zeros((t_len, b), bool)
    reset[3, 1] = True
    h0 = rng.normal(size=(b, 16)).astype(np.float32)
    c0 = rng.normal(size=(b, 16)).astype(np.float32)
    q_unroll, _ = net.unroll(obs, prev_a, prev_r, reset, h0, c0)
    h, c = tf.constant(h0), tf.constant(c0)
    for t in range(t_len):
        keep = tf.constant(1.0 - reset[t][:, None].astype(np.float32))
        q, h, c = net.step(obs[t], prev_a[t], prev_r[t], h * keep, c * keep)
        np.testing.assert_allclose(q_unroll.numpy()[t], q.numpy(), rtol=1e-5, atol=1e-6)


# -- configuration ---------------------------------------------------------------------------------

def test_config_validation_names_the_field():
    from muzero.settings import replace_section
    cases = [(lambda: R2D2TrainingConfig(unroll_length=4, n_step=5), "R2D2TrainingConfig.n_step=5"),
             (lambda: R2D2TrainingConfig(burn_in=-1), "R2D2TrainingConfig.burn_in=-1"),
             (lambda: R2D2TrainingConfig(discount=1.5), "R2D2TrainingConfig.discount=1.5"),
             (lambda: R2D2ReplayConfig(capacity=10, min_size=20), "R2D2ReplayConfig.min_size=20"),
             (lambda: R2D2ReplayConfig(priority_eta=2.0), "R2D2ReplayConfig.priority_eta=2.0"),
             (lambda: R2D2NetworkConfig(lstm_size=0), "R2D2NetworkConfig.lstm_size=0"),
             (lambda: R2D2NetworkConfig(use_memory="no"), "R2D2NetworkConfig.use_memory='no'"),
             (lambda: R2D2ActingConfig(eval_epsilon=-0.1), "R2D2ActingConfig.eval_epsilon=-0.1"),
             (lambda: replace_section(BUILDER.default_settings("cartpole"), "training", n_step=21),
              "R2D2TrainingConfig.n_step=21")]
    for make, text in cases:
        with pytest.raises(ConfigError, match=text.replace(".", r"\.").replace("(", r"\(")):
            make()
    settings = dataclasses.replace(BUILDER.default_settings("cartpole"), num_actors=0)
    with pytest.raises(ConfigError, match="num_actors"):
        BUILDER.check_settings(settings)
    # Defaults: cartpole (whatever env_options), atari, gym ids; a round trip through JSON.
    assert algorithms.get("r2d2") is BUILDER
    assert BUILDER.default_settings("cartpole").config == CARTPOLE_CONFIG
    assert BUILDER.overlap(BUILDER.default_settings("cartpole")) == CARTPOLE_CONFIG.training.burn_in
    assert BUILDER.default_settings("gym:Acrobot-v1").config.network.torso == "auto"
    atari = BUILDER.default_settings("atari").config.training
    assert (atari.burn_in, atari.n_step, atari.discount, atari.batch_size) == (40, 5, 0.997, 64)
    with pytest.raises(ValueError, match="r2d2"):
        BUILDER.default_settings("tictactoe")
    data = json.loads(json.dumps(CARTPOLE_CONFIG.to_dict()))
    assert R2D2Config.from_dict(data) == CARTPOLE_CONFIG


# -- end to end ------------------------------------------------------------------------------------

def test_r2d2_trains_checkpoints_resumes_exports_and_refuses_continuous_actions(tmp_path):
    logdir = str(tmp_path / "r2d2")
    common = ["--algo=r2d2", "--env=cartpole", f"--logdir={logdir}", "--num_actors=1", "--num_eval_actors=1",
              "--set=replay.min_size=20",
              # Short sequences (2 + 6 + 1 steps): the unrolled training graph traces in a second or
              # two instead of the default 31 steps' six seconds, in each of the two sessions.
              "--set=training.burn_in=2", "--set=training.unroll_length=6"]
    # Each session ends on an event (training steps made); --max_seconds is only a ceiling.
    common.append("--max_seconds=300")
    proc = _run("muzero.learner", [*common, "--max_train_steps=5"], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stopping: max_train_steps=5 reached" in proc.stdout, proc.stdout[-2000:]
    records = _records(logdir)
    assert records[-1]["training_step"] == 5, proc.stdout[-2000:]
    losses = [r["loss/total"] for r in records if r.get("loss/total") is not None]
    assert losses and all(np.isfinite(x) and abs(x) < 1e6 for x in losses)
    latest = open(os.path.join(logdir, "checkpoints", "latest")).read().strip()
    step = int(latest.split("-")[1])
    ckpt = os.path.join(logdir, "checkpoints", latest)
    assert os.path.isfile(os.path.join(ckpt, "replay.npz"))

    proc = _run("muzero.learner", [*common, f"--max_train_steps={step + 5}"], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resumed from {ckpt}: training step {step}" in proc.stdout
    done = re.search(r"done: (.*); training step (\d+), env steps", proc.stdout)
    assert done and done[1] == f"max_train_steps={step + 5} reached" and int(done[2]) == step + 5, \
        proc.stdout[-2000:]

    latest = open(os.path.join(logdir, "checkpoints", "latest")).read().strip()
    export = os.path.join(logdir, "export", f"step-{int(latest.split('-')[1])}")
    with open(os.path.join(export, "muzero_export.json")) as f:
        description = json.load(f)
    assert description["algo"] == "r2d2" and description["state"] == {"c": [64], "h": [64]}
    # The export plays (the function `python -m muzero.eval` calls; test_algorithms_e2e runs
    # the command itself in a fresh process).
    from muzero.algorithms.policy_export import evaluate_policy
    result = evaluate_policy(export, episodes=2, num_envs=2)
    # One point per step survived: the returns are the lengths, 8 to 500 steps.
    assert result["returns"] == pytest.approx(result["lengths"]) and 8 <= result["mean_return"] <= 500

    proc = _run("muzero.learner", ["--algo=r2d2", "--env=gym:Pendulum-v1", f"--logdir={tmp_path / 'p'}"],
                timeout=120)
    lines = [line for line in proc.stderr.splitlines()
             if line.strip() and not line.startswith(("I0000", "W0000", "WARNING"))]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "r2d2" in lines[0] and "Box(-2, 2, (1,))" in lines[0]
    if "sac" in algorithms.names():
        assert "sac" in lines[0]


def test_remote_env_ids_take_the_rungs_after_the_local_training_envs():
    # 2 local training envs (ids 0, 1), 1 evaluation env (id 2) and 2 remote ids (3, 4): a
    # ladder of 4 rungs 0.4 ** (1 + 7 i / 3); remote id 3 takes rung 2 and id 4 rung 3;
    # the evaluation id, ids outside every range and evaluation rows take eval_epsilon.
    from muzero.algorithms.r2d2.config import R2D2ActingConfig
    from muzero.algorithms.r2d2.learning import R2D2Policy
    policy = R2D2Policy(_network(), 2, R2D2ActingConfig(eval_epsilon=0.001), seed=1, remote_base=3, num_remote=2)
    rungs = [0.4 ** (1 + 7 * i / 3) for i in range(4)]
    eps = policy.epsilons(np.array([0, 1, 2, 3, 4, 5, 4]), np.array([False] * 6 + [True]))
    np.testing.assert_allclose(eps, [rungs[0], rungs[1], 0.001, rungs[2], rungs[3], 0.001, 0.001])
