"""MuZero's parts for the run loop: learner (trainer + replay), latent-cache service, search actors."""
from __future__ import annotations

import dataclasses

import envs

from muzero import core
from muzero.algorithms.muzero import defaults
from muzero.algorithms.muzero.config import NETWORK_PARTS, MuZeroConfig
from muzero.config import ConfigError
from muzero.settings import replace_section


class MuZeroBuilder(core.Builder):
    summary = "search actors, prioritized replay"
    name = "muzero"
    config_class = MuZeroConfig
    ingestion = "trajectory"
    two_player = True
    presets = defaults.PRESETS
    multi_device = True
    trainable_parts = NETWORK_PARTS
    numba_warmups = {"replay": "muzero.algorithms.muzero.replay:compile_kernels"}
    shortcuts = (
        core.Shortcut("simulations", "search", "num_simulations", "integer", "MCTS simulations per move"),
        core.Shortcut("pretrain", "pretrain", "enabled", "boolean",
                      "self-supervised pretraining run: actors play uniformly random legal moves, the learner "
                      "trains only the representation and the pretrain head on two augmented views of replay "
                      "observations (pretrain.objective ntxent or simsiam); no export at the end. Fine-tune "
                      "with --init_checkpoint=<its logdir>. docs/PRETRAINING.md"),
        core.Shortcut("dataset", "replay", "dataset", "string",
                      "recorded episodes (a Minari dataset id in the Minari root, or a folder; python -m "
                      "muzero.record makes them) put into the replay at the start; with --preset=offline the "
                      "run trains on them alone, without training actors. docs/PRETRAINING.md"),
    )

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
        dataset = changes.get("replay", {}).get("dataset", settings.config.replay.dataset)
        recorded_share = changes.get("replay", {}).get("dataset_fraction", settings.config.replay.dataset_fraction)
        share = min(0.5, 1.0 - recorded_share) if isinstance(recorded_share, (int, float)) else 0.5
        if dataset and share > 0 and not settings.config.targets.reanalyse_fraction \
                and "reanalyse_fraction" not in changes.get("targets", {}):
            # Recorded actions are another (usually weaker) policy's: as one-hot policy targets
            # they pull the policy back toward it. CartPole fine-tuned from an offline run that
            # plays 500: without reanalysis its greedy return fell to about 200-250 within the
            # first 30k env steps; with it, it stayed at 500 (docs/RESULTS.md, "Pretraining").
            # Both shares are of one batch: the reanalysed one leaves room for replay.dataset_fraction.
            settings = replace_section(settings, "targets", reanalyse_fraction=share)
            notes.append(f"targets.reanalyse_fraction={share:g}: the recorded episodes (--dataset) hold another "
                         f"policy's actions; {share:.0%} of each batch comes from positions the current network "
                         f"searched again")
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

    def make_learner(self, settings, descriptor, context):
        trainable_parts = context.trainable_parts or None   # None: the whole model
        if settings.config.pretrain.enabled:   # --pretrain: representation only (pretraining.py)
            from muzero.algorithms.muzero.pretraining import PretrainLearner
            return PretrainLearner(settings, descriptor, context, trainable_parts=trainable_parts)
        from muzero.algorithms.muzero.learning import MuZeroLearner
        return MuZeroLearner(settings, descriptor, context, trainable_parts=trainable_parts)

    def make_service(self, settings, descriptor, learner, context, server_config):
        from muzero.algorithms.muzero.service import MuZeroService
        from muzero.algorithms.muzero.config import CacheServiceConfig
        # One cache slot per acting env (twice, so a restarted actor's new lease never waits
        # for the old one's timeout), each with a node per simulation plus the root: the
        # learner's own actors, --remote_envs envs of actors on other machines, and the
        # reanalyse worker's batch (targets.reanalyse_fraction > 0). The learner's own actors'
        # slots are kept for them: remote actors cannot take them.
        from muzero.algorithms.muzero.reanalyse import REANALYSE_ACTOR_ID
        own = {i: settings.eval_envs_per_actor if i >= settings.num_actors else settings.envs_per_actor
               for i in range(settings.num_actors + settings.num_eval_actors)}
        if settings.config.targets.reanalyse_fraction > 0 and not settings.config.pretrain.enabled:
            own[REANALYSE_ACTOR_ID] = settings.config.targets.reanalyse_batch_size
        config = CacheServiceConfig(max_nodes=settings.config.search.num_nodes,
                                    cache_slots=max(256, 2 * (sum(own.values()) + settings.remote_envs)))
        service = MuZeroService(learner.trainer.serving, config,
                                push_segments_handler=learner.push_segments,
                                learner_info_handler=learner.learner_info)
        service.leases.reserve(own)
        service.leases.full_hint = ("actors on other machines need room: start the learner with --remote_envs=N, "
                                    "N the envs of all of them")
        service.set_weights_version(learner.training_step)
        attach = getattr(learner, "attach_service", None)   # MuZeroLearner: the reanalyse worker's service
        if attach is not None:
            attach(service)
        return service

    def actor_target(self):
        from muzero.algorithms.muzero.actor import run_actor
        return run_actor

    def actor_args(self, settings, index, address, client_config, training_step):
        evaluation = index >= settings.num_actors
        return (_actor_settings(
            settings, server=address, envs_per_actor=settings.eval_envs_per_actor if evaluation
            else settings.envs_per_actor, actor_id=index, seed=settings.seed + 7919 * (training_step + 1),
            evaluation=evaluation, client_config=client_config),)

    def remote_actor(self, settings, remote: core.RemoteActor) -> tuple:
        import functools

        from muzero.algorithms.muzero.actor import run_actor
        actor = _actor_settings(settings, server=remote.server, envs_per_actor=remote.envs_per_actor
                                or settings.envs_per_actor, actor_id=remote.actor_id, seed=remote.seed,
                                evaluation=remote.evaluation, client_config=remote.client_config,
                                max_env_steps=remote.max_env_steps)
        banner = f"actor {remote.actor_id}: {actor.envs_per_actor} x {settings.env} -> {remote.server}"
        return banner, functools.partial(run_actor, actor)

    def stored_episodes(self, checkpoint_dir: str, settings, descriptor) -> tuple:
        import os

        from muzero.algorithms.muzero.replay import Replay, stored_episodes
        from muzero.replay.snapshot import SnapshotError
        try:
            replay = Replay.restore(os.path.join(checkpoint_dir, "replay"))
        except SnapshotError as e:
            raise ValueError(f"{checkpoint_dir}: its replay cannot be read ({e})") from None
        theirs, mine = replay.descriptor, descriptor

        def facts(d) -> tuple:
            return tuple(d.observation_shape), str(d.observation_dtype), int(d.num_actions)
        if facts(theirs) != facts(mine):
            raise ValueError(f"{checkpoint_dir}: its replay holds observations {facts(theirs)[:2]} and "
                             f"{facts(theirs)[2]} actions, but the run's env {settings.env!r} has "
                             f"{facts(mine)[:2]} and {facts(mine)[2]}")
        return stored_episodes(replay)

    def play_export(self, export_dir: str, request: core.PlayRequest) -> dict:
        """Greedy search with the export's search settings (``run.json``) changed by
        ``request.overrides`` (``search.field=value`` only); tic-tac-toe against
        ``request.opponent``."""
        import numpy as np

        from muzero.algorithms.muzero.evaluator import evaluate, load_run, override_search, search_config_from_run
        run = load_run(export_dir) or {}
        items = list(request.overrides)
        simulations = None
        named = [item.split("=", 1)[0] for item in items]
        if not run and "search.num_simulations" in named:   # no saved search: start from the defaults
            simulations = int(items.pop(named.index("search.num_simulations")).split("=", 1)[1])
        search_config = override_search(search_config_from_run(run) if run else None, simulations, items)
        opponent = None
        if request.opponent != "none":
            from envs.tictactoe import EMPTY, MinimaxPlayer
            if request.opponent == "minimax":
                opponent = MinimaxPlayer(seed=request.seed).act
            else:
                rng = np.random.default_rng(request.seed)
                opponent = lambda board, to_play: int(rng.choice(np.flatnonzero(board == EMPTY)))  # noqa: E731
        return evaluate(export_dir, request.episodes, num_envs=request.num_envs, seed=request.seed,
                        env=request.env, env_options=request.env_options, search_config=search_config,
                        opponent=opponent, make_batch=request.make_batch)


def _actor_settings(settings, *, server, envs_per_actor, actor_id, seed, evaluation, client_config,
                    max_env_steps=0):
    """The search actor's ``ActorSettings`` for one actor of a run (``RunSettings``); a
    pretraining run's actors play uniformly random legal moves."""
    from muzero.algorithms.muzero.actor import ActorSettings
    cfg: MuZeroConfig = settings.config
    is_image = envs.describe(settings.env, **settings.env_options).is_image
    return ActorSettings(
        server=server, env=settings.env, search=cfg.search, env_options=settings.env_options_for(evaluation),
        envs_per_actor=envs_per_actor, actor_id=actor_id, seed=seed, evaluation=evaluation,
        stack_frames=cfg.targets.frames_for(is_image), segment_length=cfg.replay.segment_length,
        max_env_steps=max_env_steps, client_config=client_config, random_policy=cfg.pretrain.enabled)


BUILDER = MuZeroBuilder()
