"""Wiring of PPO into the generic run loop: ``BUILDER = PPOBuilder()`` (``muzero.core.Builder``).

PPO uses step streaming: thin actors (``muzero.algorithms.streaming_actor``) send observations and
rewards, ``muzero.algorithms.streaming.StepStreamingService`` acts with the learner's
``PPOPolicy`` and hands finished unrolls to the learner's queue.

Per-env defaults (``default_settings``):

* ``cartpole``: rl-baselines3-zoo's tuned PPO for CartPole-v1 (8 envs x 32 steps = 256
  transitions per batch, one minibatch, 20 epochs, discount 0.98, lambda 0.8, no entropy
  bonus, lr 1e-3 and clip 0.2 both linear to 0; two separate 64-64 tanh MLPs). The zoo
  reaches 500 after 100k env steps; the linear schedules here end at 150k env steps
  (12,000 updates of 256 transitions each).
* ``atari``: CleanRL's Atari PPO (8 envs x 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4
  linear, clip 0.1, entropy 0.01, rewards clipped to +-1; conv torso and its 512 dense
  layer shared by the policy and value heads). Observations are single frames (the
  policy keeps no frame stack).
* ``gym:<ID>``: the ``PPOConfig`` defaults (CleanRL's classic-control PPO) with 4 envs.

Imports no TensorFlow until a learner or service is made.
"""
from __future__ import annotations

from muzero import algorithms, core
from muzero.algorithms.ppo.config import PPOConfig, PPONetworkConfig, PPOTrainingConfig
from muzero.algorithms.streaming_builder import StreamingBuilder
from muzero.config import ConfigError

NAME = "ppo"

CARTPOLE_CONFIG = PPOConfig(
    network=PPONetworkConfig(torso="mlp", policy_hidden_sizes=(64, 64), value_hidden_sizes=(64, 64),
                             shared_layers=0, activation="tanh"),
    training=PPOTrainingConfig(unroll_length=32, batch_size=8, epochs=20, num_minibatches=1,
                               clip_epsilon=0.2, clip_schedule="linear", gae_lambda=0.8, discount=0.98,
                               entropy_cost=0.0, value_cost=0.5, policy_learning_rate=1e-3,
                               value_learning_rate=1e-3, lr_schedule="linear", lr_decay_steps=12_000,
                               gradient_clip_norm=0.5, normalize_advantages=True, scale_value_targets=True))

ATARI_CONFIG = PPOConfig(
    network=PPONetworkConfig(torso="atari", policy_hidden_sizes=(512,), value_hidden_sizes=(512,),
                             shared_layers=4, activation="relu"),
    training=PPOTrainingConfig(unroll_length=128, batch_size=8, epochs=4, num_minibatches=4,
                               clip_epsilon=0.1, clip_schedule="linear", gae_lambda=0.95, discount=0.99,
                               entropy_cost=0.01, value_cost=0.5, policy_learning_rate=2.5e-4,
                               value_learning_rate=2.5e-4, lr_schedule="linear", lr_decay_steps=40_000,
                               gradient_clip_norm=0.5, max_abs_reward=1.0))


class PPOBuilder(StreamingBuilder):
    """Makes PPO's learner, streaming service and thin actors."""
    summary = "thin actors, clipped policy updates"

    name = NAME
    config_class = PPOConfig

    def default_settings(self, env: str):
        from muzero.settings import RunSettings
        if env == "cartpole":
            return RunSettings(env=env, algo=NAME, config=CARTPOLE_CONFIG, num_actors=2, envs_per_actor=4,
                               num_eval_actors=1, eval_envs_per_actor=4, publish_every_steps=1,
                               summary_every_steps=5 * CARTPOLE_CONFIG.training.updates_per_batch)
        if env == "atari":
            return RunSettings(env=env, algo=NAME, config=ATARI_CONFIG, num_actors=2, envs_per_actor=4,
                               num_eval_actors=1, eval_envs_per_actor=2, publish_every_steps=1,
                               summary_every_steps=ATARI_CONFIG.training.updates_per_batch)
        if isinstance(env, str) and env.startswith("gym:") and len(env) > 4:
            config = PPOConfig()
            return RunSettings(env=env, algo=NAME, config=config, num_actors=1,
                               envs_per_actor=config.training.batch_size, num_eval_actors=1,
                               eval_envs_per_actor=4, publish_every_steps=1,
                               summary_every_steps=5 * config.training.updates_per_batch)
        raise ValueError(f"--algo=ppo has no defaults for env {env!r}; it has defaults for "
                         "cartpole, atari and gym:<ID> (single-player envs with discrete actions)")

    def check_settings(self, settings) -> None:
        t = settings.config.training
        if settings.num_actors < 1 and settings.remote_envs < 1:
            raise ConfigError(f"RunSettings.num_actors={settings.num_actors} is invalid for --algo=ppo: "
                              "training needs at least one training actor (or --remote_envs for actors on "
                              "other machines)")
        updates = t.updates_per_batch
        if updates % settings.publish_every_steps:
            raise ConfigError(f"RunSettings.publish_every_steps={settings.publish_every_steps} is invalid for "
                              f"--algo=ppo: it must divide the {updates} training steps taken per batch "
                              "(epochs * num_minibatches) so every batch's weights reach the actors")

    def make_learner(self, settings, descriptor, context: core.RunContext):
        algorithms.check_env(self, descriptor)
        from muzero.algorithms.ppo.learning import PPOLearner
        return PPOLearner(descriptor, settings.config, seed=settings.seed, stop_event=context.stop_event)



BUILDER = PPOBuilder()

__all__ = ["BUILDER", "PPOBuilder", "CARTPOLE_CONFIG", "ATARI_CONFIG"]
