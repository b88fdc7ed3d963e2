"""``python -m muzero.learner --env=cartpole``: train an agent with local actors on this machine.

Starts the inference server, the learner of ``--algo`` (MuZero by default: replay and
trainer) and ``--num_actors`` actor processes (plus ``--num_eval_actors`` greedy
evaluation actors). Per-(algorithm, env) defaults live in each algorithm's folder
(``muzero/algorithms/<algo>/``); flags override them; the resulting settings are
printed and saved as ``<logdir>/config.json``. Running the same command again resumes
from the newest checkpoint in ``--logdir``.

Examples:
  python -m muzero.learner --env=cartpole --max_env_steps=200000
  python -m muzero.learner --algo=ppo --env=cartpole --max_seconds=120
  python -m muzero.learner --env=tictactoe --logdir=runs/ttt
  python -m muzero.learner --env=atari --env_options='{"game": "Breakout"}'
  python -m muzero.learner --env=cartpole --set=training.learning_rate=0.001 --set=search.num_simulations=50
  python -m muzero.learner --env=cartpole --logdir=runs/ft --init_checkpoint=runs/cartpole \\
      --trainable_parts=dynamics,prediction
  python -m muzero.learner --env=cartpole --pretrain --max_train_steps=2000 --logdir=runs/pre
  python -m muzero.learner --env=cartpole --init_checkpoint=runs/pre --logdir=runs/ft
"""
from __future__ import annotations

import dataclasses
import json
import os
import re

from absl import flags

from muzero import algorithms
from muzero.config import ConfigError

FLAGS = flags.FLAGS
flags.DEFINE_string("algo", algorithms.DEFAULT, "Algorithm: " + "; ".join(
    f"{n} ({algorithms.get(n).summary})" for n in algorithms.names()) + ". A --config file's algo is used when "
    "this flag is not given.")
flags.DEFINE_string("env", "cartpole", "Env name: cartpole, tictactoe, atari, reach (a goal env) or "
                    "gym:<Gymnasium id>.")
flags.DEFINE_string("env_options", "{}", "JSON object of env options, e.g. '{\"game\": \"Breakout\"}' for atari.")
flags.DEFINE_string("eval_env_options", None, "JSON object of env options the evaluation actors take over "
                    "--env_options, e.g. '{\"max_episode_steps\": 2500}' to end greedy episodes sooner "
                    "(minatar: ids default to that; '{}' turns it off). Default: the env's defaults.")
flags.DEFINE_string("logdir", None, "Log directory (checkpoints, TensorBoard, config.json, metrics.jsonl, "
                    "exports). Default: runs/<algo>_<env> (runs/<env> for the default algorithm). An existing "
                    "checkpoint there is resumed.")
flags.DEFINE_integer("num_actors", None, "Local acting processes (default per env; 0 = only remote actors).")
flags.DEFINE_integer("envs_per_actor", None, "Envs stepped in lockstep per actor (default per env).")
flags.DEFINE_integer("num_eval_actors", None, "Local greedy evaluation actors (no noise, temperature 0).")
flags.DEFINE_integer("eval_envs_per_actor", None, "Envs per evaluation actor.")
flags.DEFINE_integer("batch_size", None, "Training batch size (training.batch_size; unrolls for vtrace/ppo, "
                     "sequences for r2d2, transitions for sac).")
flags.DEFINE_float("learning_rate", None, "Peak learning rate (training.learning_rate).")
flags.DEFINE_integer("max_env_steps", None, "Stop after this many env steps (0 = no limit).")
flags.DEFINE_integer("max_train_steps", None, "Stop after this many training steps (0 = no limit).")
flags.DEFINE_float("max_seconds", None, "Stop after this many seconds of training wall time, counted across "
                   "resumes of the same logdir (0 = no limit).")
flags.DEFINE_integer("seed", None, "Seed of networks, replay sampling and actors.")
flags.DEFINE_multi_string("set", [], "Override any config field: section.field=value, section one of the "
                          "algorithm's config sections (muzero: search, targets, replay, network, training; "
                          "the error for a wrong one lists them), value as JSON, e.g. "
                          "network.value_support='{\"low\": -5, \"high\": 5, \"num_bins\": 11}'. "
                          "Repeatable; all are applied together.")
flags.DEFINE_string("preset", None, "A named bundle of settings over the per-env defaults (your other flags "
                    "and --set values still win; docs/PRESETS.md): " + "; ".join(
                        f"{n}: {', '.join(sorted(algorithms.get(n).presets))}" for n in algorithms.names()
                        if algorithms.get(n).presets) + ".")
flags.DEFINE_string("config", None, "Start from a saved config.json (e.g. a previous run's) instead of the "
                    "per-env defaults; other flags still override it.")
flags.DEFINE_string("host", "127.0.0.1", "Interface the inference server binds. Non-loopback addresses "
                    "require --tls_cert_file, --tls_key_file and --auth_token_file.")
flags.DEFINE_integer("port", 0, "Server port (0 picks a free one; the address is printed and written to "
                     "<logdir>/server_address.txt). Use a fixed port for remote actors.")
flags.DEFINE_string("tls_cert_file", None, "PEM certificate for TLS.")
flags.DEFINE_string("tls_key_file", None, "PEM private key for TLS.")
flags.DEFINE_string("auth_token_file", None, "File holding the shared token clients must send.")
flags.DEFINE_string("init_checkpoint", None, "Initialise network weights from this checkpoint (a ckpt-<step> "
                    "directory or a run's logdir) when --logdir holds none: fine-tuning after pretraining.")
flags.DEFINE_list("trainable_parts", None, "Train only these parts of the network (default all): "
                  + "; ".join(f"{n}: {', '.join(algorithms.get(n).trainable_parts)}" for n in algorithms.names()
                              if algorithms.get(n).trainable_parts) + ".")
flags.DEFINE_boolean("export", True, "Export a SavedModel to <logdir>/export/step-<N> at the end.")
flags.DEFINE_float("checkpoint_every_secs", None, "Seconds between checkpoints (default per algorithm and env).")
flags.DEFINE_float("export_every_secs", None, "Also export a SavedModel to <logdir>/export/step-<N> every this many "
                   "seconds while training (default 0: only at the end), so a killed run leaves a recent export.")
flags.DEFINE_integer("export_every_env_steps", None, "Also export a SavedModel each time the env-step count "
                     "passes a multiple of this (default 0: off): snapshots at fixed env steps for "
                     "sample-efficiency curves. Combines with --export_every_secs.")
flags.DEFINE_integer("keep_exports", None, "Exports kept in <logdir>/export (periodic ones and those of earlier "
                     "sessions), oldest step deleted first after each export (default 5; 0 keeps all).")
flags.DEFINE_enum("launcher", None, ["local", "ray"], "Where actors run: local (processes on this machine, the "
                  "default) or ray (Ray actors, restarted by Ray when they fail; pip install -e '.[ray]').")
flags.DEFINE_string("ray_address", None, "--launcher=ray: empty (default) starts a Ray instance on 127.0.0.1 "
                    "without the dashboard; 'auto' or <host>:<port> joins a running Ray cluster.")
flags.DEFINE_float("ray_cpus_per_actor", None, "--launcher=ray: logical CPUs reserved per actor (default 1; "
                   "0.5 packs two actors on a core).")
flags.DEFINE_integer("ray_max_restarts", None, "--launcher=ray: restarts Ray grants each failed actor (-1, the "
                     "default, means without limit).")
flags.DEFINE_integer("remote_envs", None, "Envs of actors started on other machines (python -m muzero.actor): "
                     "MuZero makes room for them in its latent cache; step-streaming algorithms hand out that "
                     "many env ids to actors without --env_id_base. Default 0.")
flags.DEFINE_float("remote_lease_s", None, "Seconds a remote actor's env id lease lasts unused before its ids "
                   "go back to the pool (step-streaming algorithms). Default 60.")
flags.DEFINE_integer("learner_devices", None, "Train on N devices (data parallel, MirroredStrategy): the first N "
                     "GPUs, or N logical CPU devices on a machine without GPUs. Default 1. Algorithms that "
                     "take it: " + ", ".join(n for n in algorithms.names() if algorithms.get(n).multi_device) + ".")
algorithms.define_shortcut_flags()


class UsageError(ValueError):
    """A flag value that cannot be used; reported as one line."""


def _parse_set(item: str, config) -> tuple:
    """'section.field=value' -> (section, field, value) checked against ``config``'s sections."""
    from muzero.config import parse_override
    from muzero.settings import sections
    try:
        return parse_override(item, sections(config))
    except ConfigError as e:
        raise UsageError(str(e)) from None


def build_settings():
    from muzero.cli import json_object_flag
    from muzero.settings import replace_sections

    if FLAGS.config:
        try:
            with open(FLAGS.config) as f:
                data = json.load(f)
        except OSError as e:
            raise UsageError(f"--config={FLAGS.config!r} cannot be read: {e.strerror or e}") from None
        except ValueError as e:
            raise UsageError(f"--config={FLAGS.config!r} is not valid JSON ({e})") from None
        settings = algorithms.settings_from_dict(data)
        if FLAGS["algo"].present and FLAGS.algo != settings.algo:
            raise UsageError(f"--algo={FLAGS.algo} differs from the --config file's algo {settings.algo!r}")
        if FLAGS["env"].present and FLAGS.env != settings.env:
            settings = dataclasses.replace(settings, env=FLAGS.env)
    else:
        try:
            builder = algorithms.get(FLAGS.algo)
        except algorithms.UnknownAlgorithmError as e:
            raise UsageError(str(e)) from None
        try:
            settings = builder.default_settings(FLAGS.env)
        except ValueError as e:
            raise UsageError(f"--env={FLAGS.env!r} is not a known env for --algo={FLAGS.algo} ({e})") from None
    try:
        options = json_object_flag("env_options", FLAGS.env_options)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if options:
        settings = dataclasses.replace(settings, env_options={**settings.env_options, **options})
    if FLAGS.eval_env_options is not None:
        try:
            settings = dataclasses.replace(settings, eval_env_options=json_object_flag(
                "eval_env_options", FLAGS.eval_env_options))
        except ValueError as e:
            raise UsageError(str(e)) from None
    import envs
    try:
        descriptor = envs.describe(settings.env, **settings.env_options)
    except Exception as e:  # unknown env or module (e.g. gym:nosuchmodule:Foo-v0), bad --env_options
        raise UsageError(f"--env={settings.env!r} with options {settings.env_options}: {e}") from None
    if settings.eval_env_options:
        try:
            envs.describe(settings.env, **settings.env_options_for(evaluation=True))
        except Exception as e:
            raise UsageError(f"--eval_env_options={json.dumps(settings.eval_env_options)} for --env="
                             f"{settings.env}: {e}") from None
    changes: dict = {}
    if FLAGS.preset:
        presets = algorithms.get(settings.algo).presets
        if FLAGS.preset not in presets:
            raise UsageError(f"--preset={FLAGS.preset!r} is not a preset of --algo={settings.algo} "
                             f"(its presets: {', '.join(sorted(presets)) or 'none'})")
        preset = presets[FLAGS.preset]
        reason = preset.refusal(descriptor)
        if reason:
            raise UsageError(f"--preset={FLAGS.preset} {reason}; --env={settings.env} is a {descriptor.kind} env")
        changes = {section: dict(fields) for section, fields in preset.sections.items()}
        settings = dataclasses.replace(settings, **preset.top)
    for flag, section, field in (("batch_size", "training", "batch_size"), ("learning_rate", "training", "learning_rate")):
        if getattr(FLAGS, flag) is not None:
            if not hasattr(settings.config, section) or not hasattr(getattr(settings.config, section), field):
                raise UsageError(f"--{flag} does not apply to --algo={settings.algo} (it sets {section}.{field})")
            changes.setdefault(section, {})[field] = getattr(FLAGS, flag)
    for item in algorithms.shortcut_overrides(algorithms.get(settings.algo)) + list(FLAGS.set):
        section, field, value = _parse_set(item, settings.config)
        changes.setdefault(section, {})[field] = value
    top = {"num_actors": FLAGS.num_actors, "envs_per_actor": FLAGS.envs_per_actor,
           "num_eval_actors": FLAGS.num_eval_actors, "eval_envs_per_actor": FLAGS.eval_envs_per_actor,
           "max_env_steps": FLAGS.max_env_steps, "max_train_steps": FLAGS.max_train_steps,
           "max_seconds": FLAGS.max_seconds, "seed": FLAGS.seed,
           "checkpoint_every_secs": FLAGS.checkpoint_every_secs, "export_every_secs": FLAGS.export_every_secs,
           "export_every_env_steps": FLAGS.export_every_env_steps, "keep_exports": FLAGS.keep_exports,
           "launcher": FLAGS.launcher,
           "ray_address": FLAGS.ray_address, "ray_cpus_per_actor": FLAGS.ray_cpus_per_actor,
           "ray_max_restarts": FLAGS.ray_max_restarts, "learner_devices": FLAGS.learner_devices,
           "remote_envs": FLAGS.remote_envs, "remote_lease_s": FLAGS.remote_lease_s}
    notes = []
    if not FLAGS.config:   # a saved config.json is complete: nothing is derived again
        settings, notes = algorithms.get(settings.algo).fit_to_env(settings, descriptor, changes)
    settings = dataclasses.replace(settings, **{k: v for k, v in top.items() if v is not None})
    settings = replace_sections(settings, changes)
    # Run checks these too; here they answer before TensorFlow loads (a refusal costs no start-up).
    builder = algorithms.get(settings.algo)
    algorithms.check_env(builder, descriptor)
    builder.check_settings(settings)
    try:
        algorithms.check_remote_envs(builder, settings)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return settings, notes


def _check_logdir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise UsageError(f"--logdir={path!r} is not writable: {e.strerror or e}") from None


def main(argv):
    if len(argv) > 1:
        raise UsageError(f"unexpected arguments {argv[1:]}; flags look like --name=value")
    from absl import logging
    logging.set_verbosity(logging.WARNING)  # the learner prints its own progress lines
    settings, notes = build_settings()
    builder = algorithms.get(settings.algo)
    if FLAGS.trainable_parts is not None:
        try:
            algorithms.check_trainable_parts(builder, FLAGS.trainable_parts)
        except ConfigError as e:
            raise UsageError(str(e)) from None
    logdir = FLAGS.logdir or os.path.join("runs", re.sub(r"[^\w.-]+", "_", builder.logdir_name(settings.env)))
    _check_logdir(logdir)

    from muzero.learner.loop import Run
    from muzero.rpc.config import ClientConfig, ServerConfig

    server_config = ServerConfig(host=FLAGS.host, port=FLAGS.port, tls_cert_file=FLAGS.tls_cert_file,
                                 tls_key_file=FLAGS.tls_key_file, auth_token_file=FLAGS.auth_token_file)
    # The learner's own actors dial a loopback address when it serves on a loopback or wildcard
    # address (the certificate must then name localhost), else the address it serves on (which
    # the certificate names for the remote actors anyway).
    from muzero.rpc.config import is_loopback
    local_name = FLAGS.tls_cert_file and (is_loopback(FLAGS.host) or FLAGS.host in ("0.0.0.0", "::", "[::]"))
    # The certificate and token travel inside the actors' arguments (as values), so that actors
    # Ray places on other hosts need no files there.
    client_config = ClientConfig(tls_ca_file=FLAGS.tls_cert_file, auth_token_file=FLAGS.auth_token_file,
                                 tls_server_name="localhost" if local_name else None).with_credentials_inline()
    if FLAGS.preset:
        print(f"preset {FLAGS.preset}: {builder.presets[FLAGS.preset].description}", flush=True)
    if notes:
        print("defaults fitted to the env (set a field with --set to override it):\n"
              + "\n".join(f"  {note}" for note in notes), flush=True)
    print(f"settings ({logdir}/config.json):\n{settings.to_json()}", flush=True)
    run = Run(settings, logdir, server_config=server_config, client_config=client_config,
              init_checkpoint=FLAGS.init_checkpoint, trainable_parts=FLAGS.trainable_parts,
              export=FLAGS.export, log=lambda m: print(m, flush=True))
    record = run.run()
    print(f"done: {record.get('stop_reason')}; training step {run.training_step}, "
          f"env steps {run.env_steps}", flush=True)


def run():
    from muzero.cli import run_main
    from muzero.core import LaunchError
    from muzero.rpc.server import BindError
    run_main(main, (UsageError, ConfigError, FileNotFoundError, LaunchError, BindError))


if __name__ == "__main__":
    run()
