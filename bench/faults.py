"""Fault injection: a CartPole run of ``python -m muzero.learner`` killed, corrupted and starved of disk.

    python bench/faults.py                      # 10 learner kills, 10 actor kills, 4 corruptions, full disk
    python bench/faults.py --kills=2            # smoke run: 2 learner kills, 2 actor kills
    python bench/faults.py --kills=2 --corruptions=1 --no-disk_full

One log directory, one command, started again after every fault (small settings and
``--checkpoint_every_secs=3``):

- the learner is killed with SIGKILL ``--learner_kills`` times: half of them while a
  checkpoint is being written (``<logdir>/checkpoints/.tmp-*`` of its pid exists; the kill
  comes 0-80 ms after it appears, so it lands in the model write, the replay snapshot or the
  renames), the others at random moments: 1-25 s after the start (start-up, restore,
  warm-up) or 0-8 s after training started;
- an actor process (a spawned child of the learner) is killed with SIGKILL ``--actor_kills``
  times; the learner must restart it;
- before ``--corruptions`` of the restarts the newest checkpoint is damaged (a replay array
  truncated, bytes of the model flipped, the replay manifest's ``head`` counter flipped,
  ``state.json`` truncated; in turn); the learner must say so and fall back to the next one;
- with ``--disk_full`` (default on; needs ``mount -t tmpfs``, i.e. root) a second run lives on
  a small tmpfs which is filled while it trains: the periodic checkpoint must fail with a
  logged line and training go on, SIGTERM must still exit 0, and a restart once space is
  back must resume from the checkpoint written before the disk filled.

After every restart it checks: the "resumed from" line names the newest checkpoint that was
not damaged (the fallback line names the damaged one), which restores: its replay snapshot
loads (manifest checksums, counters against arrays) and holds no duplicate segment (two
with the same episode and start, or overlapping steps of one episode), no partial one (a
record whose slots another segment owns, a length outside 1..segment_length, garbage
policies, a short open segment with a successor) and no broken chain (prev/next links,
starts, the episode index); no ``.tmp-*`` entry of an earlier process is left in the logdir
once the run has started; no finished checkpoint exists only under a ``.tmp-`` name (which
the restart would delete); and no output line holds a traceback. The last line:

    restarts=<n> tracebacks=0 resumed_from_intact=<k>/<k> duplicate_segments=0 partial_segments=0 leftover_tmp_dirs=0

Exit status 0 when every check held.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))

SEGMENT_LENGTH = 50      # the CartPole default (replay.segment_length)
CAPACITY = 20_000        # small: checkpoints of ~2.5 MB, and the ring wraps within one or two learner starts
TRAINING = r"^\[\d+m\d+s\] step [1-9]"   # a progress line once training has started
CORRUPTIONS = ("truncate_replay_array", "flip_model_bytes", "flip_manifest_head", "truncate_state_json")


def learner_command(logdir: str, seed: int) -> list:
    return [sys.executable, "-m", "muzero.learner", "--env=cartpole", f"--logdir={logdir}", f"--seed={seed}",
            "--num_actors=2", "--num_eval_actors=0", "--envs_per_actor=16", "--checkpoint_every_secs=3",
            "--set=replay.min_steps_to_sample=300", f"--set=replay.capacity_steps={CAPACITY}",
            f"--set=replay.segment_length={SEGMENT_LENGTH}"]


# ---------------------------------------------------------------- processes
def _children(pid: int) -> list:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def actor_children(pid: int) -> list:
    """The learner's spawned actor processes (not multiprocessing's resource tracker)."""
    pids = []
    for child in _children(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"multiprocessing" in cmd and b"resource_tracker" not in cmd:
            pids.append(child)
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Learner:
    """One ``python -m muzero.learner`` process in its own process group, its output collected."""

    def __init__(self, cmd: list, log_path: str):
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace", start_new_session=True)
        self.pid = self.proc.pid
        self.closed = False
        self.lines: list = []
        self._log = open(log_path, "w")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._log.write(line)
            self._log.flush()

    def wait_for(self, pattern: str, timeout: float, since: int = 0):
        """The first output line from index ``since`` matching ``pattern``; None on timeout or exit."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines[since:]:
                if regex.search(line):
                    return line
            if time.monotonic() > deadline or (self.proc.poll() is not None and not self._reader.is_alive()):
                return None
            time.sleep(0.05)

    def output(self) -> str:
        return "\n".join(self.lines)

    def kill9(self) -> int:
        """SIGKILL to the learner only (its actors must notice and exit); returns actors left after 5 s."""
        actors = actor_children(self.pid)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and any(_alive(p) for p in actors):
            time.sleep(0.1)
        orphans = sum(_alive(p) for p in actors)
        self.close()
        return orphans

    def close(self, timeout: float = 0.0) -> None:
        """Waits up to ``timeout`` s for the learner to exit, then SIGKILLs what is left of its group."""
        if self.closed:
            return
        self.closed = True
        if timeout:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self._reader.join(timeout=5)
        self._log.close()


# ---------------------------------------------------------------- checkpoints
def checkpoints_dir(logdir: str) -> str:
    return os.path.join(logdir, "checkpoints")


def candidates(logdir: str) -> list:
    from muzero import checkpoints
    return checkpoints.checkpoints_newest_first(logdir)


def leftover_tmp(logdir: str, current_pid: int) -> list:
    """``.tmp-`` entries anywhere in the logdir not written by ``current_pid``."""
    found = []
    for base, dirs, files in os.walk(logdir):
        for name in dirs + files:
            if ".tmp-" in name and not re.search(rf"\.tmp-(ckpt-\d+-)?{current_pid}\b", name):
                found.append(os.path.relpath(os.path.join(base, name), logdir))
        dirs[:] = [d for d in dirs if ".tmp-" not in d]
    return found


def corrupt(ckpt: str, mode: str, rng: random.Random) -> str:
    """Damages one file of a checkpoint; returns what was done."""
    if mode == "truncate_replay_array":
        names = sorted(f for f in os.listdir(os.path.join(ckpt, "replay")) if f.endswith(".npy"))
        path = os.path.join(ckpt, "replay", rng.choice(names))
        size = os.path.getsize(path)
        os.truncate(path, size // 2)
        return f"truncated {os.path.relpath(path, ckpt)} from {size} to {size // 2} bytes"
    if mode == "flip_model_bytes":
        path = next(os.path.join(ckpt, f) for f in sorted(os.listdir(ckpt)) if f.startswith("model.data"))
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            for _ in range(4):
                offset = rng.randrange(size)
                f.seek(offset)
                byte = f.read(1)
                f.seek(offset)
                f.write(bytes([byte[0] ^ 0x5A]))
        return f"flipped 4 bytes of {os.path.basename(path)}"
    if mode == "flip_manifest_head":
        path = os.path.join(ckpt, "replay", "manifest.json")
        with open(path) as f:
            manifest = json.load(f)
        head = manifest["meta"]["store"]["head"]
        manifest["meta"]["store"]["head"] = head ^ (1 << rng.randrange(3, 10))
        with open(path, "w") as f:
            json.dump(manifest, f)
        return f"flipped replay manifest head {head} -> {manifest['meta']['store']['head']}"
    if mode == "truncate_state_json":
        path = os.path.join(ckpt, "state.json")
        size = os.path.getsize(path)
        os.truncate(path, size // 3)
        return f"truncated state.json from {size} to {size // 3} bytes"
    raise ValueError(mode)


def fill_disk(path: str) -> None:
    """Writes ``path`` until its file system has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for block in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError:
                pass
    finally:
        os.close(fd)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:   # another file system (the tmpfs)
        shutil.copy2(src, dst)


def preserve(paths: list, dest: str) -> dict:
    """Hard-link copies of checkpoint directories (the learner never rewrites a file of a
    finished checkpoint) so they can be checked after the restarted learner has pruned them;
    original -> copy."""
    out = {}
    os.makedirs(dest, exist_ok=True)
    for path in paths:
        copy = os.path.join(dest, os.path.basename(path))
        try:
            shutil.copytree(path, copy, copy_function=_link_or_copy)
        except (OSError, shutil.Error):
            continue   # pruned meanwhile
        out[path] = copy
    return out


def complete_under_temporary_names(logdir: str, complete: list) -> list:
    """``.tmp-ckpt-<step>-*`` directories holding a finished checkpoint (state.json) whose
    ``ckpt-<step>`` is missing: a checkpoint the next start would delete."""
    root = checkpoints_dir(logdir)
    names = {os.path.basename(c) for c in complete}
    found = []
    for d in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        m = re.match(r"\.tmp-(ckpt-\d+)-", d)
        if m and m.group(1) not in names and os.path.isfile(os.path.join(root, d, "state.json")):
            found.append(d)
    return found


def still_damaged(path: str, corrupted: dict) -> bool:
    """True while the damaged directory is still the one there (a save of the same step
    replaces it with a new directory: another inode)."""
    if path not in corrupted:
        return False
    try:
        return os.stat(path).st_ino == corrupted[path][1]
    except OSError:
        return False


# ---------------------------------------------------------------- replay checks
def check_replay_store(store, segment_length: int) -> dict:
    """Counts duplicate, partial and mis-chained segments of a TrajectoryStore; 'problems' says which."""
    c = store.capacity
    ids = np.arange(store.seg_tail, store.seg_head, dtype=np.int64)
    rows = ids % c
    ep, start = store.seg_episode[rows], store.seg_start[rows]
    length, first = store.seg_length[rows], store.seg_first_slot[rows]
    prev, nxt, end = store.seg_prev[rows], store.seg_next[rows], store.seg_end[rows]
    problems = {"duplicate": [], "partial": [], "chain": []}
    by_id = {int(i): k for k, i in enumerate(ids)}

    # duplicates: same (episode, start), or overlapping steps of one episode
    order = np.lexsort((start, ep))
    for a, b in zip(order[:-1], order[1:]):
        if ep[a] == ep[b] and start[a] + length[a] > start[b]:
            problems["duplicate"].append(f"segments {ids[a]} and {ids[b]} of episode {ep[a]} overlap "
                                         f"(starts {start[a]}+{length[a]}, {start[b]})")

    # partial: the record does not describe one whole pushed segment
    expected_first = store.tail % c
    for k, seg_id in enumerate(ids):
        n = int(length[k])
        if not 1 <= n <= segment_length:
            problems["partial"].append(f"segment {seg_id} has length {n}")
            continue
        if first[k] != expected_first:
            problems["partial"].append(f"segment {seg_id} starts at slot {first[k]}, not {expected_first}")
        expected_first = (int(first[k]) + n) % c
        slots = (int(first[k]) + np.arange(n)) % c
        if np.any(store.slot_segment[slots] != rows[k]):
            problems["partial"].append(f"segment {seg_id}: some of its slots belong to another segment")
        sums = store.policies[slots].sum(axis=1)
        if np.any(np.abs(sums - 1.0) > 1e-3) or np.any(store.policies[slots] < 0):
            problems["partial"].append(f"segment {seg_id}: policies that are not distributions")
        if end[k] == 0 and n < segment_length and nxt[k] >= store.seg_tail:
            problems["partial"].append(f"segment {seg_id}: open, {n} < {segment_length} steps, but continued")
    if int(length.sum()) != store.head - store.tail:
        problems["partial"].append(f"live segments hold {int(length.sum())} steps, head - tail = "
                                   f"{store.head - store.tail}")
    if store.num_sampleable != int(store.sampleable.sum()):
        problems["partial"].append(f"num_sampleable {store.num_sampleable} != {int(store.sampleable.sum())}")

    # chains: prev/next links agree, starts follow on, ended segments end their episode
    for k, seg_id in enumerate(ids):
        p, q = int(prev[k]), int(nxt[k])
        if p >= store.seg_tail:
            j = by_id.get(p)
            if j is None or p >= seg_id or ep[j] != ep[k] or start[j] + length[j] != start[k] or nxt[j] != seg_id:
                problems["chain"].append(f"segment {seg_id}: bad prev link {p}")
        if q >= 0:
            j = by_id.get(q)
            if j is None or q <= seg_id or prev[j] != seg_id:
                problems["chain"].append(f"segment {seg_id}: bad next link {q}")
        if end[k] != 0 and q >= 0:
            problems["chain"].append(f"segment {seg_id}: ended but continued by {q}")
    newest = {}
    for k, seg_id in enumerate(ids):
        newest[int(ep[k])] = int(seg_id)
    if set(newest) != set(store.episodes):
        problems["chain"].append(f"episode index lists {len(store.episodes)} episodes, the segments {len(newest)}")
    for episode, seg_id in newest.items():
        entry = store.episodes.get(episode)
        if entry is not None and entry[0] != seg_id:
            problems["chain"].append(f"episode {episode}: index names segment {entry[0]}, newest is {seg_id}")
    return {"segments": int(ids.size), "steps": int(store.head - store.tail),
            "episodes": len(newest), **{k: v for k, v in problems.items()}}


def check_checkpoint(path: str) -> dict:
    """Restores a checkpoint's replay (verifying it) and checks its segments."""
    from muzero import checkpoints
    from muzero.algorithms.muzero.replay import Replay
    state = checkpoints.read_state(path)
    replay = Replay.restore(os.path.join(path, "replay"))
    result = check_replay_store(replay._store, SEGMENT_LENGTH)
    result["step"] = int(state["step"])
    return result


# ---------------------------------------------------------------- the bench
class Bench:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = args.workdir or tempfile.mkdtemp(prefix="muzero-faults-")
        os.makedirs(self.workdir, exist_ok=True)
        self.sessions = 0
        self.restarts = 0
        self.tracebacks = 0
        self.traceback_sessions: list = []
        self.resume_checks = 0
        self.resumed_intact = 0
        self.duplicates = self.partials = self.chain_errors = 0
        self.leftovers = 0
        self.learner_kills = self.kills_in_checkpoint = self.tmp_removed_lines = 0
        self.actor_kills = self.actor_restarts = 0
        self.orphan_actors = 0
        self.corruptions = self.fallbacks = 0
        self.corrupt_kept = 0
        self.lost_checkpoints = 0
        self.failures: list = []
        self.notes: list = []
        self.learners: list = []
        self.command = learner_command     # (logdir, seed) -> argv of a learner start

    def close_all(self) -> None:
        for learner in self.learners:
            learner.close()

    def fail(self, message: str) -> None:
        self.failures.append(message)
        print(f"  FAIL: {message}", flush=True)

    # -- one start of the learner -------------------------------------------------------------
    def start(self, logdir: str, corrupted: dict) -> Learner:
        """Starts the learner on ``logdir`` (after a fault, a restart) and checks how it resumed.
        ``corrupted`` maps damaged checkpoint paths to what was done to them."""
        before = [c for c in candidates(logdir) if os.path.isdir(c)]
        stranded = complete_under_temporary_names(logdir, before)
        if stranded:
            self.lost_checkpoints += len(stranded)
            self.fail(f"session {self.sessions + 1}: complete checkpoint(s) only under temporary names, which the "
                      f"restart deletes: {stranded} (killed between the renames of a same-step save)")
        damaged = [c for c in before if still_damaged(c, corrupted)]
        expected = next((c for c in before if c not in damaged), None)
        copies = preserve(before, os.path.join(self.workdir, "kept", f"session-{self.sessions}"))
        self.sessions += 1
        learner = Learner(self.command(logdir, self.args.seed),
                          os.path.join(self.workdir, f"session-{self.sessions:02d}.log"))
        self.learners.append(learner)
        if not before:
            return learner
        self.restarts += 1
        self.resume_checks += 1
        line = learner.wait_for(r"^resumed from |none can be restored|^error: ", 180)
        serving = learner.wait_for(r"^serving ", 60)
        match = re.match(r"resumed from (.+?): training step", line or "")
        if not match:
            self.fail(f"session {self.sessions}: no 'resumed from' line (got {line!r})")
            return learner
        resumed = match.group(1)
        intact = True
        if resumed != expected:
            self.fail(f"session {self.sessions}: resumed from {resumed}, expected {expected}")
            intact = False
        skipped = before[:before.index(resumed)] if resumed in before else before
        for bad in (c for c in skipped if c in damaged):
            self.fallbacks += 1
            if not learner.wait_for(rf"checkpoint {re.escape(bad)} cannot be restored .*trying an older one", 1):
                self.fail(f"session {self.sessions}: no fallback line for the damaged {bad}")
                intact = False
        try:
            result = check_checkpoint(copies[resumed])
        except Exception as e:  # noqa: BLE001 - a finding, reported
            self.fail(f"session {self.sessions}: resumed checkpoint {resumed} does not verify: "
                      f"{type(e).__name__}: {e}")
            result, intact = None, False
        if result is not None:
            self.duplicates += len(result["duplicate"])
            self.partials += len(result["partial"])
            self.chain_errors += len(result["chain"])
            for kind in ("duplicate", "partial", "chain"):
                for problem in result[kind][:5]:
                    self.fail(f"session {self.sessions}: {kind}: {problem}")
                    intact = False
        self.resumed_intact += intact
        leftovers = leftover_tmp(logdir, learner.pid) if serving else ["(never served)"]
        self.leftovers += len(leftovers)
        if leftovers:
            self.fail(f"session {self.sessions}: left over after start: {leftovers}")
        removed = learner.wait_for(r"^removed \d+ unfinished checkpoint write", 0)
        self.tmp_removed_lines += removed is not None
        summary = (f"step {result['step']}, replay {result['steps']} steps in {result['segments']} segments "
                   f"of {result['episodes']} episodes" if result else "not verified")
        print(f"  restart {self.restarts}: resumed from {os.path.basename(resumed)} ({summary})"
              + (f"; {removed}" if removed else ""), flush=True)
        return learner

    def finish(self, learner: Learner, how: str) -> None:
        count = learner.output().count("Traceback")
        if count:
            self.tracebacks += count
            self.traceback_sessions.append(self.sessions)
            idx = learner.output().index("Traceback")
            self.fail(f"session {self.sessions} ({how}): {count} traceback(s):\n" + learner.output()[idx:idx + 2500])

    # -- faults -------------------------------------------------------------------------------
    def kill_an_actor(self, learner: Learner, timeout: float = 60.0) -> bool:
        """SIGKILLs one actor once they run; waits for the learner to restart it. False if no
        actor appeared in time (the learner's own kill came first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and learner.proc.poll() is None:
            actors = actor_children(learner.pid)
            if len(actors) >= 2 and learner.wait_for(r"^\[\d+m\d+s\] step", 0):
                victim = self.rng.choice(actors)
                since = len(learner.lines)
                time.sleep(self.rng.uniform(0.0, 2.0))
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.actor_kills += 1
                line = learner.wait_for(rf"actor \d+ \(pid {victim}\) exited with code -9; restarting it", 30, since)
                if line:
                    self.actor_restarts += 1
                    print(f"  killed actor pid {victim}: {line.strip()}", flush=True)
                else:
                    self.fail(f"session {self.sessions}: actor pid {victim} was killed and not restarted in 30 s")
                return True
            time.sleep(0.2)
        return False

    def kill_during_checkpoint(self, learner: Learner, timeout: float = 90.0) -> bool:
        root = checkpoints_dir(self.logdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and learner.proc.poll() is None:
            try:
                tmp = [d for d in os.listdir(root) if d.startswith(".tmp-") and f"-{learner.pid}-" in d]
            except FileNotFoundError:
                tmp = []
            if tmp:
                time.sleep(self.rng.uniform(0.0, 0.08))
                orphans = learner.kill9()
                still = os.path.exists(os.path.join(root, tmp[0]))
                self.kills_in_checkpoint += still
                self.note_orphans(orphans)
                print(f"  killed the learner {'during' if still else 'just after'} the write of {tmp[0]}", flush=True)
                return True
            time.sleep(0.002)
        return False

    def note_orphans(self, orphans: int) -> None:
        if orphans:
            self.orphan_actors += orphans
            self.fail(f"session {self.sessions}: {orphans} actor(s) still alive 5 s after the learner was killed")

    def corrupt_newest(self, corrupted: dict, mode: str) -> bool:
        found = [c for c in candidates(self.logdir) if not still_damaged(c, corrupted)]
        if len(found) < 2:   # keep something to fall back to
            return False
        newest = found[0]
        what = corrupt(newest, mode, self.rng)
        corrupted[newest] = (what, os.stat(newest).st_ino)
        self.corruptions += 1
        print(f"  corrupted {os.path.basename(newest)}: {what}", flush=True)
        return True

    # -- the main run -------------------------------------------------------------------------
    def run_kills(self) -> None:
        a = self.args
        self.logdir = os.path.join(self.workdir, "run")
        # half while a checkpoint is written; the others at a random moment, every other one
        # counted from the start (start-up, restore, warm-up), the rest from the first training step
        kills = ["checkpoint" if i % 2 == 0 else "random_from_start" if i % 4 == 1 else "random_in_training"
                 for i in range(a.learner_kills)]
        self.rng.shuffle(kills)
        actor_plan = [a.actor_kills // max(1, len(kills) + 1) + (i < a.actor_kills % (len(kills) + 1))
                      for i in range(len(kills) + 1)]
        corrupt_left = a.corruptions
        corrupted: dict = {}
        mode_index = 0
        actor_pending = 0   # actor kills a learner start cut short hands on to the next
        for session, kind in enumerate(kills + ["stop"]):
            actor_pending += actor_plan[session]
            print(f"session {self.sessions + 1}: {actor_pending} actor kill(s), then "
                  f"{'SIGTERM' if kind == 'stop' else 'kill -9 ' + kind}", flush=True)
            learner = self.start(self.logdir, corrupted)
            kill_at = learner.started + self.rng.uniform(1.0, 25.0)
            if kind == "random_in_training":
                trained = learner.wait_for(TRAINING, 180)
                kill_at = time.monotonic() + self.rng.uniform(0.0, 8.0)
                if trained is None:
                    self.fail(f"session {self.sessions}: training did not start within 180 s")
            while actor_pending:
                if kind.startswith("random") and time.monotonic() > kill_at:
                    break
                if not self.kill_an_actor(learner, timeout=90 if not kind.startswith("random")
                                          else kill_at - time.monotonic()):
                    break
                actor_pending -= 1
            if kind == "checkpoint":
                learner.wait_for(TRAINING, 180)   # a checkpoint with data in it
                if not self.kill_during_checkpoint(learner):
                    self.fail(f"session {self.sessions}: no checkpoint write seen in 90 s")
                    self.note_orphans(learner.kill9())
                self.learner_kills += 1
            elif kind.startswith("random"):
                time.sleep(max(0.0, kill_at - time.monotonic()))
                print(f"  killed the learner {time.monotonic() - learner.started:.1f} s after it started", flush=True)
                self.note_orphans(learner.kill9())
                self.learner_kills += 1
            else:
                # the last learner start: wait for a checkpoint after the restarts, then stop cleanly
                learner.wait_for(r"^checkpoint written", 60, len(learner.lines))
                learner.proc.send_signal(signal.SIGTERM)
                learner.close(timeout=90)
                if learner.proc.returncode != 0:
                    self.fail(f"session {self.sessions}: SIGTERM exit code {learner.proc.returncode}")
            self.finish(learner, kind)
            chances_left = len(kills) - session   # this kill and the later ones
            if kind != "stop" and corrupt_left > 0 and (session % 2 == 1 or chances_left <= corrupt_left):
                if self.corrupt_newest(corrupted, CORRUPTIONS[mode_index % len(CORRUPTIONS)]):
                    mode_index += 1
                    corrupt_left -= 1
        if actor_pending:
            self.notes.append(f"{actor_pending} actor kill(s) not done")
        if corrupt_left:
            self.notes.append(f"{corrupt_left} corruption(s) not done: fewer than two checkpoints to choose from")
        kept = [c for c in corrupted if still_damaged(c, corrupted)]
        self.corrupt_kept = len(kept)
        if kept:
            self.notes.append(f"damaged checkpoints still in the logdir at the end: "
                              f"{', '.join(os.path.basename(c) for c in kept)}")

    # -- full disk ----------------------------------------------------------------------------
    def run_disk_full(self) -> str:
        mount = os.path.join(self.workdir, "tmpfs")
        os.makedirs(mount, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.args.tmpfs_mb}m", "tmpfs", mount],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            reason = (proc.stderr or proc.stdout).strip() or f"exit code {proc.returncode}"
            print(f"disk_full: skipped: mounting a tmpfs is not permitted here ({reason})", flush=True)
            return "skipped"
        try:
            return self._disk_full(mount)
        finally:
            subprocess.run(["umount", "-l", mount], capture_output=True)

    def _disk_full(self, mount: str) -> str:
        logdir = os.path.join(mount, "run")
        filler = os.path.join(mount, "filler")
        print(f"disk_full: a {self.args.tmpfs_mb} MB tmpfs at {mount}", flush=True)
        learner = self.start(logdir, {})
        ok = True
        # a checkpoint with data in it, then fill the disk right after a progress line: the
        # periodic checkpoint (every 3 s) meets the full disk before the next progress line (5 s)
        trained = learner.wait_for(r"^\[\d+m\d+s\] step [1-9]", 180)
        first = trained and learner.wait_for(r"^checkpoint written: ", 30, learner.lines.index(trained))
        progress = first and learner.wait_for(r"^\[\d+m\d+s\] step", 30, learner.lines.index(first))
        if not progress:
            self.fail("disk_full: no checkpoint with training data written before the disk was to be filled")
            learner.close()
            self.finish(learner, "disk_full")
            return "failed"
        fill_disk(filler)
        free = shutil.disk_usage(mount).free
        print(f"  filled the disk after {os.path.basename(first.split()[-1])} ({free} bytes free)", flush=True)
        since = len(learner.lines)
        failed = learner.wait_for(r"^checkpoint failed \(.*No space left on device", 30, since)
        if failed:
            print(f"  {failed[:160]}", flush=True)
        else:
            self.fail("disk_full: no 'checkpoint failed ... No space left' line within 30 s")
            ok = False
        # keep training for two more progress lines (metrics.jsonl and TensorBoard on a full disk)
        since = len(learner.lines)
        for _ in range(2):
            line = learner.wait_for(r"^\[\d+m\d+s\] step", 20, since)
            if line is None:
                self.fail("disk_full: training stopped after the disk filled "
                          f"(exit code {learner.proc.poll()})")
                ok = False
                break
            since = learner.lines.index(line) + 1
        if learner.proc.poll() is None:
            learner.proc.send_signal(signal.SIGTERM)
        learner.close(timeout=90)
        code = learner.proc.returncode
        final = learner.wait_for(r"final checkpoint failed|^checkpoint written", 0, since)
        print(f"  SIGTERM on the full disk: exit code {code}; {final}", flush=True)
        if code != 0:
            self.fail(f"disk_full: SIGTERM on a full disk exited with code {code}")
            ok = False
        self.finish(learner, "disk_full")
        intact = [c for c in candidates(logdir)]
        os.remove(filler)
        learner = self.start(logdir, {})
        if not learner.wait_for(r"^checkpoint written: ", 60):
            self.fail("disk_full: no checkpoint after space came back")
            ok = False
        learner.proc.send_signal(signal.SIGTERM)
        learner.close(timeout=90)
        if learner.proc.returncode != 0:
            self.fail(f"disk_full: exit code {learner.proc.returncode} after space came back")
            ok = False
        self.finish(learner, "disk_full restart")
        print(f"  restarted with space back: resumed, exit code {learner.proc.returncode} "
              f"(checkpoints before: {[os.path.basename(c) for c in intact]})", flush=True)
        return "ok" if ok else "failed"

    def report(self, disk: str) -> int:
        print(f"learner_kills={self.learner_kills} kills_during_checkpoint_write={self.kills_in_checkpoint} "
              f"unfinished_writes_removed={self.tmp_removed_lines}")
        print(f"actor_kills={self.actor_kills} actor_restarts={self.actor_restarts} "
              f"orphan_actors={self.orphan_actors}")
        print(f"corruptions={self.corruptions} fallbacks={self.fallbacks} "
              f"damaged_checkpoints_kept={self.corrupt_kept} chain_errors={self.chain_errors} "
              f"lost_checkpoints={self.lost_checkpoints} disk_full={disk}")
        for note in self.notes:
            print(f"note: {note}")
        print(f"workdir={self.workdir} failures={len(self.failures)}")
        print(f"restarts={self.restarts} tracebacks={self.tracebacks} "
              f"resumed_from_intact={self.resumed_intact}/{self.resume_checks} "
              f"duplicate_segments={self.duplicates} partial_segments={self.partials} "
              f"leftover_tmp_dirs={self.leftovers}", flush=True)
        return 0 if not self.failures else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=None, help="sets --learner_kills and --actor_kills")
    parser.add_argument("--learner_kills", type=int, default=10)
    parser.add_argument("--actor_kills", type=int, default=10)
    parser.add_argument("--corruptions", type=int, default=len(CORRUPTIONS))
    parser.add_argument("--disk_full", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--tmpfs_mb", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="default: a new temporary directory (kept)")
    args = parser.parse_args()
    if args.kills is not None:
        args.learner_kills = args.actor_kills = args.kills
    bench = Bench(args)
    print(f"workdir {bench.workdir}; command: {' '.join(learner_command('<logdir>', args.seed)[1:])}", flush=True)
    t0 = time.monotonic()
    try:
        bench.run_kills()
        disk = bench.run_disk_full() if args.disk_full else "off"
    finally:
        bench.close_all()
    print(f"elapsed_s={time.monotonic() - t0:.0f}")
    return bench.report(disk)


if __name__ == "__main__":
    sys.exit(main())
