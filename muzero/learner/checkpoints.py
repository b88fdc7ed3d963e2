"""Checkpoint directories of a run, for every algorithm.

A checkpoint is a directory ``<logdir>/checkpoints/ckpt-<step>``. It is written under a
temporary name (``.tmp-ckpt-<step>-...``): the learner's ``save(directory)`` fills it
(weights, optimiser, replay or queue, whatever it needs), then the run loop writes
``state.json`` (counters) last and renames the directory into place; ``checkpoints/latest``
names the newest one (replaced atomically). A crash mid-write leaves the previous
checkpoint intact; only the newest ``KEEP_CHECKPOINTS`` are kept.

Imports only the standard library.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from typing import Callable, Optional

CHECKPOINTS = "checkpoints"
LATEST = "latest"
STATE = "state.json"
KEEP_CHECKPOINTS = 2


def resolve_checkpoint(path: str) -> Optional[str]:
    """A checkpoint directory from a ckpt dir, a checkpoints dir or a logdir; None if none."""
    if os.path.isfile(os.path.join(path, STATE)):
        return path
    for base in (path, os.path.join(path, CHECKPOINTS)):
        latest = os.path.join(base, LATEST)
        if os.path.isfile(latest):
            with open(latest) as f:
                name = f.read().strip()
            candidate = os.path.join(base, name)
            if os.path.isfile(os.path.join(candidate, STATE)):
                return candidate
        # No usable 'latest' (a crash between two renames): the newest complete ckpt-<step>.
        if os.path.isdir(base):
            complete = [d for d in os.listdir(base) if d.startswith("ckpt-") and d[5:].isdigit()
                        and os.path.isfile(os.path.join(base, d, STATE))]
            if complete:
                return os.path.join(base, max(complete, key=lambda d: int(d[5:])))
    return None


def checkpoints_newest_first(logdir: str) -> list:
    """Every complete ckpt-<step> directory of a logdir, newest first ('latest' first if valid)."""
    root = os.path.join(logdir, CHECKPOINTS)
    if not os.path.isdir(root):
        return []
    complete = sorted((d for d in os.listdir(root) if d.startswith("ckpt-") and d[5:].isdigit()
                       and os.path.isfile(os.path.join(root, d, STATE))), key=lambda d: -int(d[5:]))
    paths = [os.path.join(root, d) for d in complete]
    latest = resolve_checkpoint(logdir)
    if latest in paths:
        paths.remove(latest)
        paths.insert(0, latest)
    return paths


def remove_temporary(logdir: str) -> tuple:
    """Cleans up after interrupted checkpoint writes; returns (removed names, recovered names).

    A complete ``.tmp-ckpt-<step>-...`` directory (it has state.json) whose ``ckpt-<step>``
    is missing is renamed back: a kill between the two renames of a same-step save leaves
    the only copy there. Everything else under ``.tmp-`` is removed. Call only while no
    other process writes checkpoints into this logdir."""
    root = os.path.join(logdir, CHECKPOINTS)
    if not os.path.isdir(root):
        return [], []
    removed, recovered = [], []
    for d in sorted(os.listdir(root)):
        if not d.startswith(".tmp-"):
            continue
        path = os.path.join(root, d)
        parts = d[len(".tmp-"):].split("-")
        name = "-".join(parts[:2])
        if (len(parts) >= 2 and parts[0] == "ckpt" and parts[1].isdigit() and os.path.isdir(path)
                and os.path.isfile(os.path.join(path, STATE)) and not os.path.exists(os.path.join(root, name))):
            os.replace(path, os.path.join(root, name))
            recovered.append(f"{d} -> {name}")
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
        removed.append(d)
    return removed, recovered


def set_aside(ckpt_dir: str) -> str:
    """Renames a checkpoint that cannot be restored to ``damaged-ckpt-<step>`` (kept for a
    post-mortem, never resumed from or counted among the kept checkpoints); returns the path."""
    parent, name = os.path.split(ckpt_dir.rstrip(os.sep))
    target = os.path.join(parent, f"damaged-{name}")
    if os.path.exists(target):
        shutil.rmtree(target, ignore_errors=True)
    os.replace(ckpt_dir, target)
    return target


def atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(logdir: str, step: int, write: Callable[[str], None], state: dict) -> str:
    """Writes ckpt-<step> atomically: ``write(tmp_dir)`` fills the directory, then
    ``state.json`` (``state`` plus step and time) marks it complete. Returns its path."""
    root = os.path.join(logdir, CHECKPOINTS)
    os.makedirs(root, exist_ok=True)
    name = f"ckpt-{step}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}-{os.getpid()}-{int(time.time() * 1e3)}")
    os.makedirs(tmp)
    try:
        write(tmp)
        atomic_write_text(os.path.join(tmp, STATE),
                          json.dumps({**state, "step": step, "saved_at": time.time()}, indent=2))
        old = None
        if os.path.exists(final):  # same step saved again: move the old copy aside first
            old = f"{tmp}-previous"
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(os.path.join(root, LATEST), name + "\n")
    older = sorted((d for d in os.listdir(root) if d.startswith("ckpt-") and d != name and d[5:].isdigit()),
                   key=lambda d: int(d[5:]))
    for d in older[:-(KEEP_CHECKPOINTS - 1) or None]:
        shutil.rmtree(os.path.join(root, d), ignore_errors=True)
    return final


def read_state(ckpt_dir: str) -> dict:
    """The checkpoint's state.json; ValueError if it is not a JSON object."""
    with open(os.path.join(ckpt_dir, STATE)) as f:
        state = json.load(f)
    if not isinstance(state, dict):
        raise ValueError(f"{ckpt_dir}/{STATE} is not a JSON object")
    return state
