"""Symmetry augmentation of sampled batches for board games (``TrainingConfig.augment_symmetries``).

A board game whose actions are the cells of an H x W board and whose observations are
``(H, W, C)`` planes is unchanged by some permutations of the cells (tic-tac-toe: the 8
rotations and reflections of the square, ``envs.board_symmetries``). Each sampled
position gets one of them at random, applied to the whole unroll so that the
trajectory stays a legal game: with ``perm`` mapping board ``b`` to ``b[perm]``,

* observation: cell ``i`` of the new planes is cell ``perm[i]`` of the old ones;
* actions: a move on old cell ``a`` is a move on new cell ``inverse[a]`` (``perm[inverse[a]] = a``);
* policy targets: ``new[..., i] = old[..., perm[i]]``;
* values, rewards, masks, weights and indices are unchanged.

Imports NumPy only.
"""
from __future__ import annotations

import numpy as np


def inverse_permutations(perms: np.ndarray) -> np.ndarray:
    """[P, N] permutations -> their inverses [P, N] (``inv[p][perm[p][i]] = i``)."""
    perms = np.asarray(perms, np.int64)
    inv = np.empty_like(perms)
    rows = np.arange(perms.shape[0])[:, None]
    inv[rows, perms] = np.arange(perms.shape[1])[None, :]
    return inv


def augment_board_batch(batch: dict, perms: np.ndarray, rng: np.random.Generator,
                        choice: np.ndarray = None) -> dict:
    """A copy of a replay batch with one random symmetry per position (see module doc).

    batch: the dict of ``PrioritizedReplay.sample`` with observation [B, H, W, C],
    actions [B, K] and target_policy [B, K+1, A], A = H * W. perms: [P, A] int64.
    choice: optional [B] symmetry ids (default: uniform draws from ``rng``).
    """
    obs = batch["observation"]
    b, h, w = obs.shape[:3]
    perms = np.asarray(perms, np.int64)
    cells = h * w
    if perms.ndim != 2 or perms.shape[1] != cells or batch["target_policy"].shape[-1] != cells:
        raise ValueError(f"symmetries {perms.shape} do not fit a {h}x{w} board with "
                         f"{batch['target_policy'].shape[-1]} actions")
    if choice is None:
        choice = rng.integers(0, perms.shape[0], size=b)
    perm = perms[choice]                                     # [B, A]
    inverse = inverse_permutations(perms)[choice]            # [B, A]
    rows = np.arange(b)[:, None]
    out = dict(batch)
    flat = obs.reshape(b, cells, *obs.shape[3:])
    out["observation"] = flat[rows, perm].reshape(obs.shape)
    if "next_observation" in batch:  # [B, K, H, W, C]: the same symmetry at every step
        nxt = batch["next_observation"]
        flat_next = nxt.reshape(b, nxt.shape[1], cells, *nxt.shape[4:])
        out["next_observation"] = flat_next[rows[:, :, None], np.arange(nxt.shape[1])[None, :, None],
                                            perm[:, None, :]].reshape(nxt.shape)
    out["actions"] = inverse[rows, batch["actions"]].astype(batch["actions"].dtype)
    out["target_policy"] = np.take_along_axis(batch["target_policy"], perm[:, None, :], axis=2)
    return out
