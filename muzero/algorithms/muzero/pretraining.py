"""MuZero's pretraining learner (``--pretrain``) and the partial restore of fine-tuning.

A pretraining run is a MuZero run in every respect but two: its actors play uniformly
random legal moves (``ActorSettings.random_policy``, set by the builder), and its
learner is ``PretrainLearner``: it samples observations from the same prioritized
replay the actors push to (positions are never re-prioritised, so sampling is uniform),
makes two augmented views of each (``muzero.algorithms.muzero.network.pretrain.augment_views``), and
trains only the representation and the pretrain head (``muzero.algorithms.muzero.network.ssl``) with the
objective of ``PretrainConfig``. Dynamics and prediction are neither trained nor saved.

Checkpoints have the MuZero learner's layout: ``model`` (a ``tf.train.Checkpoint`` whose
``network`` holds the ``representation`` and ``pretrain_head`` parts under the same
names as a MuZero network's, plus ``optimizer`` and ``step``), ``replay`` and
``learner.json`` (the augmentation generator's state). A fine-tuning run
(``--init_checkpoint``) restores from it whatever parts its own network has
(``learning.init_network_from``) and prints what it restored, skipped and left new.

The run writes no SavedModel at the end: its dynamics and prediction are untrained, so
there is nothing to play; the log says so (``PretrainLearner.no_export_reason``).
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from muzero import core
from muzero.algorithms.muzero.learning import MuZeroLearner, make_optimizer, set_rng_state
from muzero.algorithms.muzero.config import MuZeroConfig
from muzero.config import ConfigError
from muzero.distribute import host_seed
from muzero.checkpoints import restore_parts
from muzero.algorithms.muzero.network import make_network
from muzero.network.layers import variable_copier
from muzero.algorithms.muzero.network.pretrain import augment_views, pretrain_objective
from muzero.algorithms.muzero.replay import Replay

# The parts a pretraining run trains and checkpoints.
PRETRAIN_PARTS = ("representation", "pretrain_head")

# Salt of the augmentation generator's seed (its draws never coincide with the replay's).
_AUGMENT_SALT = 0x9E7A


class _Parts(tf.Module):
    """The trained parts under the names a MuZero network's checkpoint gives them."""

    def __init__(self, representation: tf.Module, pretrain_head: tf.Module):
        super().__init__(name="pretrained_parts")
        self.representation = representation
        self.pretrain_head = pretrain_head


class PretrainTrainer:
    """Network with its pretrain head, serving copy, optimiser, step and one train step.

    ``train(observations [B, *input_shape], rng) -> metrics`` draws two views of every
    observation with ``rng`` and takes one optimiser step on the pretraining objective
    plus ``training.weight_decay`` * sum(v^2)/2 over the trained variables (as SEED's
    pretraining loss), with ``training.gradient_clip_norm`` clipping when > 0. Only the
    representation and the pretrain head are updated.
    """

    def __init__(self, descriptor, config: MuZeroConfig, seed: int = 0):
        self.config = config
        self.descriptor = descriptor
        self.stack = config.targets.frames_for(descriptor.is_image)
        self.network = make_network(descriptor, config.network, self.stack, seed=seed, with_ssl_head=True)
        self.serving = make_network(descriptor, config.network, self.stack, seed=seed)
        self.variables = self.network.variables_of(PRETRAIN_PARTS)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.optimizer = make_optimizer(config.training)
        self.optimizer.build(self.variables)
        self.checkpoint = tf.train.Checkpoint(
            network=_Parts(self.network.representation, self.network.pretrain_head),
            optimizer=self.optimizer, step=self.step)
        self._copy_weights = variable_copier(self.network.representation.variables,
                                             self.serving.representation.variables)
        # Frame channels of an image input (the rest are action planes): T * C.
        self.frame_channels = (self.stack * int(descriptor.observation_shape[-1])) if descriptor.is_image else 0
        spec = tf.TensorSpec([None, *self.network.input_shape], self.network.input_dtype)
        self._train_step = tf.function(self._step, input_signature=[spec, spec], autograph=False)

    def _step(self, view1: tf.Tensor, view2: tf.Tensor) -> dict:
        p, t = self.config.pretrain, self.config.training
        with tf.GradientTape() as tape:
            hidden1 = self.network.representation(view1)
            hidden2 = self.network.representation(view2)
            loss, metrics = pretrain_objective(self.network.pretrain_head, hidden1, hidden2, p.objective,
                                               p.temperature, p.use_predictor)
            decay = tf.constant(0.0)
            if t.weight_decay > 0:
                decay = t.weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in self.variables])
            total = loss + decay
        grads = tape.gradient(total, self.variables)
        if t.gradient_clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, t.gradient_clip_norm)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        return {**metrics, "loss/weight_decay": decay, "loss/total": total}

    def views(self, observations: np.ndarray, rng: np.random.Generator) -> tuple:
        """Two augmented views of a batch (``PretrainConfig``'s augmentation settings)."""
        p = self.config.pretrain
        return augment_views(observations, rng, is_image=self.descriptor.is_image,
                             frame_channels=self.frame_channels, shift_pixels=p.shift_pixels,
                             brightness=p.brightness, noise_std=p.noise_std)

    def train(self, observations: np.ndarray, rng: np.random.Generator) -> dict:
        view1, view2 = self.views(observations, rng)
        metrics = self._train_step(view1, view2)
        self.step.assign_add(1)
        return {k: float(v) for k, v in metrics.items()}

    def copy_to_serving(self) -> None:
        """Copies the trained representation into the serving network (nothing else changes)."""
        self._copy_weights()


class PretrainLearner(core.Learner):
    """The ``core.Learner`` of a pretraining run: prioritized replay + ``PretrainTrainer``."""

    no_export_reason = ("a pretraining run trains only the representation (dynamics and prediction stay "
                        "untrained, nothing to play): fine-tune it with --init_checkpoint=<this logdir>")

    # Ingestion, learner_info and progress are the MuZero learner's (they use only
    # replay, context, segments and training_step, which this class has too).
    push_segments = MuZeroLearner.push_segments
    learner_info = MuZeroLearner.learner_info
    progress = MuZeroLearner.progress

    def __init__(self, settings, descriptor, context: core.RunContext,
                 trainable_parts: Optional[Sequence[str]] = None):
        if trainable_parts is not None:
            raise ConfigError(f"--trainable_parts={','.join(trainable_parts)} does not apply to a pretraining "
                              f"run: it trains {' and '.join(PRETRAIN_PARTS)}; drop the flag")
        if descriptor.kind not in ("vector", "image"):
            raise ConfigError(f"pretrain.enabled: env {settings.env!r} has {descriptor.kind} observations; "
                              "pretraining augments image and vector observations only")
        self.settings = settings
        self.config: MuZeroConfig = settings.config
        self.descriptor = descriptor
        self.context = context
        self.rng = np.random.default_rng([host_seed(settings.seed, 0), _AUGMENT_SALT])
        self.trainer = PretrainTrainer(descriptor, self.config, seed=settings.seed)
        self.replay = Replay(descriptor, self.config.replay, self.config.targets, seed=host_seed(settings.seed, 0),
                             discount=self.config.search.discount)
        self.segments = 0

    @property
    def training_step(self) -> int:
        return int(self.trainer.step.numpy())

    def step(self) -> Optional[dict]:
        batch_size = self.config.training.batch_size
        if not self.replay.wait_until_can_sample(batch_size, timeout=0.05):
            return None
        batch = self.replay.sample(batch_size, timeout=1.0)
        return self.trainer.train(batch["observation"], self.rng)

    def copy_to_serving(self) -> None:
        self.trainer.copy_to_serving()

    # The files of a MuZero checkpoint: model, replay snapshot, learner.json (RNG, segments).
    save = MuZeroLearner.save

    def restore(self, directory: str) -> None:
        self.trainer.checkpoint.read(os.path.join(directory, "model")).assert_existing_objects_matched()
        self.trainer.copy_to_serving()
        self.replay.load(os.path.join(directory, "replay"))
        with open(os.path.join(directory, "learner.json")) as f:
            state = json.load(f)
        set_rng_state(self.rng, state["rng"])
        self.segments = int(state.get("segments", 0))

    def init_from(self, path: str) -> str:
        """Starts pretraining from another run's representation (and pretrain head)."""
        network = self.trainer.network
        self.init_summary = restore_parts(path, {part: getattr(network, part) for part in PRETRAIN_PARTS})
        self.trainer.copy_to_serving()
        return self.init_summary.source

    def export(self, directory: str) -> None:
        raise RuntimeError(f"no SavedModel: {self.no_export_reason}")

    def stop_limiting(self) -> None:
        self.replay.stop_limiting()

    def close(self) -> None:
        self.replay.close()
