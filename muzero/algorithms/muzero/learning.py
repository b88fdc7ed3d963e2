"""MuZero's learner: networks, optimiser, SGD steps, replay ingestion, checkpoints, export.

``Trainer`` owns two copies of the network: ``network`` is trained, ``serving``
answers the inference server. After a training step the trained weights are copied
into the serving copy between two inference batches (``MuZeroService.update_weights``),
so inference always reads one consistent set of weights, and its weights version is
the training step they came from. With ``targets.value_target_update_steps`` a third
copy, the target network, gives the value bootstraps and is refreshed from the trained
weights every that many steps (``Trainer.bootstrap_values``).

With ``devices`` (``muzero.distribute.configure_devices``, ``--learner_devices=N``) the
trained network, optimiser, step and checkpoint live under a ``MirroredStrategy`` (one
copy per device) and each step is data parallel
(``muzero.algorithms.muzero.network.loss.make_distributed_train_step``); the serving copy is a plain
network on the first device, so inference runs on one device. The checkpoint holds one
value per variable either way: checkpoints move freely between 1 and N devices.

``MuZeroLearner`` (the ``muzero.core.Learner`` of MuZero) adds the prioritized replay:
actors' ``push_segments`` go into it (``push_segments`` below, called by the service),
and ``step()`` samples a batch (with value reanalyse and symmetry augmentation
when configured), trains and writes the new priorities back. With
``targets.reanalyse_fraction > 0`` the builder hands it the inference service
(``attach_service``) and the first ``step()`` starts the reanalyse worker
(``reanalyse.ReanalyseWorker``, docs/REANALYSE.md), which ``close()`` stops.

Layer skipping (``NetworkConfig.skip_fraction > 0``): each step draws its ``n_forward`` on
the host from (seed, training step) (``muzero.algorithms.muzero.network.networks.draw_n_forward``) and passes
it into the train step as a float32 scalar tensor (one trace for every value; the same
number on every replica). The consistency loss (``TrainingConfig.consistency_loss_weight
> 0``) builds the trained network with its ``pretrain_head``, trained with the rest and
never copied to the serving network, which has none.

With ``training.serving_ema_decay`` > 0 a fourth copy, ``average``, holds an exponential
moving average of the trained weights, updated after every training step; it is what the
serving copy receives and what exports hold (``Trainer.served_network``), while the losses
and value bootstraps keep using the trained weights.

A checkpoint directory holds ``model`` (``tf.train.Checkpoint`` of network, optimiser
and step), ``replay`` (a replay snapshot), ``learner.json`` (RNG state) and, with the
average on, ``average`` (its own ``tf.train.Checkpoint``).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Optional, Sequence

import grpc
import numpy as np
import tensorflow as tf

import envs
from muzero import core
from muzero.algorithms.muzero.config import MuZeroConfig, TrainingConfig
from muzero.config import ConfigError
from muzero.distribute import configure_devices, host_seed, make_strategy
from muzero.checkpoints import RestoreSummary, restore_parts
from muzero.algorithms.muzero.network import export_saved_model, make_network, make_train_step
from muzero.algorithms.muzero.network.loss import make_distributed_train_step
from muzero.network import optimizers
from muzero.network.layers import variable_averager, variable_copier
from muzero.network.optimizers import learning_rate_schedule
from muzero.algorithms.muzero.network.networks import PARTS, draw_n_forward
from muzero.algorithms.muzero.replay import Replay, ReplayClosedError
from muzero.algorithms.muzero.augment import augment_board_batch, augment_mirror_batch
from muzero.replay.store import MAX_ABS_SCALAR
from muzero.rpc.server import RequestError

# Longest a push waits for the rate limiter before answering RESOURCE_EXHAUSTED; well
# below the client's per-call deadline, so the actor always hears the outcome.
PUSH_WAIT_S = 20.0


def make_optimizer(training: TrainingConfig):
    """The training section's optimiser (Adam or SGD) at its learning-rate schedule."""
    schedule = learning_rate_schedule(training.learning_rate, training.lr_schedule, training.lr_decay_steps,
                                      alpha=training.lr_alpha)
    return optimizers.make_optimizer(schedule, training.optimizer, momentum=training.momentum)


def check_parts(parts: Optional[Sequence[str]]) -> Optional[list]:
    if parts is None:
        return None
    parts = list(parts)
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise ValueError(f"trainable parts {parts} invalid: choose from {list(PARTS)}")
    return parts


class Trainer:
    """Owns the trained and served networks, the optimiser and the step counter.

    ``devices``: None trains on TensorFlow's default device; a list of device names (from
    ``configure_devices``) trains data parallel over them, with ``strategy`` their
    ``MirroredStrategy`` (None without devices).
    """

    def __init__(self, descriptor, config: MuZeroConfig, seed: int = 0,
                 trainable_parts: Optional[Sequence[str]] = None, devices: Optional[list] = None):
        stack = config.targets.frames_for(descriptor.is_image)
        self.config = config
        self.seed = int(seed)
        self.strategy = make_strategy(devices) if devices else None
        mirrored = self.strategy.scope if self.strategy else contextlib.nullcontext
        with_head = config.training.consistency_loss_weight > 0
        with mirrored():
            self.network = make_network(descriptor, config.network, stack, seed=seed,
                                        with_ssl_head=with_head)
        with tf.device(devices[0]) if devices else contextlib.nullcontext():
            self.serving = make_network(descriptor, config.network, stack, seed=seed)
            # The bootstrap target network (TargetConfig.value_target_update_steps).
            targets = config.targets
            self._target_every = targets.value_target_update_steps if targets.reanalyse_values else 0
            self.target = (make_network(descriptor, config.network, stack, seed=seed)
                           if self._target_every else None)
            # The served average of the trained weights (TrainingConfig.serving_ema_decay).
            decay = config.training.serving_ema_decay
            self.average = make_network(descriptor, config.network, stack, seed=seed) if decay > 0 else None
        self._target_round = None   # step // _target_every when the target was last refreshed
        with mirrored():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.optimizer = make_optimizer(config.training)
            self.trainable_parts = check_parts(trainable_parts)
            variables = (self.network.variables_of(self.trainable_parts) if self.trainable_parts
                         else list(self.network.trainable_variables))
            if self.trainable_parts and self.network.pretrain_head is not None:
                # The head exists for the consistency loss and always trains with it.
                variables += list(self.network.pretrain_head.trainable_variables)
            self.optimizer.build(variables)
            if self.strategy:
                self._train_step = make_distributed_train_step(self.strategy, self.network, self.optimizer,
                                                               config.training, variables)
            else:
                self._train_step = make_train_step(self.network, self.optimizer, config.training, variables)
            self.checkpoint = tf.train.Checkpoint(network=self.network, optimizer=self.optimizer, step=self.step)
        # Only the parts inference uses (the serving copy has no pretrain_head).
        def inference_variables(network):
            return [v for p in PARTS for v in getattr(network, p).variables]
        self._copy_weights = variable_copier(inference_variables(self.served_network),
                                             inference_variables(self.serving))
        self._copy_target = None if self.target is None else variable_copier(
            inference_variables(self.network), inference_variables(self.target))
        if self.average is None:
            self._reset_average = self._update_average = None
        else:
            self._reset_average = variable_copier(inference_variables(self.network),
                                                  inference_variables(self.average))
            self._update_average = variable_averager(inference_variables(self.network),
                                                     inference_variables(self.average), decay)
            # Saved beside the model (MuZeroLearner.save), so that turning the average on or
            # off between resumes leaves the model checkpoint loadable.
            self.average_checkpoint = tf.train.Checkpoint(average=self.average)
            self.reset_average()
        net_cfg = config.network
        self._skip = (None if net_cfg.skip_fraction <= 0 or self.network.skip_blocks == 0 else
                      (self.network.skip_blocks, net_cfg.skip_fraction, net_cfg.skip_warmup_steps))

    @property
    def served_network(self):
        """The network whose weights inference and exports use: the average of the trained
        weights with ``serving_ema_decay`` > 0, else the trained network."""
        return self.average if self.average is not None else self.network

    def copy_to_serving(self) -> None:
        """Copies the served weights (``served_network``) into the serving network (call
        between inference batches); mirrored weights are read in cross-replica context (all
        copies are equal)."""
        self._copy(self._copy_weights)

    def reset_average(self) -> None:
        """Starts the served average afresh from the trained weights (after they were
        loaded from elsewhere); nothing without ``serving_ema_decay``."""
        if self._reset_average is not None:
            self._copy(self._reset_average)

    def _copy(self, copier) -> None:
        if self.strategy:
            with self.strategy.scope():
                copier()
        else:
            copier()

    def n_forward(self, step: int) -> Optional[float]:
        """The layer-skipping draw of training step ``step`` (None when skipping is off)."""
        if self._skip is None:
            return None
        return draw_n_forward(self.seed, step, *self._skip)

    def train(self, batch: dict) -> tuple:
        """One SGD step on a replay batch; returns (metrics {name: float}, new priorities [B])."""
        inputs = {k: v for k, v in batch.items() if k != "index"}
        n_forward = self.n_forward(int(self.step.numpy()))
        if n_forward is None:
            total, metrics, priorities = self._train_step(inputs)
        else:
            total, metrics, priorities = self._train_step(inputs, tf.constant(n_forward, tf.float32))
        if self._update_average is not None:   # the average after this step (step counts from 0)
            self._copy(lambda: self._update_average(self.step))
        self.step.assign_add(1)
        out = {k: float(v) for k, v in metrics.items()}
        out["loss/total"] = float(total)
        return out, priorities.numpy()

    def bootstrap_values(self, observation: np.ndarray, index: np.ndarray) -> np.ndarray:
        """The replay's reanalyse hook (``TargetConfig.reanalyse_values``): the trained
        network's value [M] of observations [M, *input_shape], each from the point of
        view of the player to move there (``index`` is not needed).

        With ``value_target_update_steps`` N > 0 the value is the target network's: the
        trained weights as they were when it was last refreshed, which happens on the first
        call at or after every multiple of N training steps (and on the first call after a
        resume, which starts it from the restored weights)."""
        if self.target is None:
            return self.network.initial_inference(observation)["value"].numpy()
        due = int(self.step.numpy()) // self._target_every
        if due != self._target_round:
            self._copy(self._copy_target)
            self._target_round = due
        return self.target.initial_inference(observation)["value"].numpy()

    # -- checkpoints ----------------------------------------------------------------------------

    def check_resumable(self, model_path: str) -> None:
        """Raises ConfigError when the checkpoint at ``model_path`` (a ``model`` prefix) and
        this trainer disagree on the pretrain head (the consistency loss): the optimiser's
        slots follow the variable order, so such a resume cannot work."""
        from tensorflow.core.protobuf import trackable_object_graph_pb2
        graph = trackable_object_graph_pb2.TrackableObjectGraph()
        graph.ParseFromString(tf.train.load_checkpoint(model_path).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
        network = [c.node_id for c in graph.nodes[0].children if c.local_name == "network"]
        saved = any(c.local_name == "pretrain_head" for n in network for c in graph.nodes[n].children)
        if saved != (self.network.pretrain_head is not None):
            weight = self.config.training.consistency_loss_weight
            raise ConfigError(
                f"training.consistency_loss_weight={weight:g} but checkpoint {model_path!r} was trained "
                f"{'with' if saved else 'without'} the consistency loss's pretrain_head: resume with the "
                "setting it was trained with, or start a new run from it with --init_checkpoint")


def init_network_from(trainer, path: str) -> RestoreSummary:
    """Fine-tuning: loads into ``trainer.network`` every part a checkpoint holds
    (``muzero.checkpoints.restore_parts``: representation and pretrain head from
    a pretraining run, every part from a MuZero run), then copies the weights to the
    serving network. ``trainer`` has ``network``, ``copy_to_serving()`` and optionally a
    ``strategy`` (data-parallel training: variables are assigned in its scope)."""
    network = trainer.network
    parts = {part: getattr(network, part) for part in PARTS}
    parts["pretrain_head"] = network.pretrain_head
    strategy = getattr(trainer, "strategy", None)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        summary = restore_parts(path, parts)
    trainer.copy_to_serving()
    return summary


def rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


class MuZeroLearner(core.Learner):
    """Trainer + prioritized replay behind the ``core.Learner`` interface."""

    def __init__(self, settings, descriptor, context: core.RunContext,
                 trainable_parts: Optional[Sequence[str]] = None):
        self.settings = settings
        self.config: MuZeroConfig = settings.config
        self.descriptor = descriptor
        self.context = context
        # One learner host (index 0), whose seed is the run's: host_seed(seed, 0) == seed.
        self.rng = np.random.default_rng(host_seed(settings.seed, 0))
        # builder.check_settings has refused augment_symmetries on an env without symmetries.
        augment = self.config.training.augment_symmetries
        self.symmetries = envs.board_symmetries(settings.env) if augment else None
        self.mirror = envs.mirror_actions(settings.env) if augment else None
        devices = configure_devices(getattr(settings, "learner_devices", 1))
        self.trainer = Trainer(descriptor, self.config, seed=settings.seed, trainable_parts=trainable_parts,
                               devices=devices)
        self.replay = Replay(descriptor, self.config.replay, self.config.targets, seed=host_seed(settings.seed, 0),
                             next_observations=self.config.training.consistency_loss_weight > 0,
                             discount=self.config.search.discount)
        self.segments = 0
        self._values_fn = self.trainer.bootstrap_values if self.config.targets.reanalyse_values else None
        self.reanalyse = None   # ReanalyseWorker, started by step() once a service is attached
        self._service = None
        if self.config.replay.dataset:
            self.start_notes = (self._load_dataset(self.config.replay.dataset),)

    def _load_dataset(self, ref: str) -> str:
        """Puts the recorded episodes of ``ref`` into the replay (outside the rate limiter's
        count); returns a line saying what was loaded. ConfigError for a dataset of another
        env or one that cannot start an actor-less run."""
        from muzero import dataset
        from muzero.algorithms.muzero.replay import dataset_segments
        name = f"--dataset={ref!r}"
        if self.descriptor.two_player:
            raise ConfigError(f"{name}: recorded episodes of two-player games are not supported (no player to move "
                              "is recorded)")
        try:
            data = dataset.open_dataset(ref)
            dataset.check_matches(data, self.descriptor, self.settings.env, ref=name)
            episodes = list(dataset.read_episodes(data))
            steps = self.replay.insert_many(dataset_segments(episodes, self.descriptor.num_actions), limited=False)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        replay = self.config.replay
        if self.settings.num_actors == 0 and steps < replay.min_steps_to_sample:
            raise ConfigError(f"{name} holds {steps} steps, fewer than replay.min_steps_to_sample="
                              f"{replay.min_steps_to_sample}, and no training actor adds more: record more "
                              "episodes or lower replay.min_steps_to_sample")
        if self.settings.num_actors == 0 and replay.samples_per_insert > 0:
            raise ConfigError(f"{name} with no training actors needs replay.samples_per_insert=0 (no replay ratio "
                              "to keep: nothing is inserted); --preset=offline sets it")
        returns = [float(np.sum(e.rewards)) for e in episodes]
        kept = min(steps, replay.capacity_steps)
        return (f"dataset {ref}: {len(episodes)} episodes, {steps} steps (mean return {np.mean(returns):.1f}) in the "
                f"replay" + ("" if kept == steps else f"; the replay keeps its newest {kept}"))

    def attach_service(self, service) -> None:
        """The bound inference service the reanalyse worker searches through."""
        self._service = service

    def _start_reanalyse(self) -> None:
        from muzero.algorithms.muzero.reanalyse import ReanalyseWorker
        t = self.config.targets
        self.reanalyse = ReanalyseWorker(self.replay, self._service, self.config.search, self.descriptor,
                                         t.reanalyse_batch_size, seed=host_seed(self.settings.seed, 0),
                                         root_noise=t.reanalyse_root_noise)
        self.reanalyse.start()

    # -- ingestion (gRPC threads) --------------------------------------------------------------
    def push_segments(self, items: list) -> dict:
        """Stores a push all or nothing: reports are checked, then the segments go into the
        replay as one group. While the rate limiter holds inserts back the call waits up to
        PUSH_WAIT_S, then answers RESOURCE_EXHAUSTED (nothing stored; the actor retries)."""
        reports, segments = [], []
        for item in items:
            if "report" in item:
                returns = np.asarray(item.get("episode_return", []), np.float32).reshape(-1)
                lengths = np.asarray(item.get("episode_length", []), np.int64).reshape(-1)
                if (returns.shape != lengths.shape or not np.all(np.isfinite(returns))
                        or (returns.size and np.abs(returns).max() > MAX_ABS_SCALAR)
                        or (lengths.size and (lengths.min() < 0 or lengths.max() > 2**40))):
                    raise ValueError(f"report: episode_return must be finite and within {MAX_ABS_SCALAR:g}, "
                                     "episode_length non-negative, both of the same length")
                reports.append((returns, lengths, bool(item.get("evaluation", False))))
            else:
                segments.append(item)
        try:
            steps = self.replay.insert_many(segments, timeout=PUSH_WAIT_S)
        except TimeoutError:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"push_segments: the replay's rate limiter held this push back for "
                               f"{PUSH_WAIT_S:g} s (training is behind acting); nothing was stored, "
                               "retry later") from None
        except ReplayClosedError:
            raise RequestError(grpc.StatusCode.UNAVAILABLE, "push_segments: the learner is shutting down") from None
        self.context.add_env_steps(steps)
        self.segments += len(segments)
        for returns, lengths, evaluation in reports:
            self.context.episodes.add(returns, lengths, evaluation)
        return {"accepted": np.int64(len(segments)), "training_step": np.int64(self.training_step)}

    def learner_info(self) -> dict:
        return {"training_step": np.int64(self.training_step), "env_steps": np.int64(self.context.env_steps)}

    # -- core.Learner --------------------------------------------------------------------------
    @property
    def training_step(self) -> int:
        return int(self.trainer.step.numpy())

    def step(self) -> Optional[dict]:
        batch_size = self.config.training.batch_size
        if not self.replay.wait_until_can_sample(batch_size, timeout=0.05):
            return None
        if self.reanalyse is None and self._service is not None and self.config.targets.reanalyse_fraction > 0:
            self._start_reanalyse()
        batch = self.replay.sample(batch_size, values_fn=self._values_fn, timeout=1.0)
        versions = batch.pop("target_version", None)   # [B, K+1]; only with reanalyse
        if self.symmetries is not None:
            batch = augment_board_batch(batch, self.symmetries, self.rng)
        elif self.mirror is not None:
            batch = augment_mirror_batch(batch, self.mirror, self.rng)
        step = self.training_step
        metrics, priorities = self.trainer.train(batch)
        self.replay.update_priorities(batch["index"], priorities)
        if versions is not None:   # rows whose step-0 target was reanalysed, and how many steps ago
            fresh = versions[:, 0] >= 0
            metrics["reanalyse/batch_fraction"] = float(fresh.mean())
            # the share of the batch's policy targets (every unrolled step) that were reanalysed
            targets = batch["policy_mask"] > 0
            metrics["reanalyse/target_fraction"] = float((versions >= 0)[targets].mean()) if targets.any() else 0.0
            metrics["reanalyse/target_age"] = float(np.mean(step - versions[fresh, 0])) if fresh.any() else 0.0
            if self.reanalyse is not None:
                metrics.update(self.reanalyse.stats())
        return metrics

    def copy_to_serving(self) -> None:
        self.trainer.copy_to_serving()

    def save(self, directory: str) -> None:
        self.trainer.checkpoint.write(os.path.join(directory, "model"))
        if getattr(self.trainer, "average", None) is not None:   # PretrainLearner shares save
            self.trainer.average_checkpoint.write(os.path.join(directory, "average"))
        self.replay.snapshot(os.path.join(directory, "replay"))
        with open(os.path.join(directory, "learner.json"), "w") as f:
            json.dump({"rng": rng_state(self.rng), "segments": self.segments}, f)

    def restore(self, directory: str) -> None:
        self.trainer.check_resumable(os.path.join(directory, "model"))
        self.trainer.checkpoint.read(os.path.join(directory, "model")).assert_existing_objects_matched()
        if self.trainer.average is not None:
            average = os.path.join(directory, "average")
            if tf.io.gfile.exists(average + ".index"):
                self.trainer.average_checkpoint.read(average).assert_existing_objects_matched()
            else:   # saved without serving_ema_decay: the average starts from the trained weights
                self.trainer.reset_average()
        self.trainer.copy_to_serving()
        self.replay.load(os.path.join(directory, "replay"))
        path = os.path.join(directory, "learner.json")
        if os.path.isfile(path):
            with open(path) as f:
                state = json.load(f)
            set_rng_state(self.rng, state["rng"])
            self.segments = int(state.get("segments", 0))

    def init_from(self, path: str) -> str:
        """Fine-tuning: restores the parts the checkpoint holds; ``init_summary`` says which
        variables were restored, skipped and left new (the run loop prints it)."""
        self.init_summary = init_network_from(self.trainer, path)
        self.trainer.reset_average()
        self.trainer.copy_to_serving()
        return self.init_summary.source

    def export(self, directory: str) -> None:
        from muzero.algorithms.muzero.evaluator import write_run
        export_saved_model(self.trainer.served_network, directory)
        write_run(directory, self.settings.env, dict(self.settings.env_options), self.config.search,
                  self.config.targets.frames_for(self.descriptor.is_image))

    def progress(self) -> dict:
        steps = self.replay.num_steps
        return {"replay_steps": steps, "replay_fill": steps / self.config.replay.capacity_steps,
                "replay_samples_per_insert":
                    self.training_step * self.config.training.batch_size / max(1, self.context.env_steps)}

    def stop_limiting(self) -> None:
        self.replay.stop_limiting()

    def close(self) -> None:
        if self.reanalyse is not None:
            self.reanalyse.stop()
        self.replay.close()
