"""How do a CartPole model's greedy episodes end? Cart out of bounds, pole fallen, or 500 steps.

    python bench/cartpole_endings.py --export_dir=runs/cartpole/export/step-N [--episodes=20]

Plays the exported SavedModel greedily (the search settings of its run.json, no noise) on
Gymnasium's own CartPole-v1 (independent of the project's batched physics), one env per
episode, all at once. For each episode prints its length, how it ended (``cart_out``:
|x| > 2.4; ``pole_fell``: |theta| > 12 degrees; ``truncated``: 500 steps), the largest
|x| reached and the model's value at the first and the last step. The last line is
machine-readable: ``episodes=<n> cart_out=<k> pole_fell=<k> truncated=<k> mean_return=<r>``.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

X_LIMIT = 2.4  # CartPole-v1 terminates beyond this |x|; any other termination is the pole


def parse_args(doc: str, episodes: int, episodes_help: str) -> argparse.Namespace:
    """--export_dir, --episodes, --seed: the flags of the CartPole export scripts."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export_dir", required=True, help="an export of a cartpole run (holds run.json)")
    parser.add_argument("--episodes", type=int, default=episodes, help=f"{episodes_help} (default {episodes})")
    parser.add_argument("--seed", type=int, default=100, help="episode i resets with seed + i (default 100)")
    args = parser.parse_args()
    if args.episodes < 1:
        raise SystemExit("--episodes must be >= 1")
    return args


def cartpole_player(export_dir: str, num_envs: int):
    """A greedy SavedModelPlayer for ``num_envs`` envs, with the search of the export's run."""
    from muzero.algorithms.muzero.evaluator import SavedModelPlayer, load_run, search_config_from_run
    run = load_run(export_dir)
    if run is None or run.get("env") != "cartpole":
        raise SystemExit(f"{export_dir} is not an export of a cartpole run (no run.json naming env cartpole)")
    return SavedModelPlayer(export_dir, search_config_from_run(run), num_envs)


def main() -> None:
    args = parse_args(__doc__, 20, "episodes, played at once")
    import gymnasium as gym
    n = args.episodes
    player = cartpole_player(args.export_dir, n)
    envs = [gym.make("CartPole-v1") for _ in range(n)]
    obs = np.stack([env.reset(seed=args.seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
    legal, to_play = np.ones((n, 2), bool), np.zeros(n, np.int8)
    rng = np.random.default_rng(args.seed)
    alive = np.ones(n, bool)
    length, max_x = np.zeros(n, int), np.zeros(n)
    first_value, last_value = np.zeros(n), np.zeros(n)
    endings = {"cart_out": 0, "pole_fell": 0, "truncated": 0}
    while alive.any():
        # The player searches every env; finished ones keep their last observation and are ignored.
        actions = player.act(obs, legal, to_play, rng)
        values = player.last_root_value
        for i in np.flatnonzero(alive):
            if length[i] == 0:
                first_value[i] = values[i]
            last_value[i] = values[i]
            o, _, terminated, truncated, _ = envs[i].step(int(actions[i]))
            length[i] += 1
            max_x[i] = max(max_x[i], abs(o[0]))
            obs[i] = o
            if terminated or truncated:
                alive[i] = False
                how = "truncated" if not terminated else "cart_out" if abs(o[0]) > X_LIMIT else "pole_fell"
                endings[how] += 1
                print(f"episode {i}: {length[i]} steps, {how} (x={o[0]:+.2f}, theta={o[2]:+.3f}), max |x| "
                      f"{max_x[i]:.2f}, value first {first_value[i]:.1f} last {last_value[i]:.1f}", flush=True)
    print(f"episodes={n} cart_out={endings['cart_out']} pole_fell={endings['pole_fell']} "
          f"truncated={endings['truncated']} mean_return={length.mean():.1f}")


if __name__ == "__main__":
    main()
