"""What a MuZero agent gets wrong on a single-player env: its values against the returns it
actually gets, and what its search sees, for every export of a run.

    python bench/diagnose_values.py --logdir=runs/bench/control/gym_Acrobot-v1-seed0 [--episodes=10]

Plays each export (``<logdir>/export/step-<N>``, oldest first) greedily for ``--episodes``
episodes (single-player envs: vector ones, and image ones such as ``minatar:`` ids, whose
frames it stacks as the evaluator does) and prints one line per export:

- ``ended``: the share of episodes that terminated (reached the goal) rather than being cut
  off by the time limit, and ``len``: their mean length;
- ``value_mae`` / ``value_bias`` / ``value_corr``: the network's value of each visited
  observation against its discounted Monte-Carlo return (the run's discount; a truncated
  episode's tail is bootstrapped with the network's value of its last observation), as
  mean absolute error, mean (value - return) and correlation;
- ``q_spread``: the mean over steps of the largest minus the smallest Q value among the
  root's visited actions (how much the search tells the actions apart), and
  ``visit_entropy``: the entropy of the root's visit distribution over log(A) (1: uniform);
- ``return``: the mean episode return.

Also prints, from the run's metrics.jsonl, the training episodes' mean length and return at
the time of each export, so a learning failure can be read off: values that all sit at the
same level (no Q spread) while training episodes never end mean the agent has not yet seen
where returns differ; values far from the returns mean the model has not learned them.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def discounted_returns(rewards: list, discount: float, tail: float) -> np.ndarray:
    """G_t = r_t + discount G_{t+1}, with G_T = tail (0 after termination)."""
    out = np.zeros(len(rewards), np.float64)
    g = tail
    for t in range(len(rewards) - 1, -1, -1):
        g = rewards[t] + discount * g
        out[t] = g
    return out


def diagnose(export_dir: str, episodes: int, num_envs: int, seed: int) -> dict:
    import envs
    from muzero.algorithms.muzero.evaluator import SavedModelPlayer, load_run, search_config_from_run
    from muzero.observation import FrameHistory
    run = load_run(export_dir)
    search = search_config_from_run(run)
    batch = envs.make_batch(run["env"], num_envs, seed=seed, **run.get("env_options", {}))
    if batch.descriptor.two_player:
        raise SystemExit("diagnose_values plays single-player envs only")
    player = SavedModelPlayer(export_dir, search, num_envs)
    history = (FrameHistory(num_envs, batch.descriptor.observation_shape, int(run.get("stack_frames", 1)),
                            batch.descriptor.num_actions) if batch.descriptor.is_image else None)
    rng = np.random.default_rng(seed)
    a = batch.descriptor.num_actions
    open_eps = [dict(values=[], rewards=[]) for _ in range(num_envs)]
    done, spreads, entropies = [], [], []
    step = batch.reset()
    if history is not None:
        history.start(step.observation, np.ones(num_envs, bool))
    while len(done) < episodes:
        actions = player.act(step.observation if history is None else history.network_input(),
                             step.legal_mask, step.to_play, rng)
        result = player.last_result
        visits = result.visit_counts.astype(np.float64)
        q = np.where(visits > 0, result.root_q, np.nan)
        spreads.extend(np.nanmax(q, axis=1) - np.nanmin(q, axis=1))
        p = visits / np.maximum(visits.sum(axis=1, keepdims=True), 1)
        entropies.extend(-np.sum(np.where(p > 0, p * np.log(np.maximum(p, 1e-12)), 0.0), axis=1) / np.log(a))
        nxt = batch.step(actions)
        final = nxt.final_observation if nxt.final_observation is not None else nxt.observation
        if history is not None:   # the ended episodes' last inputs, then their new episodes' first
            history.push(final, actions)
            final = history.network_input()
            history.start(nxt.observation, nxt.done)
        for i in range(num_envs):
            open_eps[i]["values"].append(float(player.last_root_value[i]))
            open_eps[i]["rewards"].append(float(nxt.reward[i]))
            if nxt.episode_length[i] >= 0:
                tail = 0.0
                if not nxt.terminated[i]:   # cut off: bootstrap from the value of the last observation
                    out = player._call(player._initial, observation=final[i][None].astype(player.input_dtype))
                    tail = float(out["value"][0])
                g = discounted_returns(open_eps[i]["rewards"], search.discount, tail)
                done.append(dict(values=np.array(open_eps[i]["values"]), returns=g, ended=bool(nxt.terminated[i]),
                                 total=float(np.sum(open_eps[i]["rewards"])), length=len(g)))
                open_eps[i] = dict(values=[], rewards=[])
        step = nxt
    batch.close()
    done = done[:episodes]
    values = np.concatenate([e["values"] for e in done])
    returns = np.concatenate([e["returns"] for e in done])
    corr = float(np.corrcoef(values, returns)[0, 1]) if values.std() > 0 and returns.std() > 0 else float("nan")
    return {"ended": float(np.mean([e["ended"] for e in done])), "len": float(np.mean([e["length"] for e in done])),
            "value_mae": float(np.mean(np.abs(values - returns))), "value_bias": float(np.mean(values - returns)),
            "value_corr": corr, "q_spread": float(np.nanmean(spreads)), "visit_entropy": float(np.mean(entropies)),
            "return": float(np.mean([e["total"] for e in done]))}


def training_at(logdir: str, env_steps: int) -> str:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.isfile(path):
        return ""
    last = None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("env_steps", 0) > env_steps:
                break
            last = r
    if not last or last.get("return_train") is None:
        return ""
    return f" | training episodes: return {last['return_train']:.1f} length {last.get('length_train') or 0:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--num_envs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=30_000)
    args = parser.parse_args()
    root = os.path.join(args.logdir, "export")
    if not os.path.isdir(root):
        raise SystemExit(f"{args.logdir} has no export folder (train with --export_every_env_steps=N)")
    names = sorted((n for n in os.listdir(root) if n.startswith("step-")), key=lambda n: int(n[5:]))
    for name in names:
        path = os.path.join(root, name)
        with open(os.path.join(path, "run.json")) as f:
            env_steps = int(json.load(f).get("env_steps", 0))
        d = diagnose(path, args.episodes, args.num_envs, args.seed)
        print(f"{name} env_steps={env_steps} ended={d['ended']:.2f} len={d['len']:.0f} return={d['return']:.1f} "
              f"value_mae={d['value_mae']:.2f} value_bias={d['value_bias']:.2f} value_corr={d['value_corr']:.2f} "
              f"q_spread={d['q_spread']:.3f} visit_entropy={d['visit_entropy']:.2f}"
              + training_at(args.logdir, env_steps), flush=True)


if __name__ == "__main__":
    main()
