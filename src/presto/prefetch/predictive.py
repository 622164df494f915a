"""traversal=predictive: spend a call's requests where the walk is predicted to go, and no further.

The paper's predictive rule (Section 3.3, Appendix C) allocates node-level requests: a
classifier predicts each candidate node's epsilon-class before generation, eq. 14 turns
the class probabilities into a branch probability h_hat, and Proposition 2's dynamic
program picks the ancestor-closed set of at most N_pf nodes with the largest predicted
number of transitions. Those objects live in :mod:`presto.prefetch.allocation` and are
what scripts/oracle_bound.py replays.

In this codebase random inputs are keyed by transition, so every feasible node at depth d
is served by the same request and a call covers whole depths; BFS (depths
0..min(N_pf, K-k)-1) already reaches every feasible node down to its depth, which is what
an oracle node-level allocation could reach with the same requests. What is left to
decide is how MANY depths to request. This rule:

1. predicts, for each candidate depth d, the probability that the walk decides
   transition d (:func:`~presto.prefetch.allocation.shared_request_walk`: a DP
   over (depth, node cut, agreement with the root, accepts) with h_hat from the
   predictor's class probabilities of each state's node features, the features logged
   in trees.jsonl and computed by the same function; an accepted proposal keeps deeper
   depths feasible as far as it repeats the root's tokens, which it does with the
   probability the root's stored log q gives);
   The reach probabilities are then calibrated online against realized walks
   (:class:`ReachCalibration`: one exponent, fitted by maximum likelihood on which
   depths the walks of earlier rounds decided, with the same model: a hot-swapped
   checkpoint starts a fresh calibration). A walk is followed past its round's last
   request (:class:`PendingWalk`): the chain is the same whatever was requested, so
   the states of the next rounds tell how far it would have gone. Judged only on the
   depths it requested, a rule that requests few would never see that walks go
   farther, and would keep requesting few;
2. predicts the cost of a call carrying depths 0..m-1 with a model fitted online to the
   engine's measured call times, t = a + b * (tokens generated) + c * (longest suffix)
   + d * (pairs of rows decoding together) (non-negative least squares; a batched decode
   costs about one step per token of the longest row plus a per-row share, and on some
   engines a row's share grows with the batch), less what the requests the walk is predicted
   to leave undecided save later calls when the chain still makes them on reaching their
   transitions: their tokens and their decode steps (the DP follows the chain's agreement
   with the root past the walk's end; a request survives while its cut is within it);
3. requests the m that maximizes predicted transitions per predicted second.

With ``cost_aware: false`` it requests every depth BFS would: same requests, same calls.
Before the cost model has seen ``min_calls`` calls it warms up: the depths whose new rows
fit in ``warmup_rows``, doubled with each measured call (cheap first calls that span
widths for the fit; a BFS-wide first call can cost more than the rest of its chain where
a call's time follows its tokens). The chain never changes: any prefix of
depths is a valid plan, and the walk takes the kernel's own decisions with the
decision's own random inputs (Proposition 1), so the predictor and the timings only move
the boundary between this call and the next.

It never spends a request below a deferred node, by construction: a plan is a prefix of
depths, and the depth-d request serves every feasible node at depth d, among them the
all-reject path, which is never deferred. A depth's request is thus never spent only on
nodes the walk cannot reach from this call's root, and the MH walk stops at the first
deferred node anyway (the next call resumes there with the same random inputs).
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presto.config import ConfigError, absolute
from presto.engines.base import SuffixRequest
from presto.predictor.features import broadcast_feature_matrix
from presto.predictor.hotload import HotPredictor, Predictor
from presto.predictor.provenance import provenance_mismatch
from presto.prefetch.allocation import (
    best_depth_count,
    prepaid_cost,
    shared_request_walk,
    squared_row_steps,
    warmup_depth_count,
)
from presto.prefetch.traversal import Traversal, walk_decides
from presto.prefetch.tree import PATH_FEATURES, node_features
from presto.samplers.kernel import Kernel
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState

OPTIONS = ("predictor", "cost_aware", "min_calls", "window", "prior_calls", "warmup_rows")


class CallCostModel:
    """Seconds of one engine call from the rows it decodes, fitted to measured calls.

    ``t = a + b * tokens + c * longest + d * pairs`` with a, b, c, d >= 0: an engine
    decodes a batch one token step at a time, so a call costs about one step per token of
    its longest row (c), a share per generated token (b), a fixed part (a: prefill,
    scheduling), and, where a step's work per row grows with the rows beside it, a share
    per pair of rows decoding together (d; ``pairs`` is
    :func:`~presto.prefetch.allocation.squared_row_steps`). Without that last term one
    wide call (140 rows on the transformers engine on a CPU, dearer per row than 7) tilts
    the fit onto the per-token cost, and mid-width calls, cheaper per row than both, look
    so dear that the rule never makes them. Calls observed without ``pairs`` fit a, b, c.

    BFS calls nearly always carry some depth with a long suffix, so from BFS alone the
    intercept and the per-step cost are not identifiable. The fit is therefore a
    non-negative least squares with a weak ridge prior (``prior_calls`` pseudo-calls,
    on columns scaled to their mean) that attributes time to decode steps; measured
    calls with other longest suffixes (which the traversal's own plans produce) override
    it. No prediction before ``min_calls`` calls (the traversal then warms up:
    :func:`~presto.prefetch.allocation.warmup_depth_count`).
    """

    def __init__(self, min_calls: int = 3, window: int = 256, prior_calls: float = 2.0) -> None:
        if min_calls < 1 or window < min_calls or not 0 <= prior_calls < math.inf:  # NaN fails too
            raise ValueError(
                f"need 1 <= min_calls <= window and a finite prior_calls >= 0, got {min_calls}, {window}, {prior_calls}"
            )
        self.min_calls = min_calls
        self.prior_calls = prior_calls
        self.rows: deque[tuple[float, float, float | None, float]] = deque(maxlen=window)
        self.coef: np.ndarray | None = None

    def observe(self, tokens: float, longest: float, seconds: float, pairs: float | None = None) -> None:
        """Fit one more measured call. Runs after every engine call of a run, so it never raises:
        a call it cannot use (a non-finite or non-positive count, a NaN time) is skipped, and
        a fit that fails or comes out non-finite leaves the previous one."""
        measured = (tokens, longest, seconds) + (() if pairs is None else (pairs,))
        if not (
            all(np.isfinite(measured)) and seconds >= 0 and tokens > 0 and longest > 0 and (pairs is None or pairs > 0)
        ):
            return
        self.rows.append((float(tokens), float(longest), None if pairs is None else float(pairs), float(seconds)))
        if len(self.rows) < self.min_calls:
            return
        from scipy.optimize import nnls

        with_pairs = all(row[2] is not None for row in self.rows)
        data = np.asarray([row if with_pairs else (*row[:2], 0.0, row[3]) for row in self.rows], dtype=np.float64)
        columns = [np.ones(len(data)), data[:, 0], data[:, 1]] + ([data[:, 2]] if with_pairs else [])
        design = np.column_stack(columns)
        scale = design.mean(axis=0)  # every column > 0
        weight = np.sqrt(self.prior_calls)
        prior = np.zeros(design.shape[1])
        prior[2] = data[:, 3].mean()  # scaled: all time in decode steps
        system = np.vstack([design / scale, weight * np.eye(design.shape[1])])
        target = np.concatenate([data[:, 3], weight * prior])
        try:
            coef, _ = nnls(system, target)
        except (ValueError, RuntimeError):  # e.g. no convergence on subnormal times: keep the last fit
            return
        coef = np.append(coef / scale, [0.0] * (4 - len(coef)))
        if np.all(np.isfinite(coef)):
            self.coef = coef

    @property
    def calls(self) -> int:
        """Measured calls the fit holds (at most ``window``)."""
        return len(self.rows)

    @property
    def token_cost(self) -> float:
        """Fitted seconds per generated token (b); 0 before the first fit."""
        return 0.0 if self.coef is None else float(self.coef[1])

    @property
    def step_cost(self) -> float:
        """Fitted seconds per decode step of a call's longest row (c); 0 before the first fit."""
        return 0.0 if self.coef is None else float(self.coef[2])

    def predict(self, tokens: np.ndarray, longest: np.ndarray, pairs: np.ndarray | None = None) -> np.ndarray | None:
        if self.coef is None:
            return None
        a, b, c = self.coef[:3]
        cost = a + b * np.asarray(tokens, dtype=np.float64) + c * np.asarray(longest, dtype=np.float64)
        if pairs is not None and len(self.coef) > 3:
            cost = cost + self.coef[3] * np.asarray(pairs, dtype=np.float64)
        return cost


class ReachCalibration:
    """Online calibration of the predicted reach probabilities against realized walks.

    The realization DP's reach probabilities inherit the predictor's biases (it was
    trained on other trees, other prompts). Each round shows, for every requested depth
    d, whether the walk decided transition d; this fits one exponent gamma by maximum
    likelihood so that ``p ** gamma`` matches those outcomes (gamma < 1 lifts a too
    pessimistic tail, gamma > 1 lowers an optimistic one; p = 1 at depth 0 stays 1).
    One parameter, so a few rounds suffice; no change before ``min_pairs`` outcomes.

    The exponent corrects one model's biases, so the pairs belong to the model that
    predicted them (``model``: its fingerprint, None for h = 1/2). :meth:`use` switches to
    another model with a fresh fit; outcomes of rounds planned by a model no longer in use
    (another chain's round that straddled a hot-swap) are dropped.
    """

    def __init__(self, min_pairs: int = 20, window: int = 2048) -> None:
        self.min_pairs = min_pairs
        self.pairs: deque[tuple[float, int]] = deque(maxlen=window)
        self.gamma = 1.0
        self.model: str | None = None

    def use(self, model: str | None) -> None:
        """Calibrate the predictions of ``model`` from now on; a different model starts from gamma = 1."""
        if model != self.model:
            self.model = model
            self.pairs.clear()
            self.gamma = 1.0

    def observe(self, predicted: Sequence[float], realized: int, model: str | None = None) -> None:
        """``predicted[d]``: ``model``'s reach probability of requested depth d; ``realized``: transitions walked."""
        if model != self.model:
            return
        self.pairs.extend((float(p), int(d < realized)) for d, p in enumerate(predicted) if 0.0 < p < 1.0)
        if len(self.pairs) < self.min_pairs:
            return
        from scipy.optimize import minimize_scalar

        data = np.asarray(self.pairs)
        log_p, reached = np.log(np.clip(data[:, 0], 1e-9, 1 - 1e-9)), data[:, 1]

        def loss(gamma: float) -> float:
            q = np.clip(np.exp(gamma * log_p), 1e-12, 1 - 1e-12)
            return -float(np.sum(reached * np.log(q) + (1 - reached) * np.log1p(-q)))

        self.gamma = float(minimize_scalar(loss, bounds=(0.05, 20.0), method="bounded").x)

    def apply(self, predicted: np.ndarray) -> np.ndarray:
        return np.power(np.clip(predicted, 0.0, 1.0), self.gamma)


# One watcher per checkpoint file per process (it only watches and loads the file). What the
# rule learns online (the call-cost model and the reach calibration) belongs to one traversal:
# run.py builds one per run and its chains share it, while another run in the same process
# (a multirun job, the benchmark's next sampler) starts afresh, so its plans never depend on
# which runs came before it.
_HOT: dict[str, HotPredictor] = {}


def resolve_predictor_path(value: Any, sampler: str | None, option: str = "traversal.predictor") -> Path | None:
    """The checkpoint ``value`` names: a path; null: none; ``default``: the shipped checkpoint
    trained on ``sampler``'s trees (next to the package, never the working directory).

    ``default`` with no sampler to choose by, or one no predictor ships for, is a ConfigError
    naming ``option`` (the setting that said ``default``).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "none")):
        return None
    if value == "default":
        from presto.predictor import SHIPPED_SAMPLERS, default_checkpoint

        try:
            return default_checkpoint(sampler)  # ValueError: no predictor ships for it
        except ValueError:
            which = "no sampler was given" if sampler is None else f"none ships for sampler {sampler}"
            raise ConfigError(
                f"{option}=default names the shipped predictor of the run's sampler "
                f"({', '.join(SHIPPED_SAMPLERS)}), but {which}: name a checkpoint PATH, or null (h = 1/2)"
            ) from None
    # Absolute, not resolve(): a symlink (current.ckpt -> v1.ckpt) is watched as the link, so
    # repointing it during the run is a replacement like any other.
    return Path(absolute(value))


class PredictiveTraversal(Traversal):
    """Request the depth prefix with the best predicted transitions per predicted call second."""

    name = "predictive"

    def __init__(
        self,
        predictor: HotPredictor | Predictor | None = None,
        cost_aware: bool = True,
        cost_model: CallCostModel | None = None,
        reach_calibration: ReachCalibration | None = None,
        warmup_rows: int = 8,
    ) -> None:
        self.predictor = predictor
        self.cost_aware = bool(cost_aware)
        self.cost_model = cost_model or CallCostModel()
        self.reach_calibration = reach_calibration or ReachCalibration()
        self.warmup_rows = warmup_rows  # new rows of the first call before the cost model predicts
        self.last_plan: dict[str, Any] | None = None
        self._round: tuple[tuple[Any, int], int] | None = None  # ((ChainKey, stage), transition) just planned
        self._planned: PendingWalk | None = None  # its walk to follow, when the plan predicted reach
        self._pending: list[PendingWalk] = []  # walks of earlier rounds still followed
        self.sampler: Any = None  # the run's sampler settings (expect_sampler): swapped-in models are checked

    @classmethod
    def from_options(cls, options: dict[str, Any], sampler: str | None = None) -> PredictiveTraversal:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"traversal=predictive has no option(s) {unknown}; it takes {', '.join(OPTIONS)}")
        cost_aware = options.get("cost_aware", True)
        if not isinstance(cost_aware, bool):
            raise ConfigError(f"traversal.cost_aware must be true or false, got {cost_aware!r}")
        min_calls, window = options.get("min_calls", 3), options.get("window", 256)
        prior_calls = options.get("prior_calls", 2.0)
        # bool is an int to isinstance: min_calls=true must not pass as 1.
        if isinstance(min_calls, bool) or not isinstance(min_calls, int) or min_calls < 1:
            raise ConfigError(f"traversal.min_calls must be an integer >= 1, got {min_calls!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < min_calls:
            raise ConfigError(
                f"traversal.window must be an integer >= traversal.min_calls ({min_calls}), got {window!r}"
            )
        # NaN or inf would only fail at the first fit, mid-run.
        if isinstance(prior_calls, bool) or not isinstance(prior_calls, int | float) or not 0 <= prior_calls < math.inf:
            raise ConfigError(f"traversal.prior_calls must be a finite number >= 0, got {prior_calls!r}")
        warmup_rows = options.get("warmup_rows", 8)
        if isinstance(warmup_rows, bool) or not isinstance(warmup_rows, int) or warmup_rows < 1:
            raise ConfigError(f"traversal.warmup_rows must be an integer >= 1, got {warmup_rows!r}")
        path = resolve_predictor_path(options.get("predictor", "default"), sampler)
        predictor = None
        if path is not None:
            key = str(path)
            if key in _HOT:  # an earlier run's watcher: the file may have broken or changed since
                _HOT[key].check()  # PredictorError (a ConfigError) if unusable at this run's start
            else:
                _HOT[key] = HotPredictor(path)  # PredictorError (a ConfigError) if unusable at start
            predictor = _HOT[key]
        cost_model = CallCostModel(min_calls, window, float(prior_calls))
        return cls(predictor, cost_aware, cost_model, ReachCalibration(), warmup_rows)

    def observe_call(self, record: dict[str, Any]) -> None:
        """Called by the PrefetchStepper after each engine call with its measured time."""
        self.cost_model.observe(
            record["generated_tokens"], record["longest_suffix"], record["call_time_s"], record.get("row_pairs")
        )

    def observe_round(self, realized: int, states: Sequence[ChainState] = ()) -> None:
        """Called by the PrefetchStepper after each walk: the transitions it realized and the
        states it went through; walks still followed learn how far they went, and those
        that are done go to the reach calibration."""
        planned, self._planned = self._planned, None
        if self._round is None:
            return
        (chain, start), self._round = self._round, None
        if not states:  # nothing to follow the walk with: judge the requested depths only
            if planned is not None:
                self.reach_calibration.observe(planned.predicted[: self.last_plan["depths"]], realized, planned.model)
            return
        # Walks of another chain or block can never be followed further.
        walks = [w for w in self._pending if w.chain == chain] + ([planned] if planned is not None else [])
        self._pending = []
        for walk in walks:
            walk.follow(start, states)
            if walk.length is None:
                self._pending.append(walk)
            else:
                self.reach_calibration.observe(walk.predicted, walk.length, walk.model)

    def expect_sampler(self, sampler: Any) -> None:
        """The run's sampler settings (presto.config.SamplerSettings): each predictor swapped in from
        now on whose training data holds another sampler or setting gets a ``warning:`` line
        (:func:`provenance_warning`). The run names its first predictor itself (announce_predictor)."""
        self.sampler = sampler

    def current_predictor(self) -> Predictor | None:
        if isinstance(self.predictor, HotPredictor):
            swaps = self.predictor.swaps
            predictor = self.predictor.current()  # between rounds: a replaced checkpoint is picked up here
            if self.predictor.swaps != swaps:  # say so: trees.jsonl's plans name it by fingerprint from here on
                print(f"notice: reloaded {describe_predictor(predictor)}", file=sys.stderr)
                warning = provenance_warning(predictor, self.sampler) if self.sampler is not None else None
                if warning is not None:
                    print(warning, file=sys.stderr)
            return predictor
        return self.predictor

    def branch_function(self, root: ChainState, predictor: Predictor | None) -> Callable[..., np.ndarray]:
        """h_hat(depth, cut, node cuts, accepts) for the realization DP; 1/2 without a predictor."""

        def branch(depth: int, cut: int, node_cuts: np.ndarray, accepts: np.ndarray) -> np.ndarray:
            if predictor is None:
                return np.full(len(node_cuts), 0.5)
            if PATH_FEATURES.isdisjoint(predictor.feature_names):
                row = node_features(root, cut, depth, root.length, 0)
                h = predictor.branch_probability(broadcast_feature_matrix(row, predictor.feature_names, 1))
                return np.full(len(node_cuts), float(h[0]))
            # The DP's states share (node cut, accepts) across agreements: featurize each pair once,
            # all pairs in one call (the root's statistics around the cut are the same for all).
            span = int(accepts.max(initial=0)) + 1
            pairs, index = np.unique(node_cuts * span + accepts, return_inverse=True)
            columns = node_features(root, cut, depth, pairs // span, pairs % span)
            matrix = broadcast_feature_matrix(columns, predictor.feature_names, len(pairs))
            return predictor.branch_probability(matrix)[index.ravel()]

        return branch

    def plan(
        self,
        kernel: Kernel,
        root: ChainState,
        inputs: Callable[[int], DecisionInputs],
        depth_cap: int,
        budget: int,
        reusable: Collection[SuffixRequest] = (),
    ) -> dict[int, int]:
        depths = min(budget, depth_cap)
        decision = inputs(0)
        self._round, self._planned = ((decision.key, decision.stage), decision.transition), None
        cuts = [kernel.cut(root, inputs(d)) for d in range(depths)]
        predictor = self.current_predictor()
        info: dict[str, Any] = {
            "max_depths": depths,
            "predictor": predictor.fingerprint if predictor else None,
            "h_root": None,
            "realize": None,
            "costs": None,
        }
        count = depths
        if self.cost_aware and depths > 1:
            branch = self.branch_function(root, predictor)
            info["h_root"] = float(branch(0, cuts[0], np.array([root.length]), np.array([0]))[0])
            # Proposals drawn at the root's own temperature repeat its tokens with known
            # probability (its stored log q); candidates at other temperatures (MultiTryMH)
            # get the cut-level bound instead.
            repeats = root.logq if not kernel.extra_temperatures else None
            path_dependent = predictor is not None and not PATH_FEATURES.isdisjoint(predictor.feature_names)
            realize, usable = shared_request_walk(cuts, root.length, branch, repeats, path_dependent)
            # What the call would generate: proposals an earlier round of the block already
            # made (typically the long suffixes of small cuts) are reused, not generated.
            lengths = [
                [r.num_new_tokens for r in set(kernel.requests((), root, cut, inputs(d))) if r not in reusable]
                for d, cut in enumerate(cuts)
            ]
            depth_tokens = [sum(group) for group in lengths]
            tokens = np.cumsum(depth_tokens)
            depth_longest = [max(group, default=0) for group in lengths]
            longest = np.maximum.accumulate(depth_longest)
            pairs = [squared_row_steps([n for group in lengths[: m + 1] for n in group]) for m in range(len(lengths))]
            costs = self.cost_model.predict(tokens, np.maximum(longest, 1), np.asarray(pairs))
            if costs is not None:
                # A depth this walk leaves undecided is not lost when the chain still makes the
                # same request on reaching its transition, a round or several later: that
                # call then neither generates its tokens nor decodes its (long) row. Without
                # this credit the rule under-requests (deep requests look like pure waste).
                prepaid = prepaid_cost(
                    realize, usable, depth_tokens, depth_longest, self.cost_model.token_cost, self.cost_model.step_cost
                )
                costs = costs - prepaid
            self.reach_calibration.use(info["predictor"])  # a swapped-in model is not fitted on the old one's pairs
            calibrated = self.reach_calibration.apply(realize)
            if costs is None:  # warm-up: no cost prediction yet
                count = warmup_depth_count([len(group) for group in lengths], self.cost_model.calls, self.warmup_rows)
            else:
                count = best_depth_count(calibrated, costs)
            self._planned = PendingWalk(
                chain=self._round[0],
                start=self._round[1],
                kernel=kernel,
                root=root,
                cuts=cuts,
                inputs=inputs,
                predicted=realize.tolist(),
                model=info["predictor"],
            )
            info.update(
                realize=calibrated.tolist(),
                realize_raw=realize.tolist(),
                reach_gamma=self.reach_calibration.gamma,
                warmup=costs is None,
                costs=None if costs is None else costs.tolist(),
                usable=usable.tolist(),
                prepaid=None if costs is None else prepaid.tolist(),
            )
        info["depths"] = count
        self.last_plan = info
        return {d: cuts[d] for d in range(count)}


@dataclass
class PendingWalk:
    """A round's walk followed as if every depth up to its plan's maximum had been requested.

    ``length`` is None until known: the number of depths that walk decides, i.e. up to the
    first depth d whose state (the chain's state before transition ``start + d``, the
    same whatever was requested) fails :func:`~presto.prefetch.traversal.walk_decides`.
    """

    chain: tuple[Any, int]  # (ChainKey, stage): a walk never leaves its chain's block
    start: int  # transition of the root
    kernel: Kernel
    root: ChainState
    cuts: list[int]  # speculated from the root, one per plannable depth
    inputs: Callable[[int], DecisionInputs]
    predicted: list[float]  # the model's reach probability of each plannable depth
    model: str | None
    decided: int = 0
    length: int | None = None

    def follow(self, first: int, states: Sequence[ChainState]) -> None:
        """``states[i]``: the chain's state before transition ``first + i``."""
        while self.length is None:
            depth = self.decided
            index = self.start + depth - first
            if depth == len(self.cuts):
                self.length = depth
            elif not 0 <= index < len(states):
                return  # that state comes with a later round
            elif depth == 0 or walk_decides(
                self.kernel, self.root, states[index], self.cuts[depth], self.inputs(depth)
            ):
                self.decided += 1
            else:
                self.length = depth


def describe_predictor(predictor: Predictor) -> str:
    """One line naming a predictor as runs log it: its file and the fingerprint trees.jsonl's plans carry."""
    return f"predictor {predictor.path} (fingerprint {predictor.fingerprint})"


def provenance_warning(predictor: Predictor, sampler: Any) -> str | None:
    """The ``warning:`` line for serving ``predictor`` to a run of ``sampler`` (its SamplerSettings),
    when its training trees came from another sampler or setting
    (:func:`~presto.predictor.provenance.provenance_mismatch`); None when they did not, or when the
    checkpoint does not say (one written before checkpoints carried their provenance)."""
    mismatch = provenance_mismatch(predictor.provenance, sampler)
    if mismatch is None:
        return None
    return (
        f"warning: {describe_predictor(predictor)} was {mismatch}; planning goes on with it (its features are "
        "computed for every sampler), but its epsilon-classes may fit this run worse: the paper trains one "
        "predictor per setting (src/train_predictor.py on runs of this setting)"
    )
