"""Which checkpoint a run resumes from: 'latest', and the fallback when 'latest' is unusable."""
import os

from muzero.checkpoints import CHECKPOINTS, LATEST, resolve_checkpoint


def _ckpt(root, step, complete=True):
    path = os.path.join(root, CHECKPOINTS, f"ckpt-{step}")
    os.makedirs(path)
    if complete:
        with open(os.path.join(path, "state.json"), "w") as f:
            f.write("{}")
    return path


def _latest(root, name):
    with open(os.path.join(root, CHECKPOINTS, LATEST), "w") as f:
        f.write(name + "\n")


def test_latest_wins_and_a_broken_latest_falls_back_to_the_newest_complete(tmp_path):
    root = str(tmp_path)
    assert resolve_checkpoint(root) is None
    five, ten = _ckpt(root, 5), _ckpt(root, 10)
    _ckpt(root, 12, complete=False)               # a directory without state.json is ignored
    _latest(root, "ckpt-5")
    assert resolve_checkpoint(root) == five       # 'latest' is honoured even if not the newest
    _latest(root, "ckpt-13")                      # points at nothing (crash between renames)
    assert resolve_checkpoint(root) == ten
    assert resolve_checkpoint(five) == five       # a checkpoint directory itself
    assert resolve_checkpoint(os.path.join(root, CHECKPOINTS)) == ten
