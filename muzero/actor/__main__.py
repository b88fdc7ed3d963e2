"""``python -m muzero.actor --server=HOST:PORT --env=cartpole``: an actor for another machine.

``--algo=muzero`` (the default) runs the same loop the local launcher runs: E envs in
lockstep, one batched search per step through the learner's latent-cache inference,
segments pushed to the learner's replay. The search and target settings must match the
learner's: pass the learner's ``--config=<logdir>/config.json`` (copied to this machine),
or rely on the per-env defaults and the same overrides the learner used.

Any other ``--algo`` (``vtrace``, ``ppo``, ...; taken from ``--config`` when not given)
runs a thin step-streaming actor (``muzero.actor.streaming``): it steps
``--envs_per_actor`` envs with server env ids ``--env_id_base`` + 0..E-1 and gets its
actions from the learner. Training actors must use ids below the learner's
``num_actors * envs_per_actor``; evaluation actors (``--evaluation``) the ids after them.

Examples:
  python -m muzero.actor --server=127.0.0.1:8686 --env=cartpole
  python -m muzero.actor --server=learner.example:8686 --config=config.json \\
      --tls_ca_file=cert.pem --auth_token_file=token.txt --envs_per_actor=64
  python -m muzero.actor --algo=vtrace --server=learner.example:8686 --config=config.json \\
      --env_id_base=256 --envs_per_actor=64 --tls_ca_file=cert.pem --auth_token_file=token.txt
"""
from __future__ import annotations

import dataclasses
import json

from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_string("algo", "muzero", "Algorithm of the learner: muzero (search actor) or a step-streaming "
                    "one (vtrace, ppo, ...: thin actor). Default: the --config's algo, else muzero.")
flags.DEFINE_string("server", None, "Learner address HOST:PORT (printed by the learner and written to "
                    "<logdir>/server_address.txt).")
flags.DEFINE_string("env", "cartpole", "Env name (must match the learner's).")
flags.DEFINE_string("env_options", "{}", "JSON object of env options (must match the learner's).")
flags.DEFINE_string("config", None, "The learner's config.json; overrides --env/--env_options and defaults.")
flags.DEFINE_integer("envs_per_actor", None, "Envs stepped in lockstep (default per env).")
flags.DEFINE_integer("simulations", None, "MCTS simulations per move (must match the learner's max_nodes).")
flags.DEFINE_integer("env_id_base", 0, "Streaming algos: server env id of this actor's first env (ids "
                     "env_id_base .. env_id_base + envs_per_actor - 1 must belong to no other actor).")
flags.DEFINE_integer("actor_id", 1000, "Id of this actor (distinct per actor; local actors use 0..N-1).")
flags.DEFINE_integer("seed", 0, "Seed of envs, noise and action sampling.")
flags.DEFINE_boolean("evaluation", False, "Greedy evaluation actor: temperature 0, no root noise, no segments.")
flags.DEFINE_integer("max_env_steps", 0, "Stop after this many env steps (0 = until stopped).")
flags.DEFINE_string("tls_ca_file", None, "PEM certificate to trust (enables TLS).")
flags.DEFINE_string("tls_server_name", None, "Name the server certificate carries, if not the host name.")
flags.DEFINE_string("auth_token_file", None, "File holding the learner's auth token.")


def _client_config():
    from muzero.rpc.config import ClientConfig
    return ClientConfig(tls_ca_file=FLAGS.tls_ca_file, tls_server_name=FLAGS.tls_server_name,
                        auth_token_file=FLAGS.auth_token_file)


def main(argv):
    del argv
    from muzero import algorithms
    if not FLAGS.server:
        raise ValueError("--server=HOST:PORT is required (the learner prints its address)")
    data = None
    if FLAGS.config:
        with open(FLAGS.config) as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"--config={FLAGS.config}: expected a JSON object (a run's config.json)")
    algo = FLAGS.algo
    if data is not None and "algo" in data:
        if FLAGS["algo"].present and data["algo"] != FLAGS.algo:
            raise ValueError(f"--algo={FLAGS.algo} differs from the --config's algo {data['algo']!r}")
        algo = data["algo"]
    if algo not in algorithms.names():
        raise ValueError(f"--algo={algo!r} is not a known algorithm; known: {', '.join(algorithms.names())}")
    if algo == "muzero":
        _main_muzero(data)
    else:
        _main_streaming(algo, data)


def _main_streaming(algo: str, data) -> None:
    """A thin step-streaming actor for ``algo``."""
    from muzero.actor.streaming import StreamingActorSettings, run_streaming_actor
    from muzero.learner.settings import RunSettings

    if FLAGS.simulations is not None:
        raise ValueError(f"--simulations applies to --algo=muzero only, not {algo}")
    if data is not None:
        settings = RunSettings.from_dict(data)
        env, options = settings.env, dict(settings.env_options)
        default_envs = settings.eval_envs_per_actor if FLAGS.evaluation else settings.envs_per_actor
    else:
        env = FLAGS.env
        try:
            options = json.loads(FLAGS.env_options)
        except json.JSONDecodeError as e:
            raise ValueError(f"--env_options is not JSON: {e}") from None
        if not isinstance(options, dict):
            raise ValueError(f"--env_options={FLAGS.env_options} must be a JSON object")
        default_envs = None
    num_envs = FLAGS.envs_per_actor if FLAGS.envs_per_actor is not None else default_envs
    if num_envs is None:
        raise ValueError("--envs_per_actor is required without --config")
    actor = StreamingActorSettings(
        server=FLAGS.server, env=env, env_options=options, num_envs=num_envs,
        env_id_base=FLAGS.env_id_base, seed=FLAGS.seed, evaluation=FLAGS.evaluation,
        client_config=_client_config(), max_env_steps=FLAGS.max_env_steps)
    ids = f"{actor.env_id_base}..{actor.env_id_base + actor.num_envs - 1}"
    print(f"{algo} streaming actor: {actor.num_envs} x {env} (env ids {ids}"
          f"{', evaluation' if actor.evaluation else ''}) -> {FLAGS.server}", flush=True)
    run_streaming_actor(actor)


def _main_muzero(data) -> None:
    from muzero.actor.actor import ActorSettings, run_actor
    from muzero.algorithms.muzero.defaults import run_defaults
    from muzero.learner.settings import RunSettings, replace_section

    if data is not None:
        settings = RunSettings.from_dict(data)
    else:
        settings = run_defaults(FLAGS.env)
        options = json.loads(FLAGS.env_options)
        if options:
            settings = dataclasses.replace(settings, env_options=options)
    if FLAGS.simulations is not None:
        settings = replace_section(settings, "search", num_simulations=FLAGS.simulations)
    import envs
    descriptor = envs.describe(settings.env, **settings.env_options)
    cfg = settings.config
    actor = ActorSettings(
        server=FLAGS.server, env=settings.env, search=cfg.search, env_options=dict(settings.env_options),
        envs_per_actor=FLAGS.envs_per_actor or settings.envs_per_actor, actor_id=FLAGS.actor_id,
        seed=FLAGS.seed, stack_frames=cfg.targets.frames_for(descriptor.is_image),
        segment_length=cfg.replay.segment_length, evaluation=FLAGS.evaluation,
        max_env_steps=FLAGS.max_env_steps, client_config=_client_config(),
        random_policy=cfg.pretrain.enabled)   # a pretraining run's actors play random legal moves
    print(f"actor {FLAGS.actor_id}: {actor.envs_per_actor} x {settings.env} -> {FLAGS.server}", flush=True)
    run_actor(actor)


def run():
    from muzero.cli import run_main
    run_main(main, (ValueError, OSError, ConnectionError))


if __name__ == "__main__":
    run()
