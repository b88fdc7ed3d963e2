"""``python -m muzero.plot --logdir=runs/cartpole``: training curves as a PNG.

Reads the progress records the learner appends to ``<logdir>/metrics.jsonl`` (one
JSON object every few seconds; resumed runs keep appending) and draws mean episode
return against env steps and against wall time, and the losses against training
steps. Several ``--logdir`` values (comma-separated) are drawn on the same axes.

``python -m muzero.plot --compare runs/a runs/b ...`` compares runs, any algorithms:
one colour per run, its evaluation return solid and its training return dotted, against
env steps and against wall time, written to ``compare.png`` in the runs' common folder
(or ``--out``).
"""
from __future__ import annotations

import json
import os
import sys

from absl import flags

FLAGS = flags.FLAGS


def read_metrics(logdir: str) -> list:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: is {logdir!r} a learner logdir with at least "
                                "one progress record?")
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"warning: {path}:{number} is not JSON (a run killed mid-write?); skipped",
                      file=sys.stderr)
    if not records:
        raise ValueError(f"{path} holds no progress records")
    return records


def _wall_time(records: list) -> list:
    """Seconds since the first start, continuing across resumes (each run restarts 'time')."""
    out, offset, previous = [], 0.0, 0.0
    for r in records:
        t = float(r["time"])
        if t < previous:
            offset += previous
        previous = t
        out.append((offset + t) / 60.0)
    return out


def plot(logdirs: list, out: str, title: str = None) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for logdir in logdirs:
        records = read_metrics(logdir)
        label = os.path.basename(os.path.normpath(logdir))
        env_steps = [r["env_steps"] for r in records]
        minutes = _wall_time(records)
        for key, style in (("return_train", "-"), ("return_eval", "--")):
            ys = [r.get(key) for r in records]
            pts = [(x, y, t) for x, y, t in zip(env_steps, ys, minutes) if y is not None]
            if pts:
                axes[0].plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{label} {key[7:]}")
                axes[1].plot([p[2] for p in pts], [p[1] for p in pts], style, label=f"{label} {key[7:]}")
        steps = [r["training_step"] for r in records]
        for key in sorted(k for k in records[-1] if k.startswith("loss/")):
            ys = [r.get(key) for r in records]
            pts = [(x, y) for x, y in zip(steps, ys) if y is not None]
            if pts:
                axes[2].plot([p[0] for p in pts], [p[1] for p in pts], label=f"{label} {key[5:]}")
    axes[0].set(xlabel="env steps", ylabel="mean episode return", title="return vs env steps")
    axes[1].set(xlabel="wall time (minutes)", ylabel="mean episode return", title="return vs wall time")
    axes[2].set(xlabel="training steps", ylabel="loss", title="losses", yscale="log")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(title or ", ".join(os.path.basename(os.path.normpath(d)) for d in logdirs))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _labels(logdirs: list) -> list:
    """Each run's name: its path below the runs' common folder (its own name for one run)."""
    if len(logdirs) == 1:
        return [os.path.basename(os.path.normpath(logdirs[0]))]
    common = os.path.commonpath([os.path.abspath(d) for d in logdirs])
    return [os.path.relpath(os.path.abspath(d), common) for d in logdirs]


def compare(logdirs: list, out: str, title: str = None) -> str:
    """Several runs' returns on one figure: by env steps (left) and by wall time (right),
    one colour per run, evaluation returns solid and training returns dotted."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(label, read_metrics(d)) for label, d in zip(_labels(logdirs), logdirs)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for k, (label, records) in enumerate(runs):
        colour = f"C{k % 10}"
        env_steps, minutes = [r["env_steps"] for r in records], _wall_time(records)
        for key, style, name in (("return_eval", "-", "eval"), ("return_train", ":", "train")):
            pts = [(x, t, r[key]) for x, t, r in zip(env_steps, minutes, records) if r.get(key) is not None]
            if pts:
                axes[0].plot([p[0] for p in pts], [p[2] for p in pts], style, color=colour, label=f"{label} {name}")
                axes[1].plot([p[1] for p in pts], [p[2] for p in pts], style, color=colour, label=f"{label} {name}")
    axes[0].set(xlabel="env steps", ylabel="mean episode return", title="return vs env steps")
    axes[1].set(xlabel="wall time (minutes)", ylabel="mean episode return", title="return vs wall time")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(title or " vs ".join(label for label, _ in runs))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv):
    logdirs = list(FLAGS.logdir or [])
    if FLAGS.compare:
        logdirs += argv[1:]
        if len(logdirs) < 2:
            raise ValueError("--compare needs at least two run directories, e.g. "
                             "python -m muzero.plot --compare runs/cartpole runs/ppo_cartpole")
        common = os.path.commonpath([os.path.abspath(d) for d in logdirs])
        print(compare(logdirs, FLAGS.out or os.path.join(common, "compare.png"), FLAGS.title))
        return
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]}: several runs go in --logdir=a,b or after --compare")
    if not logdirs:
        raise ValueError("--logdir is required (a learner logdir holding metrics.jsonl)")
    out = FLAGS.out or os.path.join(logdirs[0], "curves.png")
    print(plot(logdirs, out, FLAGS.title))


def define_flags() -> None:
    """The command line's flags, defined when it runs (importing the module for its functions
    defines none, so it can sit beside another command line's flags)."""
    flags.DEFINE_list("logdir", None, "Run directories (comma-separated) holding metrics.jsonl.")
    flags.DEFINE_string("out", None, "Output PNG (default <first logdir>/curves.png).")
    flags.DEFINE_string("title", None, "Figure title (default: the logdir names).")
    flags.DEFINE_boolean("compare", False, "Compare the run directories given after the flags (and any --logdir): "
                         "returns by env steps and by wall time, one colour per run, to <common folder>/compare.png.")


def run():
    from muzero.cli import run_main
    define_flags()
    run_main(main)


if __name__ == "__main__":
    run()
