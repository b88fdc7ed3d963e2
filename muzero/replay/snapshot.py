"""Atomic replay snapshots on disk: one directory of ``.npy`` arrays and a manifest.

Layout of a snapshot directory::

    manifest.json   {"format": "muzero-replay-snapshot", "version": 1,
                     "meta": {...JSON state: configs, counters, RNG...},
                     "arrays": {name: {"file": "<name>.npy", "bytes": n, "sha256": hex}}}
    <name>.npy      one array each, written with numpy.save (no pickles)

Writing goes to a sibling ``<directory>.tmp-<pid>-<random>`` directory; every file is
fsynced and the manifest is written last; only then is the temporary directory
renamed to ``<directory>``. A snapshot interrupted before the rename therefore
never appears under its final name, and an existing snapshot under that name is
replaced only after the new one is complete (it is first renamed aside, then
deleted). Reading checks the manifest, every file's size and its SHA-256, and
raises :class:`SnapshotError` naming what is wrong.

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
VERSION = 1
MANIFEST = "manifest.json"
_CHUNK = 1 << 24


class SnapshotError(RuntimeError):
    """A replay snapshot is missing, partial, corrupted or incompatible."""


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
        manifest = {"format": FORMAT, "version": VERSION, "meta": meta, "arrays": entries}
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
    if manifest.get("version") != VERSION:
        raise SnapshotError(f"replay snapshot {directory!r} has version {manifest.get('version')!r}; "
                            f"this code reads version {VERSION}")
    arrays = {}
    for name, entry in manifest["arrays"].items():
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
    return arrays, manifest["meta"]
