"""Symmetry augmentation of board-game batches: hand-worked rotation, and game semantics
kept (the real env replays augmented trajectories to the same results). CartPole's mirror:
a hand-worked batch, and the physics (a negated cart with swapped pushes runs the negated
trajectory)."""
import numpy as np
import pytest

import envs
from envs.tictactoe import EMPTY, SYMMETRIES, TicTacToe, observation_planes, winner
from envs.cartpole import MIRROR, CartPoleBatch
from muzero.algorithms.muzero.augment import augment_board_batch, augment_mirror_batch, inverse_permutations


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


def test_mirror_by_hand():
    batch = {"observation": np.array([[0.5, -1.0, 0.02, 0.3], [1.0, 2.0, 3.0, 4.0]], np.float32),
             "next_observation": np.array([[[0.6, -0.8, 0.01, 0.2]], [[1.5, 2.5, 3.5, 4.5]]], np.float32),
             "actions": np.array([[0], [1]], np.int32),
             "target_policy": np.array([[[0.7, 0.3], [0.4, 0.6]], [[0.9, 0.1], [0.2, 0.8]]], np.float32),
             "target_value": np.array([[10.0, 9.0], [8.0, 7.0]], np.float32)}
    out = augment_mirror_batch(batch, np.array(MIRROR), np.random.default_rng(0), flip=np.array([True, False]))
    # Position 0 mirrored: every component negated, push left (0) becomes push right (1),
    # and the visits on left / right swap places.
    np.testing.assert_array_equal(out["observation"][0], np.float32([-0.5, 1.0, -0.02, -0.3]))
    np.testing.assert_array_equal(out["next_observation"][0, 0], np.float32([-0.6, 0.8, -0.01, -0.2]))
    assert out["actions"].tolist() == [[1], [1]]
    np.testing.assert_array_equal(out["target_policy"][0], np.float32([[0.3, 0.7], [0.6, 0.4]]))
    # Position 1 untouched; values unchanged everywhere; the input is not modified.
    np.testing.assert_array_equal(out["observation"][1], batch["observation"][1])
    np.testing.assert_array_equal(out["next_observation"][1], batch["next_observation"][1])
    np.testing.assert_array_equal(out["target_policy"][1], batch["target_policy"][1])
    np.testing.assert_array_equal(out["target_value"], batch["target_value"])
    assert batch["actions"].tolist() == [[0], [1]] and batch["observation"][0, 0] == 0.5
    assert out["actions"].dtype == np.int32 and out["observation"].dtype == np.float32


def test_mirror_flips_about_half_the_positions():
    batch = {"observation": np.ones((1000, 4), np.float32), "actions": np.zeros((1000, 5), np.int32),
             "target_policy": np.tile(np.float32([0.75, 0.25]), (1000, 6, 1))}
    out = augment_mirror_batch(batch, np.array(MIRROR), np.random.default_rng(1))
    flipped = out["observation"][:, 0] < 0
    assert 430 < flipped.sum() < 570
    assert (out["actions"][flipped] == 1).all() and (out["actions"][~flipped] == 0).all()
    assert np.allclose(out["target_policy"][flipped], [0.25, 0.75])


def test_cartpole_is_unchanged_by_its_mirror():
    # The registered mirror is a fact about the physics: start a cart in a state and one in
    # the negated state, push the second with every action swapped, and the second runs the
    # negated trajectory with the same rewards and the same end.
    assert envs.mirror_actions("cartpole").tolist() == [1, 0]
    assert envs.mirror_actions("tictactoe") is None and envs.mirror_actions("gym:Acrobot-v1") is None
    rng = np.random.default_rng(3)
    a, b = CartPoleBatch(4, seed=0), CartPoleBatch(4, seed=0)
    a.reset(), b.reset()
    start = rng.uniform(-0.05, 0.05, size=(4, 4))
    a.state[:], b.state[:] = start, -start
    for t in range(200):
        actions = rng.integers(0, 2, size=4).astype(np.int32)
        sa, sb = a.step(actions), b.step(np.array(MIRROR)[actions].astype(np.int32))
        np.testing.assert_allclose(sb.final_observation, -sa.final_observation, atol=1e-6)
        np.testing.assert_array_equal(sb.reward, sa.reward)
        np.testing.assert_array_equal(sb.terminated, sa.terminated)
        if sa.terminated.any():   # the carts that ended restart from fresh (different) states
            break
    assert t > 3


def test_gymnasium_cartpole_is_unchanged_by_its_mirror():
    # The same fact for Gymnasium's CartPole class, which gym:CartPole-v0/-v1 make: a cart
    # started in the negated state and pushed with swapped actions runs the negated
    # trajectory. Ids of other classes and unknown ids have no mirror.
    import gymnasium
    assert envs.mirror_actions("gym:CartPole-v1").tolist() == [1, 0]
    assert envs.mirror_actions("gym:CartPole-v0").tolist() == [1, 0]
    assert envs.mirror_actions("gym:MountainCar-v0") is None and envs.mirror_actions("gym:NoSuchEnv-v0") is None
    a, b = gymnasium.make("CartPole-v1"), gymnasium.make("CartPole-v1")
    a.reset(seed=0), b.reset(seed=0)
    start = np.array([0.3, -0.2, 0.04, 0.1])
    a.unwrapped.state, b.unwrapped.state = start.copy(), -start
    rng = np.random.default_rng(4)
    for t in range(300):
        action = int(rng.integers(0, 2))
        oa, ra, ta, _, _ = a.step(action)
        ob, rb, tb, _, _ = b.step(int(envs.mirror_actions("gym:CartPole-v1")[action]))
        np.testing.assert_allclose(ob, -oa, atol=1e-5)
        assert (rb, tb) == (ra, ta)
        if ta:
            break
    assert t > 3


def test_register_refuses_bad_mirrors():
    make, describe = (lambda seed=0: None), (lambda: None)
    with pytest.raises(ValueError, match="its own inverse"):
        envs.register("mirror_test_cycle", make, describe, mirror=[1, 2, 0])
    with pytest.raises(ValueError, match="its own inverse"):
        envs.register("mirror_test_repeat", make, describe, mirror=[0, 0])
    with pytest.raises(ValueError, match="not both"):
        envs.register("mirror_test_both", make, describe, symmetries=[[0, 1]], mirror=[1, 0])
    assert "mirror_test_cycle" not in envs.known_names()
