"""Pretraining then fine-tuning against training from scratch, per seed, plus a linear probe.

    python bench/pretrain_finetune.py --env=minatar:Breakout --seeds=3 [--minutes=30]
        [--pretrain_steps=1500] [--probe_steps=1250] [--probe_horizon=10] [-- extra learner flags]

For each seed it runs three learner processes (``bench/learn.py``'s ``train``):

1. **from scratch**: ``--max_seconds=<minutes>`` with one greedy evaluation actor;
2. **pretraining**: ``--pretrain --max_train_steps=<pretrain_steps>`` (random-policy actors,
   self-supervised objective; docs/PRETRAINING.md);
3. **fine-tuning**: ``--init_checkpoint=<the pretraining run>`` for the scratch run's
   wall time minus the pretraining run's (equal wall time, pretraining counted).

The comparison, pretraining frames and time counted:

- ``final_return_scratch`` R: the scratch run's evaluation return at the end (mean of its
  last 20 evaluation episodes, as bench/learn.py);
- ``env_steps_ratio``: (pretraining env steps + the fine-tuning env steps at which its
  evaluation return first reached R) / the scratch run's env steps at its end; inf when the
  fine-tuning run never reached R. A ratio <= 0.7 means pretraining saves 30 % of the env steps;
- ``final_return_finetune``: the fine-tuning run's return at the end (equal wall time).

Linear probe (before the runs' comparison is printed): from ``--probe_steps`` steps of 16
uniformly random envs (seeded apart from training), each position's network input
(frame stack + action planes) is labelled with whether the episode scores (reward > 0)
within the next ``--probe_horizon`` steps (1: the next step only; in Breakout that is
linearly visible in the raw frame, the ball next to a brick, so it tells representations
nothing apart; positions whose horizon runs past the collected steps are dropped). A linear classifier (weighted ridge regression to +-1 labels, both classes
weighted equally) is fitted on 12 envs' positions and scored on the other 4 by balanced
accuracy (0.5 = chance), for three feature sets: the raw input, the hidden state of a
randomly initialised representation, and the hidden state of the pretrained one.

Last lines (medians over seeds; per-seed lines come first):
    probe_balanced_accuracy_raw=, probe_balanced_accuracy_random_init=,
    probe_balanced_accuracy_pretrained=
    final_return_scratch=, final_return_finetune=, env_steps_ratio=
    goal_seeds=<k>/<n>      seeds whose env_steps_ratio <= 0.7
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learn import ROOT, reached, records, train  # noqa: E402

sys.path.insert(0, ROOT)
import numpy as np  # noqa: E402

GOAL_RATIO = 0.7
PROBE_ENVS, PROBE_TRAIN_ENVS = 16, 12


def final_eval(recs: list) -> tuple:
    """(evaluation return, env steps) of the last record with >= 20 evaluation episodes."""
    for r in reversed(recs):
        if r.get("return_eval") is not None and r.get("episodes_eval", 0) >= 20:
            return float(r["return_eval"]), float(r["env_steps"])
    return float("nan"), float(recs[-1]["env_steps"]) if recs else float("nan")


def final_counters(logdir: str) -> tuple:
    """(training wall seconds, env steps) at a run's end, from its last checkpoint (the
    last metrics record can be up to one progress interval older)."""
    from muzero.checkpoints import read_state, resolve_checkpoint
    state = read_state(resolve_checkpoint(logdir))
    return float(state["elapsed_s"]), float(state["env_steps"])


def ridge_probe(features: np.ndarray, labels: np.ndarray, train: np.ndarray, l2: float = 1.0) -> float:
    """Balanced accuracy on the rows not in ``train`` of a linear classifier fitted on the
    ``train`` rows: weighted ridge regression of +-1 labels on standardised features plus a
    bias, each class's rows weighted 1 / (2 * its count) so both classes count alike.

    Args:
      features: [N, D] float; labels: [N] bool; train: [N] bool. Both classes must occur
        in the training and in the held-out rows.
    """
    x = np.asarray(features, np.float64).reshape(len(features), -1)
    y = np.asarray(labels, bool)
    train = np.asarray(train, bool)
    test = ~train
    for name, rows in (("training", train), ("held-out", test)):
        if y[rows].all() or not y[rows].any():
            raise ValueError(f"the {name} rows hold only one class: the probe needs both")
    mean, std = x[train].mean(0), x[train].std(0)
    x = (x - mean) / np.where(std > 0, std, 1.0)
    x = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    xt, yt = x[train], np.where(y[train], 1.0, -1.0)
    w = np.where(y[train], 0.5 / y[train].sum(), 0.5 / (~y[train]).sum())
    penalty = l2 * np.eye(x.shape[1]) / len(xt)
    penalty[-1, -1] = 0.0                      # the bias is not shrunk
    beta = np.linalg.solve(xt.T @ (w[:, None] * xt) + penalty, xt.T @ (w * yt))
    predicted = x[test] @ beta > 0
    truth = y[test]
    return 0.5 * (float(np.mean(predicted[truth])) + float(np.mean(~predicted[~truth])))


def scores_ahead(scores: np.ndarray, done: np.ndarray, horizon: int) -> np.ndarray:
    """[T - horizon + 1, E] bool: whether the step from position t or one of the next
    ``horizon - 1`` steps of the same episode scores. ``scores`` [T, E]: the step taken from
    position t scored; ``done`` [T, E]: that step ended the episode (the next position
    starts a new one)."""
    scores, done = np.asarray(scores, bool), np.asarray(done, bool)
    n = len(scores) - horizon + 1
    if n < 1:
        raise ValueError(f"{len(scores)} steps hold no position with a full horizon of {horizon}")
    label = scores[:n].copy()
    alive = np.ones_like(label)
    for j in range(1, horizon):
        alive &= ~done[j - 1:j - 1 + n]        # no episode end among steps t .. t+j-1
        label |= alive & scores[j:j + n]
    return label


def probe_data(env: str, settings, steps: int, seed: int) -> tuple:
    """(inputs [T, E, *input_shape] uint8, scores [T, E] bool, done [T, E] bool) from
    uniformly random play of PROBE_ENVS envs for ``steps`` steps each."""
    import envs
    from muzero.observation import FrameHistory
    batch = envs.make_batch(env, PROBE_ENVS, seed=seed)
    d = batch.descriptor
    image = d.kind == "image"
    history = FrameHistory(PROBE_ENVS, d.observation_shape, settings.config.targets.stack_frames,
                           d.num_actions) if image else None
    rng = np.random.default_rng(seed)
    out = batch.reset()
    if image:
        history.start(out.observation, np.ones(PROBE_ENVS, bool))
    inputs, scores, ends = [], [], []
    for _ in range(steps):
        inputs.append(history.network_input() if image else np.array(out.observation))
        logits = np.where(out.legal_mask, rng.random(out.legal_mask.shape), -1.0)
        actions = logits.argmax(1)
        out = batch.step(actions)
        scores.append(out.reward > 0)
        ends.append(out.done.copy())
        if image:
            history.push(out.observation, actions)
            if out.done.any():
                history.start(out.observation, out.done)
    batch.close()
    return np.stack(inputs), np.stack(scores), np.stack(ends)


def probe(env: str, pre_logdir: str, steps: int, seed: int, horizon: int) -> dict:
    """Balanced accuracies of the three feature sets (see the module docstring)."""
    import envs
    import tensorflow as tf
    from muzero.checkpoints import restore_parts
    from muzero import algorithms
    from muzero.algorithms.muzero.network import make_network
    with open(os.path.join(pre_logdir, "config.json")) as f:
        settings = algorithms.settings_from_dict(json.load(f))
    inputs, scores, done = probe_data(env, settings, steps, seed=100_000 + seed)
    labels = scores_ahead(scores, done, horizon)                 # [n, E]
    n = len(labels)
    inputs = inputs[:n].reshape(n * PROBE_ENVS, *inputs.shape[2:])
    scores = labels.reshape(-1)
    train_rows = np.tile(np.arange(PROBE_ENVS), n) < PROBE_TRAIN_ENVS
    print(f"  probe: {len(inputs)} positions, {int(scores.sum())} score within {horizon} steps", flush=True)
    d = envs.describe(env)
    results = {"raw": ridge_probe(inputs.astype(np.float32), scores, train_rows)}
    for name in ("random_init", "pretrained"):
        net = make_network(d, settings.config.network, settings.config.targets.stack_frames, seed=seed)
        if name == "pretrained":
            restore_parts(pre_logdir, {"representation": net.representation})
        hidden = np.concatenate([net.initial_inference(tf.constant(inputs[i:i + 1024]))["hidden_state"].numpy()
                                 for i in range(0, len(inputs), 1024)])
        results[name] = ridge_probe(hidden, scores, train_rows)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="minatar:Breakout")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first_seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="wall time of the scratch run; pretraining + fine-tuning get the same in total")
    parser.add_argument("--pretrain_steps", type=int, default=1500, help="training steps of the pretraining run")
    parser.add_argument("--probe_steps", type=int, default=1250, help="steps of each of the 16 probe envs")
    parser.add_argument("--probe_horizon", type=int, default=10,
                        help="the probe's label: the episode scores within this many steps")
    parser.add_argument("--root", default=os.path.join(ROOT, "runs", "bench"), help="where logdirs go")
    parser.add_argument("extra", nargs="*", help="extra learner flags for every run, after --")
    args = parser.parse_args()
    if min(args.seeds, args.pretrain_steps, args.probe_steps, args.probe_horizon) < 1 or args.minutes <= 0:
        parser.error("--seeds, --pretrain_steps, --probe_steps and --probe_horizon must be >= 1 and --minutes > 0")
    if args.probe_horizon > args.probe_steps:
        parser.error("--probe_horizon must be <= --probe_steps")
    name = args.env.replace(":", "_").replace("/", "_")
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        dirs = {k: os.path.join(args.root, f"pf-{name}-{k}-seed{seed}") for k in ("scratch", "pre", "ft")}
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
        train(args.env, dirs["pre"], seed, args.minutes,
              ["--pretrain", f"--max_train_steps={args.pretrain_steps}", *args.extra])
        pre_seconds, pre_steps = final_counters(dirs["pre"])
        if pre_seconds >= args.minutes * 60:
            raise SystemExit(f"pretraining took {pre_seconds:.0f} s, the whole --minutes budget: "
                             "lower --pretrain_steps or raise --minutes")
        accuracy = probe(args.env, dirs["pre"], args.probe_steps, seed, args.probe_horizon)
        train(args.env, dirs["scratch"], seed, args.minutes, ["--num_eval_actors=1", "--export=false", *args.extra])
        train(args.env, dirs["ft"], seed, args.minutes - pre_seconds / 60.0,
              [f"--init_checkpoint={dirs['pre']}", "--num_eval_actors=1", "--export=false", *args.extra])
        scratch, ft = records(dirs["scratch"]), records(dirs["ft"])
        r_scratch, steps_scratch = final_eval(scratch)
        r_ft, _ = final_eval(ft)
        ratio = (pre_steps + reached(ft, r_scratch)[1]) / steps_scratch
        rows.append(dict(accuracy, scratch=r_scratch, ft=r_ft, ratio=ratio))
        print(f"seed={seed} pretraining={pre_seconds:.0f}s/{pre_steps:.0f} env steps "
              f"final_return_scratch={r_scratch:.2f} ({steps_scratch:.0f} env steps) "
              f"final_return_finetune={r_ft:.2f} env_steps_ratio={ratio:.3f} "
              f"probe raw={accuracy['raw']:.3f} random_init={accuracy['random_init']:.3f} "
              f"pretrained={accuracy['pretrained']:.3f}", flush=True)
    for key in ("raw", "random_init", "pretrained"):
        print(f"probe_balanced_accuracy_{key}={statistics.median(r[key] for r in rows):.4f}")
    print(f"final_return_scratch={statistics.median(r['scratch'] for r in rows):.3f}")
    print(f"final_return_finetune={statistics.median(r['ft'] for r in rows):.3f}")
    print(f"env_steps_ratio={statistics.median(r['ratio'] for r in rows):.4f}")
    print(f"goal_seeds={sum(r['ratio'] <= GOAL_RATIO for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
