"""Wiring of SAC into the generic run loop: ``BUILDER = SACBuilder()`` (``muzero.core.Builder``).

SAC uses step streaming: thin actors (``muzero.algorithms.streaming_actor``) send observations and
rewards; ``muzero.algorithms.streaming.StepStreamingService`` acts with the learner's
``SACPolicy`` and hands unrolls (with the observations episodes ended on) to the learner,
which stores their transitions in its replay.

Per-env defaults (``default_settings``):

* ``gym:Pendulum-v1``: rl-baselines3-zoo's tuned SAC (the SB3 defaults with learning rate
  1e-3): batch 256, discount 0.99, tau 0.005, 100 transitions before learning, one update
  per env step. 4 training envs, 10 greedy evaluation envs (so 20 evaluation episodes
  take two rounds of 200 steps).
* ``reach`` and ``gym:FetchReach-v4`` (goal envs): SAC + HER as in SB3's FetchReach
  recipe: the "future" strategy with 4 relabelled goals per transition, discount 0.95.
* ``cartpole`` and any other ``gym:<ID>``: the SB3 defaults (``SACConfig()``); discrete
  action sets use the categorical variant.

Imports no TensorFlow until a learner or service is made.
"""
from __future__ import annotations

from muzero import algorithms, core
from muzero.algorithms.sac.config import SACConfig, SACTrainingConfig
from muzero.algorithms.streaming_builder import StreamingBuilder
from muzero.config import ConfigError

NAME = "sac"

PENDULUM_CONFIG = SACConfig(training=SACTrainingConfig(actor_learning_rate=1e-3, critic_learning_rate=1e-3,
                                                       alpha_learning_rate=1e-3))
GOAL_CONFIG = SACConfig(training=SACTrainingConfig(discount=0.95, her_relabels=4, her_strategy="future",
                                                   actor_learning_rate=1e-3, critic_learning_rate=1e-3,
                                                   alpha_learning_rate=1e-3, min_replay=1000))
GOAL_ENVS = ("reach", "gym:FetchReach-v4")


class SACBuilder(StreamingBuilder):
    """Makes SAC's learner, streaming service and thin actors."""
    summary = "soft actor-critic from replay, box or discrete actions, hindsight relabelling"

    name = NAME
    config_class = SACConfig
    action_kinds = ("continuous", "discrete")
    store_final_observations = True

    def refusal(self, descriptor):
        reason = super().refusal(descriptor)
        if reason is None and getattr(descriptor, "kind", "vector") == "image":
            reason = "it has image observations and --algo=sac's networks are MLPs over vector observations"
        return reason

    def default_settings(self, env: str):
        from muzero.settings import RunSettings
        if not isinstance(env, str) or not (env in ("cartpole", "reach") or (env.startswith("gym:") and len(env) > 4)):
            raise ValueError(f"--algo=sac has no defaults for env {env!r}; it has defaults for cartpole, reach "
                             "and gym:<ID> (single-player envs with vector observations)")
        config = SACConfig()
        if env == "gym:Pendulum-v1":
            config = PENDULUM_CONFIG
        elif env in GOAL_ENVS:
            config = GOAL_CONFIG
        return RunSettings(env=env, algo=NAME, config=config, num_actors=1, envs_per_actor=4,
                           num_eval_actors=1, eval_envs_per_actor=10, publish_every_steps=4,
                           summary_every_steps=500)

    def check_settings(self, settings) -> None:
        if settings.num_actors < 1 and settings.remote_envs < 1:
            raise ConfigError(f"RunSettings.num_actors={settings.num_actors} is invalid for --algo=sac: "
                              "training needs at least one training actor (or --remote_envs for actors on "
                              "other machines)")

    def make_learner(self, settings, descriptor, context: core.RunContext):
        algorithms.check_env(self, descriptor)
        from muzero.algorithms.sac.learning import SACLearner
        return SACLearner(descriptor, settings.config, seed=settings.seed, env=settings.env,
                          env_options=dict(settings.env_options))


BUILDER = SACBuilder()

__all__ = ["BUILDER", "SACBuilder", "PENDULUM_CONFIG", "GOAL_CONFIG"]
