"""Which requests a prefetch call should carry: the paper's Appendix C, in two request models.

Node-level model (the paper). Every node v of the prefetching tree decides one MH
transition; expanding v costs ONE request, the proposal at its acceptance child v+, and
is possible when v is *expandable* (Condition 1: the request's cut does not exceed the
node's own cut index, so the proposal can be generated from the root's prefix). The
candidate set I_max holds the expandable nodes above the depth cap whose strict ancestors
are all expandable; a selection is an ancestor-closed subset of it. With branch
probabilities h(v+) (the true A, its epsilon-rounding h(v+; eps) of eq. 10, or the
classifier's estimate h_hat of eq. 14) a walk from the root completes, in expectation,

    F_I(v0) = sum_{v in I} R(v)                       (Lemma 1, reaching weights eq. 11)
            = 1 + h(v+) F_I(v+) + h(v-) F_I(v-)       (Lemma 2, for v in I)

transitions, and Proposition 2's dynamic program finds the selection of at most N_pf
requests that maximizes it. The paper's BFS fills the budget in breadth-first order
instead, and (as its implementation does) may spend requests below a deferred node.

Shared-request model (this codebase). Random inputs are keyed by transition, so every
node at depth d shares the cut c_d and the suffix seed: all feasible depth-d nodes are
served by ONE request, and a call covers whole depths. A plan is a prefix of depths
{0, ..., m-1}; the walk realizes transition d when every accepted proposal above it kept
the root's first c_d tokens: at the cut level, when the smallest cut accepted so far is
>= c_d, and beyond it when the accepted suffixes happen to repeat the root's tokens.
:func:`shared_request_walk` computes P(transition d is realized) by a dynamic
program over (depth, node cut, agreement with the root, accepts so far).

Everything here is pure numpy over small trees; the oracle replay (scripts/oracle_bound.py),
the predictive traversal and the unit tests share it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

ROOT, ACCEPT, REJECT = "root", "accept", "reject"


def rounded_branch_probability(accept: np.ndarray | float, epsilon: float) -> np.ndarray:
    """h(v+; eps) of eq. 10: 0 if A <= eps, 1 if A >= 1 - eps, else A itself."""
    accept = np.asarray(accept, dtype=np.float64)
    return np.where(accept <= epsilon, 0.0, np.where(accept >= 1.0 - epsilon, 1.0, accept))


def predicted_branch_probability(p_reject: np.ndarray | float, p_accept: np.ndarray | float) -> np.ndarray:
    """h_hat(v+; eps) of eq. 14: the class-weighted mean of 0 (reject), 1 (accept) and 1/2 (uncertain).

    Lemma 3: with exact class probabilities, 1/2 for the uncertain class is the value whose
    worst-case error over every A in (eps, 1 - eps) is smallest.
    """
    return 0.5 * (1.0 + np.asarray(p_accept, dtype=np.float64) - np.asarray(p_reject, dtype=np.float64))


@dataclass
class PrefetchTree:
    """A finite node-level prefetching tree; node 0 is the root, children have larger ids.

    ``expandable[v]``: the request of v (the proposal at v+) satisfies Condition 1.
    ``accept_child[v]`` / ``reject_child[v]``: ids of v+ and v-, or -1 when absent (a
    logged tree holds only part of the infinite tree; absent children are leaves).
    """

    parent: list[int]
    branch: list[str]
    depth: list[int]
    expandable: list[bool]
    accept_child: list[int]
    reject_child: list[int]

    @classmethod
    def from_edges(
        cls, parents: Sequence[int | None], branches: Sequence[str], expandable: Sequence[bool]
    ) -> PrefetchTree:
        """Build from per-node parent ids (None for the root), branch names and Condition 1 flags."""
        n = len(parents)
        if not (len(branches) == len(expandable) == n) or n == 0:
            raise ValueError("parents, branches and expandable must be non-empty and of equal length")
        tree = cls([], [], [], [], [-1] * n, [-1] * n)
        for v, (p, b, e) in enumerate(zip(parents, branches, expandable, strict=True)):
            if (p is None) != (v == 0):
                raise ValueError(f"node {v}: only node 0 is the root (parent None)")
            if p is not None and not 0 <= p < v:
                raise ValueError(f"node {v}: parent {p} must be an earlier node")
            tree.parent.append(-1 if p is None else int(p))
            tree.branch.append(ROOT if p is None else b)
            tree.depth.append(0 if p is None else tree.depth[p] + 1)
            tree.expandable.append(bool(e))
            if p is not None:
                slots = tree.accept_child if b == ACCEPT else tree.reject_child if b == REJECT else None
                if slots is None or slots[p] != -1:
                    raise ValueError(f"node {v}: branch must be a free 'accept' or 'reject' slot of node {p}")
                slots[p] = v
        return tree

    def add_node(self, parent: int, branch: str, expandable: bool) -> int:
        """Append a child (the oracle replay adds the unlogged nodes below deferred ones)."""
        v = len(self.parent)
        slots = self.accept_child if branch == ACCEPT else self.reject_child
        if slots[parent] != -1:
            raise ValueError(f"node {parent} already has a {branch} child")
        slots[parent] = v
        self.parent.append(parent)
        self.branch.append(branch)
        self.depth.append(self.depth[parent] + 1)
        self.expandable.append(bool(expandable))
        self.accept_child.append(-1)
        self.reject_child.append(-1)
        return v

    def __len__(self) -> int:
        return len(self.parent)

    def candidates(self, depth_cap: int) -> np.ndarray:
        """I_max as a mask: expandable, depth < K', and every strict ancestor a candidate."""
        mask = np.zeros(len(self), dtype=bool)
        for v in range(len(self)):
            ok = self.expandable[v] and self.depth[v] < depth_cap
            mask[v] = ok and (v == 0 or mask[self.parent[v]])
        return mask

    def is_ancestor_closed(self, selection: Iterable[int]) -> bool:
        chosen = set(selection)
        return all(v == 0 or self.parent[v] in chosen for v in chosen)


def reaching_weights(tree: PrefetchTree, h_accept: Sequence[float] | np.ndarray) -> np.ndarray:
    """R(v) of eq. 11: the product of branch probabilities from the root to v."""
    h = np.asarray(h_accept, dtype=np.float64)
    weights = np.ones(len(tree))
    for v in range(1, len(tree)):
        p = tree.parent[v]
        weights[v] = weights[p] * (h[p] if tree.branch[v] == ACCEPT else 1.0 - h[p])
    return weights


def expected_transitions(tree: PrefetchTree, selection: Iterable[int], h_accept: Sequence[float]) -> float:
    """Lemma 1: F_I(v0) = sum of reaching weights over an ancestor-closed selection I."""
    chosen = sorted(set(selection))
    if not tree.is_ancestor_closed(chosen):
        raise ValueError("Lemma 1 needs an ancestor-closed selection; use expected_transitions_recursive")
    return float(reaching_weights(tree, h_accept)[chosen].sum()) if chosen else 0.0


def expected_transitions_recursive(tree: PrefetchTree, selection: Iterable[int], h_accept: Sequence[float]) -> float:
    """Lemma 2 for ANY node set: a walk stops at the first node outside it (so nodes below a gap count 0)."""
    chosen = set(selection)
    h = np.asarray(h_accept, dtype=np.float64)
    value = np.zeros(len(tree) + 1)  # index -1 (absent child) reads the trailing 0
    for v in reversed(range(len(tree))):
        if v in chosen:
            value[v] = 1.0 + h[v] * value[tree.accept_child[v]] + (1.0 - h[v]) * value[tree.reject_child[v]]
    return float(value[0])


@dataclass(frozen=True)
class Allocation:
    """An optimal selection for one budget, and the optimum V(v0, b) for every b <= budget."""

    value: float
    selection: frozenset[int]
    values_by_budget: np.ndarray


class AllocationProgram:
    """Proposition 2 solved once for every budget up to ``max_budget``.

    V(v, b) = 0 outside I_max or for b = 0, else
    V(v, b) = 1 + max_{0 <= m <= b-1} [h(v+) V(v+, m) + h(v-) V(v-, b-1-m)].
    Children are solved before parents (they have larger ids), each V(v, .) as one array
    over budgets, so the cost is O(|tree| * max_budget^2); :meth:`selection` rebuilds an
    optimal selection for any budget <= max_budget from the maximizing splits. It is
    ancestor-closed, inside I_max (Condition 1 and the depth cap) and of size <= budget.
    """

    def __init__(
        self, tree: PrefetchTree, h_accept: Sequence[float] | np.ndarray, max_budget: int, depth_cap: int
    ) -> None:
        if max_budget < 0:
            raise ValueError(f"budget must be >= 0, got {max_budget}")
        h = np.asarray(h_accept, dtype=np.float64)
        if h.shape != (len(tree),):
            raise ValueError(f"need one branch probability per node ({len(tree)}), got shape {h.shape}")
        self.tree = tree
        self.max_budget = max_budget
        # A selection of b nodes is ancestor-closed, so nothing deeper than b - 1 is ever chosen.
        self.candidate = tree.candidates(min(depth_cap, max_budget))
        zeros = np.zeros(max_budget + 1)
        self.values: list[np.ndarray] = [zeros] * len(tree)
        self.splits: list[np.ndarray | None] = [None] * len(tree)
        for v in reversed(range(len(tree))):
            if not self.candidate[v]:
                continue
            plus = self.values[tree.accept_child[v]] if tree.accept_child[v] >= 0 else zeros
            minus = self.values[tree.reject_child[v]] if tree.reject_child[v] >= 0 else zeros
            value = np.zeros(max_budget + 1)
            split = np.zeros(max_budget + 1, dtype=np.int64)
            for b in range(1, max_budget + 1):
                options = h[v] * plus[:b] + (1.0 - h[v]) * minus[b - 1 :: -1]
                split[b] = int(np.argmax(options))
                value[b] = 1.0 + options[split[b]]
            self.values[v], self.splits[v] = value, split

    def value(self, budget: int) -> float:
        """V(v0, budget): the largest expected transition count of a selection of <= budget nodes."""
        return float(self.values[0][budget])

    def selection(self, budget: int) -> frozenset[int]:
        if not 0 <= budget <= self.max_budget:
            raise ValueError(f"budget must be in 0..{self.max_budget}, got {budget}")
        tree, chosen = self.tree, set()
        stack = [(0, budget)]
        while stack:
            v, b = stack.pop()
            if v < 0 or b == 0 or not self.candidate[v]:
                continue
            chosen.add(v)
            m = int(self.splits[v][b])  # type: ignore[index]
            stack += [(tree.accept_child[v], m), (tree.reject_child[v], b - 1 - m)]
        return frozenset(chosen)


def optimal_allocation(
    tree: PrefetchTree, h_accept: Sequence[float] | np.ndarray, budget: int, depth_cap: int
) -> Allocation:
    """Proposition 2 for one budget (see :class:`AllocationProgram`)."""
    program = AllocationProgram(tree, h_accept, budget, depth_cap)
    return Allocation(program.value(budget), program.selection(budget), program.values[0].copy())


def node_bfs(tree: PrefetchTree, budget: int, depth_cap: int, spend_below_deferred: bool = True) -> list[int]:
    """The paper's BFS traversal: expandable nodes in breadth-first order, at most ``budget``.

    A deferred node (not expandable) issues no request. With ``spend_below_deferred`` its
    rejection child is still enqueued, as in the paper's implementation, so requests are
    spent below it that the walk of this call can never reach (Section 3.2 reports 19% of
    requests at N_pf = 10); without it the subtree below a deferred node is skipped.
    Returns the requesting nodes in order (not necessarily ancestor-closed).
    """
    chosen: list[int] = []
    queue = deque([0])
    while queue and len(chosen) < budget:
        v = queue.popleft()
        if tree.depth[v] >= depth_cap:
            continue
        if tree.expandable[v]:
            chosen.append(v)
            queue.extend(c for c in (tree.accept_child[v], tree.reject_child[v]) if c >= 0)
        elif spend_below_deferred and tree.reject_child[v] >= 0:
            queue.append(tree.reject_child[v])
    return chosen


# --- the shared-request model ----------------------------------------------------------

BranchFn = Callable[[int, int, np.ndarray, np.ndarray], np.ndarray]
"""(depth d, cut c_d, node cuts, accepts on path) -> predicted P(accept) per DP state."""


@dataclass(frozen=True)
class _WalkStates:
    """The shared-request walk's states as parallel arrays: node cut m, agreement L, accepts
    a, still on this call's walk, and probability."""

    m: np.ndarray
    agree: np.ndarray
    a: np.ndarray
    walking: np.ndarray
    p: np.ndarray

    @classmethod
    def start(cls, length: int) -> _WalkStates:
        return cls(np.array([length]), np.array([length]), np.array([0]), np.array([True]), np.array([1.0]))

    @classmethod
    def concatenate(cls, parts: Sequence[_WalkStates]) -> _WalkStates:
        return cls(*(np.concatenate([getattr(part, name) for part in parts]) for name in cls.__dataclass_fields__))

    def take(self, rows: np.ndarray) -> _WalkStates:
        return _WalkStates(self.m[rows], self.agree[rows], self.a[rows], self.walking[rows], self.p[rows])

    def with_probability(self, p: np.ndarray) -> _WalkStates:
        return _WalkStates(self.m, self.agree, self.a, self.walking, p)

    def groups(self, ignore_agreement: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
        """(first row of each distinct state, each row's group, number of groups); the states are
        told apart by (m, a, walking) alone when ``ignore_agreement``."""
        agree = 0 if ignore_agreement else self.agree
        span = int(max(self.m.max(initial=0), self.agree.max(initial=0))) + 1
        key = ((self.m * span + agree) * (int(self.a.max(initial=0)) + 1) + self.a) * 2 + self.walking
        keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse.ravel(), len(keys)

    def merged(self) -> _WalkStates:
        """One row per distinct state, probabilities summed."""
        first, group, count = self.groups()
        return self.take(first).with_probability(np.bincount(group, weights=self.p, minlength=count))

    def spread(self, agreements: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray) -> _WalkStates:
        """Every state once per agreement, with that agreement and its probability times the weight."""
        count = len(agreements)
        return _WalkStates(
            np.tile(self.m, count),
            np.repeat(np.asarray(agreements, dtype=self.m.dtype), len(self.p)),
            np.tile(self.a, count),
            np.tile(self.walking, count),
            np.outer(np.asarray(weights, dtype=np.float64), self.p).ravel(),
        )


def shared_request_walk(
    cuts: Sequence[int],
    length: int,
    branch: BranchFn,
    repeat_logq: np.ndarray | None = None,
    path_dependent: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(P(this call's walk decides transition d), P(depth d's request is still the chain's when
    it gets there)) per planned depth d.

    A node at depth d can decide when its state still holds the root's first c_d tokens.
    The DP carries, per path, its probability and (m, L, a): the node's cut index m (the
    cut of the last accepted proposal, or T; what the logged ``parent_cut`` feature
    holds), its agreement L (the length of the prefix it shares with the root) and its
    accepts a. Depth d is decided from states with c_d <= L; the others stop there
    (deferred), and so does everything below them. A decided state moves, with the
    predicted acceptance h, to m = c_d, a + 1 and a new agreement L' >= c_d; otherwise it
    stays.

    The second item follows the chain past the walk's end: the next rounds decide the
    deferred transitions from states that differ from the root before their cut, so an
    acceptance there keeps L (the differing token stays). Depth d's request, a pure function
    of the root's first c_d tokens, is the one the chain makes at transition d whenever
    c_d <= L then, in this round's walk or a later one's (so it is >= the first item).

    ``repeat_logq`` (the root's per-token log q) gives L' its law: the proposal is drawn
    from the same q as the root's suffix, token by token from the same prefix, so it
    repeats the root's tokens c_d..x-1 with probability exp(sum_{t=c_d}^{x-1} log q_t),
    which at a low proposal temperature is often close to 1. L' only matters through the
    cuts it clears, so it is kept on the grid {c_0, ..., c_{D-1}, T}. From the root, an exact
    repeat of the whole suffix has MH ratio 1 and is always accepted; the rest of the
    predicted acceptance, max(0, h - P(repeat)) / (1 - P(repeat)), goes to proposals that
    differ somewhere, independently of where. From any other state a repeat of the root's
    suffix is a move like any other, accepted with h. Without ``repeat_logq``, L' = c_d (no repeats:
    cut-level Condition 1, a lower bound).

    With ``path_dependent=False`` the branch ignores (m, a), and states merge on L alone.

    The states are numpy arrays, merged by key after every depth. A path-dependent walk has
    O(D^3) states (m, L and a each take up to D + 1 values), so the moves of an accepted
    proposal, whose destination (c_d, L', a + 1) does not depend on m or L, are summed per
    (a, still walking) before they spread over the law of L': the work per depth is linear
    in the states, not in states times grid points (scripts/plan_cost.py: 64 depths, 80 ms, not 5 s).
    """
    cuts = [int(c) for c in cuts]
    length = int(length)
    realize, usable = np.zeros(len(cuts)), np.zeros(len(cuts))
    grid = np.array(sorted({*cuts, length}))
    if repeat_logq is not None:
        logq = np.asarray(repeat_logq, dtype=np.float64)
    states = _WalkStates.start(length)
    for d, cut in enumerate(cuts):
        # A walk stops (is deferred) at its first depth whose cut its state no longer holds;
        # the chain goes on, and so does this DP.
        states = _WalkStates(states.m, states.agree, states.a, states.walking & (cut <= states.agree), states.p)
        states = states.merged()
        states = states.take(states.p > 1e-12)
        if not len(states.p):
            break
        live = cut <= states.agree
        realize[d] = states.p[states.walking].sum()
        usable[d] = states.p[live].sum()
        # Law of the new agreement on the grid below T (where it lands, with what probability),
        # and the chance of an exact repeat.
        if repeat_logq is None:
            landing, chance, repeat = np.array([cut]), np.array([1.0]), 0.0
        else:
            above = grid[grid >= cut]  # ends with T
            # P(the proposal repeats the root up to v), summed from the cut itself: a -inf log q
            # before the cut (a token the proposal law excludes) must not turn it into -inf - -inf.
            survive = np.exp(np.concatenate([[0.0], np.cumsum(logq[cut:])])[above - cut])
            repeat = float(survive[-1])  # P(the proposal equals the root's suffix)
            drops = survive[:-1] - survive[1:]  # P(its first difference lies in [v, next grid point))
            landing, chance = above[:-1][drops > 0], drops[drops > 0]
        h = np.asarray(branch(d, cut, states.m, states.a), dtype=np.float64)
        if not np.isfinite(h).all():
            # A broken prediction (NaN) would give its states NaN probabilities, which the prune
            # above drops as if they were 0: the deeper depths would look unreachable. Say "unknown"
            # instead, so that the planner falls back to requesting every depth, as BFS does.
            realize[d + 1 :] = usable[d + 1 :] = np.nan
            break
        h = np.clip(h, 0.0, 1.0)
        # Not at the root (L < T), a proposal that repeats the root's suffix is a real move
        # (back to the root), accepted with the predicted probability like any other. At the
        # root, an exact repeat has MH ratio 1 and is always accepted; the rest of the
        # predicted acceptance goes to proposals that differ from the root somewhere.
        at_root = live & (states.agree >= length)
        differ = 1.0 - repeat
        h_differ = np.where(at_root, np.clip((h - repeat) / differ, 0.0, 1.0) if differ > 0 else 0.0, h)
        h_repeat = np.where(at_root, 1.0, h)
        rejected = np.where(at_root, differ * (1.0 - h_differ), 1.0 - h)
        # An accepted proposal makes the node's cut c_d and adds an accept (path-dependent).
        accepted = _WalkStates(
            np.full_like(states.m, cut) if path_dependent else states.m,
            states.agree,
            states.a + 1 if path_dependent else states.a,
            states.walking,
            states.p,
        )
        stopped, moving = accepted.take(~live), accepted.take(live)
        # A decided move lands on (c_d, L', a + 1) whatever m and L were: sum those first, then
        # spread them over the law of L' (linear in the states, not states x grid points).
        first, group, count = moving.groups(ignore_agreement=True)
        sources = moving.take(first)
        differing = sources.with_probability(np.bincount(group, moving.p * h_differ[live], minlength=count))
        parts = [
            states.with_probability(states.p * rejected),
            # A stopped walk's transition is decided later, from a prefix that already differs
            # from the root's before the cut: an acceptance keeps the agreement where it is.
            stopped.with_probability(stopped.p * h[~live]),
            differing.spread(landing, chance),
        ]
        if repeat > 0:  # else (always without repeat_logq) the repeats would only add zero-probability states
            repeating = sources.with_probability(np.bincount(group, moving.p * h_repeat[live], minlength=count))
            parts.append(repeating.spread([length], [repeat]))
        states = _WalkStates.concatenate(parts)
    return realize, usable


def prepaid_cost(
    realize: np.ndarray,
    usable: np.ndarray,
    tokens: Sequence[float],
    longest: Sequence[float],
    token_cost: float,
    step_cost: float,
) -> np.ndarray:
    """For each plan of depths 0..m-1: the expected cost its requests save later calls.

    A request this call's walk leaves undecided is not wasted when the chain still makes
    it on reaching its transition (``usable - realize``, :func:`shared_request_walk`):
    the later call that would have generated it then does not, and saves its tokens
    (``tokens[j]`` at ``token_cost`` each) and, as that call's longest row, its decode
    steps (``longest[j]`` at ``step_cost`` each). A row reused rounds later usually is
    the longest of what its call would otherwise decode: the rows regenerated after a
    divergence have later cuts, shorter suffixes. Counting every row's steps overstates
    when several would share one later call; counting only what the next round reuses
    understates more (measured: the rule then made more calls than BFS on the
    transformers engine, leaving the last transitions of a chain to calls of their own).
    """
    later = np.clip(np.asarray(usable, dtype=np.float64) - np.asarray(realize, dtype=np.float64), 0.0, 1.0)
    saved = token_cost * np.asarray(tokens, dtype=np.float64) + step_cost * np.asarray(longest, dtype=np.float64)
    return np.cumsum(later * saved)


def best_depth_count(realize: np.ndarray, costs: np.ndarray | None) -> int:
    """m in 1..len(realize) maximizing sum_{d<m} realize[d] / cost(m); without costs (or with
    NaN in the prediction), all depths.

    Ties go to the larger m (more transitions for the same rate).
    """
    depths = len(realize)
    if depths == 0:
        raise ValueError("at least one depth must be plannable")
    if costs is None:
        return depths
    costs = np.asarray(costs, dtype=np.float64)
    if not (np.isfinite(realize).all() and not np.isnan(costs).any()):
        return depths  # a broken prediction must not stop the run: plan as BFS does
    rate = np.cumsum(realize) / np.maximum(costs, 1e-12)
    best = float(rate.max())
    return int(np.flatnonzero(rate >= best * (1.0 - 1e-9))[-1]) + 1


def warmup_depth_count(rows_per_depth: Sequence[int], calls_observed: int, first_rows: int = 8) -> int:
    """Depths to request while the call-cost model has too few measured calls to predict.

    The longest prefix of depths whose new rows fit in ``first_rows``, a row budget that
    doubles with every call measured so far (at least depth 0). A decode step of a few rows
    costs about one row's on any engine (it is bound by reading the weights), so the first
    calls stay cheap wherever rows are dear, while samplers with one row per depth still
    start near BFS; the doubling then spans the widths the cost model is fitted on.
    Planning like BFS instead made the very first call the widest of the run: one 140-row
    MultiTryMH call on the transformers engine on a CPU cost more than the rest of its chain.
    """
    if len(rows_per_depth) == 0:
        raise ValueError("at least one depth must be plannable")
    budget = first_rows << min(max(calls_observed, 0), 16)
    fits = int(np.count_nonzero(np.cumsum(rows_per_depth) <= budget))
    return max(1, fits)


def squared_row_steps(lengths: Sequence[int]) -> float:
    """Sum over a call's decode steps of (rows still decoding)^2, for rows of these lengths.

    A batch decodes one token per row per step until its longest row is done, so step t
    has r_t = #{rows longer than t}. Summing r_t^2 counts every pair of rows for as long as
    both decode: sum_ij min(L_i, L_j) = sum_k (2k - 1) L_(k), lengths sorted longest first.
    The call-cost model's term for costs that grow faster than the rows of a step (an
    engine whose per-row work grows with the batch).
    """
    ordered = np.sort(np.asarray(lengths, dtype=np.float64))[::-1]
    return float(np.sum((2.0 * np.arange(1, len(ordered) + 1) - 1.0) * ordered))
