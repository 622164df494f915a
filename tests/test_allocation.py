"""Appendix C made testable: eq. 10/14, Lemmas 1-2, and Proposition 2's DP against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from presto.prefetch.allocation import (
    ACCEPT,
    REJECT,
    AllocationProgram,
    PrefetchTree,
    best_depth_count,
    expected_transitions,
    expected_transitions_recursive,
    node_bfs,
    optimal_allocation,
    predicted_branch_probability,
    prepaid_cost,
    reaching_weights,
    rounded_branch_probability,
    shared_request_walk,
)


def random_tree(rng: np.random.Generator, max_depth: int, p_child: float = 0.8, p_expandable: float = 0.75):
    """A random partial binary tree with random Condition 1 flags and branch probabilities."""
    parents, branches, expandable = [None], ["root"], [bool(rng.random() < 0.9)]
    depth = [0]
    frontier = [0]
    while frontier:
        v = frontier.pop(0)
        if depth[v] >= max_depth:
            continue
        for branch in (ACCEPT, REJECT):
            if rng.random() < p_child:
                parents.append(v)
                branches.append(branch)
                expandable.append(bool(rng.random() < p_expandable))
                depth.append(depth[v] + 1)
                frontier.append(len(parents) - 1)
    tree = PrefetchTree.from_edges(parents, branches, expandable)
    h = rng.random(len(tree))
    h[rng.random(len(tree)) < 0.3] = rng.choice([0.0, 1.0])  # some epsilon-certain (rounded) decisions
    return tree, h


def cut_tree(rng: np.random.Generator, length: int, max_depth: int):
    """The paper's node-level tree: each acceptance child draws its own cut; Condition 1 is c' <= c."""
    parents, branches, expandable, node_cut = [None], ["root"], [], [length]
    request_cut = [int(rng.integers(length))]
    expandable.append(request_cut[0] <= node_cut[0])
    frontier, depth = [0], [0]
    while frontier:
        v = frontier.pop(0)
        if depth[v] >= max_depth:
            continue
        for branch, cut in ((ACCEPT, request_cut[v]), (REJECT, node_cut[v])):
            parents.append(v)
            branches.append(branch)
            node_cut.append(cut)
            request_cut.append(int(rng.integers(length)))
            expandable.append(request_cut[-1] <= cut)
            depth.append(depth[v] + 1)
            frontier.append(len(parents) - 1)
    return PrefetchTree.from_edges(parents, branches, expandable), np.array(node_cut), np.array(request_cut)


def ancestor_closed_selections(tree: PrefetchTree, candidate: np.ndarray, budget: int):
    """Every ancestor-closed subset of I_max with at most ``budget`` nodes (brute force)."""

    def below(v: int, b: int):
        yield frozenset()
        if v < 0 or b == 0 or not candidate[v]:
            return
        for left in below(tree.accept_child[v], b - 1):
            for right in below(tree.reject_child[v], b - 1 - len(left)):
                yield frozenset({v}) | left | right

    return set(below(0, budget))


def test_branch_probabilities_follow_eq_10_and_eq_14():
    assert rounded_branch_probability([0.0, 0.01, 0.5, 0.99, 1.0], 0.01).tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]
    # eq. 14 is the midpoint estimator of Lemma 3: certain reject -> 0, accept -> 1, uncertain -> 1/2.
    assert predicted_branch_probability(1.0, 0.0) == 0.0
    assert predicted_branch_probability(0.0, 1.0) == 1.0
    assert predicted_branch_probability(0.0, 0.0) == 0.5
    p_rej, p_acc = 0.2, 0.5
    p_unc = 1 - p_rej - p_acc
    lower = p_acc + 0.01 * p_unc  # Lemma 3's interval for E[h(v+; eps)]
    upper = p_acc + 0.99 * p_unc
    assert predicted_branch_probability(p_rej, p_acc) == pytest.approx((lower + upper) / 2)


@pytest.mark.parametrize("seed", range(60))
def test_dp_equals_brute_force_on_small_trees(seed):
    rng = np.random.default_rng(seed)
    tree, h = random_tree(rng, max_depth=int(rng.integers(1, 5)))
    for depth_cap in (1, 2, 3, 5):
        program = AllocationProgram(tree, h, 6, depth_cap)
        candidate = tree.candidates(depth_cap)
        selections = ancestor_closed_selections(tree, candidate, 6)
        for budget in range(7):
            best = max(expected_transitions(tree, s, h) for s in selections if len(s) <= budget)
            assert program.value(budget) == pytest.approx(best, abs=1e-12)
            chosen = program.selection(budget)
            assert len(chosen) <= budget and tree.is_ancestor_closed(chosen)
            assert all(candidate[v] and tree.depth[v] < depth_cap for v in chosen)
            assert expected_transitions(tree, chosen, h) == pytest.approx(best, abs=1e-12)
        single = optimal_allocation(tree, h, 4, depth_cap)
        assert single.value == pytest.approx(program.value(4))


@pytest.mark.parametrize("seed", range(20))
def test_lemma_1_equals_lemma_2_and_reaching_weights(seed):
    rng = np.random.default_rng(100 + seed)
    tree, h = random_tree(rng, max_depth=4, p_expandable=1.0)
    weights = reaching_weights(tree, h)
    for v in range(1, len(tree)):
        p = tree.parent[v]
        assert weights[v] == pytest.approx(weights[p] * (h[p] if tree.branch[v] == ACCEPT else 1 - h[p]))
    for selection in itertools.islice(ancestor_closed_selections(tree, tree.candidates(10), 8), 200):
        assert expected_transitions(tree, selection, h) == pytest.approx(
            expected_transitions_recursive(tree, selection, h)
        )


@pytest.mark.parametrize("seed", range(15))
def test_dp_respects_condition_1_and_the_depth_cap_on_cut_trees(seed):
    rng = np.random.default_rng(200 + seed)
    tree, node_cut, request_cut = cut_tree(rng, length=16, max_depth=5)
    h = rng.random(len(tree))
    for depth_cap, budget in ((2, 8), (4, 8), (6, 12)):
        chosen = optimal_allocation(tree, h, budget, depth_cap).selection
        for v in chosen:
            assert tree.depth[v] < depth_cap
            u = v
            while u >= 0:  # v and every ancestor satisfy Condition 1: c' <= c
                assert request_cut[u] <= node_cut[u]
                u = tree.parent[u]


def test_bfs_fills_breadth_first_and_the_paper_variant_spends_below_deferred_nodes():
    # root expandable; its accept child deferred; the deferred node's reject child expandable.
    tree = PrefetchTree.from_edges(
        [None, 0, 0, 1, 2, 2],
        ["root", ACCEPT, REJECT, REJECT, ACCEPT, REJECT],
        [True, False, True, True, True, True],
    )
    h = np.full(len(tree), 0.5)
    paper = node_bfs(tree, budget=10, depth_cap=5, spend_below_deferred=True)
    clean = node_bfs(tree, budget=10, depth_cap=5, spend_below_deferred=False)
    assert paper == [0, 2, 3, 4, 5] and clean == [0, 2, 4, 5]
    # Node 3 lies below the deferred node 1: the request is spent, the walk never gets there.
    assert expected_transitions_recursive(tree, paper, h) == expected_transitions_recursive(tree, clean, h)
    assert node_bfs(tree, budget=2, depth_cap=5) == [0, 2]
    assert node_bfs(tree, budget=10, depth_cap=1) == [0]


@pytest.mark.parametrize("seed", range(10))
def test_oracle_dominates_bfs_and_predicted_allocations(seed):
    rng = np.random.default_rng(300 + seed)
    tree, _, _ = cut_tree(rng, length=32, max_depth=6)
    truth = rng.choice([0.0, 1.0, 0.3], size=len(tree), p=[0.5, 0.3, 0.2])
    guess = np.clip(truth + rng.normal(0, 0.3, len(tree)), 0, 1)
    for budget in (1, 3, 6):
        oracle = optimal_allocation(tree, truth, budget, 10).value
        bfs = expected_transitions_recursive(tree, node_bfs(tree, budget, 10), truth)
        predicted = expected_transitions(tree, optimal_allocation(tree, guess, budget, 10).selection, truth)
        assert oracle >= bfs - 1e-12 and oracle >= predicted - 1e-12
        # Every candidate node down to depth budget-1: what one shared request per depth covers.
        candidate = tree.candidates(budget)
        shared = reaching_weights(tree, truth)[candidate].sum()
        assert shared >= oracle - 1e-12


def per_depth(h):
    """A branch function for shared_request_walk: P(accept) = h[d] at depth d, whatever the state."""
    return lambda depth, cut, node_cuts, accepts: np.full(len(node_cuts), h[depth])


@pytest.mark.parametrize("seed", range(20))
def test_shared_request_walk_realization_matches_path_enumeration(seed):
    rng = np.random.default_rng(400 + seed)
    length, depths = 12, int(rng.integers(1, 8))
    cuts = rng.integers(length, size=depths).tolist()
    h = rng.random(depths)
    realize = shared_request_walk(cuts, length, per_depth(h))[0]
    # Direct enumeration: sum over accept/reject prefixes of their probability, stopping at deferrals.
    expected = np.zeros(depths)
    for d in range(depths):
        for outcome in itertools.product((0, 1), repeat=d):
            p, node_cut, ok = 1.0, length, True
            for e in range(d):
                if cuts[e] > node_cut:
                    ok = False
                    break
                p *= h[e] if outcome[e] else 1 - h[e]
                node_cut = cuts[e] if outcome[e] else node_cut
            if ok and cuts[d] <= node_cut:
                expected[d] += p
    np.testing.assert_allclose(realize, expected, atol=1e-12)
    assert realize[0] == 1.0 and np.all(np.diff(realize) <= 1e-12)
    all_reject = shared_request_walk(cuts, length, per_depth(np.zeros(depths)))[0]
    np.testing.assert_allclose(all_reject, 1.0)


def test_best_depth_count_maximizes_rate_and_reduces_to_all_depths_without_costs():
    realize = np.array([1.0, 0.9, 0.2, 0.05])
    assert best_depth_count(realize, None) == 4
    assert best_depth_count(realize, np.array([1.0, 1.1, 1.9, 2.5])) == 2
    assert best_depth_count(realize, np.array([1.0, 1.0, 1.0, 1.0])) == 4  # free depths: take them all
    # A broken prediction (NaN from a degenerate fit) plans as BFS does instead of stopping the run.
    assert best_depth_count(realize, np.array([1.0, np.nan, 1.9, 2.5])) == 4
    assert best_depth_count(np.array([1.0, np.nan, 0.2, 0.1]), np.array([1.0, 1.1, 1.9, 2.5])) == 4


@pytest.mark.parametrize("seed", range(3))
def test_shared_request_walk_realization_with_repeats_matches_simulation(seed):
    """Proposals that repeat the root's tokens keep deeper depths feasible: DP vs Monte Carlo."""
    rng = np.random.default_rng(500 + seed)
    length, depths = 10, 6
    cuts = rng.integers(length, size=depths).tolist()
    logq = np.log(rng.uniform(0.5, 1.0, size=length))
    h = rng.uniform(0.2, 0.9, size=depths)
    dp, dp_usable = shared_request_walk(cuts, length, per_depth(h), repeat_logq=logq)
    merged = shared_request_walk(cuts, length, per_depth(h), repeat_logq=logq, path_dependent=False)
    np.testing.assert_allclose(merged, (dp, dp_usable), atol=1e-12)
    runs, hits, usable = 20000, np.zeros(depths), np.zeros(depths)
    for _ in range(runs):
        agree, walking = length, True
        for d in range(depths):
            # A later round decides a deferred transition from a prefix that already differs
            # before its cut: whatever it does, the agreement with the root stays.
            walking = walking and cuts[d] <= agree
            if cuts[d] > agree:
                continue
            hits[d] += walking
            usable[d] += 1
            repeat = cuts[d]
            while repeat < length and rng.random() < np.exp(logq[repeat]):
                repeat += 1
            if agree < length:  # away from the root, a repeat of its suffix is a move like any other
                accepted = rng.random() < h[d]
            elif repeat == length:  # at the root, an identical suffix: MH ratio 1
                accepted = True
            else:  # overall acceptance stays h: identical suffixes take their share
                repeat_prob = np.exp(logq[cuts[d] :].sum())
                accepted = rng.random() < max(0.0, h[d] - repeat_prob) / (1 - repeat_prob)
            if accepted:
                agree = repeat
    np.testing.assert_allclose(dp, hits / runs, atol=0.02)
    np.testing.assert_allclose(dp_usable, usable / runs, atol=0.02)
    cut_level = shared_request_walk(cuts, length, per_depth(h))[0]
    assert np.all(dp >= cut_level - 1e-12)


def test_away_from_the_root_a_repeat_of_its_suffix_is_accepted_like_any_move():
    """Only from the root is an identical suffix an MH ratio of 1; from a state that accepted a
    differing proposal, a proposal equal to the root's suffix is a move back, accepted with h."""
    rng = np.random.default_rng(31)
    length, cuts = 6, [3, 5, 2, 0, 3, 4]
    logq = np.log(rng.uniform(0.85, 1.0, size=length))  # repeats are likely
    h = rng.uniform(0.2, 0.9, size=len(cuts))
    dp, _ = shared_request_walk(cuts, length, per_depth(h), repeat_logq=logq)
    runs, hits = 40000, np.zeros(len(cuts))
    for _ in range(runs):
        agree, walking = length, True
        for d, cut in enumerate(cuts):
            walking = walking and cut <= agree
            if cut > agree:
                continue
            hits[d] += walking
            repeat = cut
            while repeat < length and rng.random() < np.exp(logq[repeat]):
                repeat += 1
            if agree == length and repeat == length:
                accepted = True
            elif agree == length:
                repeat_prob = np.exp(logq[cut:].sum())
                accepted = rng.random() < (h[d] - repeat_prob) / (1 - repeat_prob)
            else:
                accepted = rng.random() < h[d]
            if accepted:
                agree = repeat
    np.testing.assert_allclose(dp, hits / runs, atol=0.015)


@pytest.mark.parametrize("seed", range(20))
def test_usable_requests_match_path_enumeration(seed):
    """P(depth d's request is still the chain's at transition d), walks followed past deferrals: DP vs enumeration."""
    rng = np.random.default_rng(600 + seed)
    length, depths = 12, int(rng.integers(1, 8))
    cuts = rng.integers(length, size=depths).tolist()
    h = rng.random(depths)
    realize, usable = shared_request_walk(cuts, length, per_depth(h))
    # Every accept/reject sequence before d; an accepted proposal moves the agreement with the
    # root to its cut only when it was drawn from the root's prefix (c_e <= agreement).
    expected = np.zeros(depths)
    for d in range(depths):
        for outcome in itertools.product((0, 1), repeat=d):
            p, agree = 1.0, length
            for e in range(d):
                p *= h[e] if outcome[e] else 1 - h[e]
                agree = cuts[e] if outcome[e] and cuts[e] <= agree else agree
            expected[d] += p * (cuts[d] <= agree)
    np.testing.assert_allclose(usable, expected, atol=1e-12)
    assert np.all(usable >= realize - 1e-12) and usable[0] == 1.0
    # Cuts that never grow (Condition 1 all the way down): every request stays the chain's.
    np.testing.assert_allclose(shared_request_walk(sorted(cuts, reverse=True), length, per_depth(h))[1], 1.0)


def walk_by_paths(cuts, length, h, logq=None):
    """shared_request_walk's two items by following every path of accepts, rejects and (with
    ``logq``) agreement outcomes one by one, with a branch h(depth, cut, node cut, accepts)
    that depends on the path; no states are merged."""
    depths, grid = len(cuts), sorted({*cuts, length})
    realize, usable = np.zeros(depths), np.zeros(depths)

    def repeats_from(cut, upto):  # P(the proposal repeats the root's tokens cut..upto-1)
        return float(np.exp(np.sum(logq[cut:upto]))) if logq is not None else float(upto == cut)

    def follow(d, node_cut, agree, accepts, walking, p):
        if d == depths:
            return
        cut = cuts[d]
        walking = walking and cut <= agree
        realize[d] += p * walking
        usable[d] += p * (cut <= agree)
        hh = h(d, cut, node_cut, accepts)
        if cut > agree:  # decided in a later round, from a prefix that already differs
            follow(d + 1, node_cut, agree, accepts, walking, p * (1 - hh))
            follow(d + 1, cut, agree, accepts + 1, walking, p * hh)
            return
        repeat = repeats_from(cut, length) if logq is not None else 0.0
        if agree == length:  # at the root, an identical suffix has MH ratio 1
            h_differ = min(1.0, max(0.0, (hh - repeat) / (1 - repeat))) if repeat < 1 else 0.0
            rejected, h_repeat = (1 - repeat) * (1 - h_differ), 1.0
        else:
            h_differ, rejected, h_repeat = hh, 1 - hh, hh
        follow(d + 1, node_cut, agree, accepts, walking, p * rejected)
        if repeat > 0:
            follow(d + 1, cut, length, accepts + 1, walking, p * h_repeat * repeat)
        points = [v for v in grid if cut <= v < length]
        for v, above in zip(points, [*points[1:], length], strict=True):
            # The proposal first differs from the root at a token in [v, next grid point).
            lands = repeats_from(cut, v) - repeats_from(cut, above) if logq is not None else float(v == cut)
            if lands > 0:
                follow(d + 1, cut, v, accepts + 1, walking, p * h_differ * lands)

    follow(0, length, length, 0, True, 1.0)
    return realize, usable


@pytest.mark.parametrize("seed", range(12))
def test_path_dependent_walk_matches_following_every_path(seed):
    """With a branch that reads the node cut and the accepts (a predictor with path features), the
    DP's merged states give what following every path one by one gives, with and without repeats."""
    rng = np.random.default_rng(700 + seed)
    length, depths = int(rng.integers(4, 10)), int(rng.integers(1, 6))
    cuts = rng.integers(length, size=depths).tolist()
    logq = np.log(rng.uniform(0.4, 1.0, size=length))
    w = rng.normal(size=4)

    def h(depth, cut, node_cut, accepts):
        return 1 / (1 + np.exp(-(w[0] + w[1] * node_cut / length + w[2] * accepts + w[3] * cut / length + depth / 4)))

    def branch(depth, cut, node_cuts, accepts):
        return h(depth, cut, np.asarray(node_cuts, dtype=float), np.asarray(accepts, dtype=float))

    for repeats in (None, logq):
        dp = shared_request_walk(cuts, length, branch, repeat_logq=repeats)
        np.testing.assert_allclose(dp, walk_by_paths(cuts, length, h, repeats), atol=1e-10)
    # The same branch read at the root state only is a different (path-independent) walk.
    flat = shared_request_walk(cuts, length, branch, repeat_logq=logq, path_dependent=False)
    at_root = walk_by_paths(cuts, length, lambda depth, cut, m, a: h(depth, cut, length, 0), logq)
    np.testing.assert_allclose(flat, at_root, atol=1e-10)


def test_usable_requests_by_hand():
    # Depth 0 (cut 4) accepted w.p. 0.5 moves the agreement to 4: depth 1 (cut 6) is then
    # deferred, and depth 2 (cut 2) is still the chain's whatever happens at depth 1.
    realize, usable = shared_request_walk([4, 6, 2], 10, per_depth([0.5, 0.5, 0.5]))
    np.testing.assert_allclose(realize, [1.0, 0.5, 0.5])
    np.testing.assert_allclose(usable, [1.0, 0.5, 1.0])


def test_prepaid_cost_by_hand():
    realize, usable = np.array([1.0, 0.5, 0.5]), np.array([1.0, 0.5, 1.0])
    # Only depth 2 is left undecided and still needed (w.p. 0.5): 0.5 * (0.1 * 30 + 1.0 * 8).
    prepaid = prepaid_cost(realize, usable, [10, 20, 30], [10, 6, 8], token_cost=0.1, step_cost=1.0)
    np.testing.assert_allclose(prepaid, [0.0, 0.0, 5.5])
