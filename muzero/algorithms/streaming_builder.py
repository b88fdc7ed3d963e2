"""``StreamingBuilder``: the ``core.Builder`` base of the algorithms fed by thin step-streaming
actors (V-trace, PPO, R2D2, SAC): their service, their local and remote actors and the player
of their policy exports. Subclasses make the learner and the settings.

Imports no TensorFlow.
"""
from __future__ import annotations

from muzero import core


class StreamingBuilder(core.Builder):
    """A ``core.Builder`` base for algorithms fed by thin step-streaming actors: their service
    is a ``StepStreamingService`` over the learner's policy, delivering unrolls of
    ``config.training.unroll_length`` steps to ``learner.sink``, and their actors are
    ``muzero.algorithms.streaming_actor.run_streaming_actor``. Subclasses make the learner and settings."""

    ingestion = "streaming"
    # Unrolls carry ``final_observation`` (replay learners that store transitions need the
    # state an episode ended in, not the next episode's first one).
    store_final_observations = False
    leases_env_ids = True

    def policy(self, learner):
        """The ``StreamingPolicy`` the service runs (the learner's serving network)."""
        return learner.policy

    def overlap(self, settings) -> int:
        """Steps each unroll shares with the next beyond SEED's one (R2D2: the burn-in)."""
        return 0

    def make_service(self, settings, descriptor, learner, context, server_config):
        from muzero.algorithms.streaming import StepStreamingService
        return StepStreamingService(
            self.policy(learner), num_train_envs=settings.num_actors * settings.envs_per_actor,
            num_eval_envs=settings.num_eval_actors * settings.eval_envs_per_actor,
            unroll_length=settings.config.training.unroll_length, overlap=self.overlap(settings),
            sink=learner.sink, context=context, store_final_observations=self.store_final_observations,
            num_remote_envs=settings.remote_envs, lease_timeout_s=settings.remote_lease_s)

    def actor_target(self):
        from muzero.algorithms.streaming_actor import run_streaming_actor
        return run_streaming_actor

    def actor_args(self, settings, index: int, address: str, client_config, training_step: int) -> tuple:
        from muzero.algorithms.streaming_actor import streaming_actor_args
        return streaming_actor_args(settings, index, address, client_config)

    def play_export(self, export_dir: str, request: core.PlayRequest) -> dict:
        """The policy export's greedy actions (``muzero.algorithms.policy_export``)."""
        from muzero.algorithms.policy_export import evaluate_policy
        if request.opponent != "none" or request.overrides:
            raise ValueError(f"--opponent, --simulations and --set apply to search-based exports, not to "
                             f"{self.name}'s")
        return evaluate_policy(export_dir, env=request.env, env_options=request.env_options,
                               episodes=request.episodes, num_envs=request.num_envs, seed=request.seed,
                               make_batch=request.make_batch)

    def remote_actor(self, settings, remote: core.RemoteActor) -> tuple:
        """A thin actor over ``remote.envs_per_actor`` envs (required without the learner's
        config, else that config's (evaluation) envs per actor), ids from ``remote.env_id_base``
        or, when it is None, leased from the learner's remote range."""
        import functools

        from muzero.algorithms.streaming_actor import StreamingActorSettings, run_streaming_actor
        num_envs = remote.envs_per_actor
        if num_envs is None and remote.from_config:
            num_envs = settings.eval_envs_per_actor if remote.evaluation else settings.envs_per_actor
        if num_envs is None:
            raise ValueError("--envs_per_actor is required without --config")
        actor = StreamingActorSettings(
            server=remote.server, env=settings.env, env_options=settings.env_options_for(remote.evaluation),
            num_envs=num_envs, env_id_base=remote.env_id_base, seed=remote.seed, evaluation=remote.evaluation,
            client_config=remote.client_config, max_env_steps=remote.max_env_steps, actor_id=remote.actor_id)
        ids = ("leased from the learner" if actor.env_id_base is None
               else f"{actor.env_id_base}..{actor.env_id_base + actor.num_envs - 1}")
        banner = (f"{self.name} streaming actor: {actor.num_envs} x {settings.env} (env ids {ids}"
                  f"{', evaluation' if actor.evaluation else ''}) -> {remote.server}")
        return banner, functools.partial(run_streaming_actor, actor)

