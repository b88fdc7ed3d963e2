"""``python -m muzero.eval --export_dir=runs/cartpole/export/step-N``: play an exported model.

Loads the SavedModel (no training code) and plays it greedily over ``--num_envs``
envs with the player of the algorithm that wrote it (``Builder.play_export``; the
export's ``muzero_export.json`` names the algorithm): a MuZero export by search
(temperature 0, no root noise), a policy export (V-trace, PPO, R2D2, SAC) by its greedy
action. Prints the mean episode return. ``--set=search.field=value`` changes how a MuZero export
searches (e.g. ``--set=search.root_selection=gumbel`` plays by Gumbel MuZero's root without
its Gumbel noise: sequential halving, then the best of logits + completed Q). An export
whose run set ``search.eval_root_selection`` plays by that root unless ``--set`` names
``search.root_selection``. For tic-tac-toe, ``--opponent=minimax`` plays half the games as
each side against the perfect player and prints wins, draws and losses.

Examples:
  python -m muzero.eval --export_dir=runs/cartpole/export/step-3000 --episodes=20
  python -m muzero.eval --export_dir=runs/tictactoe/export/step-9000 --opponent=minimax --episodes=100
  python -m muzero.eval --export_dir=runs/cartpole/export/step-3000 --set=search.root_selection=gumbel
"""
from __future__ import annotations

from absl import flags

from muzero import algorithms

FLAGS = flags.FLAGS
flags.DEFINE_string("export_dir", None, "A SavedModel directory written by the learner (holds muzero_export.json).")
flags.DEFINE_integer("episodes", 20, "Episodes (games) to play.")
flags.DEFINE_integer("num_envs", 8, "Envs played in lockstep.")
flags.DEFINE_multi_string("set", [], "Override how a search-based export plays: search.field=value (the "
                          "learner's --set names; e.g. search.root_selection=gumbel). Repeatable; applied "
                          "after the shortcut flags (--simulations).")
flags.DEFINE_integer("seed", 0, "Seed of envs and tie-breaking.")
flags.DEFINE_string("env", None, "Env name, when the export has no run.json.")
flags.DEFINE_string("env_options", None, "JSON env options, when the export has no run.json.")
flags.DEFINE_enum("opponent", "none", ["none", "minimax", "random"], "Opponent for tic-tac-toe.")
algorithms.define_shortcut_flags()


def main(argv):
    del argv
    from muzero import core
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required")
    from muzero.cli import json_object_flag
    options = json_object_flag("env_options", FLAGS.env_options) if FLAGS.env_options else None
    builder = algorithms.for_export(FLAGS.export_dir)
    request = core.PlayRequest(episodes=FLAGS.episodes, num_envs=FLAGS.num_envs, seed=FLAGS.seed, env=FLAGS.env,
                               env_options=options, opponent=FLAGS.opponent,
                               overrides=tuple(algorithms.shortcut_overrides(builder) + list(FLAGS.set)))
    result = builder.play_export(FLAGS.export_dir, request)
    print(f"episodes={len(result['returns'])} mean_return={result['mean_return']:.2f}")
    if "wins" in result:
        print(f"wins={result['wins']} draws={result['draws']} losses={result['losses']}")
    if "success_rate" in result:
        print(f"success_rate={result['success_rate']:.3f}")
    if result.get("clipped_actions"):
        print(f"clipped_actions={result['clipped_actions']} (actions outside the env's bounds, clipped)")


def run():
    from muzero.cli import run_main
    run_main(main, (ValueError, OSError, KeyError))


if __name__ == "__main__":
    run()
