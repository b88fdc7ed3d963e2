"""``python -m muzero.actor --server=HOST:PORT --env=cartpole``: an actor for another machine.

The algorithm (``--algo``, or the ``--config``'s) makes the actor (``Builder.remote_actor``):

* ``muzero`` (the default) runs the loop the local launcher runs: E envs in lockstep, one
  batched search per step through the learner's latent-cache inference, segments pushed to
  the learner's replay. The search and target settings must match the learner's: pass the
  learner's ``--config=<logdir>/config.json`` (copied to this machine), or rely on the
  per-env defaults and the same ``--set`` overrides the learner used.
* the step-streaming algorithms (``vtrace``, ``ppo``, ``r2d2``, ``sac``) run a thin actor
  (``muzero.algorithms.streaming_actor``): it steps ``--envs_per_actor`` envs and gets its
  actions from the learner. By default it asks the learner for env ids of its
  ``--remote_envs`` when it connects (distinct ``--actor_id`` per actor); with
  ``--env_id_base`` it uses the ids ``--env_id_base`` + 0..E-1 of the learner's own actors
  instead (training ids below ``num_actors * envs_per_actor``, evaluation ids after them).

Examples:
  python -m muzero.actor --server=127.0.0.1:8686 --env=cartpole
  python -m muzero.actor --server=learner.example:8686 --config=config.json \\
      --tls_ca_file=cert.pem --auth_token_file=token.txt --envs_per_actor=64
  python -m muzero.actor --algo=vtrace --server=learner.example:8686 --config=config.json \\
      --actor_id=7 --envs_per_actor=64 --tls_ca_file=cert.pem --auth_token_file=token.txt
"""
from __future__ import annotations

import dataclasses
import json

from absl import flags

from muzero import algorithms

FLAGS = flags.FLAGS
flags.DEFINE_string("algo", algorithms.DEFAULT, "Algorithm of the learner (" + ", ".join(algorithms.names())
                    + "). Default: the --config's algo, else " + algorithms.DEFAULT + ".")
flags.DEFINE_string("server", None, "Learner address HOST:PORT (printed by the learner and written to "
                    "<logdir>/server_address.txt).")
flags.DEFINE_string("env", "cartpole", "Env name (must match the learner's).")
flags.DEFINE_string("env_options", "{}", "JSON object of env options (must match the learner's).")
flags.DEFINE_string("config", None, "The learner's config.json; overrides --env/--env_options and defaults.")
flags.DEFINE_integer("envs_per_actor", None, "Envs stepped in lockstep (default: the config's, or per env).")
flags.DEFINE_multi_string("set", [], "Override a config field as the learner's --set does: section.field=value. "
                          "Search and target settings must match the learner's. Repeatable.")
flags.DEFINE_integer("env_id_base", None, "Streaming algos: server env id of this actor's first env (ids "
                     "env_id_base .. env_id_base + envs_per_actor - 1 of the learner's own actors, belonging "
                     "to no other actor). Default: ask the learner for ids of its --remote_envs.")
flags.DEFINE_integer("actor_id", 1000, "Id of this actor (distinct per actor; local actors use 0..N-1).")
flags.DEFINE_integer("seed", 0, "Seed of envs, noise and action sampling.")
flags.DEFINE_boolean("evaluation", False, "Greedy evaluation actor: temperature 0, no root noise, no segments.")
flags.DEFINE_integer("max_env_steps", 0, "Stop after this many env steps (0 = until stopped).")
flags.DEFINE_string("tls_ca_file", None, "PEM certificate to trust (enables TLS).")
flags.DEFINE_string("tls_server_name", None, "Name the server certificate carries, if not the host name.")
flags.DEFINE_string("auth_token_file", None, "File holding the learner's auth token.")
flags.DEFINE_float("connect_timeout_s", 30.0, "Seconds to wait for the learner at the start before giving up "
                   "(a failed TLS handshake waits as long as an absent learner).")
algorithms.define_shortcut_flags()


def _settings(builder, data):
    """The run settings: the --config's, else the algorithm's defaults for --env; then --set."""
    from muzero.cli import json_object_flag
    from muzero.config import parse_override
    from muzero.settings import replace_sections, sections

    if data is not None:
        settings = algorithms.settings_from_dict(data)
    else:
        options = json_object_flag("env_options", FLAGS.env_options)
        settings = builder.default_settings(FLAGS.env)
        if options:
            settings = dataclasses.replace(settings, env_options=options)
    changes = {}
    for item in algorithms.shortcut_overrides(builder) + list(FLAGS.set):
        section, field, value = parse_override(item, sections(settings.config))
        changes.setdefault(section, {})[field] = value
    return replace_sections(settings, changes)


def main(argv):
    del argv
    from muzero import core
    from muzero.rpc.config import ClientConfig
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
    builder = algorithms.get(algo)
    remote = core.RemoteActor(
        server=FLAGS.server, envs_per_actor=FLAGS.envs_per_actor, actor_id=FLAGS.actor_id,
        env_id_base=FLAGS.env_id_base, seed=FLAGS.seed, evaluation=FLAGS.evaluation,
        max_env_steps=FLAGS.max_env_steps, from_config=data is not None,
        client_config=ClientConfig(tls_ca_file=FLAGS.tls_ca_file, tls_server_name=FLAGS.tls_server_name,
                                   auth_token_file=FLAGS.auth_token_file,
                                   connect_timeout_s=FLAGS.connect_timeout_s))
    banner, run_actor = builder.remote_actor(_settings(builder, data), remote)
    print(banner, flush=True)
    run_actor()


def run():
    from muzero.cli import run_main
    from muzero.rpc.client import ServerError
    run_main(main, (ValueError, OSError, ConnectionError, ServerError))


if __name__ == "__main__":
    run()
