"""Acting throughput while training runs: env steps per second of ``python -m muzero.learner``.

    python bench/throughput.py --env=cartpole --simulations=50 [--seconds=90] [--runs=3]

Each run trains for --seconds with one actor process (training on, so actor, server and
trainer share the 2 cores as in a real run), and takes the median env steps/s of the
progress records after the first 30 s (start-up and Numba/TF warm-up excluded). Prints
one line per run and a last line env_steps_per_s=<median over runs>.

Acting settings: --envs_per_actor (default 256) envs in one actor process, so each
inference RPC carries 256 leaves. The replay ratio is set to one sample per inserted env
step (replay.samples_per_insert=1): training runs and keeps pace with acting, but does not
hold the actors back the way the CartPole default of 8 does (with 8 the actors wait for the
trainer by design, and the figure measures the trainer). With the limiter off entirely
(samples_per_insert=0) the trainer runs flat out and takes the CPU from the actors.
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
           "--num_eval_actors=0", "--num_actors=1", f"--envs_per_actor={args.envs_per_actor}",
           "--set=replay.samples_per_insert=1", *args.extra]
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
    parser.add_argument("--envs_per_actor", type=int, default=256)
    parser.add_argument("--root", default=os.path.join(ROOT, "runs", "bench"))
    parser.add_argument("extra", nargs="*", help="extra learner flags after --")
    args = parser.parse_args()
    if args.seconds < 45:
        parser.error("--seconds must be >= 45 (the first 30 s are warm-up)")
    rates = [one_run(args, i) for i in range(args.runs)]
    print(f"env_steps_per_s={statistics.median(rates):.0f}")


if __name__ == "__main__":
    main()
