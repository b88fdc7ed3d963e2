"""Sample-time MuZero targets from stored trajectories (Numba kernels + batch assembly).

For a sampled position ``i`` of an episode whose stored steps are ``0..L-1`` (``L``
grows while the episode is open), and unroll steps ``k = 0..K`` at ``t = i + k``:

* value (``n = td_steps``; ``n = inf`` for Monte-Carlo, td_steps = -1). With
  ``s(u) = +1`` if ``to_play[u] == to_play[t]`` else ``-1`` (always +1 in one-player
  envs) and ``b = t + n``:

    - ``t < L`` and ``b < L``:  z_t = sum_{u=t}^{b-1} g^(u-t) s(u) r_u + g^n s(b) v_b
    - ``t < L``, ``b >= L``, episode **terminated** after ``L-1``:
        z_t = sum_{u=t}^{L-1} g^(u-t) s(u) r_u                   (nothing after the end)
    - ``t < L``, ``b >= L``, episode **truncated** or still **open**: bootstrap from the
      last stored root value, ``z_t = sum_{u=t}^{L-2} g^(u-t) s(u) r_u + g^(L-1-t) s(L-1) v_{L-1}``
      (``v_{L-1}`` already accounts for ``r_{L-1}``, so that reward is not added again)
    - ``t >= L``: terminated -> 0 with value_mask 1 (absorbing); otherwise masked (0).

  ``n`` may differ between samples (one n for all unrolled steps of a sample): the
  replay shortens it for old data (``TargetConfig.td_shrink_every_steps``).

* reward at ``k >= 1``: ``r_{t-1}`` (the reward after ``a_{t-1}``, mover's point of
  view, never sign-flipped), mask 1 while ``t-1 < L``; index 0 is 0 and masked. Past
  a **terminated** episode's end (``t-1 >= L``) the target is 0 with mask 1 (absorbing,
  as in the MuZero pseudocode), so that the model learns that nothing follows the end
  and a search that runs past a game's end does not back up invented rewards; past a
  truncated or open end it is masked.
* policy: the stored visit distribution at ``t``, mask 1 while ``t < L``; zeros past.
* actions ``a_{i..i+K-1}``; past the stored end they are drawn uniformly at random
  from ``[0, A)`` with the replay's generator (reported -1 by the kernel).

* next observations (only when the consistency loss asks, ``gather_next_inputs``): the
  network input at ``t = i + k`` for ``k = 1..K`` while ``t < L`` (the slots of the policy
  targets), all zeros past the stored end. Frames stay stored once; the stacks are
  assembled from the store's rows like the input at ``i``.

The value kernel does not read root values: it returns the reward part, the slot
``b`` it bootstraps from (-1 for none) and the coefficient ``g^m s(b)`` so that
``z = partial + coef * v[b]`` can use stored root values or fresher ones from the
reanalyse hook.

Imports NumPy, Numba and ``muzero.observation``; never TensorFlow.
"""
from __future__ import annotations

import numba
import numpy as np

from muzero.observation import NO_ACTION

_END_TERMINATED = 1


@numba.njit(cache=True)
def unroll_targets(slots, slot_segment, seg_first_slot, seg_length, seg_next, seg_end,
                   actions, rewards, to_play, num_unroll_steps, td_steps, discount):
    """Target parts for B sampled slots (see module doc for the formulas).

    Args:
      slots: [B] int64 slots of sampled positions.
      slot_segment: [C] int32; seg_*: [C] segment table (see ``store``).
      actions: [C] int32; rewards: [C] float32; to_play: [C] int8.
      num_unroll_steps: K. discount: g.
      td_steps: [B] int64, each sample's n (-1 for Monte-Carlo); every unrolled step of
        sample b uses td_steps[b].

    Returns:
      unroll_actions [B, K] int32 (-1 past the stored end),
      value_partial [B, K+1] float64, boot_slot [B, K+1] int64 (-1: no bootstrap),
      boot_coef [B, K+1] float64, value_mask [B, K+1] float32,
      reward [B, K+1] float32, reward_mask [B, K+1] float32,
      policy_slot [B, K+1] int64 (-1: none), policy_mask [B, K+1] float32.
    """
    c = actions.shape[0]
    nb = slots.shape[0]
    k1 = num_unroll_steps + 1
    unroll_actions = np.full((nb, num_unroll_steps), -1, np.int32)
    value_partial = np.zeros((nb, k1), np.float64)
    boot_slot = np.full((nb, k1), -1, np.int64)
    boot_coef = np.zeros((nb, k1), np.float64)
    value_mask = np.zeros((nb, k1), np.float32)
    reward = np.zeros((nb, k1), np.float32)
    reward_mask = np.zeros((nb, k1), np.float32)
    policy_slot = np.full((nb, k1), -1, np.int64)
    policy_mask = np.zeros((nb, k1), np.float32)
    for b in range(nb):
        r = np.int64(slot_segment[slots[b]])
        o = (slots[b] - seg_first_slot[r]) % c
        stored = True
        end_kind = 0
        prev_slot = -1
        for k in range(k1):
            if not stored:
                if prev_slot >= 0:  # t == L: the last reward is still a target
                    reward[b, k] = rewards[prev_slot]
                    reward_mask[b, k] = 1.0
                    prev_slot = -1
                elif end_kind == _END_TERMINATED:
                    reward_mask[b, k] = 1.0  # absorbing: reward 0 ...
                if end_kind == _END_TERMINATED:
                    value_mask[b, k] = 1.0  # ... and value 0
                continue
            s = (seg_first_slot[r] + o) % c
            policy_slot[b, k] = s
            policy_mask[b, k] = 1.0
            if k < num_unroll_steps:
                unroll_actions[b, k] = actions[s]
            if k >= 1:
                reward[b, k] = rewards[prev_slot]
                reward_mask[b, k] = 1.0
            prev_slot = s
            # n-step value from t = (r, o).
            acc = 0.0
            disc = 1.0
            j = 0
            rr = r
            oo = o
            player = to_play[s]
            n = td_steps[b]
            while True:
                su = (seg_first_slot[rr] + oo) % c
                sign = 1.0 if to_play[su] == player else -1.0
                if j == n:
                    boot_slot[b, k] = su
                    boot_coef[b, k] = disc * sign
                    break
                last = oo + 1 >= seg_length[rr] and seg_next[rr] < 0
                if last and seg_end[rr] == _END_TERMINATED:
                    acc += disc * sign * rewards[su]
                    break
                if last:  # truncated or open: bootstrap from the last stored root value
                    boot_slot[b, k] = su
                    boot_coef[b, k] = disc * sign
                    break
                acc += disc * sign * rewards[su]
                disc *= discount
                j += 1
                if oo + 1 < seg_length[rr]:
                    oo += 1
                else:
                    rr = seg_next[rr] % c
                    oo = 0
            value_partial[b, k] = acc
            value_mask[b, k] = 1.0
            # Advance t by one step along the episode.
            if o + 1 < seg_length[r]:
                o += 1
            elif seg_next[r] >= 0:
                r = seg_next[r] % c
                o = 0
            else:
                stored = False
                end_kind = seg_end[r]
    return (unroll_actions, value_partial, boot_slot, boot_coef, value_mask, reward,
            reward_mask, policy_slot, policy_mask)


@numba.njit(cache=True)
def stack_history(slots, slot_segment, seg_first_slot, seg_length, seg_prev, seg_tail,
                  actions, stack_frames):
    """Frame slots and leading actions for stacked inputs at B positions.

    Args:
      slots: [B] int64 positions. seg_prev: [C] int64 segment ids (-1 or < seg_tail: absent).
      actions: [C] int32. stack_frames: S.

    Returns:
      frame_slots [B, S] int64, oldest first; C (the all-zero row) before the stored start.
      frame_actions [B, S] int32: the action that led to each frame; NO_ACTION when none.
    """
    c = actions.shape[0]
    nb = slots.shape[0]
    frame_slots = np.full((nb, stack_frames), c, np.int64)
    frame_actions = np.full((nb, stack_frames), NO_ACTION, np.int32)
    for b in range(nb):
        r = np.int64(slot_segment[slots[b]])
        o = (slots[b] - seg_first_slot[r]) % c
        for m in range(stack_frames - 1, -1, -1):
            frame_slots[b, m] = (seg_first_slot[r] + o) % c
            if o > 0:
                o -= 1
            else:
                pid = seg_prev[r]
                if pid < 0 or pid < seg_tail:
                    break
                r = pid % c
                o = seg_length[r] - 1
            frame_actions[b, m] = actions[(seg_first_slot[r] + o) % c]
    return frame_slots, frame_actions


def gather_inputs(store, slots: np.ndarray, stack_frames: int, is_image: bool):
    """Raw inputs for positions: what must be copied while the store is locked.

    Returns (frames, frame_actions): for image envs ``[B, S, *frame]`` and ``[B, S]``;
    otherwise ``[B, *obs_shape]`` and None.
    """
    if not is_image:
        return store.observations[slots], None
    frame_slots, frame_actions = stack_history(
        slots, store.slot_segment, store.seg_first_slot, store.seg_length, store.seg_prev,
        store.seg_tail, store.actions, stack_frames)
    return store.observations[frame_slots], frame_actions


def unroll_policy_slots(store, slots: np.ndarray, num_unroll_steps: int) -> np.ndarray:
    """[B, K+1] int64: the slots whose policy targets a batch row at each of ``slots`` ([B]
    int64) trains on (t, t+1, .., t+K along the episode), -1 past its stored end."""
    return unroll_targets(
        slots, store.slot_segment, store.seg_first_slot, store.seg_length, store.seg_next,
        store.seg_end, store.actions, store.rewards, store.to_play, num_unroll_steps,
        np.ones(len(slots), np.int64), 1.0)[7]


def build_targets(store, slots: np.ndarray, num_unroll_steps: int, td_steps,
                  discount: float, rng: np.random.Generator) -> dict:
    """Targets for sampled slots ([B] int64), without the value bootstrap applied.

    ``td_steps``: one n for every sample (an int) or [B] ints, one per sample.

    Returns a dict: actions [B, K] int32 (random past the end), value_partial,
    boot_slot, boot_coef [B, K+1], the three masks, target_reward [B, K+1] f32 and
    target_policy [B, K+1, A] f32.
    """
    (actions, value_partial, boot_slot, boot_coef, value_mask, reward, reward_mask,
     policy_slot, policy_mask) = unroll_targets(
        slots, store.slot_segment, store.seg_first_slot, store.seg_length, store.seg_next,
        store.seg_end, store.actions, store.rewards, store.to_play, num_unroll_steps,
        np.broadcast_to(np.asarray(td_steps, np.int64), slots.shape).copy(), discount)
    pad = actions < 0
    if pad.any():
        actions[pad] = rng.integers(0, store.descriptor.num_actions, size=int(pad.sum()))
    policy = store.policies[np.maximum(policy_slot, 0)]  # [B, K+1, A]
    policy *= policy_mask[..., None]
    return dict(actions=actions, value_partial=value_partial, boot_slot=boot_slot,
                boot_coef=boot_coef, value_mask=value_mask, target_reward=reward,
                reward_mask=reward_mask, target_policy=policy, policy_mask=policy_mask,
                policy_slot=policy_slot)


def gather_next_inputs(store, slots: np.ndarray, policy_slot: np.ndarray, stack_frames: int,
                       is_image: bool):
    """Raw inputs of the real observations at t+1..t+K (copy them while the store is locked).

    Args:
      slots: [B] int64 sampled slots. policy_slot: [B, K+1] from ``build_targets``
        (the slot at t = i + k, -1 past the stored end).

    Returns (frames, frame_actions) for the B*K positions, b-major (row b*K + k-1 is
    step k of sample b): image envs ``[B*K, S, *frame]`` and ``[B*K, S]``, otherwise
    ``[B*K, *obs_shape]`` and None; rows past the stored end are zeros (frame actions
    ``NO_ACTION``).
    """
    following = policy_slot[:, 1:]                                      # [B, K]
    present = (following >= 0).reshape(-1)
    rows = np.where(following >= 0, following, slots[:, None]).reshape(-1).astype(np.int64)
    frames, frame_actions = gather_inputs(store, rows, stack_frames, is_image)
    frames[~present] = 0
    if frame_actions is not None:
        frame_actions[~present] = NO_ACTION
    return frames, frame_actions


def finish_values(parts: dict, boot_values: np.ndarray) -> np.ndarray:
    """z = partial + coef * v at the bootstrap slot; boot_values [B, K+1] -> [B, K+1] f32."""
    has_boot = parts["boot_slot"] >= 0
    value = parts["value_partial"] + np.where(has_boot, parts["boot_coef"] * boot_values, 0.0)
    return (value * parts["value_mask"]).astype(np.float32)
