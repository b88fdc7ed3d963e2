"""How often simple kinds of play reach a sparse-reward task's goal, with no learning at all.

    python bench/exploration_play.py --env=gym:MountainCar-v0
    python bench/exploration_play.py --env=gym:Acrobot-v1 --episodes=200

Plays the Gymnasium task with each behaviour below and prints, per behaviour, the share of
episodes that end by reaching the goal (``terminated``; an episode cut by the step limit is
``truncated``) and the mean and best return:

- a uniformly random action every step (what a search over flat values plays);
- a random action held for k steps, for each k of ``--hold`` (temporally extended exploration);
- uniformly random steps plus ez-greedy runs, for each epsilon of ``--ez``: a step not in a run
  starts one with probability epsilon, a random action held for n ~ zeta(2) steps (n <= 100);
- ``--nets`` random fixed networks (obs scaled to [-1, 1] by the observation bounds, one
  tanh layer of 16 units with biases, argmax over actions; ``--net_episodes`` episodes each):
  deterministic play that depends on the state, what a DQN's argmax over an untrained Q
  network does; also how many of the networks reach the goal at all;
- each constant action.

The answer says whether a learner's first episodes can see any return but the failure one,
before anything is learned. Discrete-action Gymnasium tasks with finite observation bounds
only.
"""
from __future__ import annotations

import argparse

import numpy as np


def play(env, policy, episodes: int, rng: np.random.Generator) -> tuple:
    """(share of episodes reaching the goal, mean return, best return)."""
    goals, returns = 0, []
    for _ in range(episodes):
        obs, _ = env.reset(seed=int(rng.integers(2 ** 31)))
        state, total, t = {}, 0.0, 0
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy(obs, t, state))
            total += float(reward)
            t += 1
            if terminated or truncated:
                break
        goals += bool(terminated)
        returns.append(total)
    return goals / episodes, float(np.mean(returns)), float(np.max(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="gym:MountainCar-v0", help="gym:<id> of a discrete-action task")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per behaviour")
    parser.add_argument("--hold", default="4,10,25", help="comma-separated hold lengths k")
    parser.add_argument("--ez", default="0.1,0.3", help="comma-separated ez-greedy epsilons")
    parser.add_argument("--nets", type=int, default=30)
    parser.add_argument("--net_episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.env.startswith("gym:"):
        parser.error(f"--env={args.env!r}: expected gym:<id>")
    if min(args.episodes, args.nets, args.net_episodes) < 1:
        parser.error("--episodes, --nets and --net_episodes must be >= 1")
    try:
        holds = [int(k) for k in args.hold.split(",") if k]
        epsilons = [float(e) for e in args.ez.split(",") if e]
    except ValueError:
        parser.error(f"--hold={args.hold!r} / --ez={args.ez!r}: expected comma-separated numbers")
    if any(k < 1 for k in holds) or any(not 0 <= e <= 1 for e in epsilons):
        parser.error("--hold lengths must be >= 1 and --ez epsilons in [0, 1]")
    import gymnasium as gym
    env = gym.make(args.env[len("gym:"):])
    if not isinstance(env.action_space, gym.spaces.Discrete):
        parser.error(f"--env={args.env}: needs discrete actions, has {env.action_space}")
    low, high = env.observation_space.low, env.observation_space.high
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        parser.error(f"--env={args.env}: needs finite observation bounds to scale by")
    n = int(env.action_space.n)
    rng = np.random.default_rng(args.seed)
    rows = [("uniformly random action each step", play(env, lambda o, t, s: int(rng.integers(n)), args.episodes, rng))]

    def held(k):
        def policy(obs, t, state):
            if t % k == 0:
                state["a"] = int(rng.integers(n))
            return state["a"]
        return policy
    rows += [(f"random action held {k} steps", play(env, held(k), args.episodes, rng)) for k in holds]

    lengths = np.arange(1, 101)
    zeta_cdf = np.cumsum(lengths ** -2.0) / np.sum(lengths ** -2.0)

    def ez(epsilon):
        def policy(obs, t, state):
            if t == 0:
                state["left"] = 0
            if state["left"] == 0 and rng.random() < epsilon:
                state["a"] = int(rng.integers(n))
                state["left"] = int(np.searchsorted(zeta_cdf, rng.random(), side="right")) + 1
            if state["left"] > 0:
                state["left"] -= 1
                return state["a"]
            return int(rng.integers(n))
        return policy
    rows += [(f"uniform steps plus ez-greedy runs, epsilon {e:g}", play(env, ez(e), args.episodes, rng))
             for e in epsilons]

    nets = []
    for _ in range(args.nets):
        w1, b1, w2 = rng.normal(size=(low.size, 16)), rng.normal(size=16), rng.normal(size=(16, n))

        def net(obs, t, state, w1=w1, b1=b1, w2=w2):
            x = 2.0 * (np.asarray(obs, np.float64).ravel() - low.ravel()) / (high - low).ravel() - 1.0
            return int(np.argmax(np.tanh(x @ w1 + b1) @ w2))
        nets.append(play(env, net, args.net_episodes, rng))
    rows.append((f"{args.nets} random fixed networks (argmax); {sum(g > 0 for g, _, _ in nets)} reach the goal at all",
                 (float(np.mean([g for g, _, _ in nets])), float(np.mean([m for _, m, _ in nets])),
                  max(b for _, _, b in nets))))
    rows += [(f"constant action {a}", play(env, lambda o, t, s, a=a: a, max(1, args.episodes // 10), rng))
             for a in range(n)]
    print(f"| {args.env}: behaviour | reaches the goal | mean return | best return |")
    print("|---|---|---|---|")
    for name, (goal, mean, best) in rows:
        print(f"| {name} | {100 * goal:.0f} % | {mean:.1f} | {best:.0f} |")


if __name__ == "__main__":
    main()
