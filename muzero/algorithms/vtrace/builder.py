"""``--algo=vtrace``: the parts of a V-trace (IMPALA) run, as SEED RL's V-trace learner.

Thin step-streaming actors send observations and rewards; the learner's
``StepStreamingService`` answers with actions sampled from the serving network and
cuts every env's stream into unrolls of ``training.unroll_length`` steps, which go into
the learner's ``UnrollQueue`` (capacity one batch: acting stays at most about one batch
ahead of training, SEED's on-policy back-pressure). The learner trains on
``training.batch_size`` unrolls per step with the V-trace loss.

Supported envs: single-player, discrete actions (``cartpole``, ``atari``, ``gym:<ID>``).
"""
from __future__ import annotations


from muzero import core
from muzero.algorithms.streaming_builder import StreamingBuilder
from muzero.algorithms.vtrace.config import VTraceConfig, VTraceNetworkConfig, VTraceTrainingConfig
from muzero.config import ConfigError

NAME = "vtrace"


def _cartpole_settings(env: str):
    from muzero.settings import RunSettings
    # CartPole-v1. V-trace uses each step once (no epochs, no replay), so what decides the
    # sample efficiency is the number of updates per env step: small batches of short unrolls,
    # 8 x 16 = 128 agent steps per update, with Adam 2e-3 (A2C-like). Measured with a synchronous
    # acting/training loop (no RPC) over 3-6 seeds each: 8 x 16 at lr 2e-3 reached a greedy
    # evaluation mean of 497-500 at 300k env steps in 6 of 6 seeds (1 of 3 at 200k); 16 x 32 at
    # lr 1e-3 was at 160-375 after 400k; 4 x 16 at 1e-3 solved too but needs twice the updates.
    # 32 envs in one actor process: more envs per batch of unrolls adds policy lag (64 envs did
    # worse than 32). Discount 0.98 (returns up to ~50: small baseline loss next to the policy
    # loss; in one 3-seed comparison at 400k env steps 0.98 solved 2 and 0.99 1). Entropy 0.01 (SEED's 2.5e-4 is for
    # 18-action Atari with 100-step unrolls). The linear decay to 0 over 20k updates (~2.5M env
    # steps) keeps a solved policy from collapsing in long runs (1M env steps: still 500).
    return RunSettings(
        env=env, algo=NAME,
        config=VTraceConfig(
            network=VTraceNetworkConfig(torso="mlp", mlp_hidden_sizes=(64, 64), activation="relu"),
            training=VTraceTrainingConfig(batch_size=8, unroll_length=16, learning_rate=2e-3,
                                          lr_schedule="linear", lr_decay_steps=20_000,
                                          discount=0.98, entropy_cost=0.01, baseline_cost=0.5,
                                          gradient_clip_norm=40.0)),
        num_actors=1, envs_per_actor=32, num_eval_actors=1, eval_envs_per_actor=20,
        checkpoint_every_secs=120.0)


def _atari_settings(env: str):
    from muzero.settings import RunSettings
    # SEED's Atari V-trace: batch 32 unrolls of 100 steps would be 3,200 frames of 96x96 per step on
    # CPU; 20-step unrolls keep a batch at 640 frames. Adam 4.8e-4 with SEED's beta1 0 and epsilon,
    # linear decay over 200k updates, entropy 0.01 (6-18 actions), rewards clipped to [-1, 1].
    return RunSettings(
        env=env, algo=NAME,
        config=VTraceConfig(
            network=VTraceNetworkConfig(torso="atari"),
            training=VTraceTrainingConfig(batch_size=32, unroll_length=20, learning_rate=4.8e-4,
                                          lr_schedule="linear", lr_decay_steps=200_000,
                                          adam_beta1=0.0, adam_epsilon=3.125e-7, discount=0.99,
                                          entropy_cost=0.01, max_abs_reward=1.0, gradient_clip_norm=40.0)),
        num_actors=2, envs_per_actor=16, num_eval_actors=1, eval_envs_per_actor=4,
        checkpoint_every_secs=600.0)


def _gym_settings(env: str):
    # Gymnasium ids: the CartPole defaults, with the conv torso picked for image observations.
    from muzero.settings import replace_sections
    return replace_sections(_cartpole_settings(env), {"network": {"torso": "auto"}})


class VTraceBuilder(StreamingBuilder):
    summary = "IMPALA: thin actors, V-trace off-policy correction"
    name = NAME
    config_class = VTraceConfig

    def default_settings(self, env: str):
        if env == "cartpole":
            return _cartpole_settings(env)
        if env == "atari":
            return _atari_settings(env)
        if isinstance(env, str) and env.startswith("gym:") and len(env) > 4:
            return _gym_settings(env)
        raise ValueError(f"--algo=vtrace has no defaults for env {env!r}: it plays single-player envs "
                         "with discrete actions: cartpole, atari, gym:<ID> (two-player games such as "
                         "tictactoe: --algo=muzero)")

    def check_settings(self, settings) -> None:
        if settings.num_actors * settings.envs_per_actor + settings.remote_envs < 1:
            raise ConfigError("--algo=vtrace needs at least one training env (num_actors * envs_per_actor >= 1, "
                              "or --remote_envs for actors on other machines)")

    def make_learner(self, settings, descriptor, context: core.RunContext):
        from muzero.algorithms.vtrace.learning import VTraceLearner
        return VTraceLearner(settings, descriptor, context)

    def policy(self, learner):
        return learner.make_policy()



BUILDER = VTraceBuilder()
