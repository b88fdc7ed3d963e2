"""The five MinAtar games with the package's MinAtar defaults, against the MinAtar paper's baselines.

    python bench/minatar_suite.py [--env_steps=500000] [--games=Breakout,Freeway] [--seed=0]

Runs ``python -m muzero.learner --env=minatar:<Game> --max_env_steps=N`` (the defaults of
docs/MINATAR.md, evaluation actors on; nothing else but the bench's logdir and seed) for each
game in turn, and prints per game the greedy evaluation return at 100k, 250k and N env steps
(the progress record nearest after each, whose ``return_eval`` is the mean of the latest 20
greedy episodes, or of as many as had ended), the minutes and training steps the run took, and then a table against the
baselines of the MinAtar paper (Young & Tian, 2019): DQN's and AC(lambda = 0.8)'s training
returns after 5 million frames, read off the figure in the MinAtar repository's README (30
seeds, a moving average of 100 training episodes; MinAtar has no frame skip, so frames are
env steps). Those are training returns with exploration, so a greedy evaluation return
compares with them favourably; the table says so.

Each game takes about 40-60 minutes on two cores at 500k env steps (the trainer is the
bound); run it alone on the machine. ``--root`` keeps every run's logdir
(``<root>/<Game>-seed<S>``); ``--figure=docs/minatar_curves.png`` draws every game's curves
(one panel each, with the two baselines), also afterwards from the kept runs with ``--reuse``.
``--reuse`` reads a game's finished run instead of running it again.

Last lines (machine-readable), per game G: ``eval_<G>_<N>=<float>`` for each checkpoint N
and ``beats_dqn_<G>=0|1`` (the return at the last checkpoint against DQN's 5M-frame figure).
"""
import argparse
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learn import records, train  # noqa: E402

# Training returns after 5M frames, read off the MinAtar README figure (Young & Tian 2019).
BASELINES = {          # game: (DQN, AC(lambda = 0.8))
    "Asterix": (17.0, 19.0),
    "Breakout": (10.0, 17.5),
    "Freeway": (50.0, 47.0),
    "Seaquest": (20.0, 15.0),
    "SpaceInvaders": (43.0, 185.0),
}


def eval_at(recs: list, env_steps: int) -> tuple:
    """(evaluation mean, evaluation episodes) of the first record at or after ``env_steps``:
    the mean of its latest 20 evaluation episodes, or of fewer where fewer had ended (long
    episodes: Freeway's last 2,500 steps); (NaN, 0) when none had, or the run never got there."""
    for r in recs:
        if r.get("env_steps", 0) >= env_steps:
            if r.get("return_eval") is None or not r.get("episodes_eval"):
                return math.nan, 0
            return float(r["return_eval"]), int(r["episodes_eval"])
    return math.nan, 0


def cell(value: float, episodes: int) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.1f}" if episodes >= 20 else f"{value:.1f} ({episodes} episodes)"


def checkpoints(env_steps: int) -> list:
    return sorted({n for n in (100_000, 250_000) if n < env_steps} | {env_steps})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", default=",".join(BASELINES), help="comma-separated games (of: %(default)s)")
    parser.add_argument("--env_steps", type=int, default=500_000, help="env steps per game")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_minutes", type=float, default=120.0,
                        help="safety stop per game (the run normally ends at --env_steps)")
    parser.add_argument("--root", default=os.path.join("runs", "bench", "minatar"))
    parser.add_argument("--reuse", action="store_true", help="read finished runs under --root instead of rerunning")
    parser.add_argument("--figure", default="", help="also draw every game's curves, one panel each, to this PNG")
    args = parser.parse_args()
    games = [g for g in args.games.split(",") if g]
    unknown = [g for g in games if g not in BASELINES]
    if unknown:
        parser.error(f"--games: unknown {', '.join(unknown)}; known: {', '.join(BASELINES)}")
    if args.env_steps < 1000:
        parser.error(f"--env_steps={args.env_steps} is too few to evaluate anything (at least 1000)")
    marks = checkpoints(args.env_steps)
    rows, tail, curves = [], [], []
    for game in games:
        logdir = os.path.join(args.root, f"{game}-seed{args.seed}")
        if not (args.reuse and os.path.exists(os.path.join(logdir, "metrics.jsonl"))):
            shutil.rmtree(logdir, ignore_errors=True)
            train(f"minatar:{game}", logdir, args.seed, args.max_minutes, [f"--max_env_steps={args.env_steps}"])
        recs = records(logdir)
        if not recs:
            raise SystemExit(f"{game}: {logdir}/metrics.jsonl holds no progress record; see the run's output")
        curves.append((game, recs))
        evals = [eval_at(recs, n) for n in marks]
        values = [v for v, _ in evals]
        last = recs[-1]
        minutes, steps = last["time"] / 60.0, int(last["training_step"])
        dqn, ac = BASELINES[game]
        print(f"game={game} " + " ".join(f"eval_{n // 1000}k={v:.2f}" for n, v in zip(marks, values))
              + f" minutes={minutes:.1f} training_steps={steps} env_steps={int(last['env_steps'])}", flush=True)
        final = values[-1]
        rows.append(f"| {game} | " + " | ".join(cell(v, n) for v, n in evals)
                    + f" | {minutes:.1f} | {steps:,} | {dqn:g} | {ac:g} | "
                    + ("yes" if final > dqn else "no") + " |")
        tail += [f"eval_{game}_{n}={v:.3f}" for n, v in zip(marks, values)]
        tail.append(f"beats_dqn_{game}={int(final > dqn)}")
    header = " | ".join(f"eval at {n // 1000}k" for n in marks)
    print(f"\n| game | {header} | minutes | training steps | DQN at 5M frames | AC(λ) at 5M frames | "
          f"beats DQN at {marks[-1] // 1000}k |")
    print("|---|" + "---|" * (len(marks) + 5))
    for row in rows:
        print(row)
    print("(eval: greedy evaluation mean over the latest 20 episodes, or over the episodes shown where "
          "fewer had ended; -: none had; DQN / AC(λ): training returns with exploration, read off the "
          "MinAtar README figure)")
    for line in tail:
        print(line)
    if args.figure:
        draw(curves, args.figure, args.seed)
        print(f"figure={args.figure}")


def draw(curves: list, path: str, seed: int) -> None:
    """One panel per game: the greedy evaluation return (mean of the latest 20 episodes) and
    the training return against env steps, with DQN's and AC(lambda)'s 5M-frame returns."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False)
    for ax, (game, recs) in zip(axes[0], curves):
        for key, label, style in (("return_eval", "MuZero, greedy evaluation", "-"),
                                  ("return_train", "MuZero, training episodes", ":")):
            points = [(r["env_steps"], r[key]) for r in recs if r.get(key) is not None]
            if points:
                ax.plot(*zip(*points), style, label=label)
        dqn, ac = BASELINES[game]
        ax.axhline(dqn, color="grey", linestyle="--", label="DQN at 5M frames")
        ax.axhline(ac, color="black", linestyle="-.", label="AC(λ) at 5M frames")
        ax.set_title(f"{game} (seed {seed})")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:.0f}k"))
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("return")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
