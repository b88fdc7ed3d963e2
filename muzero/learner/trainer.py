"""The training side of the learner: networks, optimiser, SGD steps, weights publishing, checkpoints.

Two copies of the network exist: ``network`` is trained, ``serving`` answers the
inference server. After a training step the trained weights are copied into the
serving copy between two inference batches (``MuZeroService.update_model``), so
inference always reads one consistent set of weights, and its weights version is
the training step they came from.

Checkpoints are directories ``<logdir>/checkpoints/ckpt-<step>`` written under a
temporary name and renamed when complete; ``<logdir>/checkpoints/latest`` names
the newest one (replaced atomically). Each holds the model and optimiser
(``tf.train.Checkpoint``), a replay snapshot and ``state.json`` (counters, RNG
state). A crash mid-write leaves the previous checkpoint intact.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from muzero.config import MuZeroConfig, TrainingConfig
from muzero.network import make_network, make_train_step
from muzero.network.networks import PARTS

CHECKPOINTS = "checkpoints"
LATEST = "latest"
KEEP_CHECKPOINTS = 2


def make_optimizer(training: TrainingConfig):
    lr = training.learning_rate
    if training.lr_schedule == "cosine":
        lr = tf.keras.optimizers.schedules.CosineDecay(lr, training.lr_decay_steps, alpha=training.lr_alpha)
    elif training.lr_schedule == "cosine_restarts":
        lr = tf.keras.optimizers.schedules.CosineDecayRestarts(lr, training.lr_decay_steps,
                                                               alpha=training.lr_alpha)
    if training.optimizer == "sgd":
        return tf.keras.optimizers.SGD(lr, momentum=training.momentum)
    return tf.keras.optimizers.Adam(lr)


def check_parts(parts: Optional[Sequence[str]]) -> Optional[list]:
    if parts is None:
        return None
    parts = list(parts)
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"trainable parts {parts} invalid: choose from {list(PARTS)}")
    return parts


class Trainer:
    """Owns the trained and served networks, the optimiser and the step counter."""

    def __init__(self, descriptor, config: MuZeroConfig, seed: int = 0,
                 trainable_parts: Optional[Sequence[str]] = None):
        stack = config.targets.stack_frames if descriptor.is_image else 1
        self.config = config
        self.network = make_network(descriptor, config.network, stack, seed=seed)
        self.serving = make_network(descriptor, config.network, stack, seed=seed)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.optimizer = make_optimizer(config.training)
        self.trainable_parts = check_parts(trainable_parts)
        variables = (self.network.variables_of(self.trainable_parts) if self.trainable_parts
                     else list(self.network.trainable_variables))
        self.optimizer.build(variables)
        self._train_step = make_train_step(self.network, self.optimizer, config.training, variables)
        self.checkpoint = tf.train.Checkpoint(network=self.network, optimizer=self.optimizer, step=self.step)
        self._src = list(self.network.variables)
        self._dst = list(self.serving.variables)
        if [v.shape for v in self._src] != [v.shape for v in self._dst]:
            raise RuntimeError("trained and served networks differ in structure")

    @tf.function
    def _copy_weights(self):
        for dst, src in zip(self._dst, self._src):
            dst.assign(src)

    def copy_to_serving(self, _model=None) -> None:
        """Copies trained weights into the serving network (call between inference batches)."""
        self._copy_weights()

    def train(self, batch: dict) -> tuple:
        """One SGD step on a replay batch; returns (metrics {name: float}, new priorities [B])."""
        inputs = {k: v for k, v in batch.items() if k != "index"}
        total, metrics, priorities = self._train_step(inputs)
        self.step.assign_add(1)
        out = {k: float(v) for k, v in metrics.items()}
        out["loss/total"] = float(total)
        return out, priorities.numpy()

    def bootstrap_values(self, observation: np.ndarray, index: np.ndarray) -> np.ndarray:
        """The replay's reanalyse hook (``TargetConfig.reanalyse_values``): the trained
        network's value [M] of observations [M, *input_shape], each from the point of
        view of the player to move there (``index`` is not needed)."""
        return self.network.initial_inference(observation)["value"].numpy()

    # -- checkpoints ----------------------------------------------------------------------------

    def init_from(self, path: str) -> str:
        """Loads network weights (not the optimiser) from a checkpoint dir or a run's logdir."""
        ckpt_dir = resolve_checkpoint(path)
        if ckpt_dir is None:
            raise FileNotFoundError(f"--init_checkpoint={path!r}: no checkpoint found there "
                                    f"(expected a ckpt-<step> directory or a logdir with {CHECKPOINTS}/{LATEST})")
        status = tf.train.Checkpoint(network=self.network).read(os.path.join(ckpt_dir, "model"))
        status.expect_partial()
        self.copy_to_serving()
        return ckpt_dir


def resolve_checkpoint(path: str) -> Optional[str]:
    """A checkpoint directory from a ckpt dir, a checkpoints dir or a logdir; None if none."""
    if os.path.isfile(os.path.join(path, "state.json")):
        return path
    for base in (path, os.path.join(path, CHECKPOINTS)):
        latest = os.path.join(base, LATEST)
        if os.path.isfile(latest):
            with open(latest) as f:
                name = f.read().strip()
            candidate = os.path.join(base, name)
            if os.path.isfile(os.path.join(candidate, "state.json")):
                return candidate
        # No usable 'latest' (a crash between two renames): the newest complete ckpt-<step>.
        if os.path.isdir(base):
            complete = [d for d in os.listdir(base) if d.startswith("ckpt-") and d[5:].isdigit()
                        and os.path.isfile(os.path.join(base, d, "state.json"))]
            if complete:
                return os.path.join(base, max(complete, key=lambda d: int(d[5:])))
    return None


def _atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(logdir: str, trainer: Trainer, replay, state: dict) -> str:
    """Writes ckpt-<step> atomically; returns its path. Keeps the newest KEEP_CHECKPOINTS."""
    root = os.path.join(logdir, CHECKPOINTS)
    os.makedirs(root, exist_ok=True)
    step = int(trainer.step.numpy())
    name = f"ckpt-{step}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}-{os.getpid()}-{int(time.time() * 1e3)}")
    os.makedirs(tmp)
    try:
        trainer.checkpoint.write(os.path.join(tmp, "model"))
        replay.snapshot(os.path.join(tmp, "replay"))
        _atomic_write_text(os.path.join(tmp, "state.json"),
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
    _atomic_write_text(os.path.join(root, LATEST), name + "\n")
    older = sorted((d for d in os.listdir(root) if d.startswith("ckpt-") and d != name),
                   key=lambda d: int(d.split("-")[1]))
    for d in older[:-(KEEP_CHECKPOINTS - 1) or None]:
        shutil.rmtree(os.path.join(root, d), ignore_errors=True)
    return final


def load_checkpoint(ckpt_dir: str, trainer: Trainer, replay) -> dict:
    """Restores model, optimiser, step and replay from ckpt_dir; returns its state.json."""
    with open(os.path.join(ckpt_dir, "state.json")) as f:
        state = json.load(f)
    trainer.checkpoint.read(os.path.join(ckpt_dir, "model")).assert_existing_objects_matched()
    trainer.copy_to_serving()
    replay.load(os.path.join(ckpt_dir, "replay"))
    return state


def rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state
