"""The run loop every algorithm shares: server, learner, local actors, progress, checkpoints, export.

``Run.run()`` reads top to bottom and knows no algorithm (the algorithm's parts come
from ``muzero.algorithms.get(settings.algo)``, a ``muzero.core.Builder``):

1. build the learner; resume from the newest checkpoint in the log directory, or
   initialise weights from ``init_checkpoint``;
2. bind the algorithm's service on the gRPC server (one port) and start it;
3. start the local actor processes (spawned; a ``core.Launcher``);
4. loop: ``learner.step()``; publish the weights to the service every
   ``publish_every_steps``; every few seconds print a progress line (frames/s, ETA),
   write TensorBoard summaries and ``metrics.jsonl`` and restart dead actors;
   checkpoint every ``checkpoint_every_secs`` (and export every ``export_every_secs`` when set);
5. on a stop condition, SIGINT or SIGTERM: stop the actors, write a final checkpoint,
   export a SavedModel, close the server.

Size: one class, ``Run``; each step above is a method of it.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import threading
import time
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

import envs
from muzero import algorithms, checkpoints, core
from muzero.config import ConfigError
from muzero.launch.local import LocalActors
from muzero.rpc.config import ClientConfig, ServerConfig
from muzero.rpc.server import BatchingServer
from muzero.settings import RunSettings

# After a failed periodic checkpoint (a full disk, say) the next try comes this much later.
CHECKPOINT_RETRY_S = 60.0

# A second SIGINT/SIGTERM this soon after the first is the same stop request delivered twice
# (a process group's signal plus the copy `make` or a scheduler forwards), never an abort.
DUPLICATE_SIGNAL_S = 2.0


def format_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class _Pace:
    """The one line, a minute into each learner start, that says what this machine does:
    acting and training rates over the preceding half minute and how long 100k env steps
    (Atari 100k's budget) take at that pace."""

    MARK_S, REPORT_S = 30.0, 60.0

    def __init__(self, start: float):
        self.start = start
        self.mark = None
        self.done = False

    def line(self, now: float, env_steps: int, training_step: int) -> Optional[str]:
        if self.done:
            return None
        if self.mark is None:
            if now - self.start >= self.MARK_S:
                self.mark = (now, env_steps, training_step)
            return None
        if now - self.start < self.REPORT_S:
            return None
        self.done = True
        t0, env0, step0 = self.mark
        dt = max(now - t0, 1e-6)
        env_rate, step_rate = (env_steps - env0) / dt, (training_step - step0) / dt
        parts = []
        if env_rate > 0:
            parts.append(f"acting {env_rate:.0f} env steps/s")
        parts.append(f"training {step_rate:.1f} steps/s" if training_step > 0 else "no training step yet")
        text = f"pace over the last {dt:.0f} s: {', '.join(parts)}"
        if env_rate > 0:
            text += f"; 100k env steps take about {format_duration(100_000 / env_rate)} at this pace"
        return text


class _RateWindow:
    """Env-step and training-step rates over the last ``span_s`` seconds of progress samples,
    for the ETA: a 5-second rate swings from thousands to 0 when actors deliver their steps in
    large segments, and so would the ETA."""

    def __init__(self, span_s: float = 60.0):
        self.span_s = span_s
        self.samples: collections.deque = collections.deque()

    def add(self, now: float, env_steps: int, training_step: int) -> tuple:
        """Adds a sample; returns (env steps/s, training steps/s) since the oldest sample kept
        (0, 0 with a single sample)."""
        self.samples.append((now, env_steps, training_step))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.span_s:
            self.samples.popleft()
        t0, env0, step0 = self.samples[0]
        dt = now - t0
        return ((env_steps - env0) / dt, (training_step - step0) / dt) if dt > 0 else (0.0, 0.0)


def server_address(host: str, port: int) -> str:
    """HOST:PORT as clients dial it: loopback names become 127.0.0.1, IPv6 literals get brackets."""
    if host in ("127.0.0.1", "localhost", "0.0.0.0"):
        return f"127.0.0.1:{port}"
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Run:
    """One training run of any algorithm. ``settings`` hold the config; ``logdir`` receives everything."""

    def __init__(self, settings: RunSettings, logdir: str, *, server_config: Optional[ServerConfig] = None,
                 client_config: Optional[ClientConfig] = None, init_checkpoint: Optional[str] = None,
                 trainable_parts: Optional[Sequence[str]] = None, export: bool = True,
                 log: Callable[[str], None] = print):
        self.settings = settings
        self.builder = algorithms.get(settings.algo)
        self.logdir = logdir
        self.log = log
        self.export = export
        self.init_checkpoint = init_checkpoint
        self.client_config = client_config or ClientConfig()
        self.descriptor = envs.describe(settings.env, **settings.env_options)
        algorithms.check_env(self.builder, self.descriptor)
        self.builder.check_settings(settings)
        if settings.learner_devices > 1 and not self.builder.multi_device:
            multi = ", ".join(n for n in algorithms.names() if algorithms.get(n).multi_device) or "none"
            raise ConfigError(f"--learner_devices={settings.learner_devices}: --algo={settings.algo} trains on one "
                              f"device (several: {multi}); drop the flag")
        algorithms.check_remote_envs(self.builder, settings)
        self.server_config = server_config or ServerConfig()
        if trainable_parts is not None:
            algorithms.check_trainable_parts(self.builder, trainable_parts)
        self.context = core.RunContext(seed=settings.seed, trainable_parts=trainable_parts or ())
        self.stop_event = self.context.stop_event
        self.learner: Optional[core.Learner] = None
        self.service: Optional[core.InferenceService] = None
        self.server: Optional[BatchingServer] = None
        self.actors: Optional[core.Launcher] = None
        self.address: Optional[str] = None
        self.resumed_from: Optional[str] = None
        self.elapsed_before = 0.0   # wall time of this run before its latest resume (from the checkpoint)
        self._first_signal = None
        self._signal_notes: list = []   # filled by the signal handler, logged by the loop

    @property
    def training_step(self) -> int:
        return self.learner.training_step if self.learner is not None else 0

    @property
    def env_steps(self) -> int:
        return self.context.env_steps

    # -- setup ----------------------------------------------------------------------------------------

    def _write_config(self) -> None:
        os.makedirs(self.logdir, exist_ok=True)
        checkpoints.atomic_write_text(os.path.join(self.logdir, "config.json"), self.settings.to_json() + "\n")

    def _check_same_run(self, candidates: list) -> None:
        """Refuses a logdir whose run is another algorithm, env or network shape, before
        anything there is written (its config.json would be overwritten otherwise)."""
        path = os.path.join(self.logdir, "config.json")
        if not candidates or not os.path.isfile(path):
            return
        try:
            with open(path) as f:
                previous = json.load(f)
        except (OSError, ValueError):
            return   # unreadable: the checkpoint's own state decides below
        if not isinstance(previous, dict):
            return
        mine = self.settings.to_dict()
        # config.json files written before runs named their algorithm hold the default one's run.
        previous_algo = previous.get("algo", algorithms.DEFAULT)
        previous_config = previous.get("config") if isinstance(previous.get("config"), dict) else {}
        network, my_network = previous_config.get("network"), mine["config"].get("network")
        keys = [("algo", previous_algo, mine["algo"]), ("env", previous.get("env"), mine["env"]),
                ("env_options", previous.get("env_options", {}), mine["env_options"])]
        if previous_algo == self.settings.algo:
            if isinstance(network, dict):
                network = self.builder.saved_network(network, self.settings, self.descriptor)
            keys.append(("config.network", network, my_network))
            theirs, ours = self.builder.resume_identity(previous_config), self.builder.resume_identity(mine["config"])
            keys += [(name, theirs.get(name), value) for name, value in ours.items()]
        for name, old, new in keys:
            if old != new:
                hint = (self.builder.resume_hint(old, new)
                        if name == "config.network" and isinstance(old, dict) and isinstance(new, dict) else "")
                raise ConfigError(f"--logdir={self.logdir} holds a run with {name}={json.dumps(old)}; this run has "
                                  f"{name}={json.dumps(new)}: pass another --logdir, or the same settings to "
                                  f"resume{hint}")

    def _restore_newest_intact(self, candidates: list) -> Optional[str]:
        """Restores the newest checkpoint that loads; says which ones were skipped and why."""
        for ckpt in candidates:
            try:
                state = checkpoints.read_state(ckpt)
                if state.get("algo", self.settings.algo) != self.settings.algo:
                    raise ValueError(f"it was written by --algo={state.get('algo')}")
                self.learner.restore(ckpt)
            except ConfigError:   # the checkpoint is fine but these settings cannot resume it
                raise
            except Exception as e:  # a truncated or corrupt checkpoint: set it aside, try the next older one
                aside = checkpoints.set_aside(ckpt)
                self.log(f"checkpoint {ckpt} cannot be restored ({type(e).__name__}: {str(e)[:200]}); "
                         f"moved to {aside}, trying an older one")
                self.learner = self.builder.make_learner(self.settings, self.descriptor, self.context)
                continue
            self.context.env_steps = int(state.get("env_steps", 0))
            self.elapsed_before = float(state.get("elapsed_s", 0.0))
            return ckpt
        raise ConfigError(f"--logdir={self.logdir} holds checkpoints, but none can be restored (see the lines "
                          "above): pass another --logdir, or move the checkpoints away to start afresh")

    def _build(self) -> None:
        s = self.settings
        candidates = checkpoints.checkpoints_newest_first(self.logdir)
        self._check_same_run(candidates)
        self._write_config()
        removed, recovered = checkpoints.remove_temporary(self.logdir)
        if recovered:
            self.log(f"recovered {len(recovered)} complete checkpoint(s) from an interrupted save: "
                     f"{', '.join(recovered)}")
        if removed:
            self.log(f"removed {len(removed)} unfinished checkpoint write(s): {', '.join(removed)}")
        candidates = checkpoints.checkpoints_newest_first(self.logdir)
        self.learner = self.builder.make_learner(s, self.descriptor, self.context)
        self.context.training_step = lambda: self.learner.training_step
        for note in self.learner.start_notes:
            self.log(note)
        if candidates:
            ckpt = self._restore_newest_intact(candidates)
            self.resumed_from = ckpt
            extra = ", ".join(f"{k} {v:.0f}" for k, v in self.learner.progress().items() if k.endswith("_steps"))
            self.log(f"resumed from {ckpt}: training step {self.training_step}, env steps {self.env_steps}"
                     + (f", {extra}" if extra else "") + f", {format_duration(self.elapsed_before)} run before")
        elif self.init_checkpoint:
            src = self.learner.init_from(self.init_checkpoint)
            summary = self.learner.init_summary
            self.log(f"initialised network weights from {src}"
                     + "".join(f"\n  {line}" for line in (summary.lines() if summary else [])))
        self.server = BatchingServer(self.server_config)
        self.service = self.builder.make_service(s, self.descriptor, self.learner, self.context,
                                                 self.server_config)
        self.service.bind(self.server)
        self.server.start()
        self.address = server_address(self.server_config.host, self.server.port)
        with open(os.path.join(self.logdir, "server_address.txt"), "w") as f:
            f.write(self.address + "\n")
        self.writer = tf.summary.create_file_writer(os.path.join(self.logdir, "tensorboard"))

    def actor_args(self, index: int) -> tuple:
        return self.builder.actor_args(self.settings, index, self.address, self.client_config,
                                       self.training_step)

    def _prepare_actors(self) -> None:
        """Makes the launcher and lets it prepare (before _build: see core.Launcher.prepare);
        the actors start after _build, when ``actor_args`` has the server's address."""
        s = self.settings
        count = s.num_actors + s.num_eval_actors
        if not count:
            return
        if s.launcher == "ray":
            from muzero.launch.ray_actors import RayActors
            self.actors = RayActors(count, self.builder.actor_target(), self.actor_args, address=s.ray_address,
                                    cpus_per_actor=s.ray_cpus_per_actor, max_restarts=s.ray_max_restarts,
                                    log=self.log)
        else:
            self.actors = LocalActors(count, self.builder.actor_target(), self.actor_args, log=self.log)
        self.actors.prepare()

    # -- main loop ------------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            name = signal.Signals(signum).name
            now = time.monotonic()
            # Only record here: printing inside a signal handler can interrupt the main thread's
            # own print ("reentrant call"); the loop and the shutdown log these notes.
            if self._first_signal is None:
                self._first_signal = now
                self._signal_notes.append(f"received {name}: stopping after a final checkpoint and export "
                                          "(press Ctrl-C again after 2 s to abort without them)")
                self.stop_event.set()
            elif signum == signal.SIGINT and now - self._first_signal > DUPLICATE_SIGNAL_S:
                raise KeyboardInterrupt
            else:
                self._signal_notes.append(f"received {name} again: already stopping")
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
        return format_duration(min(candidates)) if candidates else "-"

    def run(self) -> dict:
        """Trains until a stop condition; returns the final progress record."""
        s = self.settings
        self._install_signal_handlers()
        try:
            self._prepare_actors()
            self._build()
            self.log(f"serving {s.algo} on {self.address}; env {s.env} {self.descriptor.observation_shape} "
                     f"x{self.descriptor.num_actions} actions; logdir {self.logdir}")
            if self.actors is not None:
                self.actors.start()
            return self._loop()
        finally:
            self._shutdown()

    def _loop(self) -> dict:
        s = self.settings
        last_progress = last_ckpt = last_export = time.monotonic()
        # Time counts across resumes: --max_seconds bounds the whole run, not each session.
        start = self._session_start = last_progress - self.elapsed_before
        last_env, last_step = self.env_steps, self.training_step
        next_export_env = self._next_export_env()
        metrics: dict = {}
        record: dict = {}
        pace = _Pace(last_progress)
        window = _RateWindow()
        window.add(last_progress, self.env_steps, self.training_step)
        # A resumed run whose limit is already reached stops before training another step
        # (it still checkpoints and exports at the end: a way to export a checkpoint).
        reason = self._limits_reached(last_progress - start)
        while reason is None and not self.stop_event.is_set():
            new = self.learner.step()
            if new is not None:
                metrics = new
                step = self.training_step
                if step % s.publish_every_steps == 0:
                    self.service.update_weights(self.learner.copy_to_serving, version=step)
                if step % s.summary_every_steps == 0:

                    def write(metrics=metrics):
                        for name, value in metrics.items():
                            tf.summary.scalar(name, value)
                    self._summaries(step, write)
            now = time.monotonic()
            if now - last_progress >= s.progress_every_s:
                dt = now - last_progress
                env_rate = (self.env_steps - last_env) / dt
                step_rate = (self.training_step - last_step) / dt
                record = self._progress(now - start, env_rate, step_rate, metrics,
                                        eta_rates=window.add(now, self.env_steps, self.training_step))
                last_progress, last_env, last_step = now, self.env_steps, self.training_step
                line = pace.line(now, self.env_steps, self.training_step)
                if line:
                    self.log(line)
                if self.actors is not None:
                    self.actors.poll()
            due = ((s.export_every_secs and now - last_export >= s.export_every_secs)
                   or (s.export_every_env_steps and self.env_steps >= next_export_env))
            if due and self.export and not self.learner.no_export_reason:
                try:
                    self.export_model()
                except Exception as e:  # e.g. a full disk: keep training, try again next period
                    self.log(f"periodic export failed ({type(e).__name__}: {e}); training goes on")
                last_export = now
                next_export_env = self._next_export_env()
            if now - last_ckpt >= s.checkpoint_every_secs:
                try:
                    self.checkpoint()
                    last_ckpt = now
                except Exception as e:  # a full disk: keep training and the previous checkpoint, retry
                    self.log(f"checkpoint failed ({type(e).__name__}: {e}); the previous one is kept, "
                             f"retrying in {CHECKPOINT_RETRY_S:g} s")
                    last_ckpt = now - s.checkpoint_every_secs + CHECKPOINT_RETRY_S
            reason = self._limits_reached(now - start)
        if reason:
            self.log(f"stopping: {reason}")
        self._log_signal_notes()
        # A last record with the final counts and why the run stopped, so that metrics.jsonl
        # always ends with the run's state at the stop (even a run shorter than one period).
        # Its rates cover the time since the previous record, or repeat that record's when the
        # stop came less than a second after it (a rate over a few milliseconds is noise).
        now = time.monotonic()
        dt = max(now - last_progress, 1e-6)
        env_rate, step_rate = ((self.env_steps - last_env) / dt, (self.training_step - last_step) / dt) \
            if dt >= 1.0 or not record else (record["env_steps_per_s"], record["train_steps_per_s"])
        record = self._progress(now - start, env_rate, step_rate, metrics, stop_reason=reason or "signal")
        self._stopped_at = time.monotonic()   # shutdown time (stopping actors) is not run time
        return record

    def _progress(self, elapsed: float, env_rate: float, step_rate: float, metrics: dict,
                  stop_reason: Optional[str] = None, eta_rates: Optional[tuple] = None) -> dict:
        episodes = self.context.episodes
        train_ret, eval_ret = episodes.mean_return(False), episodes.mean_return(True)
        stats = self.service.stats(reset=True)
        extra = self.learner.progress()
        # Mean rows and requests per inference batch since the last record, per batched method.
        batching = {f"inference/{key}": float(value) for key, value in stats.items()
                    if key.endswith(("/mean_batch_rows", "/mean_batch_requests"))}
        record = {"time": elapsed, "training_step": self.training_step, "env_steps": self.env_steps,
                  "env_steps_per_s": env_rate, "train_steps_per_s": step_rate,
                  "return_train": train_ret, "return_eval": eval_ret,
                  "length_train": episodes.mean_length(False), "length_eval": episodes.mean_length(True),
                  "episodes_train": episodes.count[False], "episodes_eval": episodes.count[True],
                  **extra, **batching, **metrics}
        if stop_reason is not None:
            record["stop_reason"] = stop_reason

        def write():
            tf.summary.scalar("throughput/env_steps_per_s", env_rate)
            tf.summary.scalar("throughput/train_steps_per_s", step_rate)
            for key, value in extra.items():
                tf.summary.scalar(f"learner/{key}", value)
            for evaluation, tag in ((False, "train"), (True, "eval")):
                finished = episodes.take_since_summary(evaluation)
                if finished:
                    returns, lengths = zip(*finished)
                    tf.summary.scalar(f"episode/return_{tag}", float(np.mean(returns)))
                    tf.summary.scalar(f"episode/length_{tag}", float(np.mean(lengths)))
            for key, value in stats.items():
                if isinstance(value, (int, float)) and ("batch" in key or "latency" in key):
                    tf.summary.scalar(f"inference/{key}", value)
            self.writer.flush()
        self._summaries(self.training_step, write)
        line = json.dumps({k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                           for k, v in record.items()}) + "\n"
        try:
            with open(os.path.join(self.logdir, "metrics.jsonl"), "a") as f:
                f.write(line)
            self._metrics_failing = False
        except OSError as e:   # a full disk: keep training; the progress line still prints
            if not getattr(self, "_metrics_failing", False):
                self.log(f"cannot write metrics ({e.strerror or e}); training goes on, records are "
                         "skipped until the disk accepts them again")
            self._metrics_failing = True
        alive = self.actors.alive() if self.actors is not None else 0
        data = " | ".join(f"{k.replace('_steps', '')} {v:.0f}" for k, v in extra.items() if k.endswith("_steps")
                          or k.endswith("_unrolls"))
        def returned(x: float) -> str:   # "-" until an episode of that kind has ended
            return f"{x:.1f}" if np.isfinite(x) else "-"
        self.log(f"[{format_duration(elapsed)}] step {self.training_step} ({step_rate:.1f}/s) | "
                 f"env steps {self.env_steps} ({env_rate:.0f}/s) | return train {returned(train_ret)} "
                 f"eval {returned(eval_ret)} | " + (f"{data} | " if data else "") +
                 f"loss {metrics.get('loss/total', float('nan')):.3f} | actors {alive} | "
                 f"ETA {self._eta(elapsed, *(eta_rates or (env_rate, step_rate)))}")
        return record

    def _summaries(self, step: int, write: Callable[[], None]) -> None:
        """Runs ``write()`` (tf.summary calls) under the TensorBoard writer; a failure (a full
        disk raises TensorFlow's own errors, not OSError) is logged once and training goes on."""
        try:
            with self.writer.as_default(step=step):
                write()
            self._summaries_failing = False
        except Exception as e:
            if not getattr(self, "_summaries_failing", False):
                first = (str(e).strip().splitlines() or [""])[0][-200:]
                self.log(f"cannot write TensorBoard summaries ({type(e).__name__}: {first}); training goes "
                         "on, summaries are skipped until they can be written again")
            self._summaries_failing = True

    def checkpoint(self) -> str:
        start = getattr(self, "_session_start", None)
        now = getattr(self, "_stopped_at", None) or time.monotonic()
        elapsed = now - start if start is not None else self.elapsed_before
        state = {"algo": self.settings.algo, "env": self.settings.env, "env_steps": self.env_steps,
                 "elapsed_s": elapsed}
        path = checkpoints.save_checkpoint(self.logdir, self.training_step, self.learner.save, state)
        self.log(f"checkpoint written: {path}")
        return path

    def export_model(self) -> str:
        """Exports the learner's model to ``<logdir>/export/step-<N>`` and returns the path.

        The SavedModel is written to a hidden sibling directory first and renamed into place,
        so ``step-<N>`` is always complete (a run killed mid-export leaves only the hidden
        directory, removed by the next export). Then only the newest ``keep_exports``
        ``step-*`` directories are kept (0 keeps all)."""
        root = os.path.join(self.logdir, checkpoints.EXPORTS)
        os.makedirs(root, exist_ok=True)
        for name in os.listdir(root):   # leftovers of an export that was cut short
            if name.startswith(".partial-"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        start = time.monotonic()
        path = os.path.join(root, f"step-{self.training_step}")
        partial = os.path.join(root, f".partial-step-{self.training_step}")
        self.learner.export(partial)
        run_json = os.path.join(partial, "run.json")
        run = {"env": self.settings.env, "env_options": dict(self.settings.env_options)}  # what eval plays
        if os.path.isfile(run_json):   # the learner's own (a search-based export adds its search settings)
            with open(run_json) as f:
                run = json.load(f)
        # How far training was: an export is a snapshot that can be evaluated later against
        # the env steps it had seen (bench/learn.py --snapshot_every_s).
        run.update(training_step=int(self.training_step), env_steps=int(self.env_steps))
        with open(run_json, "w") as f:
            json.dump(run, f, indent=2, sort_keys=True)
        if os.path.isdir(path):   # the same step exported before (no training since): replace it
            shutil.rmtree(path)
        os.replace(partial, path)
        keep = self.settings.keep_exports
        if keep:
            for _, old in checkpoints.export_steps(root)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
        self.log(f"SavedModel exported to {path} ({time.monotonic() - start:.1f} s)")
        return path

    def _next_export_env(self) -> int:
        """The env-step count that triggers the next periodic export: the first multiple of
        ``export_every_env_steps`` above the count now (0 when that trigger is off)."""
        k = self.settings.export_every_env_steps
        return (self.env_steps // k + 1) * k if k else 0

    def _log_signal_notes(self) -> None:
        while self._signal_notes:
            self.log(self._signal_notes.pop(0))

    def _shutdown(self) -> None:
        """Stops actors, writes the final checkpoint and export, then always closes the learner's
        data (waking blocked pushes), the service and the server, whatever failed before."""
        self.stop_event.set()
        self._log_signal_notes()
        try:
            if self.learner is not None:
                self.learner.stop_limiting()   # actors blocked on a push return, stop promptly
            if self.actors is not None:
                self.actors.stop()
            if self.learner is not None and self.server is not None:
                try:
                    self.checkpoint()
                except Exception as e:  # keep shutting down: a full disk must not hang the exit
                    self.log(f"final checkpoint failed: {type(e).__name__}: {e}")
                self._log_signal_notes()
                if self.export and self.learner.no_export_reason:
                    self.log(f"no SavedModel export: {self.learner.no_export_reason}")
                elif self.export:
                    try:
                        self.export_model()
                    except Exception as e:
                        self.log(f"export failed: {type(e).__name__}: {e}")
        finally:
            if self.learner is not None:
                self.learner.close()
            if self.service is not None:
                self.service.close()
            if self.server is not None:
                self.server.stop(grace=1.0)
