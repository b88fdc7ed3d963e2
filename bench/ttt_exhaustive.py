"""Exhaustive check of an exported tic-tac-toe model against perfect play.

    python bench/ttt_exhaustive.py --export_dir=runs/bench/tictactoe/export/step-N [--simulations=S]

Three figures, none of them sampled:

* ``losing_lines``: the agent (greedy search, as in ``muzero.eval``) plays every line
  the perfect player can choose (all its optimal moves at every turn), as each side;
  printed as lost lines / all lines per side. 100 sampled games against
  ``MinimaxPlayer`` draw from exactly these lines.
* ``search_mistakes``: over every reachable position where the mover's choice matters
  (some legal move is worse than the best one), the share where the greedy search
  picks a move whose perfect-play value is below the best.
* ``value_sign_errors`` / ``prior_mistakes``: the network's own root value rounded
  to {-1, 0, 1} vs the perfect-play value, and its prior's argmax vs the best moves,
  over the same positions (no search).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reachable_positions():
    """All non-terminal positions reachable from the empty board: (boards [N, 9], to_play [N])."""
    from envs.tictactoe import EMPTY, winner
    seen = {}
    frontier = [(tuple([EMPTY] * 9), 0)]
    while frontier:
        nxt = []
        for board, to_play in frontier:
            if (board, to_play) in seen:
                continue
            seen[(board, to_play)] = True
            for cell in range(9):
                if board[cell] != EMPTY:
                    continue
                child = list(board)
                child[cell] = to_play
                if winner(np.array(child)) >= 0 or EMPTY not in child:
                    continue
                nxt.append((tuple(child), 1 - to_play))
        frontier = nxt
    keys = list(seen)
    return np.array([k[0] for k in keys], np.int64), np.array([k[1] for k in keys], np.int8)


class Agent:
    """Greedy search moves of an export for batches of (board, to_play)."""

    def __init__(self, export_dir: str, simulations, **search_changes):
        from muzero.algorithms.muzero.evaluator import load_run, search_config_from_run
        self.export_dir = export_dir
        config = search_config_from_run(load_run(export_dir))
        if simulations:
            config = dataclasses.replace(config, num_simulations=simulations)
        config = dataclasses.replace(config, **search_changes)
        self.config = config
        self._players = {}

    def _player(self, n):
        from muzero.algorithms.muzero.evaluator import SavedModelPlayer
        if n not in self._players:
            self._players[n] = SavedModelPlayer(self.export_dir, self.config, n)
        return self._players[n]

    @staticmethod
    def observations(boards, to_play):
        from envs.tictactoe import observation_planes
        return np.stack([observation_planes(b, int(p)) for b, p in zip(boards, to_play)])

    def moves(self, boards, to_play, chunk=512):
        from envs.tictactoe import EMPTY
        out = []
        rng = np.random.default_rng(0)
        for s in range(0, len(boards), chunk):
            b, p = boards[s:s + chunk], to_play[s:s + chunk]
            player = self._player(len(b))
            out.append(player.act(self.observations(b, p), b == EMPTY, p.astype(np.int8), rng,
                                  in_tree_masks=True))
        return np.concatenate(out)

    def priors(self, boards, to_play):
        """The network's root value [N] and policy logits [N, 9] (no search)."""
        player = self._player(1)   # any player: the initial-inference signature takes any batch
        root = player._call(player._initial, observation=self.observations(boards, to_play))
        return root["value"], root["policy_logits"]


def losing_lines(agent: Agent, side: int):
    """Plays all perfect-player lines against the agent on ``side``: (lost, total, losing positions)."""
    from envs.tictactoe import EMPTY, minimax_values, winner
    frontier = {(tuple([EMPTY] * 9), 0): 1}   # position -> number of lines reaching it
    lost = total = 0
    mistakes = set()
    while frontier:
        nxt = {}
        children = []   # (position, cells played from it)
        ours = [k for k in frontier if k[1] == side]
        if ours:
            boards = np.array([k[0] for k in ours], np.int64)
            moves = agent.moves(boards, np.array([k[1] for k in ours], np.int8))
            for (board, to_play), move in zip(ours, moves):
                values = minimax_values(np.array(board), to_play)
                if values[move] < values.max():
                    mistakes.add(board)
                children.append(((board, to_play), [int(move)]))
        for board, to_play in frontier:
            if to_play != side:
                values = minimax_values(np.array(board), to_play)
                children.append(((board, to_play), np.flatnonzero(values == values.max()).tolist()))
        for (board, to_play), cells in children:
            count = frontier[(board, to_play)]
            for cell in cells:
                child = list(board)
                child[cell] = to_play
                w = winner(np.array(child))
                if w >= 0 or EMPTY not in child:
                    total += count
                    lost += count if (w >= 0 and w != side) else 0
                    continue
                key = (tuple(child), 1 - to_play)
                nxt[key] = nxt.get(key, 0) + count
        frontier = nxt
    return lost, total, sorted(mistakes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export_dir", required=True)
    parser.add_argument("--simulations", type=int, default=None, help="override the export's num_simulations")
    parser.add_argument("--pb_c_init", type=float, default=None, help="override the export's pb_c_init")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from envs.tictactoe import minimax_values
    changes = {k: getattr(args, k) for k in ("pb_c_init",) if getattr(args, k) is not None}
    agent = Agent(args.export_dir, args.simulations, **changes)
    for side in (0, 1):
        lost, total, positions = losing_lines(agent, side)
        print(f"as {'first' if side == 0 else 'second'} player: lost {lost} of {total} perfect-player lines; "
              f"losing moves at {len(positions)} positions", flush=True)
        for board in positions[:10]:
            print("   ", "".join(".XO"[c + 1] for c in board))
    boards, to_play = reachable_positions()
    values = np.stack([minimax_values(b, int(p)) for b, p in zip(boards, to_play)])
    legal = np.isfinite(values)
    best = values.max(axis=1)
    worst = np.where(legal, values, np.inf).min(axis=1)
    matters = best > worst
    moves = agent.moves(boards, to_play)
    search_mistakes = int((values[np.arange(len(boards)), moves] < best)[matters].sum())
    root_value, logits = agent.priors(boards, to_play)
    prior_move = np.argmax(np.where(legal, logits, -np.inf), axis=1)
    prior_mistakes = int((values[np.arange(len(boards)), prior_move] < best)[matters].sum())
    value_errors = int((np.rint(np.clip(root_value, -1, 1)) != best).sum())
    n = int(matters.sum())
    print(f"positions={len(boards)} decisive={n}")
    print(f"value_sign_errors={value_errors}/{len(boards)} prior_mistakes={prior_mistakes}/{n}")
    print(f"search_mistakes={search_mistakes}/{n}")


if __name__ == "__main__":
    main()
