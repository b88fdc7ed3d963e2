"""The MuZero learner process: inference server, replay, trainer and local actors.

``Learner.run()`` reads top to bottom:

1. build the trainer (networks, optimiser) and the replay; resume from the newest
   checkpoint in the log directory, or initialise weights from ``init_checkpoint``;
2. serve ``register`` / ``initial_inference`` / ``recurrent_inference`` (the served
   network) and ``push_segments`` / ``learner_info`` (replay insertion, counters)
   on one gRPC port;
3. start the local actor processes (spawned);
4. loop: sample a batch when the replay and its rate limiter allow, take one SGD
   step, update priorities, publish the weights; every few seconds print a
   progress line, write TensorBoard summaries and restart dead actors; checkpoint
   on a period;
5. on a stop condition, SIGINT or SIGTERM: stop the actors, write a final
   checkpoint, export a SavedModel, close the server.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time
from typing import Callable, Optional, Sequence

import grpc
import numpy as np
import tensorflow as tf

import envs
from muzero.actor.actor import ActorSettings, run_actor
from muzero.config import ConfigError
from muzero.eval.evaluator import write_run
from muzero.launch.local import LocalActors
from muzero.learner import trainer as trainer_lib
from muzero.learner.defaults import RunSettings
from muzero.network import export_saved_model
from muzero.replay import Replay, ReplayClosedError
from muzero.replay.augment import augment_board_batch
from muzero.rpc.config import ClientConfig, ServerConfig
from muzero.rpc.muzero_service import serve
from muzero.rpc.server import RequestError


# Longest a push waits for the rate limiter before answering RESOURCE_EXHAUSTED; well
# below the client's per-call deadline, so the actor always hears the outcome.
PUSH_WAIT_S = 20.0


def _format_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class EpisodeLog:
    """Thread-safe record of finished episodes reported by actors."""

    def __init__(self):
        self.lock = threading.Lock()
        self.recent = {False: collections.deque(maxlen=100), True: collections.deque(maxlen=20)}
        self.since_summary = {False: [], True: []}
        self.count = {False: 0, True: 0}

    def add(self, returns: np.ndarray, lengths: np.ndarray, evaluation: bool) -> None:
        with self.lock:
            self.recent[evaluation].extend(zip(returns.tolist(), lengths.tolist()))
            self.since_summary[evaluation].extend(returns.tolist())
            self.count[evaluation] += len(returns)

    def mean_return(self, evaluation: bool) -> float:
        with self.lock:
            values = [r for r, _ in self.recent[evaluation]]
        return float(np.mean(values)) if values else float("nan")

    def take_since_summary(self, evaluation: bool) -> list:
        with self.lock:
            out, self.since_summary[evaluation] = self.since_summary[evaluation], []
        return out


class Learner:
    """One MuZero run. ``settings`` hold the config; ``logdir`` receives everything."""

    def __init__(self, settings: RunSettings, logdir: str, *, server_config: Optional[ServerConfig] = None,
                 client_config: Optional[ClientConfig] = None, init_checkpoint: Optional[str] = None,
                 trainable_parts: Optional[Sequence[str]] = None, export: bool = True,
                 log: Callable[[str], None] = print):
        self.settings = settings
        self.config = settings.config
        self.logdir = logdir
        self.log = log
        self.export = export
        self.init_checkpoint = init_checkpoint
        self.trainable_parts = trainable_parts
        self.client_config = client_config or ClientConfig()
        s = settings
        self.descriptor = envs.describe(s.env, **s.env_options)
        total_envs = s.num_actors * s.envs_per_actor + s.num_eval_actors * s.eval_envs_per_actor
        self.server_config = server_config or ServerConfig(
            max_nodes=self.config.search.num_simulations + 1, cache_slots=max(64, 2 * total_envs))
        self.stop_event = threading.Event()
        self.episodes = EpisodeLog()
        self._counter_lock = threading.Lock()
        self.env_steps = 0
        self.segments = 0
        self.rejected_pushes = 0
        self.rng = np.random.default_rng(s.seed)
        self.symmetries = None
        if self.config.training.augment_symmetries:
            self.symmetries = envs.board_symmetries(s.env)
            if self.symmetries is None:
                raise ConfigError(f"training.augment_symmetries is on but env {s.env!r} registers no board "
                                  "symmetries (only board games such as tictactoe do): turn it off")
        self.trainer: Optional[trainer_lib.Trainer] = None
        self.replay: Optional[Replay] = None
        self.service = self.server = self.actors = None
        self.address = None
        self.resumed_from: Optional[str] = None

    # -- server handlers (gRPC threads) -------------------------------------------------------------

    def _push_segments(self, items: list) -> dict:
        """Stores a push all or nothing: reports are checked, then the segments go into the
        replay as one group. While the rate limiter holds inserts back the call waits up to
        PUSH_WAIT_S, then answers RESOURCE_EXHAUSTED (nothing stored; the actor retries)."""
        reports, segments = [], []
        for item in items:
            if "report" in item:
                returns = np.asarray(item.get("episode_return", []), np.float32).reshape(-1)
                lengths = np.asarray(item.get("episode_length", []), np.int64).reshape(-1)
                if returns.shape != lengths.shape or not np.all(np.isfinite(returns)):
                    raise ValueError("report: episode_return and episode_length must be finite, same length")
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
        with self._counter_lock:
            self.env_steps += steps
            self.segments += len(segments)
        for returns, lengths, evaluation in reports:
            self.episodes.add(returns, lengths, evaluation)
        return {"accepted": np.int64(len(segments)), "training_step": np.int64(self.training_step)}

    @property
    def training_step(self) -> int:
        return int(self.trainer.step.numpy()) if self.trainer is not None else 0

    def _learner_info(self) -> dict:
        with self._counter_lock:
            env_steps = self.env_steps
        return {"training_step": np.int64(self.training_step), "env_steps": np.int64(env_steps)}

    # -- setup ----------------------------------------------------------------------------------------

    def _write_config(self) -> None:
        os.makedirs(self.logdir, exist_ok=True)
        text = self.settings.to_json()
        with open(os.path.join(self.logdir, "config.json"), "w") as f:
            f.write(text + "\n")

    def _build(self) -> None:
        s = self.settings
        self._write_config()
        self.trainer = trainer_lib.Trainer(self.descriptor, self.config, seed=s.seed,
                                           trainable_parts=self.trainable_parts)
        self.replay = Replay(self.descriptor, self.config.replay, self.config.targets, seed=s.seed)
        ckpt = trainer_lib.resolve_checkpoint(self.logdir)
        if ckpt is not None:
            state = trainer_lib.load_checkpoint(ckpt, self.trainer, self.replay)
            self.env_steps = int(state.get("env_steps", 0))
            self.segments = int(state.get("segments", 0))
            if "rng" in state:
                trainer_lib.set_rng_state(self.rng, state["rng"])
            self.resumed_from = ckpt
            self.log(f"resumed from {ckpt}: training step {self.training_step}, "
                     f"replay {self.replay.num_steps} env steps")
        elif self.init_checkpoint:
            src = self.trainer.init_from(self.init_checkpoint)
            self.log(f"initialised network weights from {src}")
        self.server, self.service = serve(self.trainer.serving, self.server_config,
                                          push_segments_handler=self._push_segments,
                                          learner_info_handler=self._learner_info)
        self.service.set_weights_version(self.training_step)
        self.address = f"127.0.0.1:{self.server.port}" if self.server_config.host in ("127.0.0.1", "localhost") \
            else f"{self.server_config.host}:{self.server.port}"
        with open(os.path.join(self.logdir, "server_address.txt"), "w") as f:
            f.write(self.address + "\n")
        self.writer = tf.summary.create_file_writer(os.path.join(self.logdir, "tensorboard"))

    def actor_settings(self, index: int) -> tuple:
        s = self.settings
        evaluation = index >= s.num_actors
        return (ActorSettings(
            server=self.address, env=s.env, search=self.config.search, env_options=dict(s.env_options),
            envs_per_actor=s.eval_envs_per_actor if evaluation else s.envs_per_actor,
            actor_id=index, seed=s.seed + 7919 * (self.training_step + 1), evaluation=evaluation,
            stack_frames=self.config.targets.stack_frames if self.descriptor.is_image else 1,
            segment_length=self.config.replay.segment_length, client_config=self.client_config),)

    def _start_actors(self) -> None:
        s = self.settings
        count = s.num_actors + s.num_eval_actors
        if count:
            self.actors = LocalActors(count, run_actor, self.actor_settings, log=self.log)
            self.actors.start()

    # -- main loop ------------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            if self.stop_event.is_set():
                raise KeyboardInterrupt
            self.log(f"received {signal.Signals(signum).name}: stopping (a second one aborts)")
            self.stop_event.set()
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def _limits_reached(self, elapsed: float) -> Optional[str]:
        s = self.settings
        if s.max_train_steps and self.training_step >= s.max_train_steps:
            return f"max_train_steps={s.max_train_steps} reached"
        if s.max_env_steps and self.env_steps >= s.max_env_steps:
            return f"max_env_steps={s.max_env_steps} reached"
        if s.max_seconds and elapsed >= s.max_seconds:
            return f"max_seconds={s.max_seconds:g} reached"
        return None

    def _eta(self, elapsed: float, env_rate: float, step_rate: float) -> str:
        s = self.settings
        candidates = []
        if s.max_env_steps and env_rate > 0:
            candidates.append((s.max_env_steps - self.env_steps) / env_rate)
        if s.max_train_steps and step_rate > 0:
            candidates.append((s.max_train_steps - self.training_step) / step_rate)
        if s.max_seconds:
            candidates.append(s.max_seconds - elapsed)
        return _format_duration(min(candidates)) if candidates else "-"

    def run(self) -> dict:
        """Trains until a stop condition; returns the final progress record."""
        s = self.settings
        self._build()
        self._install_signal_handlers()
        self.log(f"serving on {self.address}; env {s.env} {self.descriptor.observation_shape} "
                 f"x{self.descriptor.num_actions} actions; logdir {self.logdir}")
        self._start_actors()
        batch_size = self.config.training.batch_size
        values_fn = self.trainer.bootstrap_values if self.config.targets.reanalyse_values else None
        start = last_progress = last_ckpt = time.monotonic()
        last_env, last_step = self.env_steps, self.training_step
        metrics: dict = {}
        record: dict = {}
        reason = None
        try:
            while not self.stop_event.is_set():
                if self.replay.wait_until_can_sample(batch_size, timeout=0.05):
                    batch = self.replay.sample(batch_size, values_fn=values_fn, timeout=1.0)
                    if self.symmetries is not None:
                        batch = augment_board_batch(batch, self.symmetries, self.rng)
                    metrics, priorities = self.trainer.train(batch)
                    self.replay.update_priorities(batch["index"], priorities)
                    step = self.training_step
                    if step % s.publish_every_steps == 0:
                        self.service.update_model(self.trainer.copy_to_serving, version=step)
                    if step % s.summary_every_steps == 0:
                        with self.writer.as_default(step=step):
                            for name, value in metrics.items():
                                tf.summary.scalar(name, value)
                now = time.monotonic()
                if now - last_progress >= s.progress_every_s:
                    dt = now - last_progress
                    env_rate = (self.env_steps - last_env) / dt
                    step_rate = (self.training_step - last_step) / dt
                    record = self._progress(now - start, env_rate, step_rate, metrics)
                    last_progress, last_env, last_step = now, self.env_steps, self.training_step
                    if self.actors is not None:
                        self.actors.poll()
                if now - last_ckpt >= self.config.training.checkpoint_every_secs:
                    self.checkpoint()
                    last_ckpt = now
                reason = self._limits_reached(now - start)
                if reason:
                    self.log(f"stopping: {reason}")
                    break
        finally:
            self._shutdown()
        record["stop_reason"] = reason or "signal"
        return record

    def _progress(self, elapsed: float, env_rate: float, step_rate: float, metrics: dict) -> dict:
        train_ret, eval_ret = self.episodes.mean_return(False), self.episodes.mean_return(True)
        stats = self.service.stats(reset=True)
        record = {"time": elapsed, "training_step": self.training_step, "env_steps": self.env_steps,
                  "env_steps_per_s": env_rate, "train_steps_per_s": step_rate,
                  "return_train": train_ret, "return_eval": eval_ret,
                  "episodes_train": self.episodes.count[False], "episodes_eval": self.episodes.count[True],
                  "replay_steps": self.replay.num_steps, **{k: v for k, v in metrics.items()}}
        with self.writer.as_default(step=self.training_step):
            tf.summary.scalar("throughput/env_steps_per_s", env_rate)
            tf.summary.scalar("throughput/train_steps_per_s", step_rate)
            tf.summary.scalar("replay/steps", self.replay.num_steps)
            tf.summary.scalar("replay/fill", self.replay.num_steps / self.config.replay.capacity_steps)
            tf.summary.scalar("replay/samples_per_insert",
                              self.training_step * self.config.training.batch_size / max(1, self.env_steps))
            for evaluation, tag in ((False, "train"), (True, "eval")):
                returns = self.episodes.take_since_summary(evaluation)
                if returns:
                    tf.summary.scalar(f"episode/return_{tag}", float(np.mean(returns)))
            for key, value in stats.items():
                if isinstance(value, (int, float)) and ("batch" in key or "latency" in key):
                    tf.summary.scalar(f"inference/{key}", value)
        self.writer.flush()
        with open(os.path.join(self.logdir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps({k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                                for k, v in record.items()}) + "\n")
        alive = self.actors.alive() if self.actors is not None else 0
        self.log(f"[{_format_duration(elapsed)}] step {self.training_step} ({step_rate:.1f}/s) | "
                 f"env steps {self.env_steps} ({env_rate:.0f}/s) | return train {train_ret:.1f} "
                 f"eval {eval_ret:.1f} | replay {self.replay.num_steps} | "
                 f"loss {metrics.get('loss/total', float('nan')):.3f} | actors {alive} | "
                 f"ETA {self._eta(elapsed, env_rate, step_rate)}")
        return record

    def checkpoint(self) -> str:
        with self._counter_lock:
            state = {"env_steps": self.env_steps, "segments": self.segments}
        state["rng"] = trainer_lib.rng_state(self.rng)
        path = trainer_lib.save_checkpoint(self.logdir, self.trainer, self.replay, state)
        self.log(f"checkpoint written: {path}")
        return path

    def _shutdown(self) -> None:
        """Stops actors, writes the final checkpoint and export, then always closes the replay
        (waking blocked pushes) and the server, whatever failed before."""
        try:
            if self.actors is not None:
                self.actors.stop()
            if self.trainer is not None and self.replay is not None:
                try:
                    self.checkpoint()
                except Exception as e:  # keep shutting down: a full disk must not hang the exit
                    self.log(f"final checkpoint failed: {type(e).__name__}: {e}")
                if self.export:
                    try:
                        path = os.path.join(self.logdir, "export", f"step-{self.training_step}")
                        export_saved_model(self.trainer.network, path)
                        write_run(path, self.settings.env, dict(self.settings.env_options), self.config.search,
                                  self.config.targets.stack_frames if self.descriptor.is_image else 1)
                        self.log(f"SavedModel exported to {path}")
                    except Exception as e:
                        self.log(f"export failed: {type(e).__name__}: {e}")
        finally:
            if self.replay is not None:
                self.replay.close()
            if self.server is not None:
                self.server.stop(grace=1.0)
