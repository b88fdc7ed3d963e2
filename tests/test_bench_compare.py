"""bench/compare.py and bench/guard.py: the side-by-side runner on a throwaway git repository
whose two commits print known figures, and the guard's rule for what fell."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import compare  # noqa: E402
import guard  # noqa: E402

_SCRIPT = """import os, sys
print("mode=fake latent=8 leaves_per_s=%s" % {leaves})
print("us_per_node=%s" % {us})
print("seed=3 minutes_to_target=inf final_eval_return=None")
print("cwd_is_tree=%d" % (os.path.abspath(os.getcwd()) == os.path.abspath(os.environ["PYTHONPATH"])))
"""


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture()
def repo(tmp_path):
    """A repository whose committed bench prints 100 leaves/s and 2.0 us/node, and whose
    working tree (uncommitted) prints 300 and 1.0."""
    root = tmp_path / "repo"
    (root / "bench").mkdir(parents=True)
    _git(root, "init", "-q")
    (root / "bench" / "x.py").write_text(_SCRIPT.format(leaves=100, us=2.0))
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "base")
    (root / "bench" / "x.py").write_text(_SCRIPT.format(leaves=300, us=1.0))
    return str(root)


def test_parse_metrics_labels_numbers_by_the_lines_text_and_seed():
    text = ("seed=0 minutes_to_target=2.31 env_steps_to_target=inf final_eval_return=None\n"
            "mode=cache latent=6x6x64 leaves_per_s=91234 bytes_per_leaf=12.5\n"
            "$ python -m muzero.learner --env=cartpole --seed=0\n"
            "us_per_node=0.5 speedup_vs_reference=180.1\nus_per_node=0.574\n")
    values = compare.parse_metrics(text)
    assert values["minutes_to_target[seed=0]"] == 2.31
    assert values["env_steps_to_target[seed=0]"] == float("inf")
    assert values["leaves_per_s[mode=cache latent=6x6x64]"] == 91234.0
    assert values["us_per_node"] == 0.574            # the last value of a name wins
    assert "env" not in values and "seed" not in values   # flags of an echoed command are not metrics


def test_runs_alternate_which_side_goes_first():
    assert compare.order(3) == [0, 1, 1, 0, 0, 1]


def test_compare_runs_each_side_in_its_own_tree_and_reports_medians_and_ratio(repo, tmp_path):
    lines = []
    results = compare.compare("HEAD", ["python", "bench/x.py"], runs=2, log_dir=str(tmp_path / "logs"),
                              echo=lines.append, repo=repo)
    leaves = results["leaves_per_s[mode=fake latent=8]"]
    assert leaves["baseline"] == [100.0, 100.0] and leaves["candidate"] == [300.0, 300.0]
    assert leaves["ratio"] == pytest.approx(3.0) and leaves["verdict"] == "higher"
    assert results["us_per_node"]["ratio"] == pytest.approx(0.5) and results["us_per_node"]["verdict"] == "lower"
    assert results["cwd_is_tree"]["baseline"] == [1.0, 1.0] and results["cwd_is_tree"]["candidate"] == [1.0, 1.0]
    assert len(lines) == 1 + 4 and "[4/4]" in lines[-1]
    assert os.path.isfile(tmp_path / "logs" / "compare.json")
    # The baseline's worktree is kept for the next comparison, its own Numba cache beside it.
    worktrees = os.listdir(os.path.join(repo, ".compare"))
    assert len(worktrees) == 1 and os.path.isdir(os.path.join(repo, ".compare", worktrees[0], ".numba_cache"))
    text = compare.table(results)
    assert "3.000" in text and "higher" in text


def test_compare_refuses_a_command_the_baseline_lacks_and_an_unknown_commit(repo):
    (open(os.path.join(repo, "bench", "new.py"), "w")).write("print('a=1')\n")
    with pytest.raises(compare.CompareError, match="baseline .* has no bench/new.py"):
        compare.compare("HEAD", ["python", "bench/new.py"], runs=1, repo=repo, echo=lambda _: None)
    with pytest.raises(compare.CompareError, match="not a commit"):
        compare.compare("no-such-rev", ["python", "bench/x.py"], runs=1, repo=repo, echo=lambda _: None)


def test_a_failing_run_stops_the_comparison_with_its_log(repo, tmp_path):
    (open(os.path.join(repo, "bench", "x.py"), "w")).write("raise SystemExit(3)\n")
    with pytest.raises(compare.CompareError, match=r"candidate \(working tree\) exited 3; see .*02-candidate.log"):
        compare.compare("HEAD", ["python", "bench/x.py"], runs=1, repo=repo, log_dir=str(tmp_path),
                        echo=lambda _: None)


def test_guard_counts_a_fall_only_beyond_the_baseline_range_and_the_tolerance():
    def summary(base, cand):
        return compare.summarise(base, cand)
    # Throughput (higher is better): 90 is below every baseline run (95-110) and 10 % under 100.
    assert guard.fell(summary([95, 100, 110], [90, 90, 91]), "higher", 0.05)
    # Within the baseline's range: noise, however large the ratio.
    assert not guard.fell(summary([60, 100, 140], [70, 70, 70]), "higher", 0.05)
    # Outside the range but by less than the tolerance.
    assert not guard.fell(summary([99, 100, 101], [97, 97, 97]), "higher", 0.05)
    # Time (lower is better): 1.2 is above every run of 0.9-1.05 and 20 % over 1.0.
    assert guard.fell(summary([0.9, 1.0, 1.05], [1.2, 1.2, 1.3]), "lower", 0.05)
    assert not guard.fell(summary([0.9, 1.0, 1.05], [0.5, 0.5, 0.5]), "lower", 0.05)
    # A target never reached (inf minutes) against one that was.
    assert guard.fell(summary([2.0, 2.5, 3.0], [float("inf")] * 3), "lower", 0.05)
