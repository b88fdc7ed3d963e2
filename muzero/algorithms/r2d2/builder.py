"""``--algo=r2d2``: the parts of an R2D2 run (recurrent replay distributed DQN, SEED RL's R2D2).

Thin step-streaming actors send observations and rewards; the learner's
``StepStreamingService`` answers with epsilon-greedy actions of the serving recurrent
Q-network (the service keeps each env's LSTM state) and cuts every env's stream into
sequences of ``burn_in + unroll_length + 1`` steps (consecutive ones overlap by
``burn_in + 1``), which enter the learner's prioritized sequence replay with their initial
priority. The replay ratio (``replay.samples_per_insert``) paces actors and learner.

Supported envs: single-player, discrete actions (``cartpole`` with or without
``observe_velocity``, ``atari``, ``gym:<ID>``).
"""
from __future__ import annotations


from muzero import algorithms, core
from muzero.algorithms.r2d2.config import (R2D2ActingConfig, R2D2Config, R2D2NetworkConfig, R2D2ReplayConfig,
                                           R2D2TrainingConfig)
from muzero.algorithms.streaming_builder import StreamingBuilder
from muzero.config import ConfigError

NAME = "r2d2"

# CartPole-v1 (also its stateless variant, --env_options='{"observe_velocity": false}': the env
# name stays "cartpole", so these defaults apply). Small and fast for 2 CPU cores: MLP 64 ->
# LSTM 64 -> dueling heads of 64; sequences of 20 trained steps after a 10-step burn-in; 3-step
# double-Q targets with discount 0.99 (returns up to ~100, about 9 in h units); 32 sequences per
# update. Measured on 2 cores (one 16-env actor, one 4-env eval actor, 5-minute runs): the
# learner takes ~35 updates/s and the actors ~1,400 env steps/s, so the replay ratio decides how
# often a transition is trained: 4 sequences sampled per insert left the learner idle at ~10
# updates/s (eval ~400 after 5 minutes); 16 keeps both sides busy. With a replay of 4,000
# sequences (~1 minute of data) the solved policy forgot its failure states and oscillated
# (500 then 370-420); 20,000 sequences (the whole run) held eval >= 470 from ~3 minutes on
# and ended at 500. Adam 5e-4 was steadier than 1e-3; a target refresh every 100 updates (~3 s)
# beat 250.
CARTPOLE_CONFIG = R2D2Config(
    network=R2D2NetworkConfig(torso="mlp", mlp_hidden_sizes=(64,), lstm_size=64, head_hidden_size=64,
                              activation="relu"),
    acting=R2D2ActingConfig(),
    replay=R2D2ReplayConfig(capacity=20_000, min_size=200, samples_per_insert=16.0),
    training=R2D2TrainingConfig(unroll_length=20, burn_in=10, batch_size=32, n_step=3, discount=0.99,
                                learning_rate=5e-4, adam_epsilon=1e-3, gradient_clip_norm=40.0,
                                target_update_period=100))

# Atari: R2D2's paper values as SEED implements them (R2D2Config's defaults): conv torso +
# dense 512, LSTM 512, dueling heads of 512; 100 trained steps after a 40-step burn-in, 5-step
# targets, discount 0.997, value rescaling, batch 64, Adam 1e-4 (eps 1e-3), target every 2,500
# updates, replay ratio 1.5, priority exponent 0.9, importance sampling 0.6, eta 0.9, gradient
# norm 40, eval epsilon 1e-3. Replay: 1,000 sequences (SEED's flag; 141 frames of 96x96 each,
# ~1.3 GB; the paper's 100k sequences do not fit one machine's memory with this layout).
ATARI_CONFIG = R2D2Config()


def _cartpole_settings(env: str):
    from muzero.settings import RunSettings
    return RunSettings(env=env, algo=NAME, config=CARTPOLE_CONFIG, num_actors=1, envs_per_actor=16,
                       num_eval_actors=1, eval_envs_per_actor=4, publish_every_steps=1,
                       summary_every_steps=50, checkpoint_every_secs=120.0)


def _atari_settings(env: str):
    from muzero.settings import RunSettings
    return RunSettings(env=env, algo=NAME, config=ATARI_CONFIG, num_actors=2, envs_per_actor=16,
                       num_eval_actors=1, eval_envs_per_actor=4, publish_every_steps=1,
                       summary_every_steps=20, checkpoint_every_secs=600.0)


def _gym_settings(env: str):
    # Gymnasium ids: the CartPole defaults, with the conv torso picked for image observations.
    from muzero.settings import replace_sections
    return replace_sections(_cartpole_settings(env), {"network": {"torso": "auto"}})


class R2D2Builder(StreamingBuilder):
    """Makes R2D2's learner, streaming service (overlap = burn-in) and thin actors."""
    summary = "recurrent Q-learning from replay, discrete actions"

    name = NAME
    config_class = R2D2Config
    action_kinds = ("discrete",)

    def default_settings(self, env: str):
        if env == "cartpole":
            return _cartpole_settings(env)
        if env == "atari":
            return _atari_settings(env)
        if isinstance(env, str) and env.startswith("gym:") and len(env) > 4:
            return _gym_settings(env)
        raise ValueError(f"--algo=r2d2 has no defaults for env {env!r}: it plays single-player envs "
                         "with discrete actions: cartpole, atari, gym:<ID>")

    def overlap(self, settings) -> int:
        return settings.config.training.burn_in

    def check_settings(self, settings) -> None:
        if not isinstance(settings.config, R2D2Config):
            raise ConfigError(f"--algo=r2d2 needs an R2D2Config, got {type(settings.config).__name__}")
        if settings.num_actors * settings.envs_per_actor + settings.remote_envs < 1:
            raise ConfigError(f"RunSettings.num_actors={settings.num_actors} is invalid for --algo=r2d2: "
                              "training needs at least one training env (num_actors * envs_per_actor >= 1, "
                              "or --remote_envs for actors on other machines)")
        t = settings.config.training
        if t.n_step > t.unroll_length:
            raise ConfigError(f"R2D2TrainingConfig.n_step={t.n_step} is invalid: must be <= "
                              f"unroll_length={t.unroll_length}")

    def make_learner(self, settings, descriptor, context: core.RunContext):
        algorithms.check_env(self, descriptor)
        from muzero.algorithms.r2d2.learning import R2D2Learner
        return R2D2Learner(settings, descriptor, context)

    def policy(self, learner):
        return learner.policy


BUILDER = R2D2Builder()

__all__ = ["BUILDER", "R2D2Builder", "CARTPOLE_CONFIG", "ATARI_CONFIG"]
