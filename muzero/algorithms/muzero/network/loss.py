"""The MuZero training loss over one initial and K recurrent steps, and a train step.

For every sampled position the network is unrolled: the representation on the
observation, then the dynamics with the K stored actions, and the prediction on each of
the K+1 hidden states (``initial`` then K ``recurrent`` calls, batched). At each step t = 0..K the value, reward
(t >= 1) and policy predictions are scored by cross-entropy against the replay's
targets (values and rewards two-hot encoded over their supports):

    loss_b = sum_t scale_t * ( w_v * m^v_t CE(value) + w_r * m^r_t CE(reward) + w_p * m^p_t CE(policy) )
    total  = mean_b(importance_weight_b * loss_b) + weight_decay * sum(v^2) / 2

* ``scale_0 = 1``. For t >= 1, ``recurrent_loss_scaling = "paper"`` uses 1/K (the paper
  scales the gradient of each recurrent step by 1/K; scaling the loss itself gives the
  same gradient). ``"seed"`` uses 1 / max(sum_{t>=1} m_t, 1), per sample and per head.
* Masked positions (past the episode end) contribute nothing, even when their targets
  are garbage: targets there are replaced by zeros before the cross-entropy.
* The reward at index 0 is never scored (nothing precedes the root).
* The hidden state entering every recurrent step has its gradient scaled by
  ``hidden_gradient_scale`` (paper: 0.5).
* New priorities are |value(position 0) - target_value[:, 0]| per sample (unclipped;
  the replay applies its own floor).
* Temporal consistency (EfficientZero; ``consistency_loss_weight`` w_c > 0): with s_k the
  hidden state the dynamics predicts at step k and o_{t+k} the real observation there
  (``batch["next_observation"]``), c_k = -cos(predict(project(s_k)),
  stop_gradient(project(representation(o_{t+k})))) for k = 1..K, masked by
  ``policy_mask[:, k]`` (the observation exists) and scaled like the recurrent terms;
  ``loss_b`` gains w_c * sum_k scale_k m_k c_k. The projection and predictor are the
  network's ``pretrain_head`` (``muzero.algorithms.muzero.network.ssl``); the target representation runs
  every block (no layer skipping) and receives no gradient.
* Weight decay covers the trained variables except the ``pretrain_head``'s.
* Layer skipping: ``n_forward`` (a float scalar tensor, ``networks.draw_n_forward``) is
  passed to every ``initial`` / ``recurrent`` call of the unroll.

``make_train_step`` wraps this with a ``tf.GradientTape``, optional global-norm gradient
clipping and the optimiser update, as one ``tf.function``. ``make_distributed_train_step``
does the same step data-parallel over the R replicas of a ``tf.distribute`` strategy:
replica r takes the r-th contiguous slice of B / R samples and the gradient of its loss
divided by R; the sum of these over the replicas is the single-device gradient (the loss
is a batch mean plus weight decay, see ``muzero.distribute``), and it is clipped and
applied once.

Imports TensorFlow and the network package only.
"""
from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf

from muzero.algorithms.muzero.config import TrainingConfig
from muzero.algorithms.muzero.network.ssl import negative_cosine
from muzero.algorithms.muzero.network.support import tf_logits_to_scalar, tf_scalar_to_two_hot

BATCH_KEYS = ("observation", "actions", "target_value", "target_reward", "target_policy",
              "value_mask", "reward_mask", "policy_mask", "importance_weight")
NEXT_OBSERVATION = "next_observation"     # [B, K, *input_shape], only for the consistency loss


def scale_gradient(x: tf.Tensor, scale: float) -> tf.Tensor:
    """Identity in the forward pass; multiplies the gradient by ``scale`` going back."""
    if scale == 1.0:
        return x
    return x * scale + tf.stop_gradient(x) * (1.0 - scale)


def _cross_entropy(logits: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """[..., N] logits, [..., N] target distribution -> [...] cross-entropy."""
    return -tf.reduce_sum(target * tf.nn.log_softmax(logits, axis=-1), axis=-1)


def _step_scales(mask: tf.Tensor, num_unroll: int, mode: str) -> tf.Tensor:
    """mask [B, K+1] -> per-step loss scales [B, K+1] (1 at step 0)."""
    batch = tf.shape(mask)[0]
    first = tf.ones([batch, 1], tf.float32)
    if num_unroll == 0:
        return first
    if mode == "paper":
        rest = tf.fill([batch, num_unroll], 1.0 / num_unroll)
    else:  # "seed": 1 / max(number of unmasked recurrent steps, 1), per sample
        count = tf.reduce_sum(mask[:, 1:], axis=1, keepdims=True)
        rest = tf.tile(1.0 / tf.maximum(count, 1.0), [1, num_unroll])
    return tf.concat([first, rest], axis=1)


def decayed_variables(network, variables: Optional[Sequence[tf.Variable]] = None) -> list:
    """The variables weight decay covers: ``variables`` (default: all of the network's
    trainable ones) less the ``pretrain_head``'s."""
    variables = list(network.trainable_variables if variables is None else variables)
    head = getattr(network, "pretrain_head", None)
    if head is None:
        return variables
    skip = {v.ref() for v in head.trainable_variables}
    return [v for v in variables if v.ref() not in skip]


def consistency_terms(network, predicted_hidden: Sequence[tf.Tensor],
                      next_observation: tf.Tensor) -> tf.Tensor:
    """Per-step negative cosines c [B, K] of the temporal consistency loss (unmasked).

    predicted_hidden: K tensors [B, *hidden_shape], the dynamics' hidden states at k = 1..K.
    next_observation: [B, K, *input_shape], the real observations at t+1..t+K.
    """
    head = network.pretrain_head
    num_unroll = len(predicted_hidden)
    obs_shape = next_observation.shape[2:]
    flat_obs = tf.reshape(next_observation, tf.concat([[-1], tf.shape(next_observation)[2:]], 0))
    flat_obs.set_shape([None, *obs_shape])
    target = head.target(tf.stop_gradient(network.representation(flat_obs)))    # [B*K, P], b-major
    predicted = tf.stack(list(predicted_hidden), axis=1)                         # [B, K, ...]
    flat_pred = tf.reshape(predicted, tf.concat([[-1], tf.shape(predicted)[2:]], 0))
    flat_pred.set_shape([None, *predicted.shape[2:]])
    online = head.online(flat_pred)                                             # [B*K, P]
    return tf.reshape(negative_cosine(online, target), [-1, num_unroll])


def _checked_targets(network, batch: dict, cfg: TrainingConfig) -> dict:
    """The batch's actions [B, K] int32, masks [B, K+1] f32 (the reward's zero at step 0),
    targets zeroed where masked (so that garbage there cannot leak in) and importance
    weights [B], after checking its keys and shapes; ``num_unroll`` is the static K."""
    consistency = cfg.consistency_loss_weight > 0
    missing = [k for k in BATCH_KEYS + ((NEXT_OBSERVATION,) if consistency else ()) if k not in batch]
    if missing:
        raise KeyError(f"batch lacks {missing}; expected keys {list(BATCH_KEYS)}"
                       + (f" and '{NEXT_OBSERVATION}' (consistency_loss_weight > 0)" if consistency else ""))
    if consistency and getattr(network, "pretrain_head", None) is None:
        raise ValueError("consistency_loss_weight > 0 needs the network's pretrain_head: build it with "
                         "make_network(..., with_ssl_head=True)")
    actions = tf.cast(batch["actions"], tf.int32)                        # [B, K]
    num_unroll = actions.shape[1]
    if num_unroll is None:
        raise ValueError("batch['actions'] must have a static unroll length K, got shape "
                         f"{actions.shape}")
    value_mask = tf.cast(batch["value_mask"], tf.float32)                # [B, K+1]
    reward_mask = tf.cast(batch["reward_mask"], tf.float32)
    reward_mask = tf.concat([tf.zeros_like(reward_mask[:, :1]), reward_mask[:, 1:]], axis=1)
    policy_mask = tf.cast(batch["policy_mask"], tf.float32)
    for name, m in (("value_mask", value_mask), ("target_value", batch["target_value"]),
                    ("target_policy", batch["target_policy"])):
        if m.shape[1] is not None and m.shape[1] != num_unroll + 1:
            raise ValueError(f"batch['{name}'] has {m.shape[1]} positions, expected "
                             f"K+1 = {num_unroll + 1} (shape {m.shape})")
    return dict(
        actions=actions, num_unroll=num_unroll, value_mask=value_mask, reward_mask=reward_mask,
        policy_mask=policy_mask,
        target_value=tf.where(value_mask > 0, tf.cast(batch["target_value"], tf.float32), 0.0),
        target_reward=tf.where(reward_mask > 0, tf.cast(batch["target_reward"], tf.float32), 0.0),
        target_policy=tf.where(policy_mask[..., None] > 0, tf.cast(batch["target_policy"], tf.float32), 0.0),
        weight=tf.cast(batch["importance_weight"], tf.float32))           # [B]


def unroll(network, observation: tf.Tensor, actions: tf.Tensor, hidden_gradient_scale: float,
           n_forward: Optional[tf.Tensor] = None) -> tuple:
    """The representation on the observation, then K dynamics steps with ``actions`` [B, K],
    the gradient into each step's hidden state scaled by ``hidden_gradient_scale``; the
    prediction runs once on all K+1 hidden states stacked ([(K+1) B, ...]: one call with
    K+1 times the batch costs less than K+1 calls, and gives what ``initial`` then K
    ``recurrent`` calls give). Returns value logits [B, K+1, V], policy logits [B, K+1, A],
    reward logits [B, K, R] (None when K = 0) and the K predicted hidden states."""
    hidden = network.encode(observation, n_forward)
    hiddens = [hidden]
    reward_logits = []
    for k in range(actions.shape[1]):
        hidden = scale_gradient(hidden, hidden_gradient_scale)
        hidden, rewards = network.transition(hidden, actions[:, k], n_forward)
        hiddens.append(hidden)
        reward_logits.append(rewards)
    policy_logits, value_logits = network.prediction(tf.concat(hiddens, axis=0))

    def by_sample(x):   # [(K+1) B, N], step-major -> [B, K+1, N]
        return tf.transpose(tf.reshape(x, [len(hiddens), -1, x.shape[-1]]), [1, 0, 2])

    return (by_sample(value_logits), by_sample(policy_logits),
            tf.stack(reward_logits, axis=1) if reward_logits else None, hiddens[1:])


def compute_loss(network, batch: dict, training_config: TrainingConfig,
                 weight_decay_variables: Optional[Sequence[tf.Variable]] = None,
                 n_forward: Optional[tf.Tensor] = None):
    """K-step MuZero loss.

    Args:
      network: a ``MuZeroNetwork`` (with a ``pretrain_head`` when the consistency loss is on).
      batch: the replay's batch: observation [B, *input_shape], actions [B, K] int,
        target_value / target_reward [B, K+1] f32, target_policy [B, K+1, A] f32,
        value_mask / reward_mask / policy_mask [B, K+1] f32, importance_weight [B] f32
        (``index`` [B] may be present and is ignored); with
        ``consistency_loss_weight > 0`` also next_observation [B, K, *input_shape].
      training_config: loss weights, scalings and weight decay.
      weight_decay_variables: variables the L2 penalty covers (default: all trainable);
        the ``pretrain_head``'s are always left out.
      n_forward: None, or the layer-skipping draw (float scalar tensor).

    Returns:
      (total_loss scalar, metrics dict name -> scalar, new_priorities [B] f32).
    """
    cfg = training_config
    consistency = cfg.consistency_loss_weight > 0
    t = _checked_targets(network, batch, cfg)
    num_unroll, value_mask, reward_mask, policy_mask = (t["num_unroll"], t["value_mask"], t["reward_mask"],
                                                        t["policy_mask"])
    value_logits, policy_logits, reward_logits, predicted_hidden = unroll(
        network, batch["observation"], t["actions"], cfg.hidden_gradient_scale, n_forward)

    value_ce = _cross_entropy(value_logits,
                              tf_scalar_to_two_hot(t["target_value"], network.value_support))
    policy_ce = _cross_entropy(policy_logits, t["target_policy"])       # [B, K+1]
    if num_unroll > 0:
        reward_ce = _cross_entropy(
            reward_logits, tf_scalar_to_two_hot(t["target_reward"][:, 1:], network.reward_support))
        reward_ce = tf.concat([tf.zeros_like(reward_ce[:, :1]), reward_ce], axis=1)
    else:
        reward_ce = tf.zeros_like(value_ce)

    mode = cfg.recurrent_loss_scaling
    value_loss = tf.reduce_sum(_step_scales(value_mask, num_unroll, mode)
                               * value_mask * value_ce, axis=1)          # [B]
    reward_loss = tf.reduce_sum(_step_scales(reward_mask, num_unroll, mode)
                                * reward_mask * reward_ce, axis=1)
    policy_loss = tf.reduce_sum(_step_scales(policy_mask, num_unroll, mode)
                                * policy_mask * policy_ce, axis=1)
    per_sample = (cfg.value_loss_weight * value_loss + cfg.reward_loss_weight * reward_loss
                  + cfg.policy_loss_weight * policy_loss)
    losses = {"loss/value": value_loss, "loss/reward": reward_loss, "loss/policy": policy_loss}
    if consistency and num_unroll > 0:
        # The observation at t+k exists exactly where the policy target does.
        step_mask = tf.concat([tf.zeros_like(policy_mask[:, :1]), policy_mask[:, 1:]], axis=1)
        terms = consistency_terms(network, predicted_hidden, batch[NEXT_OBSERVATION])  # [B, K]
        terms = tf.where(step_mask[:, 1:] > 0, terms, 0.0)
        losses["loss/consistency"] = tf.reduce_sum(_step_scales(step_mask, num_unroll, mode)[:, 1:]
                                                   * step_mask[:, 1:] * terms, axis=1)   # [B]
        per_sample = per_sample + cfg.consistency_loss_weight * losses["loss/consistency"]
    elif consistency:
        losses["loss/consistency"] = tf.zeros_like(value_loss)
    loss = tf.reduce_mean(t["weight"] * per_sample)

    variables = decayed_variables(network, weight_decay_variables)
    if cfg.weight_decay > 0 and variables:
        decay = cfg.weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in variables])
    else:
        decay = tf.constant(0.0)
    total = loss + decay

    value_0 = tf.stop_gradient(tf_logits_to_scalar(value_logits[:, 0], network.value_support))
    priorities = tf.abs(value_0 - tf.cast(batch["target_value"][:, 0], tf.float32))
    return total, _metrics(network, t, losses, total, decay, value_0, reward_logits, priorities), priorities


def _metrics(network, t: dict, losses: dict, total, decay, value_0, reward_logits, priorities) -> dict:
    """compute_loss's metrics: the losses (importance-weighted batch means of the per-sample
    ``losses``), and predictions against targets at unmasked positions."""
    def masked_mean(x, m):
        return tf.reduce_sum(x * m) / tf.maximum(tf.reduce_sum(m), 1.0)

    num_unroll, weight = t["num_unroll"], t["weight"]
    predicted_reward = (tf.stack([tf.zeros_like(value_0)] + [
        tf_logits_to_scalar(reward_logits[:, k], network.reward_support)
        for k in range(num_unroll)], axis=1) if num_unroll > 0 else tf.zeros_like(t["value_mask"]))
    metrics = {"loss/total": total}
    metrics.update({name: tf.reduce_mean(weight * loss) for name, loss in losses.items()
                    if name != "loss/consistency"})
    metrics.update({
        "loss/weight_decay": decay,
        "prediction/value": tf.reduce_mean(value_0),
        "target/value": masked_mean(t["target_value"][:, :1], t["value_mask"][:, :1]),
        "prediction/reward": masked_mean(tf.stop_gradient(predicted_reward), t["reward_mask"]),
        "target/reward": masked_mean(t["target_reward"], t["reward_mask"]),
        "priority/mean": tf.reduce_mean(priorities),
    })
    if "loss/consistency" in losses:
        metrics["loss/consistency"] = tf.reduce_mean(weight * losses["loss/consistency"])
    return metrics


def make_train_step(network, optimizer, training_config: TrainingConfig,
                    variables: Optional[Sequence[tf.Variable]] = None, jit_compile: Optional[bool] = None):
    """A ``tf.function(batch, n_forward=None) -> (total_loss, metrics, new_priorities)``
    doing one SGD step (``n_forward``: the layer-skipping draw as a float32 scalar tensor,
    so that new values do not retrace; None runs every block).

    ``variables`` are the ones trained and weight-decayed (default: all of the network's;
    pass ``network.variables_of(["dynamics", "prediction"])`` to freeze the rest). With
    ``gradient_clip_norm > 0`` the gradients are clipped to that global norm.
    ``metrics["gradient_norm"]`` is the global norm before clipping and
    ``metrics["learning_rate"]`` the optimiser's rate for the next step (computed in the
    graph: evaluating a Keras schedule eagerly costs ~0.5 ms a step). ``jit_compile``
    (default ``training_config.jit_compile``) compiles the whole step, optimiser update
    included, with XLA (bench/train_step_bench.py).
    """
    variables = list(network.trainable_variables if variables is None else variables)
    if not variables:
        raise ValueError("make_train_step: no variables to train")
    clip = float(training_config.gradient_clip_norm)

    jit = bool(training_config.jit_compile if jit_compile is None else jit_compile)

    @tf.function(autograph=False, jit_compile=jit)
    def train_step(batch, n_forward=None):
        with tf.GradientTape() as tape:
            total, metrics, priorities = compute_loss(network, batch, training_config,
                                                      weight_decay_variables=variables,
                                                      n_forward=n_forward)
        grads = tape.gradient(total, variables)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        grad_norm = tf.linalg.global_norm(grads)
        if clip > 0:
            grads, _ = tf.clip_by_global_norm(grads, clip, use_norm=grad_norm)
        # The forward values returned (losses, priorities) are computed before the update.
        # Without this edge TensorFlow was free to read some variables inside the layer-
        # skipping tf.cond after apply_gradients had written them: the reported consistency
        # loss then changed by up to 0.2 % from run to run on identical weights and batch.
        with tf.control_dependencies(tf.nest.flatten([total, metrics, priorities])):
            optimizer.apply_gradients(zip(grads, variables))
        metrics = dict(metrics)
        metrics["gradient_norm"] = grad_norm
        metrics["learning_rate"] = tf.cast(tf.convert_to_tensor(optimizer.learning_rate), tf.float32)
        return total, metrics, priorities

    return train_step


def _masked_mean_counts(batch: dict) -> dict:
    """The mask totals sum(m) behind ``compute_loss``'s masked-mean metrics, each
    sum(x * m) / max(sum(m), 1): metric name -> scalar."""
    value_mask = tf.cast(batch["value_mask"], tf.float32)
    rewards = tf.reduce_sum(tf.cast(batch["reward_mask"], tf.float32)[:, 1:])   # index 0 never scored
    return {"target/value": tf.reduce_sum(value_mask[:, :1]), "prediction/reward": rewards,
            "target/reward": rewards}


def make_distributed_train_step(strategy, network, optimizer, training_config: TrainingConfig,
                                variables: Optional[Sequence[tf.Variable]] = None):
    """``make_train_step`` data-parallel over the R replicas of a ``tf.distribute`` strategy:
    a callable ``train_step(batch, n_forward=None) -> (total_loss, metrics, new_priorities)``
    with the same contract and, up to float rounding, the same numbers. ``n_forward`` (the
    layer-skipping draw, one scalar) is given unchanged to every replica, so all replicas
    skip the same blocks.

    ``network``, ``optimizer`` (built on ``variables``) and ``variables`` must have been
    created under ``strategy.scope()``. ``batch`` holds arrays of B samples (NumPy or eager
    tensors), B a multiple of R (ValueError otherwise); replica r gets the contiguous slice
    [r B/R, (r+1) B/R), placed on its device. Each replica computes ``compute_loss`` on its
    slice (total_r = slice mean + weight decay) and the gradient of total_r / R. These are
    summed over the replicas onto the first device: sum_r total_r / R = batch mean + weight
    decay because the slices are equal, so the sum is the single-device gradient of the
    whole batch. Its global norm is clipped to ``gradient_clip_norm`` as on one device, and
    the optimiser applies it once to every copy of the variables. The optimiser is called
    outside the strategy's scope: a Keras 3 optimiser called in a replica context would sum
    the gradients over the replicas a second time, and in the scope's cross-replica context
    it cannot run.

    Metrics: batch means, the total and the weight decay are the mean over the replicas
    (equal slices); the masked means are recombined as sum_r(sum x m) / max(sum_r(sum m), 1);
    ``gradient_norm`` is the norm of the summed gradients before clipping and
    ``learning_rate`` the optimiser's rate for the next step. Priorities are the replicas'
    [B/R] concatenated in slice order: [B]. The step runs as one ``tf.function`` (one trace
    per batch shape). ``training_config.jit_compile`` is refused (ValueError): XLA cannot
    read a replica's mirrored variables from the function placed on the first device
    (TensorFlow's "tf.Variable on a different device" limitation).
    """
    if training_config.jit_compile:
        raise ValueError("training.jit_compile applies to one learner device; XLA cannot compile the "
                         "multi-device step (set training.jit_compile=false or --learner_devices=1)")
    variables = list(network.trainable_variables if variables is None else variables)
    if not variables:
        raise ValueError("make_distributed_train_step: no variables to train")
    clip = float(training_config.gradient_clip_norm)
    replicas = strategy.num_replicas_in_sync
    devices = list(strategy.extended.worker_devices)
    sum_op, mean_op = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN

    def replica_step(batch, n_forward=None):
        with tf.GradientTape() as tape:
            total, metrics, priorities = compute_loss(network, batch, training_config,
                                                      weight_decay_variables=variables,
                                                      n_forward=n_forward)
            scaled = total / replicas
        grads = tape.gradient(scaled, variables)
        grads = [tf.zeros_like(v) if g is None else g for g, v in zip(grads, variables)]
        counts = _masked_mean_counts(batch)
        metrics = {k: v * tf.maximum(counts[k], 1.0) if k in counts else v for k, v in metrics.items()}
        return total, metrics, counts, priorities, grads

    @tf.function(autograph=False)
    def step(batch, n_forward=None):
        args = (batch,) if n_forward is None else (batch, n_forward)
        total, metrics, counts, priorities, grads = strategy.run(replica_step, args=args)
        with tf.device(devices[0]):
            grads = [strategy.reduce(sum_op, g, axis=None) for g in grads]
            grad_norm = tf.linalg.global_norm(grads)
            if clip > 0:
                grads, _ = tf.clip_by_global_norm(grads, clip, use_norm=grad_norm)
        with tf.control_dependencies(tf.nest.flatten([total, metrics, priorities])):
            optimizer.apply_gradients(zip(grads, variables))
        out = {}
        for name, value in metrics.items():
            if name in counts:
                out[name] = (strategy.reduce(sum_op, value, axis=None)
                             / tf.maximum(strategy.reduce(sum_op, counts[name], axis=None), 1.0))
            else:
                out[name] = strategy.reduce(mean_op, value, axis=None)
        out["gradient_norm"] = grad_norm
        out["learning_rate"] = tf.cast(tf.convert_to_tensor(optimizer.learning_rate), tf.float32)
        priorities = tf.concat(strategy.experimental_local_results(priorities), axis=0)
        return strategy.reduce(mean_op, total, axis=None), out, priorities

    def train_step(batch: dict, n_forward=None):
        size = len(batch["observation"])
        if size % replicas:
            raise ValueError(f"a batch of {size} samples does not split evenly over {replicas} replicas: "
                             f"use a batch size that is a multiple of {replicas}")
        per_replica = size // replicas

        def replica_slice(context):
            r = context.replica_id_in_sync_group
            with tf.device(devices[r]):
                return {k: tf.identity(v[r * per_replica:(r + 1) * per_replica]) for k, v in batch.items()}

        values = strategy.experimental_distribute_values_from_function(replica_slice)
        return step(values) if n_forward is None else step(values, tf.convert_to_tensor(n_forward, tf.float32))

    return train_step
