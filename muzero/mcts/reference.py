"""Plain-Python MCTS that follows the MuZero pseudocode, one tree at a time; for tests only.

This is the yardstick the Numba kernels are tested against. It is written like the
pseudocode published with the MuZero paper (arXiv 1911.08265, ``pseudocode.py``):
``Node`` objects with a dict of children, ``MinMaxStats``, ``ucb_score``,
``select_child``, ``expand_node``, ``backpropagate``, ``add_exploration_noise``, in
Python floats (float64). Where this package differs from the pseudocode, the
reference does the same so that parity tests compare like with like; each such place
is marked ``# deviation:`` and listed in docs/SEARCH.md:

- two-player games: values are stored from the point of view of the player to move at
  each node; the return flips sign across a change of player, and Q(s, a) seen from the
  parent is ``reward + discount * sign * value(child)``;
- ties in selection go to the lowest action id (the pseudocode's ``max`` over tuples
  gives the highest);
- the softmax subtracts the largest legal logit before ``exp``;
- an interior node whose legal mask allows nothing treats every action as legal;
- the parent-visit offset (SEED) and a depth cut-off are options;
- floating-point work that decides ties is done in the kernels' order (see "Ties" in
  docs/SEARCH.md): value sums are a running sum plus the TwoSum rounding errors of its
  additions (the exact sum of the returns, rounded once: independent of the order the
  returns arrive in), the pUCT score is ``E * (prior / (n + 1)) + (q - min) * (1 /
  (max - min))`` with ``E = c(N) * sqrt(N + offset)``, and the completed Q of Gumbel
  MuZero sums over children in the order their nodes were first created.

Each simulation ``s`` numbers the node it creates ``s + 1`` (the root is 0), the same
wire contract as the kernels, so tests can compare (parent, action, new node) per step.
Never used on a hot path. Imports only the standard library; never TensorFlow.
"""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence

# network(parent_id, action, new_id) -> (reward, value, policy_logits [A], legal_mask [A] or None)
OneTreeNetwork = Callable[[int, int, int], tuple]


class MinMaxStats:
    """Running min and max of Q values in one tree (optionally starting from known bounds)."""

    def __init__(self, known_bounds: Optional[Sequence[float]]):
        self.maximum = known_bounds[1] if known_bounds else -math.inf
        self.minimum = known_bounds[0] if known_bounds else math.inf

    def update(self, value: float):
        self.maximum = max(self.maximum, value)
        self.minimum = min(self.minimum, value)

    def normalize(self, value: float) -> float:
        if self.maximum > self.minimum:
            # deviation (tie-exact arithmetic): times the reciprocal, as the kernels.
            return (value - self.minimum) * (1.0 / (self.maximum - self.minimum))
        return value


class Node:
    def __init__(self, prior: float, depth: int):
        self.visit_count = 0
        self.to_play = 0
        self.prior = prior
        self.value_sum = 0.0
        self.value_error = 0.0   # TwoSum rounding errors of the value_sum additions
        self.children = {}
        self.reward = 0.0
        self.node_id = -1
        self.first_id = -1   # node id of the first evaluation (kept across depth cut-offs)
        self.depth = depth
        self.raw_value = 0.0   # the network's value when the node was expanded (Gumbel MuZero)

    def expanded(self) -> bool:
        return len(self.children) > 0

    def value(self) -> float:
        if self.visit_count == 0:
            return 0.0
        # deviation (tie-exact arithmetic): value_sum + value_error is the exact sum of the
        # returns, rounded once here, so the order they arrived in does not matter.
        return (self.value_sum + self.value_error) / self.visit_count

    def add_return(self, value: float):
        """value_sum += value, with the rounding error kept by Knuth's TwoSum."""
        total = self.value_sum + value
        moved = total - self.value_sum
        self.value_error += (self.value_sum - (total - moved)) + (value - moved)
        self.value_sum = total


def _sign(parent: Optional[Node], child: Node) -> float:
    # deviation: two-player sign; +1 at the root (no parent), as the pseudocode's root update.
    if parent is None or parent.to_play == child.to_play:
        return 1.0
    return -1.0


def _q(parent: Node, child: Node, discount: float) -> float:
    return child.reward + discount * (_sign(parent, child) * child.value())


def ucb_score(config, parent: Node, child: Node, min_max_stats: MinMaxStats) -> float:
    pb_c = math.log((parent.visit_count + config.pb_c_base + 1) / config.pb_c_base) + config.pb_c_init
    # deviation (option): SEED adds parent_visit_offset = 1; the paper uses 0.
    pb_c *= math.sqrt(parent.visit_count + config.parent_visit_offset)
    # deviation (tie-exact arithmetic): c(N) sqrt(N + offset) times prior / (n + 1), the
    # kernels' order (the pseudocode divides pb_c by n + 1 first).
    prior_score = pb_c * (child.prior / (child.visit_count + 1))
    if child.visit_count > 0:
        value_score = min_max_stats.normalize(_q(parent, child, config.discount))
    else:
        value_score = 0
    return prior_score + value_score


def select_child(config, node: Node, min_max_stats: MinMaxStats):
    best = None
    for action in sorted(node.children):
        child = node.children[action]
        score = ucb_score(config, node, child, min_max_stats)
        if best is None or score > best[0]:   # deviation: ties keep the lowest action id
            best = (score, action, child)
    return best[1], best[2]


def expand_node(node: Node, to_play: int, reward: float, policy_logits: Sequence[float],
                legal_mask: Optional[Sequence[bool]]):
    node.to_play = to_play
    node.reward = float(reward)
    actions = [a for a in range(len(policy_logits)) if legal_mask is None or legal_mask[a]]
    if not actions:   # deviation: past the end of the game every action counts as legal
        actions = list(range(len(policy_logits)))
    top = max(float(policy_logits[a]) for a in actions)   # deviation: stable softmax
    policy = {a: math.exp(float(policy_logits[a]) - top) for a in actions}
    policy_sum = 0.0
    for a in actions:
        policy_sum += policy[a]
    # Children keep statistics across a depth cut-off re-evaluation.
    old = node.children
    node.children = {}
    for a in actions:
        child = old.get(a) or Node(0.0, node.depth + 1)
        child.prior = policy[a] / policy_sum
        node.children[a] = child


def add_exploration_noise(config, node: Node, noise: Sequence[float]):
    frac = config.root_exploration_fraction
    for a in node.children:
        node.children[a].prior = node.children[a].prior * (1 - frac) + float(noise[a]) * frac


def backpropagate(search_path: List[Node], value: float, discount: float,
                  min_max_stats: MinMaxStats):
    # deviation: the return g is carried in each node's own player's view.
    for i in range(len(search_path) - 1, -1, -1):
        node = search_path[i]
        parent = search_path[i - 1] if i > 0 else None
        node.add_return(value)   # deviation: node.value_sum += value, as an exact sum
        node.visit_count += 1
        min_max_stats.update(node.reward + discount * (_sign(parent, node) * node.value()))
        value = node.reward + discount * (_sign(parent, node) * value)


def run_mcts(config, root_value: float, root_logits: Sequence[float],
             root_mask: Optional[Sequence[bool]], root_to_play: int, network: OneTreeNetwork,
             noise: Optional[Sequence[float]]) -> dict:
    """One search on one tree; returns the root, per-simulation trace and root statistics.

    noise: Dirichlet draws [A] (entries at illegal actions ignored), or None for no noise.
    The result has ``trace`` [(parent_id, action, new_id)] per simulation,
    ``visit_counts`` [A], ``root_value``, ``root_q`` [A] (0 where unvisited) and ``root``.
    """
    root = Node(0.0, 0)
    root.node_id = 0
    expand_node(root, root_to_play, 0.0, root_logits, root_mask)
    if noise is not None:
        add_exploration_noise(config, root, noise)
    min_max_stats = MinMaxStats(config.known_bounds)
    trace = []
    for sim in range(config.num_simulations):
        node = root
        search_path = [node]
        while node.expanded() and not (config.max_depth > 0 and node.depth >= config.max_depth):
            action, node = select_child(config, node, min_max_stats)
            search_path.append(node)
        parent = search_path[-2]
        node.node_id = sim + 1
        if node.first_id < 0:
            node.first_id = node.node_id
        trace.append((parent.node_id, action, node.node_id))
        reward, value, logits, mask = network(parent.node_id, action, node.node_id)
        to_play = 1 - parent.to_play if config.two_player else parent.to_play
        expand_node(node, to_play, reward, logits, mask)
        backpropagate(search_path, float(value), config.discount, min_max_stats)
    num_actions = len(root_logits)
    visit_counts = [0] * num_actions
    root_q = [0.0] * num_actions
    for a, child in root.children.items():
        visit_counts[a] = child.visit_count
        if child.visit_count > 0:
            root_q[a] = _q(root, child, config.discount)
    return {"trace": trace, "visit_counts": visit_counts, "root_value": root.value(),
            "root_q": root_q, "root": root}


# -- Gumbel MuZero (Danihelka et al. 2022), written after mctx's gumbel_muzero_policy ----------

def considered_visits(max_num_considered: int, num_simulations: int) -> List[int]:
    """mctx's seq_halving.get_sequence_of_considered_visits."""
    if max_num_considered <= 1:
        return list(range(num_simulations))
    log2max = int(math.ceil(math.log2(max_num_considered)))
    sequence: List[int] = []
    visits = [0] * max_num_considered
    num_considered = max_num_considered
    while len(sequence) < num_simulations:
        num_extra_visits = max(1, int(num_simulations / (log2max * num_considered)))
        for _ in range(num_extra_visits):
            sequence.extend(visits[:num_considered])
            for i in range(num_considered):
                visits[i] += 1
        num_considered = max(2, num_considered // 2)
    return sequence[:num_simulations]


def completed_sigma(config, node: Node, creation_order: bool = True,
                    tree_stats: Optional[MinMaxStats] = None) -> dict:
    """mctx's qtransform_completed_by_mix_value over the node's (legal) actions: {a: sigma(a)}.

    The mixed value sums over the visited children in the order their nodes were first
    created (the kernels' selection), or in action order with ``creation_order=False`` (the
    kernels' root outputs, computed from the synced Tree). With ``tree_stats``
    (config.gumbel_q_range = "tree") the rescaling range is widened to the tree's
    [minimum, maximum]."""
    actions = sorted(node.children)
    visits = {a: node.children[a].visit_count for a in actions}
    q = {a: _q(node, node.children[a], config.discount) for a in actions if visits[a] > 0}
    probs = {a: max(node.children[a].prior, 2.2250738585072014e-308) for a in actions}
    sum_visits = sum(visits.values())
    # deviation (tie-exact arithmetic): the kernels' sums, over the visited children in the
    # order they were first created, and sum(p q) / sum(p) instead of mctx's sum(p q / sum(p)).
    visited = [a for a in actions if visits[a] > 0]
    if creation_order:
        visited.sort(key=lambda a: node.children[a].first_id)
    sum_probs = 0.0
    sum_pq = 0.0
    for a in visited:
        sum_probs += probs[a]
        sum_pq += probs[a] * q[a]
    mixed = node.raw_value if sum_visits == 0 else (
        (node.raw_value + sum_visits * (sum_pq / sum_probs)) / (sum_visits + 1))
    completed = {a: q[a] if visits[a] > 0 else mixed for a in actions}
    low, high = min(completed.values()), max(completed.values())
    if tree_stats is not None:
        low, high = min(low, tree_stats.minimum), max(high, tree_stats.maximum)
    # deviation (tie-exact arithmetic): the scale first, then times (q - min), as the kernels.
    scale = (config.gumbel_maxvisit_init + max(visits.values())) * config.gumbel_value_scale / max(
        high - low, 1e-8)
    return {a: scale * (completed[a] - low) for a in actions}


def _log_softmax(values: dict) -> dict:
    top = max(values.values())
    total = sum(math.exp(v - top) for v in values.values())
    return {a: v - top - math.log(total) for a, v in values.items()}


def gumbel_interior_child(config, node: Node, tree_stats: Optional[MinMaxStats] = None):
    """argmax_a softmax(log prior + sigma)(a) - N(a) / (1 + sum N); lowest id on ties."""
    sigma = completed_sigma(config, node, tree_stats=tree_stats)
    logits = {a: math.log(c.prior) if c.prior > 0 else -math.inf for a, c in node.children.items()}
    finite = {a: logits[a] + sigma[a] for a in logits if logits[a] > -math.inf}
    log_probs = _log_softmax(finite)
    sum_visits = sum(c.visit_count for c in node.children.values())
    best = None
    for a in sorted(node.children):
        prob = math.exp(log_probs[a]) if a in log_probs else 0.0
        score = prob - node.children[a].visit_count / (1 + sum_visits)
        if best is None or score > best[0]:
            best = (score, a)
    return best[1], node.children[best[1]]


def _root_score(config, root: Node, root_logp: dict, gumbel: Sequence[float], sigma: dict, a: int) -> float:
    return max(-1e9, float(gumbel[a]) * config.gumbel_scale + root_logp[a] + sigma[a])


def run_gumbel_mcts(config, root_value: float, root_logits: Sequence[float], root_mask: Optional[Sequence[bool]],
                    root_to_play: int, network: OneTreeNetwork, gumbel: Sequence[float]) -> dict:
    """Gumbel MuZero on one tree: sequential halving at the root, the deterministic interior
    rule below, no Dirichlet noise. ``gumbel`` [A]: Gumbel(0, 1) draws (scaled by
    config.gumbel_scale; zeros for evaluation). Returns run_mcts's fields plus
    ``improved_policy`` [A] and ``action``."""
    root = Node(0.0, 0)
    root.node_id = 0
    root.raw_value = float(root_value)
    expand_node(root, root_to_play, 0.0, root_logits, root_mask)
    root_logp = _log_softmax({a: float(root_logits[a]) for a in root.children})
    num_considered = min(config.max_num_considered_actions, len(root.children))
    schedule = considered_visits(num_considered, config.num_simulations)
    # The tree's Q bounds, as pUCT keeps them; they reach sigma only with gumbel_q_range "tree".
    min_max_stats = MinMaxStats(config.known_bounds)
    tree_stats = min_max_stats if config.gumbel_q_range == "tree" else None
    trace = []
    for sim in range(config.num_simulations):
        sigma = completed_sigma(config, root, tree_stats=tree_stats)
        best = None
        for a in sorted(root.children):
            if root.children[a].visit_count != schedule[sim]:
                continue
            score = _root_score(config, root, root_logp, gumbel, sigma, a)
            if best is None or score > best[0]:
                best = (score, a)
        action, node = best[1], root.children[best[1]]
        search_path = [root, node]
        while node.expanded() and not (config.max_depth > 0 and node.depth >= config.max_depth):
            action, node = gumbel_interior_child(config, node, tree_stats)
            search_path.append(node)
        parent = search_path[-2]
        node.node_id = sim + 1
        if node.first_id < 0:
            node.first_id = node.node_id
        trace.append((parent.node_id, action, node.node_id))
        reward, value, logits, mask = network(parent.node_id, action, node.node_id)
        to_play = 1 - parent.to_play if config.two_player else parent.to_play
        expand_node(node, to_play, reward, logits, mask)
        node.raw_value = float(value)
        backpropagate(search_path, float(value), config.discount, min_max_stats)
    num_actions = len(root_logits)
    sigma = completed_sigma(config, root, creation_order=False, tree_stats=tree_stats)
    log_improved = _log_softmax({a: root_logp[a] + sigma[a] for a in root.children})
    improved = [math.exp(log_improved[a]) if a in log_improved else 0.0 for a in range(num_actions)]
    most = max(c.visit_count for c in root.children.values())
    best = None
    for a in sorted(root.children):
        if root.children[a].visit_count == most:
            score = _root_score(config, root, root_logp, gumbel, sigma, a)
            if best is None or score > best[0]:
                best = (score, a)
    visit_counts = [0] * num_actions
    root_q = [0.0] * num_actions
    for a, child in root.children.items():
        visit_counts[a] = child.visit_count
        if child.visit_count > 0:
            root_q[a] = _q(root, child, config.discount)
    return {"trace": trace, "visit_counts": visit_counts, "root_value": root.value(), "root_q": root_q,
            "root": root, "improved_policy": improved, "action": best[1]}
