"""Side-by-side measurement: one bench command on a baseline commit and on this tree, alternately.

    python bench/compare.py --baseline=12d2bd6 --runs=5 -- python bench/mcts_bench.py --batch=256
    python bench/compare.py --baseline=HEAD~3 --runs=2 --metrics='minutes_to_target*' -- \\
        python bench/learn.py --env=cartpole --seeds=5 --minutes=6 --stop_at_target
    python bench/compare.py --baseline=12d2bd6 --candidate=HEAD --env=NUMBA_NUM_THREADS=1 -- python bench/mcts_bench.py

The baseline (and ``--candidate`` when it names a commit; by default the candidate is this
working tree, uncommitted changes included) is checked out once into a git worktree under
``.compare/<commit>`` with its own Numba cache, which later comparisons reuse. Each tree's
kernels are compiled before its first timed run (``python -m muzero.warmup`` where the
tree has it). The two sides then run ``--runs`` times each, in the order B C, C B, B C,
... so that a drift of the machine's speed hits both alike. Every run executes in its own
tree (working directory and ``PYTHONPATH``), so ``python -m muzero.learner`` or
``bench/x.py`` there imports that tree's code; ``python`` stands for this interpreter.

What is compared: every ``name=value`` token with a numeric value on the command's standard
output (the last value of each name in a run wins). Tokens with non-numeric values on the
same line, and those named seed, mode, latent, env, algo or case, label the line's numbers:
``mode=cache latent=64 leaves_per_s=9e4`` gives the metric ``leaves_per_s[mode=cache latent=64]``. Per metric it
prints both medians with the range of the runs, the ratio candidate / baseline of the
medians, and where the candidate's median lies outside the baseline's range: ``higher``,
``lower`` or ``within spread``. A run that fails stops the comparison with its log's path.

Logs of every run (and ``compare.json`` with every value) go to ``--log_dir``.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABELS = ("seed", "mode", "latent", "env", "algo", "case")   # names whose numbers label, not measure
_TOKEN = re.compile(r"(?<![\w.-])([A-Za-z_][\w.]*)=(\S+)")


class CompareError(Exception):
    """A comparison that cannot run; the message says what to do."""


def _git(*args: str, cwd: str = ROOT) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompareError(f"git {' '.join(args)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip()


def checkout(rev: str, repo: str = ROOT) -> tuple:
    """(directory, short commit) of a worktree of ``repo`` holding ``rev`` (under
    ``<repo>/.compare/``); made on first use, then reused."""
    try:
        commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=repo)
    except CompareError:
        raise CompareError(f"--baseline/--candidate {rev!r} is not a commit of this repository "
                           "(try a hash from `git log --oneline`)") from None
    short = commit[:12]
    path = os.path.join(repo, ".compare", short)
    if not os.path.isdir(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _git("worktree", "prune", cwd=repo)
        _git("worktree", "add", "--detach", "--force", path, commit, cwd=repo)
    return path, short


def parse_metrics(text: str) -> dict:
    """{metric: float} from ``name=value`` tokens; see the module docstring for the labels."""
    out = {}
    for line in text.splitlines():
        tokens = _TOKEN.findall(line)
        labels, numbers = [], []
        for name, value in tokens:
            value = value.rstrip(",;")
            try:
                number = float("nan") if value == "None" else float(value)
            except ValueError:
                labels.append(f"{name}={value}")
                continue
            if name in LABELS:
                labels.append(f"{name}={value}")
            else:
                numbers.append((name, number))
        label = f"[{' '.join(labels)}]" if labels else ""
        for name, number in numbers:
            out[f"{name}{label}"] = number
    return out


def _entry_exists(tree: str, argv: list) -> str | None:
    """The command's script or ``-m`` module inside ``tree``, or None when it is missing there
    (a missing module would otherwise load from the editable install, i.e. the wrong tree)."""
    if not argv or os.path.basename(argv[0]) not in ("python", "python3"):
        return argv[0] if argv else None
    args = argv[1:]
    if "-m" in args:
        module = args[args.index("-m") + 1].replace(".", os.sep)
        for candidate in (module + ".py", os.path.join(module, "__main__.py")):
            if os.path.isfile(os.path.join(tree, candidate)):
                return candidate
        return None
    script = next((a for a in args if a.endswith(".py")), None)
    return script if script is None or os.path.isfile(os.path.join(tree, script)) else None


class Side:
    """One tree that runs the command: its directory, its label and the environment it runs in."""

    def __init__(self, name: str, tree: str, label: str, extra_env: dict):
        self.name, self.tree, self.label = name, tree, label
        self.env = dict(os.environ, PYTHONPATH=tree, NUMBA_CACHE_DIR=os.path.join(tree, ".numba_cache"),
                        PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", **extra_env)
        self.values = []   # one {metric: value} per run

    def argv(self, command: list) -> list:
        if command and command[0] in ("python", "python3"):
            return [sys.executable, *command[1:]]
        return list(command)

    def warm_up(self) -> bool:
        """Compiles the tree's kernels into its cache; False where the tree has no warmup
        module (its first run then compiles them itself)."""
        os.makedirs(self.env["NUMBA_CACHE_DIR"], exist_ok=True)
        if not os.path.isfile(os.path.join(self.tree, "muzero", "warmup.py")):
            return False
        proc = subprocess.run([sys.executable, "-m", "muzero.warmup"], cwd=self.tree, env=self.env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompareError(f"{self.name} ({self.label}): `python -m muzero.warmup` failed: "
                               f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return True

    def run(self, command: list, log_path: str, timeout: float | None) -> tuple:
        """Runs the command once; returns (seconds, metrics). Output goes to ``log_path``."""
        start = time.time()
        with open(log_path, "w") as log:
            log.write(f"# {self.name} {self.label} in {self.tree}\n$ {' '.join(command)}\n")
            log.flush()
            try:
                proc = subprocess.run(self.argv(command), cwd=self.tree, env=self.env, stdout=subprocess.PIPE,
                                      stderr=log, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise CompareError(f"{self.name} ran past --timeout={timeout:g} s; see {log_path}") from None
            log.write(proc.stdout)
        if proc.returncode != 0:
            raise CompareError(f"{self.name} ({self.label}) exited {proc.returncode}; see {log_path}")
        values = parse_metrics(proc.stdout)
        self.values.append(values)
        return time.time() - start, values


def order(runs: int) -> list:
    """Which side goes when: pairs alternate which side goes first (B C, C B, B C, ...)."""
    out = []
    for i in range(runs):
        out += [0, 1] if i % 2 == 0 else [1, 0]
    return out


def summarise(base: list, cand: list) -> dict:
    """Medians, ranges, ratio and the verdict for one metric's values on the two sides."""
    bm, cm = statistics.median(base), statistics.median(cand)
    ratio = cm / bm if bm not in (0.0,) and math.isfinite(bm) and math.isfinite(cm) else float("nan")
    if cm > max(base):
        verdict = "higher"
    elif cm < min(base):
        verdict = "lower"
    else:
        verdict = "within spread"
    return {"baseline_median": bm, "baseline_min": min(base), "baseline_max": max(base),
            "candidate_median": cm, "candidate_min": min(cand), "candidate_max": max(cand),
            "ratio": ratio, "verdict": verdict, "baseline": list(base), "candidate": list(cand)}


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"


def table(results: dict) -> str:
    rows = [("metric", "baseline median (range)", "candidate median (range)", "ratio", "verdict")]
    for name, r in results.items():
        rows.append((name, f"{_fmt(r['baseline_median'])} ({_fmt(r['baseline_min'])}-{_fmt(r['baseline_max'])})",
                     f"{_fmt(r['candidate_median'])} ({_fmt(r['candidate_min'])}-{_fmt(r['candidate_max'])})",
                     "-" if math.isnan(r["ratio"]) else f"{r['ratio']:.3f}", r["verdict"]))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def compare(baseline: str, command: list, runs: int, candidate: str | None = None, metrics: list | None = None,
            extra_env: dict | None = None, log_dir: str | None = None, timeout: float | None = None,
            echo=print, repo: str = ROOT) -> dict:
    """Runs the comparison; returns {metric: summary} (see ``summarise``) for the metrics both
    sides printed (those matching one of the ``metrics`` glob patterns, if given)."""
    if runs < 1:
        raise CompareError(f"--runs must be >= 1, got {runs}")
    if not command:
        raise CompareError("no command to compare: give it after --, e.g. -- python bench/mcts_bench.py")
    base_tree, base_label = checkout(baseline, repo)
    if candidate:
        cand_tree, cand_label = checkout(candidate, repo)
    else:
        cand_tree, cand_label = repo, "working tree"
    sides = [Side("baseline", base_tree, base_label, extra_env or {}),
             Side("candidate", cand_tree, cand_label, extra_env or {})]
    for side in sides:
        if _entry_exists(side.tree, command) is None:
            raise CompareError(f"{side.name} ({side.label}) has no {' '.join(command[1:3])} to run: "
                               "compare against a commit that has it")
    log_dir = log_dir or os.path.join(repo, "runs", "compare", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(log_dir, exist_ok=True)
    echo(f"baseline {base_label} ({base_tree}) against candidate {cand_label}; {runs} runs each; "
         f"logs in {log_dir}")
    for side in sides:
        if not side.warm_up() and os.path.isdir(os.path.join(side.tree, "muzero")):
            echo(f"note: {side.name} ({side.label}) has no muzero/warmup.py: its first run also compiles the "
                 "Numba kernels (give --runs one more, or warm its .numba_cache with a short run first)")
    schedule = order(runs)
    for i, which in enumerate(schedule):
        side = sides[which]
        log = os.path.join(log_dir, f"{i + 1:02d}-{side.name}.log")
        seconds, values = side.run(command, log, timeout)
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in values.items() if _wanted(k, metrics))
        echo(f"[{i + 1}/{len(schedule)}] {side.name} {side.label}: {seconds:.0f} s; {shown[:300]}")
    common = [k for k in sides[0].values[0] if all(k in v for s in sides for v in s.values)]
    results = {k: summarise([v[k] for v in sides[0].values], [v[k] for v in sides[1].values])
               for k in common if _wanted(k, metrics)}
    with open(os.path.join(log_dir, "compare.json"), "w") as f:
        json.dump({"baseline": base_label, "candidate": cand_label, "command": command, "runs": runs,
                   "date": time.strftime("%Y-%m-%d"), "results": results}, f, indent=1)
    return results


def _wanted(name: str, patterns: list | None) -> bool:
    return not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="commit to compare against (hash, tag, HEAD~N)")
    parser.add_argument("--candidate", default=None,
                        help="commit to measure (default: this working tree as it is, uncommitted changes too)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each side (default 5)")
    parser.add_argument("--metrics", default="",
                        help="comma-separated glob patterns of the metrics to report (default: all)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment variable for both sides' runs (repeatable)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds one run may take (default: no limit)")
    parser.add_argument("--log_dir", default=None, help="where run logs and compare.json go "
                        "(default runs/compare/<date-time>)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the bench command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    extra_env = {}
    for item in args.env:
        if "=" not in item:
            parser.error(f"--env takes NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        extra_env[name] = value
    patterns = [p for p in args.metrics.split(",") if p]
    try:
        results = compare(args.baseline, command, args.runs, args.candidate, patterns, extra_env, args.log_dir,
                          args.timeout)
    except CompareError as e:
        raise SystemExit(f"error: {e}") from None
    if not results:
        raise SystemExit("error: the two sides printed no metric in common (name=value tokens with numbers)")
    print(table(results))


if __name__ == "__main__":
    main()
