"""Acting throughput while training runs: env steps per second of ``python -m muzero.learner``.

    python bench/throughput.py --env=cartpole --simulations=50 [--seconds=90] [--runs=3]

Each run trains for --seconds with the default actors (training on, so actors, server and
trainer share the 2 cores as in a real run), and takes the median env steps/s of the
progress records after the first 30 s (start-up and Numba/TF warm-up excluded). Prints
one line per run and a last line env_steps_per_s=<median over runs>.

The replay's samples-per-insert limiter is switched off here (replay.samples_per_insert=0):
with it on, actors are held back to the trainer's pace by design, and the figure would
measure the trainer, not acting. Pass -- --set=replay.samples_per_insert=4 to see that case.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run(args, index: int) -> float:
    logdir = os.path.join(args.root, f"throughput-{args.env}-{index}")
    shutil.rmtree(logdir, ignore_errors=True)
    cmd = [sys.executable, "-m", "muzero.learner", f"--env={args.env}", f"--logdir={logdir}",
           f"--simulations={args.simulations}", f"--max_seconds={args.seconds}", "--export=false",
           "--num_eval_actors=0", "--set=replay.samples_per_insert=0", *args.extra]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"learner failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    rates = [r["env_steps_per_s"] for r in recs if r["time"] >= 30.0]
    train_rates = [r["train_steps_per_s"] for r in recs if r["time"] >= 30.0]
    rate = statistics.median(rates)
    print(f"run={index} env_steps_per_s={rate:.0f} train_steps_per_s={statistics.median(train_rates):.1f} "
          f"windows={len(rates)}", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", default=os.path.join(ROOT, "runs", "bench"))
    parser.add_argument("extra", nargs="*", help="extra learner flags after --")
    args = parser.parse_args()
    if args.seconds < 45:
        parser.error("--seconds must be >= 45 (the first 30 s are warm-up)")
    rates = [one_run(args, i) for i in range(args.runs)]
    print(f"env_steps_per_s={statistics.median(rates):.0f}")


if __name__ == "__main__":
    main()
