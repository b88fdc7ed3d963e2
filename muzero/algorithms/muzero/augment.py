"""Symmetry augmentation of sampled batches (``TrainingConfig.augment_symmetries``).

Board games (:func:`augment_board_batch`):

A board game whose actions are the cells of an H x W board and whose observations are
``(H, W, C)`` planes is unchanged by some permutations of the cells (tic-tac-toe: the 8
rotations and reflections of the square, ``envs.board_symmetries``). Each sampled
position gets one of them at random, applied to the whole unroll so that the
trajectory stays a legal game: with ``perm`` mapping board ``b`` to ``b[perm]``,

* observation: cell ``i`` of the new planes is cell ``perm[i]`` of the old ones;
* actions: a move on old cell ``a`` is a move on new cell ``inverse[a]`` (``perm[inverse[a]] = a``);
* policy targets: ``new[..., i] = old[..., perm[i]]``;
* values, rewards, masks, weights and indices are unchanged.

Mirrored vector envs (:func:`augment_mirror_batch`): an env registered with a ``mirror``
action permutation (``envs.mirror_actions``; CartPole's swaps left and right) is unchanged
when its observation is negated and every action ``a`` becomes ``mirror[a]``. Each sampled
position is mirrored with probability 1/2, over its whole unroll:

* observations (and the consistency loss's next observations) are negated;
* actions: ``a`` becomes ``mirror[a]``;
* policy targets: ``new[..., mirror[a]] = old[..., a]``, i.e. ``new = old[..., mirror]``
  (the mirror is its own inverse);
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


def augment_mirror_batch(batch: dict, mirror: np.ndarray, rng: np.random.Generator,
                         flip: np.ndarray = None) -> dict:
    """A copy of a replay batch with about half of its positions mirrored (see module doc).

    batch: the dict of ``PrioritizedReplay.sample`` with observation [B, D], actions [B, K]
    and target_policy [B, K+1, A]. mirror: [A] int64, its own inverse. flip: optional [B]
    bools, the positions to mirror (default: fair coin flips from ``rng``).
    """
    mirror = np.asarray(mirror, np.int64)
    obs = batch["observation"]
    b = obs.shape[0]
    if mirror.ndim != 1 or batch["target_policy"].shape[-1] != mirror.size:
        raise ValueError(f"a mirror of {mirror.size} actions does not fit a batch with "
                         f"{batch['target_policy'].shape[-1]} actions")
    if flip is None:
        flip = rng.random(b) < 0.5
    flip = np.asarray(flip, bool)
    sign = np.where(flip, -1.0, 1.0).astype(obs.dtype)
    out = dict(batch)
    out["observation"] = obs * sign.reshape((b,) + (1,) * (obs.ndim - 1))
    if "next_observation" in batch:   # [B, K, D]
        nxt = batch["next_observation"]
        out["next_observation"] = nxt * sign.astype(nxt.dtype).reshape((b,) + (1,) * (nxt.ndim - 1))
    actions = batch["actions"]
    out["actions"] = np.where(flip[:, None], mirror[actions], actions).astype(actions.dtype)
    policy = batch["target_policy"]
    out["target_policy"] = np.where(flip[:, None, None], policy[..., mirror], policy)
    return out
