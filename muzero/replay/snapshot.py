"""Atomic replay snapshots on disk: one directory of ``.npy`` arrays and a manifest.

Layout of a snapshot directory::

    manifest.json   {"format": "muzero-replay-snapshot", "version": 2,
                     "meta": {...JSON state: configs, counters, RNG...},
                     "arrays": {name: {"file": "<name>.npy", "bytes": n, "sha256": hex}},
                     "checksums": {field: hex}}
    <name>.npy      one array each, written with numpy.save (no pickles)

``checksums`` holds a SHA-256 for every other field of the manifest, down to each
counter (``meta.store.head``, ``meta.limiter.sampled``, ``arrays.actions.bytes``, ...;
a field is the dotted path of a leaf: a value that is not a non-empty object). So a
flipped counter is caught like a flipped array byte, and named.

Writing goes to a sibling ``<directory>.tmp-<pid>-<random>`` directory; every file is
fsynced and the manifest is written last; only then is the temporary directory
renamed to ``<directory>``. A snapshot interrupted before the rename therefore
never appears under its final name, and an existing snapshot under that name is
replaced only after the new one is complete (it is first renamed aside, then
deleted). Reading checks the manifest (every field against its checksum), every
file's size and its SHA-256 and, for a trajectory store's snapshot (``meta.store``), every
counter against the arrays it describes (``head``/``tail`` against the live segments'
lengths and slots, ``num_sampleable`` against the sampleable flags, ...); it raises
:class:`SnapshotError` naming what is wrong, :class:`SnapshotFieldError` (also a
``ValueError``) when that is a manifest field. Version 1 snapshots (no checksums) are
still read, with the counter checks.

A trajectory store whose ring has not wrapped yet saves only the rows it has written
(``meta.store.rows`` = ``head`` of ``meta.store.capacity``), so a checkpoint early in a
run with a large replay writes what it holds, not the whole preallocated ring; the
counter checks then also hold ``head`` to ``rows``. Snapshots without those two fields
hold whole arrays.

Imports only NumPy and the standard library.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil

import numpy as np

FORMAT = "muzero-replay-snapshot"
VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
CHECKSUMS = "checksums"
_CHUNK = 1 << 24


class SnapshotError(RuntimeError):
    """A replay snapshot is missing, partial, corrupted or incompatible."""


class SnapshotFieldError(SnapshotError, ValueError):
    """A manifest field fails its checksum, is missing, or disagrees with the arrays it
    describes. ``field`` is its dotted path, e.g. ``meta.store.head``."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _leaves(value, path: tuple = ()):
    """(dotted path, value) of every leaf of a JSON value: anything but a non-empty object."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, path + (str(key),))
    else:
        yield ".".join(path), value


def _field_digest(path: str, value) -> str:
    return hashlib.sha256(path.encode() + b"\0" + _canonical(value)).hexdigest()


def _field_checksums(body: dict) -> dict:
    checksums = {}
    for path, value in _leaves(body):
        if path in checksums:
            raise ValueError(f"replay snapshot manifest field {path!r} is ambiguous (a key holds a '.')")
        checksums[path] = _field_digest(path, value)
    return checksums


def _check_field_checksums(manifest: dict, where: str) -> None:
    """Every field of the manifest (but the checksums) against its checksum, and none missing."""
    checksums = manifest.get(CHECKSUMS)
    if not isinstance(checksums, dict):
        raise SnapshotFieldError(f"replay snapshot {where!r}: its manifest has no {CHECKSUMS!r} object "
                                 "(truncated or edited)", CHECKSUMS)
    leaves = dict(_leaves({k: v for k, v in manifest.items() if k != CHECKSUMS}))
    for path, value in leaves.items():
        if path not in checksums:
            raise SnapshotFieldError(f"replay snapshot {where!r}: manifest field {path!r} is not covered by "
                                     "a checksum (added or renamed after writing)", path)
        if checksums[path] != _field_digest(path, value):
            raise SnapshotFieldError(f"replay snapshot {where!r}: manifest field {path!r} fails its checksum "
                                     f"(value {_short(value)}; tampered or corrupted)", path)
    for path in checksums:
        if path not in leaves:
            raise SnapshotFieldError(f"replay snapshot {where!r}: manifest field {path!r} is missing "
                                     "(truncated or edited)", path)


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _HashingWriter:
    """File wrapper that hashes everything written through it."""

    def __init__(self, f):
        self._f = f
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        self.size += view.nbytes
        return self._f.write(view)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(directory: str, arrays: dict, meta: dict) -> None:
    """Writes ``arrays`` (name -> ndarray) and JSON-able ``meta`` atomically to ``directory``."""
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = f"{directory}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    os.makedirs(tmp)
    try:
        entries = {}
        for name, array in arrays.items():
            file_name = f"{name}.npy"
            with open(os.path.join(tmp, file_name), "wb") as f:
                writer = _HashingWriter(f)
                np.save(writer, np.ascontiguousarray(array), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            entries[name] = {"file": file_name, "bytes": writer.size,
                             "sha256": writer.digest.hexdigest()}
        # The checksums are taken over the manifest as JSON gives it back (tuples become lists).
        body = json.loads(json.dumps({"format": FORMAT, "version": VERSION, "meta": meta, "arrays": entries}))
        manifest = {**body, CHECKSUMS: _field_checksums(body)}
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        old = None
        if os.path.exists(directory):
            old = f"{directory}.old-{secrets.token_hex(4)}"
            os.rename(directory, old)
        os.rename(tmp, directory)
        _fsync_dir(parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return digest.hexdigest()
            digest.update(chunk)


def read_snapshot(directory: str) -> tuple[dict, dict]:
    """Reads and verifies a snapshot; returns (arrays, meta). Raises SnapshotError."""
    if not os.path.isdir(directory):
        raise SnapshotError(f"no replay snapshot directory at {directory!r}")
    manifest_path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(manifest_path):
        raise SnapshotError(f"replay snapshot {directory!r} is incomplete: {MANIFEST} is missing")
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise SnapshotError(f"replay snapshot {directory!r} has an unreadable {MANIFEST}: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SnapshotError(f"{manifest_path!r} is not a replay snapshot manifest (format "
                            f"{manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                            f"expected {FORMAT!r})")
    version = manifest.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise SnapshotError(f"replay snapshot {directory!r} has version {version!r}; "
                            f"this code reads versions {', '.join(map(str, READABLE_VERSIONS))}")
    if version >= 2 or CHECKSUMS in manifest:  # a version flipped to 1 does not skip the checksums
        _check_field_checksums(manifest, directory)
    entries = manifest.get("arrays")
    if not isinstance(entries, dict):
        raise SnapshotFieldError(f"replay snapshot {directory!r}: manifest field 'arrays' is "
                                 f"{_short(entries)}, not an object", "arrays")
    if not isinstance(manifest.get("meta"), dict):
        raise SnapshotFieldError(f"replay snapshot {directory!r}: manifest field 'meta' is "
                                 f"{_short(manifest.get('meta'))}, not an object", "meta")
    for name, entry in entries.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("file"), str)
                and os.path.basename(entry["file"]) == entry["file"] and entry["file"] not in ("", ".", "..")
                and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)):
            raise SnapshotFieldError(f"replay snapshot {directory!r}: manifest field 'arrays.{name}' is "
                                     f"{_short(entry)}, not {{file, bytes, sha256}}", f"arrays.{name}")
    arrays = {}
    for name, entry in entries.items():
        path = os.path.join(directory, entry["file"])
        if not os.path.isfile(path):
            raise SnapshotError(f"replay snapshot {directory!r} is missing array file {entry['file']!r}")
        size = os.path.getsize(path)
        if size != entry["bytes"]:
            raise SnapshotError(f"replay snapshot file {path!r} has {size} bytes, the manifest says "
                                f"{entry['bytes']} (partial or corrupted write)")
        if _sha256_of(path) != entry["sha256"]:
            raise SnapshotError(f"replay snapshot file {path!r} fails its SHA-256 check (corrupted)")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SnapshotError(f"replay snapshot file {path!r} cannot be read: {e}") from e
    meta = manifest["meta"]
    if "store" in meta:
        check_store_counters(arrays, meta["store"], directory)
    return arrays, meta


_STORE_ARRAYS = ("actions", "priorities", "sampleable", "seg_episode", "seg_start", "seg_length",
                 "seg_first_slot", "seg_next")
_STORE_INTS = ("head", "tail", "seg_head", "seg_tail", "num_sampleable", "inserted_steps")


def check_store_counters(arrays: dict, store: dict, where: str = "") -> None:
    """Checks a trajectory store's counters (``meta.store``) against the arrays they describe
    (layout in ``muzero/replay/store.py``); raises SnapshotFieldError naming the first that
    disagrees. Arrays of another shape than a store's are left to the store's own load."""
    prefix = f"replay snapshot {where!r}: " if where else ""

    def bad(name: str, message: str):
        sep = "" if message.startswith("=") else " "
        raise SnapshotFieldError(f"{prefix}meta.store.{name}{sep}{message}", f"meta.store.{name}")

    if not isinstance(store, dict):
        raise SnapshotFieldError(f"{prefix}meta.store is {_short(store)}, not an object", "meta.store")
    if any(name not in arrays or arrays[name].ndim < 1 for name in _STORE_ARRAYS):
        return
    n = arrays["actions"].shape[0]
    if any(arrays[name].shape[0] != n for name in _STORE_ARRAYS):
        return
    # Snapshots written before the store trimmed its arrays have no capacity/rows: whole arrays.
    has_rows = "capacity" in store or "rows" in store
    for name in _STORE_INTS + (("capacity", "rows") if has_rows else ()):
        value = store.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            bad(name, f"is {_short(value)}; expected an integer >= 0")
    c, rows = (store["capacity"], store["rows"]) if has_rows else (n, n)
    if c < 1:
        if has_rows:
            bad("capacity", f"={c}; a store holds at least one step")
        return
    head, tail, seg_head, seg_tail = store["head"], store["tail"], store["seg_head"], store["seg_tail"]
    if rows != n:
        bad("rows", f"={rows}, but the arrays have {n} rows")
    if rows > c:
        bad("capacity", f"={c} is below the {rows} array rows saved")
    if has_rows and rows != min(head, c):   # rows below the capacity are the head's; a wrapped ring saves all
        name, value = ("head", head) if rows < c else ("rows", rows)
        bad(name, f"={value}: a store of capacity {c} with head={head} saves min(head, capacity) = "
                  f"{min(head, c)} array rows; this snapshot has {rows}")
    if seg_head > head:
        bad("seg_head", f"={seg_head} is above head={head}; every segment holds at least one step")
    steps, segments = head - tail, seg_head - seg_tail
    if steps < 0:
        bad("head", f"={head} is below tail={tail}")
    if steps > c:
        bad("head", f"={head} is more than the capacity {c} ahead of tail={tail}")
    if segments < 0:
        bad("seg_head", f"={seg_head} is below seg_tail={seg_tail}")
    if segments > steps:
        bad("seg_head", f"={seg_head}: seg_head - seg_tail = {segments} live segments, but only {steps} "
                        f"live steps (head={head}, tail={tail}); every segment holds at least one")
    rows = np.arange(seg_tail, seg_head, dtype=np.int64) % c
    lengths = arrays["seg_length"][rows].astype(np.int64)
    first = arrays["seg_first_slot"][rows].astype(np.int64)
    if segments:
        if first[0] != tail % c:
            bad("tail", f"={tail} (slot {tail % c}) and meta.store.seg_tail={seg_tail} disagree: the oldest "
                        f"live segment starts at slot {first[0]}")
        if lengths.min() < 1 or first.min() < 0 or first.max() >= c:
            k = int(np.flatnonzero((lengths < 1) | (first < 0) | (first >= c))[0])
            bad("seg_head", f"={seg_head}: segment {seg_tail + k} is counted live but its record is empty "
                            f"(length {lengths[k]}, first slot {first[k]})")
        gaps = np.flatnonzero((first[:-1] + lengths[:-1]) % c != first[1:])
        if gaps.size:
            k = int(gaps[0])
            bad("seg_head", f"={seg_head}: live segment {seg_tail + k + 1} does not follow segment "
                            f"{seg_tail + k} in the ring (slot {first[k + 1]}, expected "
                            f"{(first[k] + lengths[k]) % c})")
    if int(lengths.sum()) != steps:
        bad("head", f"={head}: head - tail = {steps} steps, but the live segments {seg_tail}..{seg_head - 1} "
                    f"hold {int(lengths.sum())}")
    sampleable = int(np.count_nonzero(arrays["sampleable"]))
    if store["num_sampleable"] != sampleable:
        bad("num_sampleable", f"={store['num_sampleable']}, but {sampleable} positions are flagged sampleable")
    if store["inserted_steps"] < steps:
        bad("inserted_steps", f"={store['inserted_steps']} is below the {steps} steps stored")
    max_priority = store.get("max_priority")
    if isinstance(max_priority, bool) or not isinstance(max_priority, (int, float)) \
            or not np.isfinite(max_priority) or max_priority <= 0:
        bad("max_priority", f"is {_short(max_priority)}; expected a finite number > 0")
    live = (tail + np.arange(steps, dtype=np.int64)) % c
    if steps and float(arrays["priorities"][live].max()) > max_priority:
        bad("max_priority", f"={max_priority} is below a stored priority "
                            f"({float(arrays['priorities'][live].max())})")
    episodes = store.get("episodes")
    if not isinstance(episodes, list):
        bad("episodes", f"is {_short(episodes)}, not a list")
    seen = set()
    for item in episodes:
        if not (isinstance(item, list) and len(item) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
            bad("episodes", f"holds {_short(item)}; expected [episode_id, segment id, first step]")
        episode_id, seg_id, chain_first = item
        if episode_id in seen:
            bad("episodes", f"lists episode {episode_id} twice")
        seen.add(episode_id)
        row = seg_id % c
        if not seg_tail <= seg_id < seg_head or int(arrays["seg_episode"][row]) != episode_id \
                or int(arrays["seg_next"][row]) != -1 or chain_first > int(arrays["seg_start"][row]):
            bad("episodes", f"entry {item} does not name the newest live segment of episode {episode_id}")
