"""Checkpoint plumbing shared by the TensorFlow learners of the model-free algorithms.

``CheckpointedLearner`` implements ``muzero.core.Learner.save / restore / init_from`` once:

* ``save(directory)`` writes ``self.checkpoint`` (a ``tf.train.Checkpoint`` of networks,
  optimisers, counters) under the prefix ``model`` and a JSON file ``STATE_JSON`` holding
  ``{"algo": ALGO, **self.learner_state()}`` (generator states, counters), then calls
  ``save_extra(directory)`` (e.g. the replay).
* ``restore(directory)`` refuses another algorithm's checkpoint, reads every object of
  ``self.checkpoint`` (all must match), ``load_learner_state``, ``restore_extra``, then
  ``copy_to_serving()``.
* ``init_from(path)`` (fine-tuning) reads only ``self.init_parts()`` (the networks) from
  a checkpoint directory, a run's checkpoints directory or its logdir; a mismatch in
  network settings fails naming it.

A subclass sets ``ALGO``, ``STATE_JSON``, ``self.checkpoint`` and implements
``learner_state`` / ``load_learner_state`` / ``init_parts``.

Imports TensorFlow.
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from muzero import core

MODEL = "model"            # tf.train.Checkpoint prefix inside a checkpoint directory
RUN_STATE = "state.json"   # the run loop's counters inside a checkpoint directory


class CheckpointedLearner(core.Learner):
    """Mixin: save / restore / init_from over ``self.checkpoint`` plus a JSON state file."""

    ALGO: str = ""
    STATE_JSON: str = "learner.json"
    checkpoint: tf.train.Checkpoint

    # -- what subclasses provide --------------------------------------------------------------
    def learner_state(self) -> dict:
        """JSON-able state beyond the TensorFlow objects (generator states, counters)."""
        return {}

    def load_learner_state(self, state: dict) -> None:
        """Inverse of ``learner_state``."""

    def init_parts(self) -> dict:
        """``{name: trackable}`` restored by ``init_from`` (the networks, not the optimisers)."""
        raise NotImplementedError

    def save_extra(self, directory: str) -> None:
        """More state to write beside the model (e.g. the replay)."""

    def restore_extra(self, directory: str) -> None:
        """Inverse of ``save_extra``."""

    # -- core.Learner ---------------------------------------------------------------------------
    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.checkpoint.write(os.path.join(directory, MODEL))
        with open(os.path.join(directory, self.STATE_JSON), "w") as f:
            json.dump({"algo": self.ALGO, **self.learner_state()}, f)
        self.save_extra(directory)

    def check_algo(self, directory: str) -> None:
        """Raises ValueError when ``directory`` is another algorithm's checkpoint."""
        for name in (self.STATE_JSON, RUN_STATE):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                with open(path) as f:
                    algo = json.load(f).get("algo", self.ALGO)
                if algo != self.ALGO:
                    raise ValueError(f"{directory} is a checkpoint of --algo={algo}, not --algo={self.ALGO}")

    def restore(self, directory: str) -> None:
        self.check_algo(directory)
        self.checkpoint.read(os.path.join(directory, MODEL)).assert_existing_objects_matched()
        path = os.path.join(directory, self.STATE_JSON)
        if os.path.isfile(path):
            with open(path) as f:
                self.load_learner_state(json.load(f))
        self.restore_extra(directory)
        self.copy_to_serving()

    def init_from(self, path: str) -> str:
        from muzero.checkpoints import resolve_checkpoint
        ckpt_dir = path if os.path.isfile(os.path.join(path, MODEL + ".index")) else resolve_checkpoint(path)
        if ckpt_dir is None or not os.path.isfile(os.path.join(ckpt_dir, MODEL + ".index")):
            raise FileNotFoundError(f"--init_checkpoint={path!r}: no {self.ALGO} checkpoint found there "
                                    "(expected a ckpt-<step> directory, or a logdir holding checkpoints)")
        self.check_algo(ckpt_dir)
        status = tf.train.Checkpoint(**self.init_parts()).read(os.path.join(ckpt_dir, MODEL))
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(f"--init_checkpoint={path!r}: its networks do not match this run's "
                             f"(network settings or env differ): {e}") from None
        status.expect_partial()
        self.copy_to_serving()
        return ckpt_dir
