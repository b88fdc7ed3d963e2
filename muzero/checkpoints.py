"""Checkpoint directories of a run, for every algorithm.

A checkpoint is a directory ``<logdir>/checkpoints/ckpt-<step>``. It is written under a
temporary name (``.tmp-ckpt-<step>-...``): the learner's ``save(directory)`` fills it
(weights, optimiser, replay or queue, whatever it needs), then the run loop writes
``state.json`` (counters) last and renames the directory into place; ``checkpoints/latest``
names the newest one (replaced atomically). A crash mid-write leaves the previous
checkpoint intact; only the newest ``KEEP_CHECKPOINTS`` are kept.

``restore_parts`` is fine-tuning's partial restore (``--init_checkpoint``): it loads,
variable by variable, whatever a ``tf.train.Checkpoint`` holds of a network's parts and
reports what was restored, skipped and left new.

Imports only the standard library (``restore_parts`` imports TensorFlow and
``muzero.config`` when called).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
import dataclasses
from typing import Callable, Optional

CHECKPOINTS = "checkpoints"
LATEST = "latest"
STATE = "state.json"
KEEP_CHECKPOINTS = 2
EXPORTS = "export"   # <logdir>/export/step-<N>: the SavedModels of a run


def export_steps(root: str) -> list:
    """[(step, path)] of the ``step-<N>`` exports in ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    return sorted((int(m.group(1)), os.path.join(root, name)) for name in os.listdir(root)
                  if (m := re.fullmatch(r"step-(\d+)", name)))


def resolve_export(path: str) -> str:
    """An export directory from itself (it holds a SavedModel), a run's export folder or a
    logdir (their newest ``step-<N>``); ValueError naming what it looked for otherwise."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    for root in (path, os.path.join(path, EXPORTS)):
        steps = export_steps(root)
        if steps:
            return steps[-1][1]
    if not os.path.isdir(path):
        raise ValueError(f"--export_dir={path!r} is not a directory")
    raise ValueError(f"--export_dir={path!r} holds no SavedModel and no {EXPORTS}/step-<N> export: pass an "
                     "export directory, a run's export folder or its logdir")


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


@dataclasses.dataclass(frozen=True)
class RestoreSummary:
    """What ``restore_parts`` did. Each field maps a part name to the variable names
    (paths below the part, e.g. ``torso/layers/0/w``) in that state:

    restored: in the checkpoint and in the network (values loaded);
    skipped:  in the checkpoint, not in the network (ignored);
    new:      in the network, not in the checkpoint (kept as initialised).
    """

    source: str
    restored: dict
    skipped: dict
    new: dict

    @staticmethod
    def _counts(group: dict) -> str:
        total = sum(len(v) for v in group.values())
        if not total:
            return "none"
        return ", ".join(f"{part} {len(names)}" for part, names in group.items() if names) + f" ({total} variables)"

    def lines(self) -> list:
        """A compact report: one count line per state, then the names by part."""
        out = [f"restored: {self._counts(self.restored)}",
               f"skipped (in the checkpoint, not in this network): {self._counts(self.skipped)}",
               f"new (in this network, not in the checkpoint; initialised from the seed): {self._counts(self.new)}"]
        for label, group in (("restored", self.restored), ("skipped", self.skipped), ("new", self.new)):
            for part, names in group.items():
                if names:
                    out.append(f"  {label} {part}: {', '.join(names)}")
        return out


def variable_paths(module) -> dict:
    """{path: tf.Variable} of a ``tf.Module``'s variables, paths as a tf.train.Checkpoint
    names them below the module (attribute names and list indices joined by '/')."""
    import tensorflow as tf
    paths = {}
    for path, variable in module._flatten(predicate=lambda v: isinstance(v, tf.Variable), with_path=True):
        name = "/".join(str(p) for p in path)
        if all(v is not variable for v in paths.values()):
            paths[name] = variable
    return paths


def checkpoint_variable_keys(reader, root: str) -> dict:
    """{path below ``root``: tensor key} of every variable a ``tf.train.Checkpoint`` holds
    under its child ``root``, read from the checkpoint's object graph. (A variable is
    stored once, under the first path that reaches it -- often the optimiser's list of
    variables -- so keys cannot be read off the names; the graph gives every path.)"""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    start = [c.node_id for c in graph.nodes[0].children if c.local_name == root]
    keys, stack, seen = {}, [(node, "") for node in start], set()
    while stack:
        node_id, path_name = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE" and path_name:
                keys[path_name] = attribute.checkpoint_key
        for child in node.children:
            stack.append((child.node_id, f"{path_name}/{child.local_name}" if path_name else child.local_name))
    return keys


def restore_parts(path: str, parts: dict, root: str = "network", subdir: str = "model") -> RestoreSummary:
    """Loads the variables of ``parts`` ({part name: tf.Module or None}) that a checkpoint
    holds under ``<root>/<part>/...`` into the network; nothing else (no optimiser, no step).

    ``path`` is a ckpt-<step> directory, a checkpoints directory or a run's logdir; its
    ``<subdir>`` is the ``tf.train.Checkpoint`` prefix. Every shape is checked before any
    value is assigned: a mismatch raises ConfigError (a ValueError) naming the variable
    and both shapes, and leaves the network unchanged; so does a checkpoint sharing no
    variable with the network. FileNotFoundError when no checkpoint is there.
    """
    import tensorflow as tf

    from muzero.config import ConfigError   # a ValueError the command line reports in one line
    ckpt_dir = resolve_checkpoint(path)
    if ckpt_dir is None:
        raise FileNotFoundError(f"--init_checkpoint={path!r}: no checkpoint found there "
                                f"(expected a ckpt-<step> directory or a logdir with {CHECKPOINTS}/{LATEST})")
    reader = tf.train.load_checkpoint(os.path.join(ckpt_dir, subdir))
    keys = checkpoint_variable_keys(reader, root)   # "part/name" -> checkpoint key
    stored: dict = {}    # part -> {name: shape}
    shapes = reader.get_variable_to_shape_map()
    for path_name, key in keys.items():
        part, _, name = path_name.partition("/")
        stored.setdefault(part, {})[name] = tuple(shapes[key])
    mine = {part: variable_paths(module) for part, module in parts.items() if module is not None}
    restored, skipped, new, assignments = {}, {}, {}, []
    for part in list(mine) + [p for p in stored if p not in mine]:
        have, saved = mine.get(part, {}), stored.get(part, {})
        restored[part] = [n for n in have if n in saved]
        new[part] = [n for n in have if n not in saved]
        skipped[part] = sorted(n for n in saved if n not in have)
        for name in restored[part]:
            variable = have[name]
            if tuple(variable.shape) != saved[name]:
                raise ConfigError(f"--init_checkpoint={ckpt_dir}: {root}/{part}/{name} has shape "
                                 f"{list(saved[name])} in the checkpoint but {list(variable.shape)} in this "
                                 "network (a different network config)")
            assignments.append((variable, keys[f"{part}/{name}"]))
    if not assignments:
        raise ConfigError(f"--init_checkpoint={ckpt_dir}: none of this network's variables are in it (its "
                         f"{root} holds parts {sorted(stored) or 'none'}; this network has {sorted(mine)})")
    for variable, key in assignments:
        variable.assign(reader.get_tensor(key))
    return RestoreSummary(ckpt_dir, restored, skipped, new)
