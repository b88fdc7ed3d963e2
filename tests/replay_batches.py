"""Replay-shaped training batches for tests that drive a MuZero ``Trainer`` directly."""
import numpy as np


def replay_batch(seed: int, size: int, num_unroll_steps: int) -> dict:
    """A CartPole-shaped batch (observations [size, 4], 2 actions) over K = num_unroll_steps
    whose episodes end at different steps, so that its rows hold different numbers of
    unmasked targets (masked-mean metrics must weigh them)."""
    k = num_unroll_steps
    rng = np.random.default_rng(seed)
    ends = rng.integers(1, k + 2, size)                               # positions < end are inside
    mask = (np.arange(k + 1)[None, :] < ends[:, None]).astype(np.float32)
    policy = rng.random((size, k + 1, 2)).astype(np.float32)
    return {
        "observation": rng.normal(size=(size, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, (size, k)).astype(np.int32),
        "target_value": rng.uniform(-3, 3, (size, k + 1)).astype(np.float32),
        "target_reward": rng.uniform(-1, 1, (size, k + 1)).astype(np.float32),
        "target_policy": policy / policy.sum(-1, keepdims=True),
        "value_mask": mask, "reward_mask": mask.copy(), "policy_mask": mask.copy(),
        "importance_weight": rng.uniform(0.3, 1.0, size).astype(np.float32),
        "index": np.arange(size, dtype=np.int64),
    }
