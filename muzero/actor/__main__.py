"""``python -m muzero.actor --server=HOST:PORT --env=cartpole``: an actor for another machine.

Runs the same loop the local launcher runs: E envs in lockstep, one batched search
per step through the learner's latent-cache inference, segments pushed to the
learner's replay. The search and target settings must match the learner's: pass
the learner's ``--config=<logdir>/config.json`` (copied to this machine), or rely on
the per-env defaults and the same overrides the learner used.

Examples:
  python -m muzero.actor --server=127.0.0.1:8686 --env=cartpole
  python -m muzero.actor --server=learner.example:8686 --config=config.json \\
      --tls_ca_file=cert.pem --auth_token_file=token.txt --envs_per_actor=64
"""
from __future__ import annotations

import dataclasses
import json

from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_string("server", None, "Learner address HOST:PORT (printed by the learner and written to "
                    "<logdir>/server_address.txt).")
flags.DEFINE_string("env", "cartpole", "Env name (must match the learner's).")
flags.DEFINE_string("env_options", "{}", "JSON object of env options (must match the learner's).")
flags.DEFINE_string("config", None, "The learner's config.json; overrides --env/--env_options and defaults.")
flags.DEFINE_integer("envs_per_actor", None, "Envs stepped in lockstep (default per env).")
flags.DEFINE_integer("simulations", None, "MCTS simulations per move (must match the learner's max_nodes).")
flags.DEFINE_integer("actor_id", 1000, "Id of this actor (distinct per actor; local actors use 0..N-1).")
flags.DEFINE_integer("seed", 0, "Seed of envs, noise and action sampling.")
flags.DEFINE_boolean("evaluation", False, "Greedy evaluation actor: temperature 0, no root noise, no segments.")
flags.DEFINE_integer("max_env_steps", 0, "Stop after this many env steps (0 = until stopped).")
flags.DEFINE_string("tls_ca_file", None, "PEM certificate to trust (enables TLS).")
flags.DEFINE_string("tls_server_name", None, "Name the server certificate carries, if not the host name.")
flags.DEFINE_string("auth_token_file", None, "File holding the learner's auth token.")


def main(argv):
    del argv
    from muzero.actor.actor import ActorSettings, run_actor
    from muzero.learner.defaults import RunSettings, replace_config, run_defaults
    from muzero.rpc.config import ClientConfig

    if not FLAGS.server:
        raise ValueError("--server=HOST:PORT is required (the learner prints its address)")
    if FLAGS.config:
        with open(FLAGS.config) as f:
            settings = RunSettings.from_dict(json.load(f))
    else:
        settings = run_defaults(FLAGS.env)
        options = json.loads(FLAGS.env_options)
        if options:
            settings = dataclasses.replace(settings, env_options=options)
    if FLAGS.simulations is not None:
        settings = replace_config(settings, "search", num_simulations=FLAGS.simulations)
    import envs
    descriptor = envs.describe(settings.env, **settings.env_options)
    cfg = settings.config
    actor = ActorSettings(
        server=FLAGS.server, env=settings.env, search=cfg.search, env_options=dict(settings.env_options),
        envs_per_actor=FLAGS.envs_per_actor or settings.envs_per_actor, actor_id=FLAGS.actor_id,
        seed=FLAGS.seed, stack_frames=cfg.targets.stack_frames if descriptor.is_image else 1,
        segment_length=cfg.replay.segment_length, evaluation=FLAGS.evaluation,
        max_env_steps=FLAGS.max_env_steps,
        client_config=ClientConfig(tls_ca_file=FLAGS.tls_ca_file, tls_server_name=FLAGS.tls_server_name,
                                   auth_token_file=FLAGS.auth_token_file))
    print(f"actor {FLAGS.actor_id}: {actor.envs_per_actor} x {settings.env} -> {FLAGS.server}", flush=True)
    run_actor(actor)


def run():
    from muzero.cli import run_main
    run_main(main, (ValueError, OSError, ConnectionError))


if __name__ == "__main__":
    run()
