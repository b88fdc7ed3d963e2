"""How much of a trained MLP MuZero network is still alive: LayerNorm gains and live ReLUs.

    python bench/network_health.py --logdir=runs/bench/few30_wd0/muzero-cartpole-seed0 [--states=512]

Restores the run's latest checkpoint (``--checkpoint`` for another ckpt-<step> directory or
logdir), plays ``--states`` env steps with uniformly random actions from the run's env
(seeded by ``--seed``), and feeds the states through the network: the representation, the
dynamics with every action, the prediction heads on the hidden states. For every hidden
layer of every MLP (``Dense -> LayerNorm -> ReLU``) it prints the mean |LayerNorm gain|
(1 at initialisation), the share of units that are positive for at least one state ("live";
a unit negative for every state passes no gradient and is dead until something else moves
its input) and the mean share active per state; then the spread over states of the
prior's probabilities and of the value. A head whose gains went to ~0 outputs the same
thing for every state.

Written when a CartPole run that never learned (training return at a random policy's for
8 minutes) turned out to have a policy head whose weights and gains had all shrunk to ~1e-4,
the work of the L2 penalty under Adam (docs/NETWORK.md, "Weight decay with Adam"). Vector envs
(MLP torsos) only. Last lines: ``<mlp>_live=<share>`` and ``<mlp>_gain=<mean>`` per MLP (its
first hidden layer), then ``prior_std=`` and ``value_std=``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def random_states(env: str, env_options: dict, num_actions: int, num_states: int, seed: int) -> np.ndarray:
    """[num_states, D] observations of ``env`` under uniformly random legal actions (the
    pretraining actors' ``RandomPolicy``)."""
    import envs
    from muzero.algorithms.muzero.acting import RandomPolicy
    batch = envs.make_batch(env, 8, seed=seed, **env_options)
    policy = RandomPolicy(num_actions, np.random.default_rng(seed))
    step, states = batch.reset(), []
    while sum(len(s) for s in states) < num_states:
        states.append(np.asarray(step.observation, np.float32))
        step = batch.step(policy.act(step.legal_mask)[0])
    return np.concatenate(states)[:num_states]


def layer_report(mlp, x) -> list:
    """[(gain, live, active)] per hidden layer of a ``layers.MLP`` fed ``x`` [N, in]."""
    import tensorflow as tf
    rows = []
    for dense, norm in zip(mlp.hidden, mlp.norms):
        pre = norm(dense(x))
        positive = pre.numpy() > 0
        rows.append((float(np.mean(np.abs(norm.scale.numpy()))), float(positive.any(axis=0).mean()),
                     float(positive.mean())))
        x = tf.nn.relu(pre)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", required=True, help="a MuZero run's --logdir (holds config.json)")
    parser.add_argument("--checkpoint", default="", help="ckpt-<step> directory (default: the run's latest)")
    parser.add_argument("--states", type=int, default=512, help="random-policy env steps to probe with (default 512)")
    parser.add_argument("--seed", type=int, default=0, help="env and action seed (default 0)")
    args = parser.parse_args()
    if args.states < 1:
        raise SystemExit(f"--states={args.states} must be >= 1")
    path = os.path.join(args.logdir, "config.json")
    if not os.path.isfile(path):
        raise SystemExit(f"--logdir={args.logdir!r}: no config.json there; pass a MuZero run's --logdir")
    with open(path) as f:
        run = json.load(f)
    if run.get("algo", "muzero") != "muzero":
        raise SystemExit(f"--logdir={args.logdir!r} is a {run['algo']} run; this script reads MuZero networks")

    import tensorflow as tf
    import envs
    from muzero.algorithms.muzero.config import NetworkConfig
    from muzero.config import from_dict
    from muzero.checkpoints import restore_parts
    from muzero.algorithms.muzero.network.networks import PARTS, make_network

    env, env_options = run["env"], run.get("env_options", {})
    descriptor = envs.describe(env, **env_options)
    if descriptor.kind != "vector":
        raise SystemExit(f"{env} is a {descriptor.kind} env; this script reads the MLP torsos of vector envs")
    network = make_network(descriptor, from_dict(NetworkConfig, run["config"]["network"]), 1,
                           seed=int(run.get("seed", 0)))
    summary = restore_parts(args.checkpoint or args.logdir, {p: getattr(network, p) for p in PARTS})
    print(f"restored {summary.source}")

    states = tf.constant(random_states(env, env_options, descriptor.num_actions, args.states, args.seed))
    root = network.initial(states)
    hidden = root["hidden_state"]
    actions = [tf.fill([args.states], a) for a in range(descriptor.num_actions)]
    dynamics_in = tf.concat([network.dynamics.torso_input(hidden, a) for a in actions], axis=0)
    next_hidden = tf.concat([network.recurrent(hidden, a)["hidden_state"] for a in actions], axis=0)
    mlps = {"representation": (network.representation.torso, states),
            "dynamics": (network.dynamics.torso, dynamics_in),
            "reward_head": (network.dynamics.reward_head, next_hidden),
            "policy_head": (network.prediction.policy_head, hidden),
            "value_head": (network.prediction.value_head, hidden)}
    first = {}
    for name, (mlp, x) in mlps.items():
        for i, (gain, live, active) in enumerate(layer_report(mlp, x)):
            print(f"{name:15s} layer {i}: |gain| {gain:.3f}  live units {live:.2f}  active per state {active:.2f}")
            first.setdefault(name, (gain, live))
    prior = tf.nn.softmax(root["policy_logits"]).numpy()
    value = root["value"].numpy()
    print(f"prior: mean {np.round(prior.mean(axis=0), 3).tolist()}, std over states {np.round(prior.std(axis=0), 4).tolist()}")
    print(f"value: mean {float(value.mean()):.2f}, std over states {float(value.std()):.2f}")
    for name, (gain, live) in first.items():
        print(f"{name}_live={live:.3f}")
        print(f"{name}_gain={gain:.3f}")
    print(f"prior_std={float(prior.std(axis=0).max()):.4g}")
    print(f"value_std={float(value.std()):.4g}")


if __name__ == "__main__":
    main()
