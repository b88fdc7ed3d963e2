"""Sample-time targets of muzero.replay against values worked out by hand in comments."""
import numpy as np
import pytest

from envs.base import EnvDescriptor
from muzero.algorithms.muzero.config import ReplayConfig, TargetConfig
from muzero.algorithms.muzero.replay import Replay

VECTOR = EnvDescriptor("vec", (2,), "float32", 3)
BOARD = EnvDescriptor("board", (3, 3, 3), "uint8", 9, two_player=True, kind="board",
                      has_legal_mask=True)
IMAGE = EnvDescriptor("img", (4, 4, 1), "uint8", 3, kind="image", frame_layout="HWC")


def segment(descriptor, episode_id, start, rewards, values, to_play=None, terminated=False,
            truncated=False, frames=None, actions=None):
    t, a = len(rewards), descriptor.num_actions
    steps = start + np.arange(t)
    policies = np.zeros((t, a), np.float32)
    policies[np.arange(t), steps % a] = 1.0  # one-hot on (step mod A): identifies the step
    if frames is None:
        frames = np.zeros((t,) + descriptor.observation_shape, descriptor.observation_dtype)
    return dict(episode_id=np.int64(episode_id), start=np.int64(start), observations=frames,
                actions=(steps % a if actions is None else np.asarray(actions)).astype(np.int32),
                rewards=np.asarray(rewards, np.float32), root_values=np.asarray(values, np.float32),
                policies=policies,
                to_play=np.zeros(t, np.int8) if to_play is None else np.asarray(to_play, np.int8),
                terminated=np.bool_(terminated), truncated=np.bool_(truncated))


def replay(descriptor, k, td, discount, stack=1, capacity=64, seed=0):
    return Replay(descriptor, ReplayConfig(capacity_steps=capacity, min_steps_to_sample=1),
                  TargetConfig(num_unroll_steps=k, td_steps=td, stack_frames=stack),
                  seed, discount=discount)


def by_position(rep, num_positions, batch=256):
    """One sampled row per stored position (global index == position for one episode)."""
    b = rep.sample(batch)
    rows = {}
    for row, idx in enumerate(b["index"]):
        rows.setdefault(int(idx), row)
    assert sorted(rows) == list(range(num_positions))
    return b, rows


R6 = [1, 2, 3, 4, 5, 6]
V6 = [10, 20, 30, 40, 50, 60]


def test_discounted_n_step_with_truncation_inside_window():
    # gamma = 0.5, n = 2, K = 2; the episode (steps 0..5) is split 3 + 3 and truncated.
    rep = replay(VECTOR, k=2, td=2, discount=0.5)
    rep.insert(segment(VECTOR, 7, 0, R6[:3], V6[:3]))
    rep.insert(segment(VECTOR, 7, 3, R6[3:], V6[3:], truncated=True))
    b, rows = by_position(rep, 6)
    # z_t = r_t + .5 r_{t+1} + .25 v_{t+2} while t+2 <= 5:
    #   z0 = 1 + 1 + 7.5 = 9.5; z1 = 2 + 1.5 + 10 = 13.5; z2 = 3 + 2 + 12.5 = 17.5; z3 = 4 + 2.5 + 15 = 21.5
    # truncated: bootstrap from the last stored root value v5 = 60, r5 not added:
    #   z4 = r4 + .5 v5 = 5 + 30 = 35; z5 = v5 = 60; past the end: masked.
    z = {0: 9.5, 1: 13.5, 2: 17.5, 3: 21.5, 4: 35.0, 5: 60.0}
    for i, row in rows.items():
        for k in range(3):
            t = i + k
            assert b["value_mask"][row, k] == (1.0 if t <= 5 else 0.0)
            assert b["target_value"][row, k] == pytest.approx(z.get(t, 0.0))
            # reward k >= 1 is r_{t-1}, stored for t-1 <= 5; index 0 masked.
            has_reward = k >= 1 and t - 1 <= 5
            assert b["reward_mask"][row, k] == float(has_reward)
            assert b["target_reward"][row, k] == (R6[t - 1] if has_reward else 0.0)
            assert b["policy_mask"][row, k] == float(t <= 5)
            expected_policy = np.eye(3)[t % 3] if t <= 5 else np.zeros(3)
            np.testing.assert_array_equal(b["target_policy"][row, k], expected_policy)
        for k in range(2):
            if i + k <= 5:
                assert b["actions"][row, k] == (i + k) % 3
            else:
                assert 0 <= b["actions"][row, k] < 3  # random padding
        np.testing.assert_array_equal(b["observation"][row], np.zeros(2))


def test_termination_inside_window_is_absorbing():
    rep = replay(VECTOR, k=3, td=2, discount=0.5)
    rep.insert(segment(VECTOR, 1, 0, R6[:2], V6[:2]))
    rep.insert(segment(VECTOR, 1, 2, R6[2:], V6[2:], terminated=True))
    b, rows = by_position(rep, 6)
    # z0..z3 as in the truncation case; terminated after step 5:
    #   z4 = r4 + .5 r5 = 5 + 3 = 8; z5 = r5 = 6; z6, z7, z8 = 0 with value_mask 1.
    z = {0: 9.5, 1: 13.5, 2: 17.5, 3: 21.5, 4: 8.0, 5: 6.0}
    for i, row in rows.items():
        for k in range(4):
            t = i + k
            assert b["value_mask"][row, k] == 1.0
            assert b["target_value"][row, k] == pytest.approx(z.get(t, 0.0))
            has_reward = k >= 1 and t - 1 <= 5  # r5 = 6 is the reward target at t = 6
            # past the end (t >= 7) the reward target is 0 with mask 1 (absorbing)
            assert b["reward_mask"][row, k] == float(k >= 1)
            assert b["target_reward"][row, k] == (R6[t - 1] if has_reward else 0.0)
            assert b["policy_mask"][row, k] == float(t <= 5)


def test_open_episode_bootstraps_from_last_value_and_updates_when_it_grows():
    rep = replay(VECTOR, k=1, td=3, discount=0.5)
    rep.insert(segment(VECTOR, 3, 0, [1, 2], [10, 20]))
    b, rows = by_position(rep, 2)
    # open end at step 1: z0 = r0 + .5 v1 = 1 + 10 = 11; z1 = v1 = 20; t = 2 masked (not terminal).
    assert b["target_value"][rows[0]].tolist() == pytest.approx([11.0, 20.0])
    assert b["value_mask"][rows[1]].tolist() == [1.0, 0.0]
    rep.insert(segment(VECTOR, 3, 2, [3, 4, 5], [30, 40, 50]))
    b, rows = by_position(rep, 5)
    # now z0 = 1 + .5*2 + .25*3 + .125*v3 = 1 + 1 + .75 + 5 = 7.75
    assert b["target_value"][rows[0], 0] == pytest.approx(7.75)


def test_old_positions_get_shorter_n_steps():
    # n = 3 shrinks by one per 2 env steps stored after a position (EfficientZero's
    # off-policy correction), to at least 1; gamma = .5, K = 1; one truncated 6-step episode.
    rep = Replay(VECTOR, ReplayConfig(capacity_steps=64, min_steps_to_sample=1),
                 TargetConfig(num_unroll_steps=1, td_steps=3, td_shrink_every_steps=2,
                              stack_frames=1), 0, discount=0.5)
    rep.insert(segment(VECTOR, 7, 0, R6, V6, truncated=True))
    b, rows = by_position(rep, 6)
    # Steps stored after position i: 5 - i, so n_i = max(1, 3 - (5 - i) // 2) = 1, 1, 2, 2, 3, 3,
    # and both unrolled steps of row i use n_i:
    #   n = 1: z_t = r_t + .5 v_{t+1}: z0 = 1 + 10 = 11, z1 = 2 + 15 = 17, z2 = 3 + 20 = 23
    #   n = 2: z2 = 3 + 2 + .25 * 50 = 17.5, z3 = 4 + 2.5 + .25 * 60 = 21.5,
    #          z4 = r4 + .5 v5 = 35 (the truncated end: bootstrap from the last value)
    #   n = 3: z4 = 35, z5 = v5 = 60, t = 6 masked
    expected = {0: [11, 17], 1: [17, 23], 2: [17.5, 21.5], 3: [21.5, 35], 4: [35, 60], 5: [60, 0]}
    for i, z in expected.items():
        assert b["target_value"][rows[i]].tolist() == pytest.approx(z), i
    # Without the correction position 0 would use n = 3: 1 + 1 + .75 + .125 * 40 = 7.75.
    # Four more steps (another episode) age every position by 4: n_3 = max(1, 3 - 6 // 2) = 1,
    # so z3 = r3 + .5 v4 = 4 + 25 = 29; the new episode's last position (age 0) keeps n = 3.
    rep.insert(segment(VECTOR, 8, 0, [1, 1, 1, 1], [8, 8, 8, 8], terminated=True))
    b, rows = by_position(rep, 10)
    assert b["target_value"][rows[3], 0] == pytest.approx(29.0)
    assert b["target_value"][rows[5], 0] == pytest.approx(60.0)
    # Position 6 (the new episode's first, age 3): n = 2, z = 1 + .5 * 1 + .25 * v8 = 1.5 + 2 = 3.5;
    # position 9 (age 0, n = 3): terminated after it, z = r9 = 1.
    assert b["target_value"][rows[6], 0] == pytest.approx(3.5)
    assert b["target_value"][rows[9], 0] == pytest.approx(1.0)


def test_monte_carlo_return():
    rep = replay(VECTOR, k=0, td=-1, discount=0.5)
    rep.insert(segment(VECTOR, 0, 0, [1, 2, 3, 4], [9, 9, 9, 9], terminated=True))
    b, rows = by_position(rep, 4)
    # z0 = 1 + 1 + .75 + .5 = 3.25; z1 = 2 + 1.5 + 1 = 4.5; z2 = 3 + 2 = 5; z3 = 4.
    for i, z in enumerate([3.25, 4.5, 5.0, 4.0]):
        assert b["target_value"][rows[i], 0] == pytest.approx(z)
    assert b["actions"].shape == (256, 0)


def test_two_player_signs_follow_to_play():
    # Players alternate 0,1,0,1,0; rewards are from the mover's point of view and the mover
    # of step 4 wins (+1); values are from the point of view of the player to move.
    to_play, rewards, values = [0, 1, 0, 1, 0], [0.5, 0, 0, 0, 1], [.1, .2, .3, .4, .5]
    rep = replay(BOARD, k=1, td=2, discount=0.9)
    rep.insert(segment(BOARD, 5, 0, rewards, values, to_play=to_play, terminated=True))
    b, rows = by_position(rep, 5)
    # z0 = r0 - .9 r1 + .81 v2 = .5 + .243 = .743   (player 0 moves at 0, 2, 4)
    # z1 = r1 - .9 r2 + .81 v3 = .324               (player 1 moves at 1, 3)
    # z2 = r2 - .9 r3 + .81 v4 = .405
    # z3 = r3 - .9 r4 = -.9  (terminal after step 4: no bootstrap)
    # z4 = r4 = 1
    z = [0.743, 0.324, 0.405, -0.9, 1.0]
    for i, row in rows.items():
        assert b["target_value"][row, 0] == pytest.approx(z[i], abs=1e-6)
    # the reward target is not flipped: after a_3 (player 1) it is r3 = 0, after a_4 it is +1
    assert b["target_reward"][rows[4], 1] == 1.0
    # Monte-Carlo with discount 1: +1 for player 0's positions, -1 for player 1's, plus r0 at 0.
    rep = replay(BOARD, k=0, td=-1, discount=1.0)
    rep.insert(segment(BOARD, 5, 0, rewards, values, to_play=to_play, terminated=True))
    b, rows = by_position(rep, 5)
    assert [b["target_value"][rows[i], 0] for i in range(5)] == pytest.approx([1.5, -1, 1, -1, 1])


def test_image_stack_crosses_segments_and_pads_episode_start():
    # Frames hold 10 + step; a_j = j % 3. Episode 9 in segments of 3, 2, 2, interleaved with
    # another episode so that consecutive steps are not in consecutive slots.
    stack = 3
    rep = replay(IMAGE, k=1, td=1, discount=1.0, stack=stack)

    def frames(start, t):
        return (10 + start + np.arange(t, dtype=np.uint8))[:, None, None, None] * np.ones(
            (1, 4, 4, 1), np.uint8)

    other = dict(frames=np.full((2, 4, 4, 1), 200, np.uint8))
    rep.insert(segment(IMAGE, 9, 0, [0] * 3, [0] * 3, frames=frames(0, 3)))
    rep.insert(segment(IMAGE, 4, 0, [0] * 2, [0] * 2, **other))
    rep.insert(segment(IMAGE, 9, 3, [0] * 2, [0] * 2, frames=frames(3, 2)))
    rep.insert(segment(IMAGE, 4, 2, [0] * 2, [0] * 2, **other))
    rep.insert(segment(IMAGE, 9, 5, [0] * 2, [0] * 2, frames=frames(5, 2)))
    b = rep.sample(512)
    position_of = {0: 0, 1: 1, 2: 2, 5: 3, 6: 4, 9: 5, 10: 6}  # global index -> step of ep. 9
    seen = set()
    for row, idx in enumerate(b["index"]):
        obs = b["observation"][row]
        assert obs.shape == (4, 4, 2 * stack)
        if int(idx) not in position_of:
            continue
        j = position_of[int(idx)]
        seen.add(j)
        for m in range(stack):  # frame m holds step j - 2 + m
            step = j - (stack - 1) + m
            assert np.all(obs[..., m] == (10 + step if step >= 0 else 0))
            # plane: round(255 * (a + 1) / 3) for the action a_{step-1} that led to the frame
            plane = round(255 * ((step - 1) % 3 + 1) / 3) if step >= 1 else 0
            assert np.all(obs[..., stack + m] == plane)
    assert seen == set(range(7))


def test_values_fn_replaces_bootstrap_values():
    rep = replay(VECTOR, k=1, td=2, discount=0.5)
    rep.insert(segment(VECTOR, 0, 0, R6, V6, truncated=True))
    calls = []

    def values_fn(observation, index):
        calls.append(index.copy())
        assert observation.shape == (len(index), 2)
        return -1000.0 - index  # a recognisable "fresh" value per position

    b = rep.sample(64, values_fn=values_fn)
    assert len(calls) == 1 and len(np.unique(calls[0])) == len(calls[0])
    for row, i in enumerate(b["index"]):
        i = int(i)
        bootstrap = min(i + 2, 5)  # truncated: the last stored position is 5
        partial = sum(0.5 ** (u - i) * R6[u] for u in range(i, bootstrap))
        fresh = -1000.0 - bootstrap
        assert b["target_value"][row, 0] == pytest.approx(partial + 0.5 ** (bootstrap - i) * fresh)


def test_replay_input_equals_actor_frame_history():
    # The actor's rolling window and the replay must build the same input for a position.
    from muzero import observation
    history_cls = getattr(observation, "FrameHistory", None)
    if history_cls is None:
        pytest.skip("muzero.observation.FrameHistory not available")
    stack, steps = 4, 9
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (steps, 4, 4, 1), dtype=np.uint8)
    actions = rng.integers(0, 3, steps)
    history = history_cls(1, (4, 4, 1), stack, 3)
    history.start(frames[:1], np.array([True]))
    actor_inputs = [history.network_input()[0]]
    for j in range(1, steps):
        history.push(frames[j:j + 1], actions[j - 1:j])
        actor_inputs.append(history.network_input()[0])
    rep = replay(IMAGE, k=1, td=1, discount=1.0, stack=stack)
    rep.insert(segment(IMAGE, 0, 0, [0] * 5, [0] * 5, frames=frames[:5], actions=actions[:5]))
    rep.insert(segment(IMAGE, 0, 5, [0] * 4, [0] * 4, frames=frames[5:], actions=actions[5:]))
    b, rows = by_position(rep, steps)
    for j, row in rows.items():
        np.testing.assert_array_equal(b["observation"][row], actor_inputs[j])
