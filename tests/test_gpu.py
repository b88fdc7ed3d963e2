"""What changes on a GPU: the network runs there and computes what it computes on the CPU.

Marked ``gpu``: skipped, with the reason, where TensorFlow sees no GPU (or too few).
"""
import numpy as np
import pytest
import tensorflow as tf

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import NetworkConfig, TrainingConfig
from muzero.algorithms.muzero.learning import make_optimizer
from muzero.algorithms.muzero.network import make_network, make_train_step

CARTPOLE = EnvDescriptor("cartpole", (4,), "float32", 2)
BREAKOUT = EnvDescriptor("minatar", (10, 10, 4), "uint8", 3, kind="board")


def _outputs(device: str, descriptor, observation):
    with tf.device(device):
        net = make_network(descriptor, NetworkConfig(conv_channels=8, conv_num_blocks=1, conv_downsample=False), 1,
                           seed=3)
        out = net.initial_inference(observation)
        nxt = net.recurrent_inference(out["hidden_state"], np.arange(len(observation), dtype=np.int32) % 2)
    return out, nxt


@pytest.mark.gpu
@pytest.mark.parametrize("descriptor", [CARTPOLE, BREAKOUT], ids=["mlp", "conv"])
def test_inference_on_the_gpu_matches_the_cpu(descriptor):
    rng = np.random.default_rng(0)
    shape = (16, *descriptor.observation_shape)
    observation = (rng.integers(0, 2, shape).astype(np.uint8) if descriptor.kind == "board"
                   else rng.normal(size=shape).astype(np.float32))
    cpu, cpu_next = _outputs("/CPU:0", descriptor, observation)
    gpu, gpu_next = _outputs("/GPU:0", descriptor, observation)
    assert "GPU" in gpu["value"].device
    for a, b in ((cpu, gpu), (cpu_next, gpu_next)):
        for key in ("value", "reward", "policy_logits"):
            np.testing.assert_allclose(b[key].numpy(), a[key].numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_a_training_step_on_the_gpu_matches_the_cpu():
    rng = np.random.default_rng(1)
    k, b = 3, 32
    policy = rng.random((b, k + 1, 2)).astype(np.float32)
    batch = {"observation": rng.normal(size=(b, 4)).astype(np.float32),
             "actions": rng.integers(0, 2, (b, k)).astype(np.int32),
             "target_value": rng.uniform(-1, 1, (b, k + 1)).astype(np.float32),
             "target_reward": rng.uniform(-1, 1, (b, k + 1)).astype(np.float32),
             "target_policy": policy / policy.sum(-1, keepdims=True),
             "value_mask": np.ones((b, k + 1), np.float32), "reward_mask": np.ones((b, k + 1), np.float32),
             "policy_mask": np.ones((b, k + 1), np.float32), "importance_weight": np.ones(b, np.float32)}
    losses = {}
    for device in ("/CPU:0", "/GPU:0"):
        with tf.device(device):
            net = make_network(CARTPOLE, NetworkConfig(), 1, seed=5)
            optimizer = make_optimizer(TrainingConfig())
            optimizer.build(net.trainable_variables)
            step = make_train_step(net, optimizer, TrainingConfig())
            losses[device] = [float(step(batch)[0]) for _ in range(3)]
    np.testing.assert_allclose(losses["/GPU:0"], losses["/CPU:0"], rtol=1e-3)
