"""MuZero defaults fitted to a ``gym:`` env: supports from the reward scale, step limit and
discount; the random-policy reward probe; what the learner's flags make of them.

Expected supports are worked out by hand below (h(x) = sqrt(x + 1) - 1 + 0.001 x for x >= 0).
"""
import dataclasses
import math

import pytest

from envs.base import EnvDescriptor
from envs.probe import RewardProbe, probe_rewards
from muzero.algorithms.muzero import defaults
from muzero.algorithms.muzero.config import SupportConfig


def _probe(max_abs=1.0, lo=1.0, hi=1.0, typical=None):
    calls = []

    def probe():
        calls.append(1)
        return RewardProbe(env_steps=5000, episodes=7, max_abs_reward=max_abs, min_reward=lo, max_reward=hi,
                           mean_return=None, seconds=0.1, typical_abs_reward=typical)
    return probe, calls


def _vector(name="gym:Test-v0", reward_range=None, limit=500):
    return EnvDescriptor(name=name, observation_shape=(4,), observation_dtype="float32", num_actions=2,
                         reward_range=reward_range, max_episode_steps=limit)


def test_discounted_horizon_by_hand():
    # (1 - 0.9^3) / (1 - 0.9) = 1 + 0.9 + 0.81 = 2.71
    assert defaults.discounted_horizon(0.9, 3) == pytest.approx(2.71)
    assert defaults.discounted_horizon(0.99, None) == pytest.approx(100.0)
    assert defaults.discounted_horizon(1.0, 9) == 9.0
    assert math.isinf(defaults.discounted_horizon(1.0, None))


def test_fitted_supports_cartpole_matches_the_built_in_env():
    # Reward 1, discount 0.99, 500 steps: returns <= (1 - 0.99^500) / 0.01 = 99.343;
    # h(99.343) = sqrt(100.343) - 1 + 0.0993 = 9.116 -> 10 units -> [-10, 10], 21 bins.
    # Reward: h(1) = sqrt(2) - 1 + 0.001 = 0.415 -> 1 unit, plus one -> [-2, 2], 5 bins.
    value, reward, bound = defaults.fitted_supports(1.0, 0.99, 500)
    assert bound == pytest.approx(99.343, abs=1e-3)
    assert value == SupportConfig(-10.0, 10.0, 21, True)
    assert reward == SupportConfig(-2.0, 2.0, 5, True)
    built_in = defaults.run_defaults("cartpole").config.network
    assert (value, reward) == (built_in.value_support, built_in.reward_support)


def test_fitted_supports_lunar_lander_scale():
    # Rewards up to 100 (a crash is -100), discount 0.99, 1000 steps:
    # bound = 100 (1 - 0.99^1000) / 0.01 = 9999.57; h = sqrt(10000.57) - 1 + 9.99957 = 109.0024
    # -> 110 units, 221 bins. Reward: h(100) = sqrt(101) - 1 + 0.1 = 9.150 -> 10, plus one -> 11, 23 bins.
    value, reward, bound = defaults.fitted_supports(100.0, 0.99, 1000)
    assert bound == pytest.approx(9999.57, abs=0.01)
    assert value == SupportConfig(-110.0, 110.0, 221, True)
    assert reward == SupportConfig(-11.0, 11.0, 23, True)


def test_fitted_supports_cap_at_the_papers_601_bins():
    value, _, bound = defaults.fitted_supports(1.0, 1.0, None)   # no limit, no discount: unbounded
    assert math.isinf(bound) and value == SupportConfig(-300.0, 300.0, 601, True)
    value, _, _ = defaults.fitted_supports(1e6, 0.997, 27_000)
    assert value.num_bins == 601


def test_fitted_supports_with_a_typical_reward_lunar_lander():
    # Ordinary steps pay 2.5 in |reward|, one step up to 100 (landing bonus / crash), discount
    # 0.997, 1000 steps: 0.997^1000 = 0.049563, horizon (1 - 0.049563) / 0.003 = 316.812;
    # bound = 2.5 x 316.812 + (100 - 2.5) = 889.53; h = sqrt(890.53) - 1 + 0.88953 = 29.731
    # -> 30 units, 61 bins (against 419 with every step paying 100).
    value, reward, bound = defaults.fitted_supports(100.0, 0.997, 1000, typical_reward=2.5)
    assert bound == pytest.approx(889.53, abs=0.01)
    assert value == SupportConfig(-30.0, 30.0, 61, True)
    assert reward == SupportConfig(-11.0, 11.0, 23, True)
    # Reward 1 on every step (CartPole): the typical reward is the scale, the bound unchanged.
    assert defaults.fitted_supports(1.0, 0.99, 500, typical_reward=1.0)[2] == pytest.approx(99.343, abs=1e-3)
    # No discount, no limit: unbounded while ordinary steps pay anything; one reward when they pay 0.
    assert math.isinf(defaults.fitted_supports(1.0, 1.0, None, typical_reward=0.5)[2])
    value, _, bound = defaults.fitted_supports(1.0, 1.0, None, typical_reward=0.0)
    assert bound == 1.0 and value == SupportConfig(-1.0, 1.0, 3, True)   # h(1) = 0.415 -> 1 unit


def test_fitted_discount_follows_the_episode_limit():
    # 0.99's horizon is 100 steps: kept up to 5 x 100 = 500-step episodes.
    for limit, discount in ((200, 0.99), (500, 0.99), (501, 0.997), (1000, 0.997), (27_000, 0.997), (None, 0.997)):
        assert defaults.fitted_discount(limit) == discount, limit


def test_long_episodes_act_at_temperature_one_for_the_whole_run():
    settings = defaults.run_defaults("gym:Test-v0")
    # CartPole's schedule: factor 1 until step 3,000, 0.5 until 6,000, then 0.25.
    assert settings.config.search.temperature_at(7_000) == 0.25
    probe, _ = _probe()
    for limit in (1000, None):   # longer than 5 x the 100-step horizon of 0.99, or unlimited
        fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=limit), {}, probe=probe)
        search = fitted.config.search
        assert (search.temperature, search.temperature_steps, search.temperature_factors) == (1.0, (), (1.0,))
        assert search.temperature_at(0) == search.temperature_at(10**6) == 1.0
        assert any(n.startswith("search.temperature = 1 for the whole run, not falling to 0.25 by training "
                                "step 6,000") for n in notes)
    # CartPole-v1's 500 steps keep the built-in schedule (and so the built-in env's settings).
    fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=500), {}, probe=probe)
    assert fitted.config.search.temperature_steps == (3_000, 6_000)
    assert not any("temperature" in n for n in notes)
    # A user's temperature setting is left alone; a user's discount is too, and the temperature
    # still follows the episode length.
    fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=1000),
                                              {"search": {"temperature_factors": (1.0, 0.5, 0.25)}}, probe=probe)
    assert fitted.config.search.temperature_steps == (3_000, 6_000) and not any("temperature" in n for n in notes)
    fitted, _ = defaults.fit_run_defaults(settings, _vector(limit=1000), {"search": {"discount": 0.99}},
                                          probe=probe)
    assert fitted.config.search.temperature_steps == () and fitted.config.search.discount == 0.99


def test_long_episodes_train_at_a_constant_learning_rate():
    settings = defaults.run_defaults("gym:Test-v0")
    training = settings.config.training
    assert (training.learning_rate, training.lr_schedule, training.lr_decay_steps) == (3e-3, "cosine", 20_000)
    probe, _ = _probe()
    for limit in (1000, None):
        fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=limit), {}, probe=probe)
        training = fitted.config.training
        assert (training.learning_rate, training.lr_schedule) == (2e-3, "constant")
        assert any(n.startswith("training.learning_rate = 0.002, constant, not CartPole's cosine decay from 0.003 "
                                "over 20,000 steps") for n in notes)
    # CartPole-v1's 500 steps keep CartPole's decay.
    fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=500), {}, probe=probe)
    training = fitted.config.training
    assert (training.learning_rate, training.lr_schedule, training.lr_decay_steps) == (3e-3, "cosine", 20_000)
    assert not any("learning_rate" in n for n in notes)
    # A user's learning-rate field leaves the whole schedule to the user.
    for changes in ({"training": {"lr_decay_steps": 30_000}}, {"training": {"learning_rate": 5e-4}},
                    {"training": {"lr_schedule": "cosine"}}, {"training": {"lr_alpha": 0.5}}):
        fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=1000), changes, probe=probe)
        training = fitted.config.training
        assert (training.learning_rate, training.lr_schedule) == (3e-3, "cosine")
        assert not any("learning_rate" in n for n in notes)


def test_fitted_runs_evaluate_by_the_root_they_train_with():
    # Gumbel's root in evaluation was measured on LunarLander and left out of the fit: every
    # gym: vector task evaluates by pUCT's most visited move, as it trains.
    settings = defaults.run_defaults("gym:Test-v0")
    probe, _ = _probe()
    for limit in (500, 1000, None):
        fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=limit), {}, probe=probe)
        search = fitted.config.search
        assert (search.root_selection, search.eval_root_selection, search.eval_gumbel_value_scale) == ("puct", "", 0.0)
        assert search.for_evaluation() is search
        assert not any("eval_root" in n for n in notes)


def test_fit_uses_the_probe_and_says_where_each_default_came_from():
    settings = defaults.run_defaults("gym:Test-v0")
    probe, calls = _probe(max_abs=100.0, lo=-100.0, hi=50.0, typical=2.5)
    fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=1000), {}, probe=probe)
    net = fitted.config.network
    assert calls == [1]
    # As worked out in test_fitted_supports_with_a_typical_reward_lunar_lander.
    assert (net.value_support.num_bins, net.reward_support.num_bins) == (61, 23)
    assert fitted.config.search.discount == 0.997
    text = "\n".join(notes)
    assert "network.value_support" in text and "network.reward_support" in text
    assert "5000 random-policy steps" in text and "-100..50" in text and "1000 steps at discount 0.997" in text
    assert "search.discount = 0.997" in text and "paid 2.5 in |reward|" in text
    # Everything else is the CartPole-derived default, evaluation actors included.
    assert fitted.num_eval_actors == 1 and fitted.eval_envs_per_actor == 20
    assert dataclasses.replace(net, value_support=SupportConfig(), reward_support=SupportConfig()) == \
        dataclasses.replace(settings.config.network, value_support=SupportConfig(), reward_support=SupportConfig())
    # Without a typical reward every step is assumed to pay the scale: 100 x 316.812 = 31,681;
    # h = sqrt(31682) - 1 + 31.681 = 208.67 -> 209 units, 419 bins.
    probe, _ = _probe(max_abs=100.0, lo=-100.0, hi=50.0)
    fitted, _ = defaults.fit_run_defaults(settings, _vector(limit=1000), {}, probe=probe)
    assert fitted.config.network.value_support == SupportConfig(-209.0, 209.0, 419, True)


def test_fit_keeps_what_the_user_sets_and_reads_their_discount():
    settings = defaults.run_defaults("gym:Test-v0")
    probe, calls = _probe()
    changes = {"network": {"reward_support": SupportConfig(-3.0, 3.0, 7, True)}, "search": {"discount": 0.9}}
    fitted, notes = defaults.fit_run_defaults(settings, _vector(limit=None), changes, probe=probe)
    # discount 0.9, no limit: bound 10, h(10) = sqrt(11) - 1 + 0.01 = 2.327 -> 3 units, 7 bins.
    assert fitted.config.network.value_support == SupportConfig(-3.0, 3.0, 7, True)
    assert fitted.config.network.reward_support == settings.config.network.reward_support  # left for the user's
    assert not any("reward_support" in n for n in notes)
    assert fitted.config.search.discount == settings.config.search.discount   # applied by the caller
    assert not any("discount =" in n for n in notes)
    fitted, notes = defaults.fit_run_defaults(settings, _vector(), {"network": {"value_support": SupportConfig(),
                                                                               "reward_support": SupportConfig()}},
                                              probe=probe)
    assert len(calls) == 1   # nothing left to fit: the env is not probed; only the discount follows the limit
    assert [n.split(":")[0] for n in notes] == ["search.discount = 0.99"]
    assert fitted.config.network == settings.config.network


def test_declared_reward_range_wins_over_the_probe_and_zero_rewards_assume_one():
    settings = defaults.run_defaults("gym:Test-v0")
    probe, calls = _probe(max_abs=50.0)
    fitted, notes = defaults.fit_run_defaults(settings, _vector(reward_range=(-1.0, 1.0)), {}, probe=probe)
    assert calls == [] and fitted.config.network.value_support.num_bins == 21
    assert any("declared reward range (-1.0, 1.0)" in n for n in notes)
    probe, _ = _probe(max_abs=0.0, lo=0.0, hi=0.0)
    fitted, notes = defaults.fit_run_defaults(settings, _vector(), {}, probe=probe)
    assert fitted.config.network.value_support.num_bins == 21 and any("1 is assumed" in n for n in notes)


def test_image_observations_get_the_atari_settings_and_other_envs_are_untouched():
    settings = defaults.run_defaults("gym:Img-v0")
    image = EnvDescriptor(name="gym:Img-v0", observation_shape=(84, 84, 1), observation_dtype="uint8",
                          num_actions=6, kind="image", frame_layout="HWC", reward_range=(-1.0, 1.0),
                          max_episode_steps=27_000)
    fitted, notes = defaults.fit_run_defaults(dataclasses.replace(settings, env_options={"a": 1}), image, {})
    atari = defaults.run_defaults("atari")
    assert fitted.config.targets.stack_frames == atari.config.targets.stack_frames == 8
    assert fitted.config.network.conv_downsample and fitted.env == "gym:Img-v0" and fitted.env_options == {"a": 1}
    assert "Atari defaults" in notes[0]
    for env in ("cartpole", "tictactoe"):
        built_in = defaults.run_defaults(env)
        assert defaults.fit_run_defaults(built_in, _vector(name=env), {}) == (built_in, [])


def test_probe_on_cartpole_sees_reward_one_and_short_random_episodes():
    seen = probe_rewards("gym:CartPole-v1", max_env_steps=2_000)
    assert seen.env_steps >= 2_000 and seen.max_abs_reward == 1.0 == seen.min_reward == seen.max_reward
    # A random policy keeps the pole up for about 22 steps on average.
    assert seen.episodes > 40 and 12 < seen.mean_return < 40
    again = probe_rewards("gym:CartPole-v1", max_env_steps=2_000)   # a fixed seed: the same episodes
    assert (again.episodes, again.mean_return) == (seen.episodes, seen.mean_return)


def test_learner_flags_print_and_apply_fitted_defaults():
    from absl import flags

    from muzero.learner import __main__ as cli
    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS(["learner", "--env=gym:CartPole-v1", "--set=search.discount=0.9", "--num_eval_actors=0"])
        settings, notes = cli.build_settings()
    finally:
        flags.FLAGS.unparse_flags()
    # The user's discount 0.9 with 500 steps: bound (1 - 0.9^500) / 0.1 = 10 -> 3 units, 7 bins.
    assert settings.config.network.value_support == SupportConfig(-3.0, 3.0, 7, True)
    assert settings.config.search.discount == 0.9 and settings.num_eval_actors == 0
    assert any("random-policy steps" in n for n in notes)



def test_probe_separates_the_typical_reward_from_the_last_step():
    import gymnasium
    import numpy as np

    class CrashAtFive(gymnasium.Env):
        """Rewards 1, 1, 1, 1, then -10 on the fifth step, which ends the episode."""
        observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.zeros(2, np.float32), (-10.0 if self.t == 5 else 1.0), self.t == 5, False, {}

    gymnasium.register("ProbeCrashAtFive-v0", entry_point=CrashAtFive, max_episode_steps=100)
    seen = probe_rewards("gym:ProbeCrashAtFive-v0", num_envs=2, max_env_steps=20)
    # 2 envs x 10 batch steps: 4 episodes ended on a -10; the other 16 steps paid 1.
    assert (seen.env_steps, seen.episodes) == (20, 4)
    assert (seen.min_reward, seen.max_reward, seen.max_abs_reward) == (-10.0, 1.0, 10.0)
    assert seen.typical_abs_reward == 1.0 and seen.mean_return == -6.0


def test_mirror_augmentation_follows_the_envs_mirror():
    # The built-in cartpole trains half of each batch mirrored; a gym: vector task does too
    # exactly when Gymnasium's class for the id has a mirror (CartPole's), so gym:CartPole-v1
    # gets the built-in env's training settings and gym:Acrobot-v1 (no mirror) does not.
    assert defaults.run_defaults("cartpole").config.training.augment_symmetries is True
    settings = defaults.run_defaults("gym:Test-v0")
    assert settings.config.training.augment_symmetries is False
    probe, _ = _probe()
    fitted, notes = defaults.fit_run_defaults(dataclasses.replace(settings, env="gym:CartPole-v1"),
                                              _vector("gym:CartPole-v1"), {}, probe=probe)
    assert fitted.config.training == defaults.run_defaults("cartpole").config.training
    assert any(n.startswith("training.augment_symmetries = true: the env has a mirror") for n in notes)
    for name in ("gym:Acrobot-v1", "gym:Test-v0"):
        fitted, notes = defaults.fit_run_defaults(dataclasses.replace(settings, env=name), _vector(name), {},
                                                  probe=probe)
        assert fitted.config.training.augment_symmetries is False and not any("augment" in n for n in notes)
    # The user's own setting is kept.
    fitted, notes = defaults.fit_run_defaults(dataclasses.replace(settings, env="gym:CartPole-v1"),
                                              _vector("gym:CartPole-v1"), {"training": {"augment_symmetries": False}},
                                              probe=probe)
    assert fitted.config.training.augment_symmetries is False and not any("augment" in n for n in notes)


def test_hidden_mlp_biases_only_where_they_were_measured_to_help():
    # The built-in cartpole's MLPs have no hidden biases (faster to 475 side by side); gym: ids
    # (LunarLander) and the few_env_steps preset keep them.
    assert defaults.run_defaults("cartpole").config.network.mlp_bias is False
    assert defaults.run_defaults("gym:Test-v0").config.network.mlp_bias is True
    assert defaults.FEW_ENV_STEPS.sections["network"] == {"mlp_bias": True}
    # Nothing else of the gym: network differs from the built-in cartpole's before fitting.
    gym = defaults.run_defaults("gym:Test-v0").config.network
    assert dataclasses.replace(gym, mlp_bias=False) == defaults.run_defaults("cartpole").config.network
