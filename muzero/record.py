"""``python -m muzero.record``: play an export and write the episodes as a Minari dataset.

    python -m muzero.record --export_dir=runs/cartpole --episodes=50 --epsilon=0.25 --out=cartpole/weak-v0

Plays the export (any algorithm's, with the player ``python -m muzero.eval`` uses; a
logdir plays its newest export) in the env it was trained on, with probability
``--epsilon`` replacing each move by a uniformly random legal one, and writes the first
``--episodes`` complete episodes as dataset ``--out`` in the Minari root
(``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``; ``--minari_root`` sets it).
A learner reads it with ``--dataset=<id or folder>`` (docs/PRETRAINING.md, "Offline").
Needs the ``offline`` extra (Minari). Prints one line: episodes, steps, mean return, the
share of random moves and where the dataset is.
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
    flags.DEFINE_integer("episodes", 50, "Complete episodes to write.")
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
    if not FLAGS.export_dir or not FLAGS.out:
        raise ValueError("--export_dir and --out are required, e.g. python -m muzero.record "
                         "--export_dir=runs/cartpole --episodes=50 --epsilon=0.25 --out=cartpole/weak-v0")
    if FLAGS.episodes < 1:
        raise ValueError(f"--episodes={FLAGS.episodes} must be >= 1")
    if FLAGS.minari_root:
        os.environ["MINARI_DATASETS_PATH"] = os.path.abspath(FLAGS.minari_root)
    import numpy as np

    from muzero import core, dataset
    from muzero.checkpoints import resolve_export
    dataset._minari()   # the extra is there before anything is played
    export_dir = resolve_export(FLAGS.export_dir)
    collector = dataset.EpisodeCollector(epsilon=FLAGS.epsilon, seed=FLAGS.seed)
    builder = algorithms.for_export(export_dir)
    request = core.PlayRequest(episodes=FLAGS.episodes, num_envs=FLAGS.num_envs, seed=FLAGS.seed,
                               overrides=tuple(algorithms.shortcut_overrides(builder) + list(FLAGS.set)),
                               make_batch=collector.make_batch)
    print(f"playing {export_dir} with epsilon {FLAGS.epsilon:g}", flush=True)
    builder.play_export(export_dir, request)
    episodes = collector.episodes[:FLAGS.episodes]
    path = dataset.write_dataset(FLAGS.out, episodes, collector.descriptor, env=collector.env,
                                 env_options=collector.env_options, algorithm=builder.name,
                                 description=f"{export_dir} played with epsilon {FLAGS.epsilon:g}")
    steps = sum(e.num_steps for e in episodes)
    returns = [float(np.sum(e.rewards)) for e in episodes]
    print(f"episodes={len(episodes)} steps={steps} mean_return={np.mean(returns):.2f} "
          f"random_moves={collector.random_actions / max(1, collector.steps):.3f} dataset={path}")


def run():
    from muzero.cli import run_main
    define_flags()
    run_main(main, (ValueError, OSError, KeyError))


if __name__ == "__main__":
    sys.exit(run())
