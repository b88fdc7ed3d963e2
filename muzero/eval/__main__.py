"""``python -m muzero.eval --export_dir=runs/cartpole/export/step-N``: play an exported model.

Loads the SavedModel (no training code) and plays it greedily over ``--num_envs``
envs: a MuZero export by search (temperature 0, no root noise), a policy export
(V-trace, PPO: ``muzero_export.json`` names the algorithm) by its greedy action.
Prints the mean episode return. ``--set=search.field=value`` changes how a MuZero export
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

import json

from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_string("export_dir", None, "A SavedModel directory written by the learner (holds muzero_export.json).")
flags.DEFINE_integer("episodes", 20, "Episodes (games) to play.")
flags.DEFINE_integer("num_envs", 8, "Envs played in lockstep.")
flags.DEFINE_integer("simulations", None, "Override the search's num_simulations.")
flags.DEFINE_multi_string("set", [], "Override a search setting of a MuZero export: search.field=value (the "
                          "learner's --set names; e.g. search.root_selection=gumbel). Repeatable; applied "
                          "after --simulations.")
flags.DEFINE_integer("seed", 0, "Seed of envs and tie-breaking.")
flags.DEFINE_string("env", None, "Env name, when the export has no run.json.")
flags.DEFINE_string("env_options", None, "JSON env options, when the export has no run.json.")
flags.DEFINE_enum("opponent", "none", ["none", "minimax", "random"], "Opponent for tic-tac-toe.")


def main(argv):
    del argv
    import numpy as np

    from muzero.algorithms.policy_export import evaluate_policy, is_policy_export
    from muzero.eval.evaluator import evaluate, load_run, override_search, search_config_from_run
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required")
    options = json.loads(FLAGS.env_options) if FLAGS.env_options else None
    if is_policy_export(FLAGS.export_dir):
        if FLAGS.opponent != "none" or FLAGS.simulations is not None or FLAGS.set:
            raise ValueError("--opponent, --simulations and --set apply to MuZero exports only")
        result = evaluate_policy(FLAGS.export_dir, env=FLAGS.env, env_options=options, episodes=FLAGS.episodes,
                                 num_envs=FLAGS.num_envs, seed=FLAGS.seed)
        print(f"episodes={len(result['returns'])} mean_return={result['mean_return']:.2f}")
        if "success_rate" in result:
            print(f"success_rate={result['success_rate']:.3f}")
        if result["clipped_actions"]:
            print(f"clipped_actions={result['clipped_actions']} (actions outside the env's bounds, clipped)")
        return
    run = load_run(FLAGS.export_dir) or {}
    search_config = search_config_from_run(run) if run else None
    search_config = override_search(search_config, FLAGS.simulations, FLAGS.set)
    opponent = None
    if FLAGS.opponent != "none":
        from envs.tictactoe import EMPTY, MinimaxPlayer
        if FLAGS.opponent == "minimax":
            opponent = MinimaxPlayer(seed=FLAGS.seed).act
        else:
            rng = np.random.default_rng(FLAGS.seed)
            opponent = lambda board, to_play: int(rng.choice(np.flatnonzero(board == EMPTY)))  # noqa: E731
    result = evaluate(FLAGS.export_dir, FLAGS.episodes, num_envs=FLAGS.num_envs, seed=FLAGS.seed,
                      env=FLAGS.env, env_options=options, search_config=search_config, opponent=opponent)
    print(f"episodes={len(result['returns'])} mean_return={result['mean_return']:.2f}")
    if opponent is not None:
        print(f"wins={result['wins']} draws={result['draws']} losses={result['losses']}")


def run():
    from muzero.cli import run_main
    run_main(main, (ValueError, OSError, KeyError))


if __name__ == "__main__":
    run()
