"""What does a CartPole model value along its own greedy episodes, and over the cart's position?

    python bench/cartpole_value_probe.py --export_dir=runs/cartpole/export/step-N [--episodes=3]

Plays ``--episodes`` greedy episodes of the exported SavedModel (its run's search, no
noise) on Gymnasium's CartPole-v1, then prints the network's value (initial inference,
no search) at the start, the middle and 30, 20, 10, 5, 3, 2 and 1 steps before each
episode's end, with the cart's position and velocity there. Then the value over a grid of
states (x from 0 to 2.39, velocity 0, 0.5 and 1, the pole upright and still). A model
that sees where the cart is values the last steps of an episode that runs off the track
near the discounted rewards left (1 on the last step). The last line is machine-readable:
``last_step_value=<mean over episodes> flat_grid=<1 when the velocity-0 row from x = 0.3 on
varies by less than 0.1>``.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cartpole_endings import cartpole_player, parse_args  # noqa: E402  (same folder)


def main() -> None:
    args = parse_args(__doc__, 3, "greedy episodes to trace")
    import gymnasium as gym
    player = cartpole_player(args.export_dir, 1)
    rng = np.random.default_rng(args.seed)

    def values(observations: np.ndarray) -> np.ndarray:
        return player._call(player._initial, observation=observations.astype(np.float32))["value"]

    last = []
    for i in range(args.episodes):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=args.seed + i)
        trace = []
        while True:
            action = player.act(obs[None].astype(np.float32), np.ones((1, 2), bool), np.zeros(1, np.int8), rng)
            trace.append(obs.copy())
            obs, _, terminated, truncated, _ = env.step(int(action[0]))
            if terminated or truncated:
                break
        trace = np.array(trace, np.float32)
        v, n = values(trace), len(trace)
        points = [t for t in (0, n // 2, n - 30, n - 20, n - 10, n - 5, n - 3, n - 2, n - 1) if t >= 0]
        print(f"episode {i}: {n} steps; value (x, velocity) at step from the end: " + ", ".join(
            f"{t - n}: {v[t]:.1f} ({trace[t, 0]:+.2f}, {trace[t, 1]:+.2f})" for t in points), flush=True)
        last.append(float(v[-1]))
    xs = np.linspace(0.0, 2.39, 9)
    flat = False
    for velocity in (0.0, 0.5, 1.0):
        v = values(np.array([[x, velocity, 0.0, 0.0] for x in xs]))
        print(f"velocity {velocity}: " + ", ".join(f"x={x:.2f}: {val:.1f}" for x, val in zip(xs, v)))
        if velocity == 0.0:
            flat = bool(np.ptp(v[1:]) < 0.1)   # constant at the printed precision
    print(f"last_step_value={np.mean(last):.2f} flat_grid={int(flat)}")


if __name__ == "__main__":
    main()
