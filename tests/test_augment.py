"""Symmetry augmentation of board-game batches: hand-worked rotation, and game semantics
kept (the real env replays augmented trajectories to the same results)."""
import numpy as np
import pytest

import envs
from envs.tictactoe import EMPTY, SYMMETRIES, TicTacToe, observation_planes, winner
from muzero.replay.augment import augment_board_batch, inverse_permutations


def _batch(obs, actions, policy):
    b = len(obs)
    return {"observation": np.asarray(obs, np.uint8), "actions": np.asarray(actions, np.int32),
            "target_policy": np.asarray(policy, np.float32),
            "target_value": np.arange(b * 2, dtype=np.float32).reshape(b, 2),
            "index": np.arange(b, dtype=np.int64)}


def _board_of(planes):
    board = np.full(9, EMPTY)
    board[planes[..., 0].ravel() == 1] = 0
    board[planes[..., 1].ravel() == 1] = 1
    return board


def test_tictactoe_has_the_eight_symmetries_of_the_square():
    perms = envs.board_symmetries("tictactoe")
    assert perms.shape == (8, 9) and len({tuple(p) for p in perms.tolist()}) == 8
    np.testing.assert_array_equal(perms[0], np.arange(9))
    assert all(p[4] == 4 for p in perms)                       # the centre never moves
    assert envs.board_symmetries("cartpole") is None


def test_quarter_turn_by_hand():
    # SYMMETRIES[1] turns the board a quarter counter-clockwise: the top-left corner (0)
    # goes to the bottom-left (6), the right edge (5) to the top edge (1), the top-right
    # corner (2) to the top-left (0).
    board = np.full(9, EMPTY)
    board[0], board[5] = 0, 1                                  # X top-left, O right edge
    policy = np.zeros((1, 2, 9), np.float32)
    policy[0, 0, 2] = 1.0                                      # all visits on the top-right corner
    policy[0, 1, 8] = 1.0
    batch = _batch([observation_planes(board, 0)], [[2]], policy)
    out = augment_board_batch(batch, SYMMETRIES, np.random.default_rng(0), choice=np.array([1]))
    new = _board_of(out["observation"][0])
    expected = np.full(9, EMPTY)
    expected[6], expected[1] = 0, 1
    np.testing.assert_array_equal(new, expected)
    assert out["actions"].tolist() == [[0]]
    assert np.flatnonzero(out["target_policy"][0, 0]).tolist() == [0]
    assert np.flatnonzero(out["target_policy"][0, 1]).tolist() == [2]   # bottom-right -> top-right
    np.testing.assert_array_equal(out["observation"][0, ..., 2], 0)       # to-play plane unchanged
    np.testing.assert_array_equal(out["target_value"], batch["target_value"])
    np.testing.assert_array_equal(batch["actions"], [[2]])               # the input is not modified


def test_inverse_permutations():
    inv = inverse_permutations(SYMMETRIES)
    for p, q in zip(SYMMETRIES, inv):
        np.testing.assert_array_equal(p[q], np.arange(9))
        np.testing.assert_array_equal(q[p], np.arange(9))


def _play(board, to_play, moves):
    env = TicTacToe()
    env.reset()
    env._board[:] = board
    env._to_play = to_play
    results = []
    for m in moves:
        step = env.step(int(m))
        results.append((step.reward, step.terminated))
        if step.terminated:
            break
    return results


def test_augmented_trajectories_replay_to_the_same_results_in_the_real_game():
    rng = np.random.default_rng(3)
    obs, acts, starts = [], [], []
    while len(obs) < 64:                        # random games, cut at a random move, next 3 moves
        board, to_play, history, moves = np.full(9, EMPTY), 0, [], []
        while winner(board) < 0 and (board == EMPTY).any():
            history.append((board.copy(), to_play))
            m = int(rng.choice(np.flatnonzero(board == EMPTY)))
            moves.append(m)
            board[m] = to_play
            to_play = 1 - to_play
        cut = rng.integers(0, len(history))
        b0, p0 = history[cut]
        future = moves[cut:]
        if len(future) < 3:
            continue
        obs.append(observation_planes(b0, p0))
        acts.append(future[:3])
        starts.append((b0, p0))
    policy = np.zeros((64, 4, 9), np.float32)
    policy[np.arange(64)[:, None], np.arange(3)[None, :], np.array(acts)] = 1.0
    batch = _batch(obs, acts, policy)
    choice = np.arange(64) % 8
    out = augment_board_batch(batch, SYMMETRIES, rng, choice=choice)
    for i, (b0, p0) in enumerate(starts):
        new_board = _board_of(out["observation"][i])
        np.testing.assert_array_equal(new_board, b0[SYMMETRIES[choice[i]]])
        assert _play(new_board, p0, out["actions"][i]) == _play(b0, p0, acts[i])
        np.testing.assert_array_equal(np.argmax(out["target_policy"][i, :3], axis=1), out["actions"][i])


def test_shapes_that_do_not_fit_are_rejected():
    batch = _batch(np.zeros((2, 3, 3, 3)), [[0], [1]], np.zeros((2, 2, 9)))
    with pytest.raises(ValueError, match="do not fit"):
        augment_board_batch(batch, np.arange(4)[None], np.random.default_rng(0))
