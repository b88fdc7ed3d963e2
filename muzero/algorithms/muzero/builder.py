"""MuZero's parts for the run loop: learner (trainer + replay), latent-cache service, search actors."""
from __future__ import annotations

import dataclasses

import envs

from muzero import core
from muzero.algorithms.muzero import defaults
from muzero.config import NETWORK_PARTS, ConfigError, MuZeroConfig
from muzero.learner.settings import replace_section


class MuZeroBuilder(core.Builder):
    name = "muzero"
    config_class = MuZeroConfig
    ingestion = "trajectory"
    two_player = True
    presets = defaults.PRESETS
    multi_device = True
    trainable_parts = NETWORK_PARTS

    def default_settings(self, env: str):
        return defaults.run_defaults(env)

    def logdir_name(self, env: str) -> str:
        return env   # runs/<env>: the package's default algorithm

    def resume_identity(self, config: dict) -> dict:
        # A pretraining run's checkpoints hold no dynamics or prediction to resume from.
        return {"config.pretrain.enabled": bool((config.get("pretrain") or {}).get("enabled", False))}

    def fit_to_env(self, settings, descriptor, changes: dict) -> tuple:
        settings, notes = defaults.fit_run_defaults(settings, descriptor, changes)
        pretrain = changes.get("pretrain", {}).get("enabled", settings.config.pretrain.enabled)
        if pretrain and settings.num_eval_actors:
            # Random moves need no evaluation, and a random actor that pushes no segments is
            # never paced by the replay: it would take a core from the learner.
            settings = dataclasses.replace(settings, num_eval_actors=0)
            notes.append("num_eval_actors=0: a pretraining run's actors play random moves; the training "
                         "return is the random policy's")
        if pretrain and descriptor.is_image and "shift_pixels" not in changes.get("pretrain", {}):
            # Random shifts of about 1/24 of the frame side: 4 px on 84-96 px frames (DrQ,
            # EfficientZero), 1 px on MinAtar's 10 x 10.
            side = min(descriptor.observation_shape[:2])
            shift = max(1, round(side / 24))
            if shift != settings.config.pretrain.shift_pixels:
                settings = replace_section(settings, "pretrain", shift_pixels=shift)
                notes.append(f"pretrain.shift_pixels={shift}: about 1/24 of the {side}-pixel frame side")
        return settings, notes

    def saved_network(self, network: dict, settings, descriptor) -> dict:
        # Runs written before network.mlp_bias existed had vector MLPs without hidden biases;
        # the setting does not change image and board networks, so any value matches there.
        legacy = False if descriptor.kind == "vector" else settings.config.network.mlp_bias
        # The initial weights' seed does not matter to a resume (the checkpoint replaces
        # them), and runs from before network.init_seed existed have none.
        return {"mlp_bias": legacy, **network, "init_seed": settings.config.network.init_seed}

    def resume_hint(self, old_network: dict, new_network: dict) -> str:
        if old_network.get("mlp_bias") is False and new_network.get("mlp_bias") is True:
            return " (runs made before 2026-12-04 resume with --set=network.mlp_bias=false)"
        return ""

    def check_settings(self, settings) -> None:
        devices = getattr(settings, "learner_devices", 1)
        batch = settings.config.training.batch_size
        if devices > 1 and batch % devices:
            raise ConfigError(f"training.batch_size={batch} does not split evenly over --learner_devices={devices}: "
                              f"use a batch size that is a multiple of {devices}")
        if settings.config.training.augment_symmetries and envs.board_symmetries(settings.env) is None \
                and envs.mirror_actions(settings.env) is None:
            raise ConfigError(f"training.augment_symmetries is on but env {settings.env!r} registers no "
                              "symmetries (board games such as tictactoe do, and cartpole and gym:CartPole-v1 "
                              "with their mirror): turn it off")
        if devices > 1 and settings.config.training.jit_compile:
            raise ConfigError(f"training.jit_compile applies to one learner device, not --learner_devices={devices} "
                              "(XLA cannot compile the multi-device step): set training.jit_compile=false")
        if devices > 1 and settings.config.pretrain.enabled:
            raise ConfigError(f"--learner_devices={devices} does not apply to --pretrain (pretraining trains on one "
                              "device): drop the flag")

    def make_learner(self, settings, descriptor, context, *, trainable_parts=None):
        if settings.config.pretrain.enabled:   # --pretrain: representation only (pretraining.py)
            from muzero.algorithms.muzero.pretraining import PretrainLearner
            return PretrainLearner(settings, descriptor, context, trainable_parts=trainable_parts)
        from muzero.algorithms.muzero.learning import MuZeroLearner
        return MuZeroLearner(settings, descriptor, context, trainable_parts=trainable_parts)

    def make_service(self, settings, descriptor, learner, context, server_config):
        from muzero.algorithms.muzero.service import MuZeroService
        from muzero.rpc.config import CacheServiceConfig
        # One cache slot per acting env (twice, so a restarted actor's new lease never waits
        # for the old one's timeout), each with a node per simulation plus the root.
        # The reanalyse worker (targets.reanalyse_fraction > 0) leases one batch of slots too.
        envs = settings.total_envs
        if settings.config.targets.reanalyse_fraction > 0 and not settings.config.pretrain.enabled:
            envs += settings.config.targets.reanalyse_batch_size
        config = CacheServiceConfig(max_nodes=settings.config.search.num_nodes,
                                    cache_slots=max(256, 2 * envs))
        service = MuZeroService(learner.trainer.serving, config,
                                push_segments_handler=learner.push_segments,
                                learner_info_handler=learner.learner_info)
        service.set_weights_version(learner.training_step)
        attach = getattr(learner, "attach_service", None)   # MuZeroLearner: the reanalyse worker's service
        if attach is not None:
            attach(service)
        return service

    def actor_target(self):
        from muzero.actor.actor import run_actor
        return run_actor

    def actor_args(self, settings, index, address, client_config, training_step):
        from muzero.actor.actor import ActorSettings
        import envs
        cfg: MuZeroConfig = settings.config
        is_image = envs.describe(settings.env, **settings.env_options).is_image
        evaluation = index >= settings.num_actors
        return (ActorSettings(
            server=address, env=settings.env, search=cfg.search, env_options=dict(settings.env_options),
            envs_per_actor=settings.eval_envs_per_actor if evaluation else settings.envs_per_actor,
            actor_id=index, seed=settings.seed + 7919 * (training_step + 1), evaluation=evaluation,
            stack_frames=cfg.targets.frames_for(is_image),
            segment_length=cfg.replay.segment_length, client_config=client_config,
            random_policy=cfg.pretrain.enabled),)


BUILDER = MuZeroBuilder()
