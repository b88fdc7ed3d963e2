"""SavedModel export of a MuZero network, usable without this package.

``export_saved_model(network, path)`` writes one SavedModel directory with two
signatures and a JSON description beside the model files:

    path/saved_model.pb, path/variables/...      the SavedModel
    path/muzero_export.json                      what an evaluator needs to drive it

Signatures (batch dimension ``None``, shapes taken from the network, never hard-coded):

    initial_inference(observation [B, *input_shape] input_dtype)
    recurrent_inference(hidden_state [B, *hidden_shape] float32, action [B] int32)

both returning a dict with ``value [B]``, ``reward [B]``, ``policy_logits [B, A]``,
``value_logits [B, V]``, ``reward_logits [B, R]``, ``hidden_state [B, *hidden_shape]``.
Load with ``tf.saved_model.load(path).signatures["initial_inference"](observation=...)``.
The exported functions are never XLA-compiled, whatever the network's setting, so the
model loads on any TensorFlow build. Only the representation, dynamics and prediction
are saved: a ``pretrain_head`` (projection + predictor, a training aid) is left out.

Imports TensorFlow and the network package only.
"""
from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

from muzero.algorithms.muzero.network.networks import OUTPUT_KEYS, PARTS
from muzero.algorithms.muzero.network.support import support_description

EXPORT_JSON = "muzero_export.json"
FORMAT_VERSION = 1


class _ExportModule(tf.Module):
    """Holds the network's parts (so their variables are saved) and two plain functions."""

    def __init__(self, network):
        super().__init__(name="muzero_export")
        self.representation = network.representation
        self.dynamics = network.dynamics
        self.prediction = network.prediction
        self.initial_inference = tf.function(network.initial,
                                             input_signature=[network.observation_spec])
        self.recurrent_inference = tf.function(
            network.recurrent, input_signature=[network.hidden_spec, network.action_spec])


def export_description(network) -> dict:
    """The ``muzero_export.json`` content for ``network`` (plain JSON types)."""
    eps = network.value_support.eps
    return {
        "format_version": FORMAT_VERSION,
        "kind": network.kind,
        "observation": {
            "shape": list(network.input_shape),
            "dtype": network.input_dtype.name,
            "batch_dimension": "first, any size",
            "scaling": "divided by 255 inside the model" if network.kind == "image"
                       else "used as given",
            "layout": ("channels last: T*C frame channels oldest to newest, then T action "
                       "planes (muzero.observation)") if network.kind == "image" else None,
        },
        "num_actions": network.num_actions,
        "hidden_shape": list(network.hidden_shape),
        "action": {"dtype": "int32", "shape": ["batch"]},
        "value_support": support_description(network.value_support),
        "reward_support": support_description(network.reward_support),
        "transform": {
            "name": "h",
            "forward": "h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x",
            "inverse": "x = sign(y) * (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)",
            "eps": eps,
            "decode": "softmax(logits) . linspace(low, high, num_bins), then the inverse "
                      "when use_transform is true",
        },
        "value_point_of_view": "player to move",
        "reward_point_of_view": "player who made the move",
        "signatures": {
            "initial_inference": {
                "inputs": {"observation": [None, *network.input_shape]},
                "outputs": list(OUTPUT_KEYS),
            },
            "recurrent_inference": {
                "inputs": {"hidden_state": [None, *network.hidden_shape], "action": [None]},
                "outputs": list(OUTPUT_KEYS),
            },
        },
        "parts": sorted(PARTS),
        "num_parameters": int(sum(np.prod(v.shape) for v in network.variables_of(PARTS))),
    }


def export_saved_model(network, path: str) -> str:
    """Writes the SavedModel and ``muzero_export.json`` into directory ``path``; returns it."""
    os.makedirs(path, exist_ok=True)
    module = _ExportModule(network)
    signatures = {
        "initial_inference": module.initial_inference.get_concrete_function(),
        "recurrent_inference": module.recurrent_inference.get_concrete_function(),
    }
    tf.saved_model.save(module, path, signatures=signatures)
    with open(os.path.join(path, EXPORT_JSON), "w") as f:
        json.dump(export_description(network), f, indent=2, sort_keys=True)
    return path
