"""Config validation, temperature schedule and JSON round trip."""
import json

import pytest

from muzero.algorithms.muzero.config import (MuZeroConfig, NetworkConfig, ReplayConfig, SupportConfig,
                                             TargetConfig, TrainingConfig)
from muzero.config import ConfigError, parse_override
from muzero.config import from_dict as config_from_dict
from muzero.mcts.config import SearchConfig


@pytest.mark.parametrize("cls,kwargs,needle", [
    (SearchConfig, {"num_simulations": 0}, "SearchConfig.num_simulations=0"),
    (SearchConfig, {"num_simulations": 2.5}, "must be an integer"),
    (SearchConfig, {"parent_visit_offset": 2}, "in [0, 1]"),
    (SearchConfig, {"discount": 1.5}, "SearchConfig.discount=1.5"),
    (SearchConfig, {"discount": 0.0}, "(0.0, 1.0]"),
    (SearchConfig, {"root_exploration_fraction": -0.1}, "root_exploration_fraction"),
    (SearchConfig, {"known_bounds": (1.0, -1.0)}, "low < high"),
    (SearchConfig, {"temperature_factors": (1.0,)}, "exactly len(temperature_steps)+1 = 3"),
    (SearchConfig, {"temperature_steps": (10, 5)}, "increasing"),
    (SearchConfig, {"greedy_after_moves": -2}, "SearchConfig.greedy_after_moves=-2"),
    (TargetConfig, {"td_steps": 0}, "-1 (Monte-Carlo) or >= 1"),
    (TargetConfig, {"num_unroll_steps": -1}, "num_unroll_steps=-1"),
    (ReplayConfig, {"capacity_steps": 10, "min_steps_to_sample": 20}, "<= capacity_steps (10)"),
    (ReplayConfig, {"importance_sampling_exponent": 2.0}, "[0.0, 1.0]"),
    (TrainingConfig, {"optimizer": "rmsprop"}, "one of ['adam', 'sgd']"),
    (TrainingConfig, {"learning_rate": 0.0}, "learning_rate=0.0"),
    (TrainingConfig, {"batch_size": True}, "must be an integer"),
    (SupportConfig, {"low": 1.0, "high": 1.0}, "must be < high"),
    (TargetConfig, {"reanalyse_values": 1}, "TargetConfig.reanalyse_values=1 is invalid: must be true or false"),
    (NetworkConfig, {"conv_downsample": "no"}, "NetworkConfig.conv_downsample='no'"),
    (NetworkConfig, {"jit_compile": None}, "NetworkConfig.jit_compile=None"),
    (NetworkConfig, {"mlp_residual_dynamics": 1}, "NetworkConfig.mlp_residual_dynamics=1 is invalid: must be true"),
    (NetworkConfig, {"init_seed": -2}, "NetworkConfig.init_seed=-2 is invalid: must be an integer in [-1, 4294967295]"),
    (TargetConfig, {"reanalyse_values": True, "value_target_update_steps": -1},
     "TargetConfig.value_target_update_steps=-1 is invalid: must be an integer in [0, 1000000000]"),
    (TrainingConfig, {"augment_symmetries": "true"}, "TrainingConfig.augment_symmetries='true'"),
    (TargetConfig, {"td_shrink_every_steps": -5}, "TargetConfig.td_shrink_every_steps=-5 is invalid"),
    (TargetConfig, {"td_steps": -1, "td_shrink_every_steps": 100}, "Monte-Carlo targets (td_steps=-1) have no n"),
])
def test_bad_values_name_field_and_range(cls, kwargs, needle):
    with pytest.raises(ConfigError) as err:
        cls(**kwargs)
    assert needle in str(err.value)


def test_one_discount_and_config_json_written_with_two_still_loads():
    # config.json files once held the discount in both sections (equal, by a check).
    old = MuZeroConfig().to_dict()
    old["search"]["discount"] = old["targets"]["discount"] = 0.95
    assert MuZeroConfig.from_dict(old).search.discount == 0.95
    del old["search"]["discount"]   # only the targets' copy: it moves to the search
    assert MuZeroConfig.from_dict(old).search.discount == 0.95
    old["search"]["discount"] = 0.9
    with pytest.raises(ConfigError, match=r"targets.discount=0.95 disagrees with search.discount=0.9"):
        MuZeroConfig.from_dict(old)
    with pytest.raises(ConfigError, match=r"TargetConfig.discount is search.discount now"):
        config_from_dict(TargetConfig, {"discount": 0.9})
    with pytest.raises(ConfigError, match=r"--set: targets.discount is search.discount now: "
                                          r"use --set=search.discount=0.9$"):
        parse_override("targets.discount=0.9", {"search": SearchConfig, "targets": TargetConfig})


def test_defaults_follow_the_documented_sources():
    s, t, tr = SearchConfig(), TargetConfig(), TrainingConfig()
    assert (s.pb_c_base, s.pb_c_init, s.num_simulations, s.discount) == (19652.0, 1.25, 50, 0.997)
    assert (s.parent_visit_offset, s.dirichlet_alpha) == (0, 0.25)  # paper, not SEED (1, 0.5)
    assert (t.td_steps, t.num_unroll_steps) == (10, 5)
    assert (tr.batch_size, tr.learning_rate, tr.weight_decay, tr.optimizer) == (64, 1e-3, 1e-5, "adam")
    assert NetworkConfig().value_support.num_bins == 601


def test_temperature_schedule_uses_learner_steps():
    s = SearchConfig(temperature=2.0, temperature_steps=(100, 200), temperature_factors=(1.0, 0.5, 0.25))
    assert [s.temperature_at(x) for x in (0, 99, 100, 199, 200, 10**9)] == [2.0, 2.0, 1.0, 1.0, 0.5, 0.5]


def test_json_round_trip_and_unknown_keys():
    cfg = MuZeroConfig(search=SearchConfig(num_simulations=7, known_bounds=(-1, 1)),
                       network=NetworkConfig(value_support=SupportConfig(-2, 1, 8, False)))
    text = cfg.to_json()
    again = MuZeroConfig.from_json(text)
    assert again == cfg
    assert again.search.known_bounds == (-1.0, 1.0)
    data = json.loads(text)
    data["search"]["num_simulation"] = 3
    with pytest.raises(ConfigError, match=r"unknown field\(s\) \['num_simulation'\]"):
        MuZeroConfig.from_dict(data)
    data = json.loads(text)
    data["training"]["batch_size"] = 0
    with pytest.raises(ConfigError, match="TrainingConfig.batch_size=0"):
        MuZeroConfig.from_dict(data)
