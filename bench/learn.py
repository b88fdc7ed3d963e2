"""Learning benchmarks: full training runs of ``python -m muzero.learner``.

    python bench/learn.py --env=cartpole --seeds=3 [--minutes=10]
        One run per seed with a greedy evaluation actor (temperature 0, no noise); the
        evaluation return is the mean of the last 20 evaluation episodes. Prints
        minutes_to_195=<median>, minutes_to_solve=<median> (mean evaluation return >= 475)
        and solved_seeds=<k>/<n>. A seed that never gets there counts as inf.

    python bench/learn.py --env=tictactoe [--minutes=15]
        Trains, then plays 100 games against the perfect minimax player (50 as each side)
        with the exported SavedModel and prints losses=<n> (and wins, draws); also
        losing_lines=<lost>/<all>: the same model against every line the perfect player
        can choose (bench/ttt_exhaustive.py), which the 100 games sample from.

Each run writes its logdir under --root (default runs/bench); progress lines are echoed.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(env: str, logdir: str, seed: int, minutes: float, extra: list) -> None:
    cmd = [sys.executable, "-m", "muzero.learner", f"--env={env}", f"--logdir={logdir}", f"--seed={seed}",
           f"--max_seconds={minutes * 60:g}", *extra]
    print("$", " ".join(cmd), flush=True)
    env_vars = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    env_vars.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    for line in proc.stdout:
        if line.startswith(("[", "stopping", "done", "error", "resumed")):
            print(f"  seed {seed}: {line.rstrip()}", flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"learner failed for seed {seed} (exit {proc.returncode}); see {logdir}")


def records(logdir: str) -> list:
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def minutes_to(recs: list, threshold: float) -> float:
    for r in recs:
        if r.get("return_eval") is not None and r.get("episodes_eval", 0) >= 20 and r["return_eval"] >= threshold:
            return r["time"] / 60.0
    return float("inf")


def cartpole(args) -> None:
    to_195, to_solve = [], []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        logdir = os.path.join(args.root, f"cartpole-seed{seed}")
        shutil.rmtree(logdir, ignore_errors=True)
        train("cartpole", logdir, seed, args.minutes, ["--num_eval_actors=1", "--export=false", *args.extra])
        recs = records(logdir)
        to_195.append(minutes_to(recs, 195.0))
        to_solve.append(minutes_to(recs, 475.0))
        print(f"seed={seed} minutes_to_195={to_195[-1]:.2f} minutes_to_solve={to_solve[-1]:.2f} "
              f"final_eval_return={recs[-1].get('return_eval')}", flush=True)
    solved = sum(m <= args.minutes for m in to_solve)
    print(f"minutes_to_195={statistics.median(to_195):.2f}")
    print(f"minutes_to_solve={statistics.median(to_solve):.2f}")
    print(f"solved_seeds={solved}/{args.seeds}")


def tictactoe(args) -> None:
    logdir = os.path.join(args.root, "tictactoe")
    shutil.rmtree(logdir, ignore_errors=True)
    train("tictactoe", logdir, 0, args.minutes, list(args.extra))
    with open(os.path.join(logdir, "checkpoints", "latest")) as f:
        step = f.read().strip().split("-")[1]
    export_dir = os.path.join(logdir, "export", f"step-{step}")
    from muzero.eval.evaluator import evaluate
    from envs.tictactoe import MinimaxPlayer
    start = time.time()
    result = evaluate(export_dir, 100, num_envs=10, seed=0, opponent=MinimaxPlayer(seed=0).act)
    print(f"played 100 games in {time.time() - start:.0f}s: wins={result['wins']} draws={result['draws']} "
          f"losses={result['losses']} (as first player {result['losses_as_first']}, "
          f"as second {result['losses_as_second']})")
    from ttt_exhaustive import Agent, losing_lines
    agent = Agent(export_dir, None)
    lines = [losing_lines(agent, side)[:2] for side in (0, 1)]
    print(f"every perfect-player line: lost {lines[0][0]} of {lines[0][1]} as first player, "
          f"{lines[1][0]} of {lines[1][1]} as second (bench/ttt_exhaustive.py)")
    print(f"losing_lines={lines[0][0] + lines[1][0]}/{lines[0][1] + lines[1][1]}")
    print(f"losses={result['losses']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=["cartpole", "tictactoe"], default="cartpole")
    parser.add_argument("--seeds", type=int, default=3, help="cartpole: training runs (default 3)")
    parser.add_argument("--first_seed", type=int, default=0, help="cartpole: seeds first_seed, first_seed + 1, ...")
    parser.add_argument("--minutes", type=float, default=None,
                        help="wall-clock budget per run (default 10 for cartpole, 15 for tictactoe)")
    parser.add_argument("--root", default=os.path.join(ROOT, "runs", "bench"), help="where logdirs go")
    parser.add_argument("extra", nargs="*", help="extra learner flags, after --, e.g. -- --simulations=50")
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    args.minutes = args.minutes or (10.0 if args.env == "cartpole" else 15.0)
    sys.path.insert(0, ROOT)
    (cartpole if args.env == "cartpole" else tictactoe)(args)


if __name__ == "__main__":
    main()
