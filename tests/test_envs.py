"""Environment layer: registry, tic-tac-toe rules, CartPole physics, batches, gym adapter."""
import gymnasium
import numpy as np
import pytest

import envs
from envs import cartpole, tictactoe
from envs.base import Env, EnvDescriptor, LoopEnvBatch, StepResult
from envs.gym_env import GymEnv, OldApiAdapter
from envs.tictactoe import IllegalMoveError, MinimaxPlayer, TicTacToe, TicTacToeBatch


# ----------------------------------------------------------------------------- registry

def test_unknown_env_lists_known_names():
    with pytest.raises(envs.UnknownEnvError) as err:
        envs.make("pacman")
    for name in ("cartpole", "tictactoe", "atari", "gym:<ID>"):
        assert name in str(err.value)


def test_describe_builtin_envs():
    d = envs.describe("cartpole")
    assert (d.observation_shape, d.observation_dtype, d.num_actions, d.two_player, d.kind) == \
        ((4,), "float32", 2, False, "vector")
    assert d.max_episode_steps == 500
    t = envs.describe("tictactoe")
    assert (t.observation_shape, t.num_actions, t.two_player, t.kind, t.has_legal_mask) == \
        ((3, 3, 3), 9, True, "board", True)
    assert t.known_bounds == (-1.0, 1.0)


def test_options_are_checked():
    with pytest.raises(ValueError, match="takes no options"):
        envs.make("tictactoe", frame_skip=2)
    with pytest.raises(ValueError, match="cartpole.*observe_velocity only.*frame_skip"):
        envs.make("cartpole", frame_skip=2)
    with pytest.raises(ValueError, match="num_envs"):
        envs.make_batch("cartpole", 0)
    with pytest.raises(envs.UnknownEnvError, match="gym: needs"):
        envs.make("gym:")


# ----------------------------------------------------------------------------- tic-tac-toe

def _play(moves):
    env = TicTacToe()
    env.reset()
    result = None
    for m in moves:
        result = env.step(m)
    return env, result


@pytest.mark.parametrize("line", tictactoe.WIN_LINES.tolist())
@pytest.mark.parametrize("winner", [0, 1])
def test_every_win_line_wins_for_either_player(line, winner):
    # The winner fills `line`; the other player fills cells off the line that make no line of
    # their own. Player 0 moves first, so when player 1 is to win, player 0 gets one extra move.
    others = [c for c in range(9) if c not in line]
    rng = np.random.default_rng(len(line) * 10 + winner)
    for _ in range(50):
        filler = list(rng.permutation(others))[: 3 if winner == 1 else 2]
        board = np.full(9, -1)
        board[filler] = 1 - winner
        if tictactoe.winner(board) == -1:
            break
    moves = []
    win_moves, fill_moves = list(line), list(filler)
    for ply in range(len(win_moves) + len(fill_moves)):
        mover = ply % 2
        moves.append(win_moves.pop(0) if mover == winner else fill_moves.pop(0))
    env, result = _play(moves)
    assert result.terminated and not result.truncated
    assert result.reward == 1.0  # mover's view: the last mover won
    assert result.info["winner"] == winner
    assert tictactoe.winner(env.board) == winner


def test_draw_turn_order_and_observation():
    # X O X / X O O / O X X : a full board without a line.
    moves = [0, 1, 2, 4, 3, 5, 7, 6, 8]
    env = TicTacToe()
    obs = env.reset()
    assert obs[..., 2].max() == 0  # player 0 to move
    for ply, m in enumerate(moves):
        assert env.to_play() == ply % 2
        result = env.step(m)
        assert result.reward == 0.0
        assert result.terminated == (ply == 8)
    assert result.info["winner"] == -1
    board = env.board
    np.testing.assert_array_equal(result.observation[..., 0].ravel(), board == 0)
    np.testing.assert_array_equal(result.observation[..., 1].ravel(), board == 1)


def test_illegal_moves_raise():
    env = TicTacToe()
    env.reset()
    env.step(4)
    with pytest.raises(IllegalMoveError, match="cell 4 is taken"):
        env.step(4)
    with pytest.raises(IllegalMoveError, match=r"\[0, 8\]"):
        env.step(9)
    _, result = _play([0, 3, 1, 4, 2])
    assert result.terminated
    env, _ = _play([0, 3, 1, 4, 2])
    with pytest.raises(IllegalMoveError, match="game is over"):
        env.step(5)
    assert not env.legal_mask().any()


def test_empty_board_is_a_draw_under_perfect_play():
    # A known fact of tic-tac-toe: perfect play from the empty board draws; every opening
    # move also draws, so all nine move values are 0.
    np.testing.assert_array_equal(tictactoe.minimax_values(np.full(9, -1), 0), np.zeros(9))
    # Player 0 threatens 0-1-2 and it is player 0's move: cell 2 wins at once (value +1).
    board = np.array([0, 0, -1, 1, 1, -1, -1, -1, -1])
    assert tictactoe.minimax_values(board, 0)[2] == 1.0
    assert MinimaxPlayer(seed=None).act(board, 0) == 2


@pytest.mark.parametrize("minimax_side", [0, 1])
def test_minimax_never_loses_to_random_play(minimax_side):
    rng = np.random.default_rng(minimax_side)
    player = MinimaxPlayer(seed=minimax_side)
    wins = 0
    for _ in range(40):
        env = TicTacToe()
        env.reset()
        while True:
            if env.to_play() == minimax_side:
                move = player.act(env.board, minimax_side)
            else:
                move = int(rng.choice(np.flatnonzero(env.legal_mask())))
            mover = env.to_play()
            result = env.step(move)
            if result.terminated:
                assert result.info["winner"] in (-1, minimax_side), "minimax lost a game"
                wins += result.info["winner"] == minimax_side == mover
                break
    assert wins > 20  # random play loses most games against a perfect player


def test_tictactoe_batch_matches_single_games_and_auto_resets():
    e = 6
    batch = TicTacToeBatch(e)
    step = batch.reset()
    singles = [TicTacToe() for _ in range(e)]
    for s in singles:
        s.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in step.legal_mask])
        step = batch.step(actions)
        for i, s in enumerate(singles):
            r = s.step(int(actions[i]))
            assert step.reward[i] == r.reward and step.terminated[i] == r.terminated
            if r.terminated:
                ended += 1
                assert step.episode_length[i] == np.sum(s.board >= 0)
                assert step.episode_return[i] == (1.0 if r.info["winner"] >= 0 else 0.0)
                s.reset()
            else:
                assert step.episode_length[i] == -1 and np.isnan(step.episode_return[i])
            np.testing.assert_array_equal(step.legal_mask[i], s.legal_mask())
            assert step.to_play[i] == s.to_play()
            np.testing.assert_array_equal(step.observation[i], tictactoe.observation_planes(s.board, s.to_play()))
    assert ended > 10
    batch.reset()
    batch.step(np.arange(e))
    with pytest.raises(IllegalMoveError, match="env 2: cell 2 is taken"):
        batch.step(np.array([8, 8, 2, 8, 8, 8]))


# ----------------------------------------------------------------------------- CartPole

def test_cartpole_batch_follows_gymnasium_physics():
    gym_env = gymnasium.make("CartPole-v1")
    obs, _ = gym_env.reset(seed=7)
    batch = cartpole.CartPoleBatch(1, seed=0)
    batch.reset()
    batch.state[0] = gym_env.unwrapped.state
    rng = np.random.default_rng(1)
    for t in range(200):
        a = int(rng.integers(0, 2))
        g_obs, g_rew, g_term, g_trunc, _ = gym_env.step(a)
        step = batch.step(np.array([a]))
        assert step.terminated[0] == g_term and step.truncated[0] == g_trunc
        if g_term:
            assert step.episode_length[0] == t + 1 and step.episode_return[0] == t + 1
            break
        np.testing.assert_allclose(step.observation[0], g_obs, rtol=1e-6, atol=1e-7)
    assert g_term, "a random policy drops the pole within 200 steps"


def _balancing_action(obs):
    # A simple linear controller that keeps the pole up for the whole episode.
    x, x_dot, theta, theta_dot = obs
    return int(theta + 0.5 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


def test_cartpole_truncates_at_500_steps_not_terminates():
    env = envs.make("cartpole", seed=3)
    obs = env.reset()
    for t in range(500):
        result = env.step(_balancing_action(obs))
        obs = result.observation
        if result.terminated or result.truncated:
            break
    assert t == 499 and result.truncated and not result.terminated
    batch = cartpole.CartPoleBatch(3, seed=0, max_episode_steps=4)
    batch.reset()
    for _ in range(4):
        step = batch.step(np.array([_balancing_action(o) for o in batch.state]))
    np.testing.assert_array_equal(step.truncated, True)
    np.testing.assert_array_equal(step.terminated, False)
    np.testing.assert_array_equal(step.episode_length, 4)


def test_seeded_determinism():
    def rollout(seed):
        b = envs.make_batch("cartpole", 4, seed=seed)
        out = [b.reset().observation]
        for _ in range(30):
            out.append(b.step(np.ones(4, np.int64)).observation)
        return np.stack(out)
    np.testing.assert_array_equal(rollout(5), rollout(5))
    assert not np.array_equal(rollout(5), rollout(6))
    a, b = envs.make("cartpole", seed=11), envs.make("cartpole", seed=11)
    np.testing.assert_array_equal(a.reset(), b.reset())


# ----------------------------------------------------------------------------- batches

class _CountdownEnv(Env):
    """Terminates after `length` steps (or truncates, if `truncate`); reward = action + 1."""

    descriptor = EnvDescriptor(name="countdown", observation_shape=(1,), observation_dtype="float32",
                               num_actions=3)

    def __init__(self, length, truncate=False):
        self.length, self.truncate, self.t = length, truncate, 0

    def reset(self):
        self.t = 0
        return np.zeros(1, np.float32)

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        return StepResult(np.array([self.t], np.float32), float(action + 1),
                          terminated=end and not self.truncate, truncated=end and self.truncate, info={})


def test_loop_batch_auto_reset_and_episode_statistics():
    batch = LoopEnvBatch([_CountdownEnv(2), _CountdownEnv(3, truncate=True)])
    batch.reset()
    s1 = batch.step(np.array([0, 1]))
    assert list(s1.observation[:, 0]) == [1, 1] and not s1.done.any()
    s2 = batch.step(np.array([2, 1]))
    # env 0 ends (terminated): return 1 + 3 = 4, length 2; it shows its reset observation.
    assert s2.terminated.tolist() == [True, False] and s2.truncated.tolist() == [False, False]
    assert s2.episode_return[0] == 4.0 and s2.episode_length[0] == 2 and s2.observation[0, 0] == 0
    assert np.isnan(s2.episode_return[1]) and s2.episode_length[1] == -1
    s3 = batch.step(np.array([0, 0]))
    assert s3.truncated.tolist() == [False, True] and s3.terminated.tolist() == [False, False]
    assert s3.episode_return[1] == 2 + 2 + 1 and s3.episode_length[1] == 3
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        batch.step(np.array([0]))
    with pytest.raises(ValueError, match=r"\[0, 2\]"):
        batch.step(np.array([0, 3]))


# ----------------------------------------------------------------------------- gym adapter

class _OldApiEnv:
    """An old-API env: reset() -> obs, step() -> (obs, reward, done, info)."""

    def __init__(self, limit, time_limited):
        self.action_space = gymnasium.spaces.Discrete(2)
        self.observation_space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)
        self.limit, self.time_limited, self.t, self.seeded = limit, time_limited, 0, None

    def seed(self, seed):
        self.seeded = seed

    def reset(self):
        self.t = 0
        return np.zeros(2, np.float32)

    def step(self, action):
        self.t += 1
        done = self.t >= self.limit
        info = {"TimeLimit.truncated": True} if (done and self.time_limited) else {}
        return np.full(2, self.t, np.float32), 1.0, done, info


@pytest.mark.parametrize("time_limited", [False, True])
def test_old_api_adapter_splits_done(time_limited):
    raw = _OldApiEnv(2, time_limited)
    env = GymEnv(raw, name="old", seed=9)
    assert isinstance(env._env, OldApiAdapter)
    assert env.descriptor.num_actions == 2 and env.descriptor.kind == "vector"
    env.reset()
    assert raw.seeded == 9
    env.step(0)
    result = env.step(1)
    assert result.terminated == (not time_limited)
    assert result.truncated == time_limited


def test_gym_ids_vector_and_image():
    env = envs.make("gym:CartPole-v1", seed=1)
    assert env.descriptor.observation_shape == (4,) and env.descriptor.max_episode_steps == 500
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (4,)
    img = envs.make("gym:ALE/Pong-v5", seed=1)
    assert img.descriptor.kind == "image" and img.descriptor.observation_shape == (210, 160, 3)
    assert img.reset().dtype == np.uint8
    batch = envs.make_batch("gym:CartPole-v1", 2, seed=0)
    assert batch.reset().observation.shape == (2, 4)
    assert envs.make("gym:Pendulum-v1").descriptor.is_continuous

    class MultiBinaryEnv(gymnasium.Env):
        action_space = gymnasium.spaces.MultiBinary(3)
        observation_space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    with pytest.raises(ValueError, match="only Discrete and Box action spaces"):
        GymEnv(MultiBinaryEnv(), name="multibinary")
    with pytest.raises(ValueError, match="Gymnasium cannot make"):
        envs.make("gym:NoSuchEnv-v0")


# ----------------------------------------------------------------------------- final observations

def _gym_cartpole_step(state, action):
    """One CartPole-v1 step by Gymnasium itself from ``state`` -> float32 observation."""
    env = gymnasium.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    env.state = np.array(state, np.float64)
    obs, _, _, _, _ = env.step(int(action))
    return np.asarray(obs, np.float32)


def test_cartpole_batch_final_observation_of_truncated_episodes():
    batch = cartpole.CartPoleBatch(3, seed=4, max_episode_steps=3)
    step = batch.reset()
    assert step.final_observation is step.observation      # nothing ended: no copy
    for t in range(3):
        before = batch.state.copy()
        actions = np.array([_balancing_action(o) for o in before])
        step = batch.step(actions)
        if t < 2:
            assert not step.done.any()
            np.testing.assert_array_equal(step.final_observation, step.observation)
    assert step.truncated.all()
    expected = np.stack([_gym_cartpole_step(before[i], actions[i]) for i in range(3)])
    np.testing.assert_allclose(step.final_observation, expected, rtol=1e-6, atol=1e-7)
    # The observation shows the new episodes' first states, drawn in [-0.05, 0.05].
    assert np.abs(step.observation).max() <= 0.05
    assert not np.allclose(step.observation, step.final_observation)


def test_cartpole_batch_final_observation_of_terminated_episodes():
    batch = cartpole.CartPoleBatch(4, seed=1)
    batch.reset()
    pushes = np.array([1, 0, 1, 0])       # constant pushes drop the pole within ~60 steps
    seen = np.zeros(4, bool)
    for _ in range(200):
        before = batch.state.copy()
        step = batch.step(pushes)
        ended = step.terminated
        if ended.any():
            final = step.final_observation[ended]
            x, theta = final[:, 0], final[:, 2]
            assert ((np.abs(x) > cartpole.X_LIMIT) | (np.abs(theta) > cartpole.THETA_LIMIT)).all()
            for i in np.flatnonzero(ended):
                np.testing.assert_allclose(step.final_observation[i], _gym_cartpole_step(before[i], pushes[i]),
                                           rtol=1e-6, atol=1e-7)
            assert np.abs(step.observation[ended]).max() <= 0.05
            seen |= ended
        np.testing.assert_array_equal(step.final_observation[~step.done], step.observation[~step.done])
        if seen.all():
            break
    assert seen.all()


def test_tictactoe_batch_final_observation_is_the_finished_board():
    batch = TicTacToeBatch(2)
    batch.reset()
    # env 0: player 0 wins on the top row at its third move; env 1 plays elsewhere.
    moves = [(0, 4), (3, 0), (1, 8), (4, 1), (2, 2)]
    for a0, a1 in moves[:-1]:
        step = batch.step(np.array([a0, a1]))
        assert step.final_observation is step.observation
    step = batch.step(np.array(moves[-1]))
    assert step.terminated.tolist() == [True, False]
    board = np.full(9, -1)
    board[[0, 1, 2]] = 0
    board[[3, 4]] = 1
    np.testing.assert_array_equal(step.final_observation[0], tictactoe.observation_planes(board, 1))
    np.testing.assert_array_equal(step.observation[0], tictactoe.observation_planes(np.full(9, -1), 0))
    np.testing.assert_array_equal(step.final_observation[1], step.observation[1])


def test_loop_batch_final_observation():
    batch = LoopEnvBatch([_CountdownEnv(2), _CountdownEnv(3, truncate=True)])
    assert batch.reset().final_observation is not None
    s1 = batch.step(np.array([0, 0]))
    np.testing.assert_array_equal(s1.final_observation, s1.observation)
    s2 = batch.step(np.array([0, 0]))      # env 0 terminates at t=2
    assert s2.final_observation[:, 0].tolist() == [2, 2] and s2.observation[:, 0].tolist() == [0, 2]
    s3 = batch.step(np.array([0, 0]))      # env 1 truncates at t=3
    assert s3.final_observation[:, 0].tolist() == [1, 3] and s3.observation[:, 0].tolist() == [1, 0]


def test_atari_vector_batch_final_observation_matches_an_uncapped_run():
    pytest.importorskip("ale_py")
    capped = envs.make_batch("atari", 2, seed=3, max_episode_frames=24, noop_max=0, sticky_actions=0.0)
    free = envs.make_batch("atari", 2, seed=3, max_episode_frames=1000, noop_max=0, sticky_actions=0.0)
    try:
        capped.reset(), free.reset()
        for _ in range(6):                         # 6 agent steps x 4 frames = the 24-frame cap
            a = np.array([0, 1])
            step, ref = capped.step(a), free.step(a)
        assert step.truncated.all() and not ref.done.any()
        np.testing.assert_array_equal(step.final_observation, ref.observation)
        assert step.final_observation is not step.observation
    finally:
        capped.close(), free.close()


# ----------------------------------------------------------------------------- continuous actions, goals

def test_box_action_space_is_described_and_clipped_with_a_count():
    d = envs.describe("gym:Pendulum-v1")
    assert (d.action_kind, d.action_shape, d.action_low, d.action_high, d.num_actions) == \
        ("continuous", (1,), (-2.0,), (2.0,), 0)
    assert d.action_space == "Box(-2, 2, (1,))" and envs.describe("cartpole").action_space == "Discrete(2)"
    batch = envs.make_batch("gym:Pendulum-v1", 2, seed=0)
    batch.reset()
    batch.step(np.array([[0.5], [7.0]], np.float32))
    assert batch.clipped_actions == 1
    with pytest.raises(ValueError, match="non-finite"):
        batch.step(np.array([[np.nan], [0.0]], np.float32))
    with pytest.raises(ValueError, match=r"shape \(2, 1\)"):
        batch.step(np.array([0, 1]))
    batch.close()
    with pytest.raises(ValueError, match="low < high"):
        EnvDescriptor("x", (2,), "float32", 0, action_kind="continuous", action_shape=(1,),
                      action_low=(1.0,), action_high=(1.0,))


def test_stateless_cartpole_shows_position_and_angle_only():
    full = envs.make_batch("cartpole", 3, seed=4)
    blind = envs.make_batch("cartpole", 3, seed=4, observe_velocity=False)
    assert envs.describe("cartpole", observe_velocity=False).observation_shape == (2,)
    a, b = full.reset(), blind.reset()
    for _ in range(30):
        np.testing.assert_array_equal(b.observation, a.observation[:, [0, 2]])
        np.testing.assert_array_equal(b.final_observation, a.final_observation[:, [0, 2]])
        actions = np.array([0, 1, 1])
        a, b = full.step(actions), blind.step(actions)
    single = envs.make("cartpole", seed=1, observe_velocity=False)
    assert single.reset().shape == (2,) and single.step(0).observation.shape == (2,)
    with pytest.raises(ValueError, match="observe_velocity"):
        envs.describe("cartpole", observe_velocity="no")
    with pytest.raises(ValueError, match="observe_velocity only"):
        envs.describe("cartpole", velocity=False)


def test_reach_goal_env():
    assert envs.describe("reach").observation_shape == (9,)           # defaults: 3-D, 5 cm tolerance
    d = envs.describe("reach", dims=2, threshold=0.1)
    assert d.goal_slices() == {"observation": slice(0, 2), "achieved_goal": slice(2, 4),
                               "desired_goal": slice(4, 6)}
    batch = envs.make_batch("reach", 2, seed=0, dims=2, threshold=0.1)
    step = batch.reset()
    goal = step.observation[:, 4:6].copy()
    start = step.observation[:, 0:2].copy()
    step = batch.step(np.array([[1.0, 0.0], [0.0, -0.5]], np.float32))
    # the point moves by step_size * action (0.1), inside the box
    np.testing.assert_allclose(step.observation[:, 0:2], start + [[0.1, 0.0], [0.0, -0.05]], atol=1e-6)
    np.testing.assert_array_equal(step.observation[:, 2:4], step.observation[:, 0:2])
    want = -(np.linalg.norm(step.observation[:, 0:2] - goal, axis=1) > 0.1).astype(np.float32)
    np.testing.assert_array_equal(step.reward, want.astype(np.float32))
    np.testing.assert_array_equal(batch.compute_reward(np.zeros((2, 2)), np.array([[0.05, 0], [0.2, 0]])), [0, -1])
    for _ in range(49):
        step = batch.step(np.zeros((2, 2), np.float32))
    assert step.truncated.all() and not step.terminated.any() and (step.episode_length == 50).all()
    np.testing.assert_array_equal(step.final_observation[:, 4:6], goal)     # the ended episode's goal
    assert not np.array_equal(step.observation[:, 4:6], goal)               # a new goal drawn
    env = envs.make("reach", seed=0, dims=4)
    assert env.reset().shape == (12,) and env.descriptor.action_shape == (4,)
    with pytest.raises(ValueError, match="dims"):
        envs.describe("reach", dims=0)


class _GoalEnv(gymnasium.Env):
    """A Gymnasium-Robotics-style goal env without MuJoCo: a 2-D point, goal (0.5, 0.5)."""

    observation_space = gymnasium.spaces.Dict({
        "observation": gymnasium.spaces.Box(-1, 1, (3,), np.float32),
        "achieved_goal": gymnasium.spaces.Box(-1, 1, (2,), np.float32),
        "desired_goal": gymnasium.spaces.Box(-1, 1, (2,), np.float32)})
    action_space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)

    def _obs(self):
        return {"observation": np.array([*self.p, 7.0], np.float32), "achieved_goal": self.p.astype(np.float32),
                "desired_goal": np.array([0.5, 0.5], np.float32)}

    def reset(self, seed=None, options=None):
        self.p = np.zeros(2)
        return self._obs(), {}

    def step(self, action):
        self.p = self.p + 0.25 * np.asarray(action)
        return self._obs(), float(self.compute_reward(self.p, np.array([0.5, 0.5]), {})), False, False, {}

    def compute_reward(self, achieved, desired, info):
        return -(np.linalg.norm(np.asarray(achieved) - desired, axis=-1) > 0.05).astype(np.float32)


def test_gymnasium_goal_dicts_are_flattened_with_their_layout():
    env = GymEnv(_GoalEnv(), name="goal")
    d = env.descriptor
    assert d.observation_shape == (7,) and d.is_continuous
    assert d.goal_layout == (("observation", 0, 3), ("achieved_goal", 3, 5), ("desired_goal", 5, 7))
    np.testing.assert_array_equal(env.reset(), [0, 0, 7, 0, 0, 0.5, 0.5])
    result = env.step(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(result.observation, [0.25, 0.25, 7, 0.25, 0.25, 0.5, 0.5])
    assert result.reward == -1.0
    np.testing.assert_array_equal(env.compute_reward(np.array([[0.5, 0.5], [0.0, 0.0]]), np.full((2, 2), 0.5)),
                                  [0.0, -1.0])
    env.step(np.array([4.0, 0.0]))                              # outside [-1, 1]: clipped and counted
    assert env.clipped_actions == 1
