"""Helpers shared by the end-to-end tests that run ``python -m muzero.<module>`` in subprocesses."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subprocess_env() -> dict:
    """The environment of a learner/actor/eval subprocess: the shared Numba cache, quiet
    TensorFlow, unbuffered output."""
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_module(module: str, args: list, timeout: float) -> subprocess.CompletedProcess:
    """Runs ``python -m <module> <args>`` to completion from the repository root."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


def records(logdir: str) -> list:
    """The run's metrics.jsonl records ([] before the first one)."""
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def error_lines(proc) -> list:
    """stderr lines that are not TensorFlow/absl start-up noise."""
    return [line for line in proc.stderr.splitlines()
            if line.strip() and not line.startswith(("I0000", "W0000", "WARNING"))]
