"""``python -m muzero.eval --export_dir=runs/cartpole``: play an exported model.

``--export_dir`` is an export (``<logdir>/export/step-<N>``), or a run's logdir or export
folder, whose newest export is played. Loads the SavedModel (no training code) and plays it greedily over ``--num_envs``
envs with the player of the algorithm that wrote it (``Builder.play_export``; the
export's ``muzero_export.json`` names the algorithm): a MuZero export by search
(temperature 0, no root noise), a policy export (V-trace, PPO, R2D2, SAC) by its greedy
action. Prints the mean episode return. ``--set=search.field=value`` changes how a MuZero export
searches (e.g. ``--set=search.root_selection=gumbel`` plays by Gumbel MuZero's root without
its Gumbel noise: sequential halving, then the best of logits + completed Q). An export
whose run set ``search.eval_root_selection`` plays by that root unless ``--set`` names
``search.root_selection``. For tic-tac-toe, ``--opponent=minimax`` plays half the games as
each side against the perfect player and prints wins, draws and losses. ``--video=PATH``
(.gif, or .mp4 with the video extra) records the played episodes of the first env, drawn
for the env's kind with the step and return on every frame (``envs.video``); with it the
games are played one env at a time unless ``--num_envs`` says otherwise.

Examples:
  python -m muzero.eval --export_dir=runs/cartpole --episodes=20
  python -m muzero.eval --export_dir=runs/cartpole --episodes=3 --video=runs/cartpole/eval.gif
  python -m muzero.eval --export_dir=runs/tictactoe/export/step-9000 --opponent=minimax --episodes=100
  python -m muzero.eval --export_dir=runs/cartpole/export/step-3000 --set=search.root_selection=gumbel
"""
from __future__ import annotations

from absl import flags

from muzero import algorithms

FLAGS = flags.FLAGS
flags.DEFINE_string("export_dir", None, "A SavedModel directory written by the learner (<logdir>/export/step-<N>), "
                    "or a run's logdir or export folder: its newest export.")
flags.DEFINE_integer("episodes", 20, "Episodes (games) to play.")
flags.DEFINE_integer("num_envs", 8, "Envs played in lockstep (1 with --video unless given).")
flags.DEFINE_multi_string("set", [], "Override how a search-based export plays: search.field=value (the "
                          "learner's --set names; e.g. search.root_selection=gumbel). Repeatable; applied "
                          "after the shortcut flags (--simulations).")
flags.DEFINE_integer("seed", 0, "Seed of envs and tie-breaking.")
flags.DEFINE_string("env", None, "Env name, when the export has no run.json.")
flags.DEFINE_string("env_options", None, "JSON env options, when the export has no run.json.")
flags.DEFINE_enum("opponent", "none", ["none", "minimax", "random"], "Opponent for tic-tac-toe.")
flags.DEFINE_string("video", None, "Record the first env's episodes to this .gif or .mp4 file (MP4 needs "
                    "pip install -e '.[video]'): the env drawn for its kind, with the step and return.")
algorithms.define_shortcut_flags()


def main(argv):
    del argv
    from muzero import core
    if not FLAGS.export_dir:
        raise ValueError("--export_dir is required")
    from muzero.checkpoints import resolve_export
    from muzero.cli import json_object_flag
    export_dir = resolve_export(FLAGS.export_dir)
    if export_dir != FLAGS.export_dir:
        print(f"playing {export_dir}", flush=True)
    options = json_object_flag("env_options", FLAGS.env_options) if FLAGS.env_options else None
    recorder, num_envs = None, FLAGS.num_envs
    if FLAGS.video:
        from envs.video import VideoRecorder
        recorder = VideoRecorder(FLAGS.video, episodes=FLAGS.episodes)
        num_envs = FLAGS.num_envs if FLAGS["num_envs"].present else 1
    builder = algorithms.for_export(export_dir)
    request = core.PlayRequest(episodes=FLAGS.episodes, num_envs=num_envs, seed=FLAGS.seed, env=FLAGS.env,
                               env_options=options, opponent=FLAGS.opponent,
                               overrides=tuple(algorithms.shortcut_overrides(builder) + list(FLAGS.set)),
                               make_batch=recorder.make_batch if recorder else None)
    result = builder.play_export(export_dir, request)
    print(f"episodes={len(result['returns'])} mean_return={result['mean_return']:.2f}")
    if "wins" in result:
        print(f"wins={result['wins']} draws={result['draws']} losses={result['losses']}")
    if "success_rate" in result:
        print(f"success_rate={result['success_rate']:.3f}")
    if result.get("clipped_actions"):
        print(f"clipped_actions={result['clipped_actions']} (actions outside the env's bounds, clipped)")
    if recorder is not None:
        frames = recorder.close()
        print(f"video={FLAGS.video} frames={frames} fps={recorder.fps}"
              + (f" (a GIF stops at {recorder.GIF_MAX_FRAMES} frames; .mp4 has no cap)" if recorder.capped else ""))


def run():
    from muzero.cli import run_main
    run_main(main, (ValueError, OSError, KeyError))


if __name__ == "__main__":
    run()
