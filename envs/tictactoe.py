"""Tic-tac-toe for two alternating players, plus a perfect minimax opponent.

Cells are numbered 0..8 row by row; action ``a`` places the mover's stone on cell
``a``. Player 0 moves first. The reward of a step is from the *mover's* point of
view: +1 when the move wins, 0 otherwise (a move can never lose on the spot).
A win or a full board terminates the episode. Playing on an occupied cell, or
stepping a finished game, raises :class:`IllegalMoveError`: illegal moves are a
bug in the caller, not something to be learned from a penalty.

Observation: ``(3, 3, 3)`` uint8 planes ``[player-0 stones, player-1 stones,
to_play]`` where the last plane is all ones when player 1 is to move.
"""
from __future__ import annotations

import functools
from typing import Optional

import numpy as np

from envs.base import BatchStep, Env, EnvBatch, EnvDescriptor, EpisodeStats, StepResult

# The eight winning lines, as cell indices.
WIN_LINES = np.array([
    [0, 1, 2], [3, 4, 5], [6, 7, 8],  # rows
    [0, 3, 6], [1, 4, 7], [2, 5, 8],  # columns
    [0, 4, 8], [2, 4, 6],             # diagonals
], dtype=np.int64)

EMPTY = -1


def _symmetries() -> np.ndarray:
    """The 8 symmetries of the square as cell permutations [8, 9]: a board ``b`` maps to
    ``b[perm]`` (the identity first, then rotations by 90/180/270 degrees, then the
    transpose and its rotations)."""
    grid = np.arange(9).reshape(3, 3)
    return np.array([np.rot90(g, k).ravel() for g in (grid, grid.T) for k in range(4)], np.int64)


# Cells are the actions, so a permutation maps boards, moves and move distributions alike.
SYMMETRIES = _symmetries()

DESCRIPTOR = EnvDescriptor(
    name="tictactoe",
    observation_shape=(3, 3, 3),
    observation_dtype="uint8",
    num_actions=9,
    two_player=True,
    kind="board",
    reward_range=(0.0, 1.0),
    value_range=(-1.0, 1.0),
    known_bounds=(-1.0, 1.0),
    max_episode_steps=9,
    frame_layout=None,
    has_legal_mask=True,
)


class IllegalMoveError(ValueError):
    """A move on an occupied cell, outside the board, or after the game ended."""


def winner(board: np.ndarray) -> int:
    """0 or 1 if that player has three in a line, else -1. ``board``: [9] with -1 empty."""
    lines = board[WIN_LINES]  # [8, 3]
    for player in (0, 1):
        if np.any(np.all(lines == player, axis=1)):
            return player
    return -1


def observation_planes(board: np.ndarray, to_play: int) -> np.ndarray:
    """[9] board -> (3, 3, 3) uint8 planes [player 0, player 1, to_play]."""
    grid = board.reshape(3, 3)
    obs = np.empty((3, 3, 3), dtype=np.uint8)
    obs[..., 0] = grid == 0
    obs[..., 1] = grid == 1
    obs[..., 2] = to_play
    return obs


class TicTacToe(Env):
    descriptor = DESCRIPTOR

    def __init__(self, seed: int = 0):
        del seed  # the game itself is deterministic
        self._board = np.full(9, EMPTY, dtype=np.int64)
        self._to_play = 0
        self._done = True

    @property
    def board(self) -> np.ndarray:
        return self._board.copy()

    def reset(self) -> np.ndarray:
        self._board[:] = EMPTY
        self._to_play = 0
        self._done = False
        return observation_planes(self._board, self._to_play)

    def step(self, action: int) -> StepResult:
        if self._done:
            raise IllegalMoveError("the game is over: call reset() before step()")
        if isinstance(action, (bool, np.bool_)) or not (0 <= int(action) < 9) or int(action) != action:
            raise IllegalMoveError(f"action {action!r} is not a cell: must be an integer in [0, 8]")
        action = int(action)
        if self._board[action] != EMPTY:
            raise IllegalMoveError(
                f"cell {action} is taken by player {self._board[action]}; "
                f"legal cells: {np.flatnonzero(self._board == EMPTY).tolist()}")
        mover = self._to_play
        self._board[action] = mover
        won = winner(self._board) == mover
        full = not np.any(self._board == EMPTY)
        self._done = won or full
        self._to_play = 1 - mover
        return StepResult(observation_planes(self._board, self._to_play), 1.0 if won else 0.0,
                          terminated=self._done, truncated=False,
                          info={"winner": mover if won else (-1 if full else None)})

    def legal_mask(self) -> np.ndarray:
        if self._done:
            return np.zeros(9, dtype=bool)
        return self._board == EMPTY

    def to_play(self) -> int:
        return self._to_play


@functools.lru_cache(maxsize=None)
def _negamax(board: tuple, to_play: int) -> int:
    """Game value for the player to move under perfect play: +1 win, 0 draw, -1 loss."""
    best = -2
    for cell in range(9):
        if board[cell] != EMPTY:
            continue
        child = list(board)
        child[cell] = to_play
        if winner(np.array(child)) == to_play:
            return 1
        if EMPTY not in child:
            value = 0
        else:
            value = -_negamax(tuple(child), 1 - to_play)
        best = max(best, value)
    return best


def minimax_values(board: np.ndarray, to_play: int) -> np.ndarray:
    """[9] value of each move for the mover under perfect play (-inf for illegal moves)."""
    board = np.asarray(board)
    values = np.full(9, -np.inf)
    for cell in np.flatnonzero(board == EMPTY):
        child = board.copy()
        child[cell] = to_play
        if winner(child) == to_play:
            values[cell] = 1.0
        elif not np.any(child == EMPTY):
            values[cell] = 0.0
        else:
            values[cell] = -_negamax(tuple(int(v) for v in child), 1 - to_play)
    return values


class MinimaxPlayer:
    """A perfect tic-tac-toe player: never loses. Ties among best moves are broken
    at random with ``seed`` (or by lowest cell with ``seed=None``)."""

    def __init__(self, seed: Optional[int] = 0):
        self._rng = None if seed is None else np.random.default_rng(seed)

    def act(self, board: np.ndarray, to_play: int) -> int:
        values = minimax_values(board, to_play)
        best = np.flatnonzero(values == values.max())
        if self._rng is None:
            return int(best[0])
        return int(self._rng.choice(best))


class TicTacToeBatch(EnvBatch):
    """E tic-tac-toe games in lockstep, vectorised over boards ``[E, 9]``."""

    descriptor = DESCRIPTOR

    def __init__(self, num_envs: int, seed: int = 0):
        del seed
        self.num_envs = num_envs
        self._boards = np.full((num_envs, 9), EMPTY, dtype=np.int8)
        self._to_play = np.zeros(num_envs, dtype=np.int8)
        self._stats = EpisodeStats(num_envs)

    @property
    def boards(self) -> np.ndarray:
        return self._boards.copy()

    def _observe(self) -> np.ndarray:
        obs = np.empty((self.num_envs, 3, 3, 3), dtype=np.uint8)
        grid = self._boards.reshape(-1, 3, 3)
        obs[..., 0] = grid == 0
        obs[..., 1] = grid == 1
        obs[..., 2] = self._to_play[:, None, None]
        return obs

    def _batch_step(self, reward, terminated, ep_return, ep_length, final=None) -> BatchStep:
        """final: [E, 3, 3, 3] pre-reset observations when a game ended, else None."""
        obs = self._observe()
        return BatchStep(obs, reward, terminated, np.zeros(self.num_envs, bool),
                         self._boards == EMPTY, self._to_play.copy(), ep_return, ep_length,
                         final_observation=obs if final is None else final)

    def reset(self) -> BatchStep:
        e = self.num_envs
        self._boards[:] = EMPTY
        self._to_play[:] = 0
        self._stats = EpisodeStats(e)
        return self._batch_step(np.zeros(e, np.float32), np.zeros(e, bool), *self._stats.no_episode())

    def step(self, actions) -> BatchStep:
        actions = self._check_actions(actions)
        rows = np.arange(self.num_envs)
        taken = self._boards[rows, actions] != EMPTY
        if np.any(taken):
            i = int(np.flatnonzero(taken)[0])
            raise IllegalMoveError(
                f"env {i}: cell {int(actions[i])} is taken; legal cells: "
                f"{np.flatnonzero(self._boards[i] == EMPTY).tolist()}")
        mover = self._to_play
        self._boards[rows, actions] = mover
        lines = self._boards[:, WIN_LINES]                                # [E, 8, 3]
        won = np.any(np.all(lines == mover[:, None, None], axis=2), axis=1)  # [E]
        full = ~np.any(self._boards == EMPTY, axis=1)
        terminated = won | full
        reward = won.astype(np.float32)
        ep_return, ep_length = self._stats.update(reward, terminated)
        self._to_play = (1 - mover).astype(np.int8)
        final = None
        if np.any(terminated):
            final = self._observe()                                       # the finished boards
            self._boards[terminated] = EMPTY                              # same-step reset
            self._to_play[terminated] = 0
        return self._batch_step(reward, terminated, ep_return, ep_length, final)
