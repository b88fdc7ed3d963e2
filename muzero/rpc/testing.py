"""Small models with hand-checkable outputs, for testing the server and its clients.

``ToyModel`` (numpy) follows the model interface of ``muzero.algorithms.muzero.service`` with
arithmetic simple enough to work out by hand (all values are small integers,
exact in float32):

    input_shape (2,) float32, hidden_shape (2,), num_actions 3
    initial_inference(obs):      h = obs,             reward = 0
    recurrent_inference(h, a):   h' = 2 * h + a,      reward = a
    both: value = h[0] + h[1];  policy_logits = [h[0], h[1], h[0] - h[1]]

Example: obs [1, 5] -> value 6, logits [1, 5, -4]; action 2 -> h [4, 12], reward 2,
value 16, logits [4, 12, -8]; then action 1 -> h [9, 25], reward 1, value 34.

``toy_tf_model()`` builds the same model in TensorFlow (``tf.function``s returning
tf.Tensors), so the TensorFlow cache path can be checked against the same numbers.

Imports numpy only; TensorFlow is imported inside ``toy_tf_model``.
"""
from __future__ import annotations

import numpy as np


class ToyModel:
    input_shape = (2,)
    input_dtype = np.float32
    hidden_shape = (2,)
    num_actions = 3

    @staticmethod
    def _heads(h: np.ndarray, reward: np.ndarray) -> dict:
        logits = np.stack([h[:, 0], h[:, 1], h[:, 0] - h[:, 1]], axis=1)
        return {"value": h[:, 0] + h[:, 1], "reward": reward.astype(np.float32),
                "policy_logits": logits, "hidden_state": h}

    def initial_inference(self, observation: np.ndarray) -> dict:
        """observation [B, 2] float32 -> outputs with hidden_state [B, 2]."""
        h = np.asarray(observation, np.float32)
        return self._heads(h, np.zeros(len(h), np.float32))

    def recurrent_inference(self, hidden_state: np.ndarray, action: np.ndarray) -> dict:
        """hidden_state [B, 2], action [B] int32 -> outputs."""
        a = np.asarray(action).astype(np.float32)
        h = 2.0 * np.asarray(hidden_state, np.float32) + a[:, None]
        return self._heads(h, a)


def toy_path(observation, actions) -> tuple:
    """Plain-Python reference: (hidden, reward, value, logits) after ``actions`` from the
    root ``observation`` (a pair of numbers), per the formulas in the module docstring."""
    h0, h1 = float(observation[0]), float(observation[1])
    reward = 0.0
    for a in actions:
        h0, h1, reward = 2 * h0 + a, 2 * h1 + a, float(a)
    return (h0, h1), reward, h0 + h1, [h0, h1, h0 - h1]


def toy_tf_model():
    """The ToyModel in TensorFlow: same attributes, tf.Tensor outputs."""
    import tensorflow as tf

    class ToyTFModel(tf.Module):
        input_shape = (2,)
        input_dtype = tf.float32
        hidden_shape = (2,)
        num_actions = 3

        @staticmethod
        def _heads(h, reward):
            logits = tf.stack([h[:, 0], h[:, 1], h[:, 0] - h[:, 1]], axis=1)
            return {"value": h[:, 0] + h[:, 1], "reward": reward, "policy_logits": logits,
                    "hidden_state": h}

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def initial_inference(self, observation):
            return self._heads(observation, tf.zeros(tf.shape(observation)[:1]))

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32),
                                      tf.TensorSpec([None], tf.int32)])
        def recurrent_inference(self, hidden_state, action):
            a = tf.cast(action, tf.float32)
            return self._heads(2.0 * hidden_state + a[:, None], a)

    return ToyTFModel()
