"""A short random-policy probe of an env's reward scale.

Gymnasium no longer declares reward ranges (``Env.reward_range`` is gone in 1.x), so
the learner's env-derived defaults (``muzero.algorithms.muzero.defaults.fit_to_env``)
measure one instead: :func:`probe_rewards` plays uniformly random legal actions in a
small batch of envs for a bounded number of steps and reports what it saw.

The probe is deterministic for a deterministic env: it uses its own fixed seed, not the
run's, so runs of one env with different ``--seed`` values get the same network shapes
(and a resumed run the same shapes as before).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional

import numpy as np

PROBE_SEED = 20_261_130


@dataclasses.dataclass(frozen=True)
class RewardProbe:
    """What a random policy saw.

    Attributes:
      env_steps: env steps played (summed over the batch).
      episodes: episodes that ended (terminated or truncated) during the probe.
      max_abs_reward: the largest |reward| of one step (0.0 when every reward was 0).
      min_reward, max_reward: extremes of one step's reward.
      mean_return: mean undiscounted return of the finished episodes, or None if none ended.
      seconds: wall time of the probe.
      typical_abs_reward: mean |reward| over the steps that did not end an episode (what
        an ordinary step pays, apart from a crash penalty or goal bonus on the last step),
        or None when every step ended an episode.
    """

    env_steps: int
    episodes: int
    max_abs_reward: float
    min_reward: float
    max_reward: float
    mean_return: Optional[float]
    seconds: float
    typical_abs_reward: Optional[float] = None


def probe_rewards(name: str, options: Optional[dict] = None, *, num_envs: int = 8, max_env_steps: int = 5_000,
                  max_seconds: float = 10.0, seed: int = PROBE_SEED) -> RewardProbe:
    """Plays random legal actions in ``num_envs`` envs until ``max_env_steps`` env steps or
    ``max_seconds`` have passed (at least one batch step), and summarises the rewards.

    Discrete actions are drawn uniformly among the legal ones; continuous actions uniformly
    within the box. Non-finite rewards raise ValueError naming the env.
    """
    import envs

    options = dict(options or {})
    batch = envs.make_batch(name, num_envs, seed=seed, **options)
    desc = batch.descriptor
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    steps = episodes = 0
    lo, hi = np.inf, -np.inf
    mid_abs_sum, mid_steps = 0.0, 0
    finished: list = []
    try:
        legal = batch.reset().legal_mask
        while True:
            if desc.action_kind == "continuous":
                low = np.asarray(desc.action_low, np.float32)
                high = np.asarray(desc.action_high, np.float32)
                actions = rng.uniform(low, high, size=(num_envs,) + tuple(desc.action_shape)).astype(np.float32)
            elif legal is not None:
                # One uniform draw per env among its legal actions (Gumbel-max over a mask).
                scores = np.where(np.asarray(legal, bool), rng.random((num_envs, desc.num_actions)), -1.0)
                actions = scores.argmax(axis=1).astype(np.int32)
            else:
                actions = rng.integers(0, desc.num_actions, size=num_envs).astype(np.int32)
            step = batch.step(actions)
            rewards = np.asarray(step.reward, np.float64)
            if not np.all(np.isfinite(rewards)):
                raise ValueError(f"env {name!r} returned a non-finite reward {rewards[~np.isfinite(rewards)][0]} "
                                 "under a random policy")
            lo, hi = min(lo, float(rewards.min())), max(hi, float(rewards.max()))
            done = np.asarray(step.done, bool)
            mid_abs_sum += float(np.abs(rewards[~done]).sum())
            mid_steps += int((~done).sum())
            finished.extend(np.asarray(step.episode_return, np.float64)[done].tolist())
            episodes += int(done.sum())
            legal = step.legal_mask
            steps += num_envs
            if steps >= max_env_steps or time.perf_counter() - start >= max_seconds:
                break
    finally:
        batch.close()
    return RewardProbe(env_steps=steps, episodes=episodes, max_abs_reward=max(abs(lo), abs(hi)),
                       min_reward=lo, max_reward=hi,
                       mean_return=float(np.mean(finished)) if finished else None,
                       seconds=time.perf_counter() - start,
                       typical_abs_reward=mid_abs_sum / mid_steps if mid_steps else None)
