"""Mutation review of prefetch/allocation.py: tests that kill mutants the other tests let live.

Each test checks a public function of ``presto.prefetch.allocation`` against an independent
reference (an exact enumeration, a brute force over selections, or a value worked by hand).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from presto.prefetch.allocation import (
    ACCEPT,
    REJECT,
    PrefetchTree,
    best_depth_count,
    expected_transitions,
    node_bfs,
    optimal_allocation,
    prepaid_cost,
    shared_request_walk,
    warmup_depth_count,
)


def clip01(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


def enumerate_walk(cuts, length, h, logq=None, path_dependent=True):
    """shared_request_walk's two items by exact enumeration, with the agreement kept at the exact
    position of the proposal's first difference from the root (no grid), in plain Python dicts.

    State (node cut m, agreement L, accepts a, still walking); ``h`` is a branch function, called
    with one state at a time."""
    realize, usable = np.zeros(len(cuts)), np.zeros(len(cuts))
    dist = {(length, length, 0, True): 1.0}
    for d, cut in enumerate(cuts):

        def repeats(upto, cut=cut):  # P(the proposal repeats the root's tokens cut..upto-1)
            if logq is None:
                return 1.0 if upto == cut else 0.0
            return math.exp(sum(logq[cut:upto]))

        repeat = repeats(length) if logq is not None else 0.0
        firsts = [(x, repeats(x) - repeats(x + 1)) for x in range(cut, length)]  # first difference at x
        new = defaultdict(float)
        for (m, agree, a, walking), p in dist.items():
            walking = walking and cut <= agree
            realize[d] += p * walking
            usable[d] += p * (cut <= agree)
            hh = clip01(np.asarray(h(d, cut, np.array([m]), np.array([a])), dtype=float)[0])
            m2, a2 = (cut, a + 1) if path_dependent else (m, a)
            if cut > agree:  # decided later, from a prefix that differs before the cut: L stays
                new[(m, agree, a, walking)] += p * (1 - hh)
                new[(m2, agree, a2, walking)] += p * hh
                continue
            if agree == length:  # at the root an exact repeat has MH ratio 1; the rest of h is spread
                h_differ = clip01((hh - repeat) / (1 - repeat)) if repeat < 1 else 0.0
                h_repeat = 1.0
            else:
                h_differ = h_repeat = hh
            new[(m2, length, a2, walking)] += p * repeat * h_repeat
            for x, chance in firsts:
                new[(m, agree, a, walking)] += p * chance * (1 - h_differ)
                new[(m2, x, a2, walking)] += p * chance * h_differ
            if agree < length:
                new[(m, agree, a, walking)] += p * repeat * (1 - h_repeat)
        dist = new
    return realize, usable


def random_case(rng, max_length=6, max_depths=6):
    length = int(rng.integers(2, max_length + 1))
    depths = int(rng.integers(1, max_depths + 1))
    cuts = rng.integers(length, size=depths)
    cuts[rng.random(depths) < 0.3] = 0  # agreement 0 and cut 0: the edges of the state keys
    q = rng.uniform(0.3, 1.0, size=length)
    q[rng.random(length) < 0.2] = 1.0  # tokens the proposal always repeats
    with np.errstate(divide="ignore"):
        logq = np.log(np.where(rng.random(length) < 0.1, 0.0, q))  # and some it never does
    w = rng.normal(size=5)

    def h(d, cut, m, a):
        z = w[0] + w[1] * np.asarray(m, dtype=float) / length + w[2] * np.asarray(a, dtype=float)
        return 1.0 / (1.0 + np.exp(-(z + w[3] * cut / length + w[4] * d)))

    return cuts.tolist(), length, h, logq


def per_depth(h):
    """A branch for shared_request_walk that reads only the depth: P(accept) = h[d] in every state."""
    return lambda d, cut, m, a: np.full(len(m), h[d])


@pytest.mark.parametrize("seed", range(60))
def test_walk_matches_an_exact_enumeration_of_first_differences(seed):
    """The DP keeps the agreement on the grid of cuts and merges states by packed keys; an exact,
    unmerged enumeration over where each proposal first differs from the root gives the same two
    items, with and without repeats and path dependence, on short suffixes where cut 0, agreement
    0 and tokens repeated with probability 1 or 0 are common."""
    rng = np.random.default_rng(9000 + seed)
    cuts, length, h, logq = random_case(rng)
    for repeats in (None, logq):
        for path_dependent in (True, False):
            got = shared_request_walk(cuts, length, h, repeat_logq=repeats, path_dependent=path_dependent)
            want = enumerate_walk(cuts, length, h, repeats, path_dependent)
            np.testing.assert_allclose(got, want, atol=1e-10, err_msg=f"{cuts=} {length=} {path_dependent=}")


@pytest.mark.parametrize("h_root", [0.0, 0.1, 0.5, 1.0])
def test_with_cuts_that_never_grow_every_depth_is_walked_even_when_repeats_outweigh_h(h_root):
    """Cuts that never grow keep every state's agreement >= the next cut, so the walk reaches every
    depth with probability exactly 1, whatever the branch and the repeat law. At the root an exact
    repeat (here 0.9^4 = 0.6561, more than a small h) is always accepted; the mass that is left for
    rejections is then 1 - P(repeat), not 1 - h: a probability of 1 is not exceeded."""
    length, cuts = 4, [0, 0, 0, 0, 0]
    logq = np.log(np.full(length, 0.9))
    realize, usable = shared_request_walk(cuts, length, per_depth([h_root] * len(cuts)), repeat_logq=logq)
    np.testing.assert_allclose(realize, 1.0, atol=1e-12)
    np.testing.assert_allclose(usable, 1.0, atol=1e-12)
    rng = np.random.default_rng(5)
    for _ in range(10):
        cuts = sorted(rng.integers(length, size=5).tolist(), reverse=True)
        h = rng.uniform(0.0, 0.5, size=len(cuts))
        walk = shared_request_walk(cuts, length, per_depth(h), repeat_logq=logq)
        np.testing.assert_allclose(walk, 1.0, atol=1e-12)


def test_a_branch_outside_zero_one_is_read_as_certain():
    """A predictor's raw output can leave [0, 1] (a regression head, a calibration exponent): the
    walk clips it, so 1.5 plans exactly as a sure accept and -0.5 as a sure reject."""
    length, cuts = 6, [2, 4, 1, 0]
    for raw, sure in ((1.5, 1.0), (-0.5, 0.0)):
        for logq in (None, np.log(np.full(length, 0.7))):
            got = shared_request_walk(cuts, length, per_depth([raw] * len(cuts)), repeat_logq=logq)
            want = enumerate_walk(cuts, length, per_depth([sure] * len(cuts)), logq)
            np.testing.assert_allclose(got, want, atol=1e-12)
    # By hand, without repeats: a sure accept at cut 2 defers cut 4, and cut 1 is then the chain's again.
    realize, usable = shared_request_walk(cuts, length, per_depth([1.5] * len(cuts)))
    np.testing.assert_allclose(realize, [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(usable, [1.0, 0.0, 1.0, 1.0])


def ancestor_closed_values(tree: PrefetchTree, h, depth_cap: int, budget: int) -> list[float]:
    """max F_I(v0) over ancestor-closed I inside I_max with |I| <= b, for every b <= budget (brute force)."""
    candidate = tree.candidates(depth_cap)
    nodes = [v for v in range(len(tree)) if candidate[v]]
    best = [0.0] * (budget + 1)
    for mask in range(1 << len(nodes)):
        chosen = [v for i, v in enumerate(nodes) if mask >> i & 1]
        if len(chosen) > budget or not tree.is_ancestor_closed(chosen):
            continue
        value = expected_transitions(tree, chosen, h)
        for b in range(len(chosen), budget + 1):
            best[b] = max(best[b], value)
    return best


@pytest.mark.parametrize("budget", [0, 1, 3, 5])
def test_values_by_budget_hold_the_optimum_for_every_budget_up_to_the_one_asked(budget):
    # root -> accept (1), reject (2); 1 -> accept (3), reject (4); 2 -> reject (5); 3 -> accept (6)
    tree = PrefetchTree.from_edges(
        [None, 0, 0, 1, 1, 2, 3],
        ["root", ACCEPT, REJECT, ACCEPT, REJECT, REJECT, ACCEPT],
        [True, True, True, True, False, True, True],
    )
    h = np.array([0.7, 0.4, 0.9, 0.5, 0.3, 0.2, 0.6])
    allocation = optimal_allocation(tree, h, budget, depth_cap=4)
    want = ancestor_closed_values(tree, h, depth_cap=4, budget=budget)
    assert allocation.values_by_budget.shape == (budget + 1,)
    np.testing.assert_allclose(allocation.values_by_budget, want, atol=1e-12)
    assert allocation.value == pytest.approx(want[budget], abs=1e-12)


def test_prepaid_credit_is_never_negative():
    """The credit is what requests left undecided save later calls; where ``usable`` falls below
    ``realize`` (rounding in the walk, or inputs that disagree) nothing is saved, and nothing charged."""
    prepaid = prepaid_cost(
        np.array([1.0, 0.6, 0.2]), np.array([1.0 - 1e-12, 0.5, 0.7]), [10, 20, 30], [10, 6, 8], 0.1, 1.0
    )
    np.testing.assert_allclose(prepaid, [0.0, 0.0, 0.5 * (0.1 * 30 + 1.0 * 8)], atol=1e-15)
    assert np.all(prepaid >= 0.0)


def test_a_nan_branch_prediction_plans_as_bfs_does():
    # Cuts that never grow: every depth is the chain's with probability 1, whatever the branch.
    cuts, length = [3, 2, 1, 0], 6
    realize, usable = shared_request_walk(cuts, length, per_depth([np.nan] * len(cuts)))
    assert not np.any(usable < 1.0), usable  # now [1, 0, 0, 0]: the chain "never" reaches depth 1
    assert best_depth_count(realize, np.array([1.0, 1.5, 2.0, 2.5])) == len(cuts)  # now 1


def test_a_negative_count_of_measured_calls_warms_up_as_none():
    """The row budget is first_rows doubled once per measured call; a count below zero (no call
    measured) gives first_rows itself, not a budget doubled by its absolute value."""
    rows = [1] * 40
    assert [warmup_depth_count(rows, calls, first_rows=4) for calls in (-3, -1, 0, 1, 2)] == [4, 4, 4, 8, 16]


def test_states_with_agreement_zero_and_at_the_root_stay_apart():
    """Two tokens, cuts 0, 1, 0, 1, each token repeated w.p. 1/2: states at the root (agreement 2)
    and states whose proposal differed at token 0 (agreement 0) meet at neighbouring node cuts
    with equal accepts; the walk must keep them apart. Exact enumeration gives n/192."""
    cuts, length, logq = [0, 1, 0, 1], 2, np.log([0.5, 0.5])
    branch = per_depth([0.75, 0.75, 0.5, 0.25])
    realize, usable = shared_request_walk(cuts, length, branch, repeat_logq=logq)
    want_realize, want_usable = enumerate_walk(cuts, length, branch, logq)
    np.testing.assert_allclose(want_realize * 192, [192, 128, 128, 103], atol=1e-9)
    np.testing.assert_allclose(want_usable * 192, [192, 128, 192, 119], atol=1e-9)
    np.testing.assert_allclose(realize, want_realize, atol=1e-12)
    np.testing.assert_allclose(usable, want_usable, atol=1e-12)


def test_candidates_exclude_expandable_nodes_below_a_deferred_ancestor():
    """I_max: expandable, above the depth cap, and every strict ancestor expandable too (the walk
    of this call cannot pass a deferred node). The oracle replay counts and covers with this mask."""
    # 0 -> accept 1 (deferred), reject 2; 1 -> reject 3 (expandable, below the deferred 1); 2 -> accept 4
    tree = PrefetchTree.from_edges(
        [None, 0, 0, 1, 2], ["root", ACCEPT, REJECT, REJECT, ACCEPT], [True, False, True, True, True]
    )
    assert tree.candidates(5).tolist() == [True, False, True, False, True]
    assert tree.candidates(1).tolist() == [True, False, False, False, False]
    rng = np.random.default_rng(17)
    for _ in range(30):
        parents, branches, free = [None], ["root"], [(0, ACCEPT), (0, REJECT)]
        for v in range(1, int(rng.integers(2, 12))):
            p, b = free.pop(int(rng.integers(len(free))))
            parents.append(p)
            branches.append(b)
            free += [(v, ACCEPT), (v, REJECT)]
        expandable = (rng.random(len(parents)) < 0.7).tolist()
        tree = PrefetchTree.from_edges(parents, branches, expandable)
        for cap in range(5):
            want = []
            for v in range(len(tree)):
                path, u = [], v
                while u >= 0:
                    path.append(u)
                    u = tree.parent[u]
                want.append(all(expandable[u] for u in path) and tree.depth[v] < cap)
            assert tree.candidates(cap).tolist() == want


def test_bfs_from_a_deferred_root_requests_nothing_on_the_walk():
    """A deferred root issues no request: the clean BFS then has nothing to spend on, and the
    paper's variant goes on below its rejection child only (in breadth-first order)."""
    # 0 (deferred) -> accept 1, reject 2; 2 -> accept 3, reject 4; 4 -> reject 5
    tree = PrefetchTree.from_edges(
        [None, 0, 0, 2, 2, 4], ["root", ACCEPT, REJECT, ACCEPT, REJECT, REJECT], [False, True, True, True, True, True]
    )
    assert node_bfs(tree, budget=10, depth_cap=5, spend_below_deferred=False) == []
    assert node_bfs(tree, budget=10, depth_cap=5, spend_below_deferred=True) == [2, 3, 4, 5]
    assert node_bfs(tree, budget=2, depth_cap=5, spend_below_deferred=True) == [2, 3]
    assert node_bfs(tree, budget=10, depth_cap=2, spend_below_deferred=True) == [2]
    assert optimal_allocation(tree, np.full(len(tree), 0.5), 4, 5).value == 0.0
