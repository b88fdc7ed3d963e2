"""``python -m muzero.record``: play an export and write the episodes as a Minari dataset.

    python -m muzero.record --export_dir=runs/cartpole --episodes=50 --epsilon=0.25 --out=cartpole/weak-v0

Plays the export (any algorithm's, with the player ``python -m muzero.eval`` uses; a
logdir plays its newest export) in the env it was trained on, with probability
``--epsilon`` replacing each move by a uniformly random legal one, and writes the first
``--episodes`` complete episodes (or, with ``--steps``, complete episodes until they hold
that many steps) as dataset ``--out`` in the Minari root
(``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``; ``--minari_root`` sets it).
A learner reads it with ``--dataset=<id or folder>`` (docs/PRETRAINING.md, "Offline").

    python -m muzero.record --from_logdir=runs/cartpole --out=cartpole/run-v0

writes instead the whole episodes a run's newest checkpoint keeps in its replay (MuZero
runs), so a new network can pretrain on an old run's experience.
Needs the ``offline`` extra (Minari). Prints one line: episodes, steps, mean return, the
share of random moves (with ``--from_logdir``: how many stored episodes it skipped) and
where the dataset is.
"""
from __future__ import annotations

import os
import sys

from absl import flags

from muzero import algorithms

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("export_dir", None, "The export to play: <logdir>/export/step-<N>, or a run's logdir or "
                        "export folder (its newest export).")
    flags.DEFINE_string("from_logdir", None, "Instead of playing an export: a run's logdir whose newest checkpoint's "
                        "replay holds the episodes to write (MuZero runs; --episodes, --steps, --epsilon do not "
                        "apply).")
    flags.DEFINE_integer("episodes", 50, "Complete episodes to write (unless --steps is set).")
    flags.DEFINE_integer("steps", 0, "If > 0: write complete episodes until they hold at least this many env "
                         "steps (--episodes is then ignored), e.g. --steps=100000.")
    flags.DEFINE_float("epsilon", 0.0, "Probability of replacing each move by a uniformly random legal one.")
    flags.DEFINE_string("out", None, "Dataset id to write in the Minari root, e.g. cartpole/weak-v0 "
                        "([namespace/]name-v<version>).")
    flags.DEFINE_string("minari_root", None, "Folder of Minari datasets (default: $MINARI_DATASETS_PATH or "
                        "~/.minari/datasets).")
    flags.DEFINE_integer("num_envs", 8, "Envs played in lockstep.")
    flags.DEFINE_integer("seed", 0, "Seed of envs, tie-breaking and the random moves.")
    flags.DEFINE_multi_string("set", [], "Override how a search-based export plays (as muzero.eval's --set).")
    algorithms.define_shortcut_flags()


def main(argv):
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]}; flags look like --name=value")
    if bool(FLAGS.export_dir) == bool(FLAGS.from_logdir) or not FLAGS.out:
        raise ValueError("--out and one of --export_dir or --from_logdir are required, e.g. python -m muzero.record "
                         "--export_dir=runs/cartpole --episodes=50 --epsilon=0.25 --out=cartpole/weak-v0")
    if FLAGS.from_logdir:
        playing = ["episodes", "steps", "epsilon", "num_envs", "seed", "set"]
        playing += [s.flag for name in algorithms.names() for s in algorithms.get(name).shortcuts]
        given = [f"--{name}" for name in dict.fromkeys(playing) if FLAGS[name].present]
        if given:
            raise ValueError(f"{', '.join(given)}: not used with --from_logdir (it writes the episodes the run "
                             f"played)")
    if FLAGS.episodes < 1:
        raise ValueError(f"--episodes={FLAGS.episodes} must be >= 1")
    if FLAGS.steps < 0:
        raise ValueError(f"--steps={FLAGS.steps} must be >= 0 (0: --episodes decides)")
    if FLAGS.minari_root:
        os.environ["MINARI_DATASETS_PATH"] = os.path.abspath(FLAGS.minari_root)
    from muzero import core, dataset
    from muzero.checkpoints import resolve_export
    dataset._minari()   # the extra is there before anything is played
    if FLAGS.from_logdir:
        return _from_logdir(FLAGS.from_logdir, FLAGS.out)
    export_dir = resolve_export(FLAGS.export_dir)
    collector = dataset.EpisodeCollector(epsilon=FLAGS.epsilon, seed=FLAGS.seed, max_steps=FLAGS.steps)
    builder = algorithms.for_export(export_dir)
    wanted = 2 ** 31 - 1 if FLAGS.steps else FLAGS.episodes    # --steps: the collector ends the play
    request = core.PlayRequest(episodes=wanted, num_envs=FLAGS.num_envs, seed=FLAGS.seed,
                               overrides=tuple(algorithms.shortcut_overrides(builder) + list(FLAGS.set)),
                               make_batch=collector.make_batch)
    goal = f"{FLAGS.steps} steps" if FLAGS.steps else f"{FLAGS.episodes} episodes"
    print(f"playing {export_dir} with epsilon {FLAGS.epsilon:g} for {goal}", flush=True)
    try:
        builder.play_export(export_dir, request)
    except dataset.Enough:
        pass
    episodes = collector.episodes if FLAGS.steps else collector.episodes[:FLAGS.episodes]
    path = dataset.write_dataset(FLAGS.out, episodes, collector.descriptor, env=collector.env,
                                 env_options=collector.env_options, algorithm=builder.name,
                                 description=f"{export_dir} played with epsilon {FLAGS.epsilon:g}")
    print(f"{_counts(episodes)} random_moves={collector.random_actions / max(1, collector.steps):.3f} "
          f"dataset={path}")


def _from_logdir(logdir: str, out: str) -> None:
    import json

    import envs
    from muzero import checkpoints, dataset
    path = os.path.join(logdir, "config.json")
    try:
        with open(path) as f:
            settings = algorithms.settings_from_dict(json.load(f))
    except FileNotFoundError:
        raise ValueError(f"--from_logdir={logdir!r} holds no config.json: not a run's logdir") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    checkpoint = checkpoints.resolve_checkpoint(logdir)
    if checkpoint is None:
        raise ValueError(f"--from_logdir={logdir!r} holds no complete checkpoint")
    descriptor = envs.describe(settings.env, **settings.env_options)
    if descriptor.two_player:
        raise ValueError(f"env {settings.env!r} is a two-player game; recorded episodes hold one player's view only")
    builder = algorithms.get(settings.algo)
    print(f"reading the replay of {checkpoint}", flush=True)
    episodes, skipped = builder.stored_episodes(checkpoint, settings, descriptor)
    if not episodes:
        raise ValueError(f"{checkpoint}: its replay holds no episode from its first step on ({skipped} skipped: "
                         f"begun before the replay's oldest step, recorded from a dataset, or one open step)")
    path = dataset.write_dataset(out, episodes, descriptor, env=settings.env, env_options=settings.env_options,
                                 algorithm=builder.name, description=f"the replay of {checkpoint}")
    print(f"{_counts(episodes)} skipped={skipped} dataset={path}")


def _counts(episodes: list) -> str:
    """``episodes= steps= mean_return=`` of what is written."""
    import numpy as np
    returns = [float(np.sum(e.rewards)) for e in episodes]
    return f"episodes={len(episodes)} steps={sum(e.num_steps for e in episodes)} mean_return={np.mean(returns):.2f}"


def run():
    from muzero.cli import run_main
    define_flags()
    run_main(main, (ValueError, OSError, KeyError))


if __name__ == "__main__":
    sys.exit(run())
