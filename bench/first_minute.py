"""What a new user sees in a run's first minutes: when env steps start counting, when the first
training step comes, the pace line, and what else the command prints.

    python bench/first_minute.py --env=atari --env_options='{"game": "Pong"}' [--seconds=100] [-- --set=...]

Runs ``python -m muzero.learner`` for ``--seconds`` (wall time of the run loop, the learner's
``--max_seconds``) in a fresh logdir and prints, timed from the command's launch:
``first_env_steps_s=`` (the first progress line with env steps above 0),
``first_training_step_s=``, the learner's ``pace`` line, the final counts, and
``noise_lines=`` (lines that are neither the learner's own nor progress: library start-up
and shutdown messages a user would read as errors) with the first few of them. Run it alone.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRESS = re.compile(r"^\[(\d+)m(\d+)s\] step (\d+) .*\| env steps (\d+) ")
OWN = ("[", "serving", "stopping", "done", "checkpoint", "SavedModel", "pace", "resumed", "env ", "note",
       "logdir", "fitted", "  ", "initialised", "dataset", "no SavedModel", "received", "settings", "{", "}")


def fmt(seconds) -> str:
    return "never" if seconds is None else f"{seconds:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="atari")
    parser.add_argument("--env_options", default="")
    parser.add_argument("--seconds", type=float, default=100.0)
    parser.add_argument("extra", nargs="*", help="more learner flags, after --")
    args = parser.parse_args()
    logdir = tempfile.mkdtemp(prefix="first_minute_")
    cmd = [sys.executable, "-m", "muzero.learner", f"--env={args.env}", f"--logdir={logdir}",
           f"--max_seconds={args.seconds:g}", *([f"--env_options={args.env_options}"] if args.env_options else []),
           *args.extra]
    print("$", " ".join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    first_env = first_step = None
    pace, last, noise = "", "", []
    for line in proc.stdout:
        now = time.monotonic() - start
        line = line.rstrip("\n")
        match = PROGRESS.match(line)
        if match:
            last = line
            if first_env is None and int(match.group(4)) > 0:
                first_env = now
            if first_step is None and int(match.group(3)) > 0:
                first_step = now
        elif line.startswith("pace"):
            pace = line
        elif line.strip() and not line.startswith(OWN):
            noise.append(line)
        print(f"  {now:6.1f}s {line}"[:240], flush=True)
    proc.wait()
    shutil.rmtree(logdir, ignore_errors=True)
    print(f"first_env_steps_s={fmt(first_env)}")
    print(f"first_training_step_s={fmt(first_step)}")
    print(f"pace_line={pace or 'none'}")
    print(f"last_progress={last}")
    print(f"noise_lines={len(noise)}" + "".join(f"\n  {n[:200]}" for n in noise[:5]))
    print(f"exit_code={proc.returncode}")


if __name__ == "__main__":
    main()
