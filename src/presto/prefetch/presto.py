"""PreSTO: one batched model call per prefetch round, then the MH walk over the subtree.

A round rooted at the state of transition k asks the traversal rule which depths to
request, generates all their proposals from the root's prefixes in ONE engine call (none
when an earlier round of the block already generated every one of them), and walks the
realized accept/reject path with the kernel's own rule. The walk stops at the
depth cap K-k, at a depth not requested, or at a deferred node (its state does not share
the root's first c_d tokens, or, for a state-dependent cut law, its cut differs from the
speculated one); the next round resumes there with the same random inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from presto.engines.base import SuffixRequest, SuffixResult
from presto.prefetch.allocation import squared_row_steps
from presto.prefetch.traversal import Traversal, walk_decides
from presto.prefetch.tree import log_tree
from presto.samplers.chain import ChainTrace
from presto.samplers.kernel import Decision
from presto.samplers.randomness import DecisionInputs


class PrefetchStepper:
    """Runs a block's K transitions in prefetch rounds of at most N_pf requests."""

    name = "presto"

    def __init__(
        self,
        traversal: Traversal,
        budget: int,
        on_round: Callable[[dict[str, Any]], None] | None = None,
        max_logged_nodes: int = 64,
    ) -> None:
        if budget < 1:
            raise ValueError(f"budget.n_pf must be >= 1, got {budget}")
        self.traversal = traversal
        self.budget = budget
        self.on_round = on_round
        self.max_logged_nodes = max_logged_nodes

    def run_block(self, kernel, engine, prompt_ids, state, key, stage, steps, trace: ChainTrace):
        done = 0
        generated: dict[SuffixRequest, SuffixResult] = {}  # this block's proposals, by request
        reusable: set[SuffixRequest] = set()  # the same requests without the prompt, for the planner
        # Each decision's random inputs, drawn once for the block: the plan, the cut check, the
        # requests, the walk and the tree log all ask for them, round after round.
        decisions: dict[int, DecisionInputs] = {}
        while done < steps:
            root, start = state, done
            depth_cap = steps - done

            def inputs(depth: int, start: int = start) -> DecisionInputs:
                transition = start + depth
                if transition not in decisions:
                    decisions[transition] = key.decision(stage, transition)
                return decisions[transition]

            plan = self.traversal.plan(kernel, root, inputs, depth_cap, self.budget, reusable=reusable)
            if 0 not in plan or len(plan) > self.budget or max(plan) >= depth_cap:
                raise RuntimeError(f"{self.traversal.name} planned depths {sorted(plan)} outside the rules")
            # The walk takes each planned cut as the decision's own: a rule that got one wrong would
            # silently leave the kernel's cut law (the chain would no longer be exact).
            wrong = [d for d, cut in plan.items() if cut != kernel.cut(root, inputs(d))]
            if wrong:
                raise RuntimeError(
                    f"{self.traversal.name} planned depth {wrong[0]} at cut {plan[wrong[0]]}, "
                    f"but that decision's cut from this root is {kernel.cut(root, inputs(wrong[0]))}"
                )
            requests = {d: kernel.requests(prompt_ids, root, cut, inputs(d)) for d, cut in sorted(plan.items())}
            wanted = [r for group in requests.values() for r in group]
            # A request is a pure function of (prefix, length, temperature, seed), so a proposal
            # generated in an earlier round of this block is reused whenever the new root still
            # shares its prefix; those are typically the small cuts, i.e. the longest suffixes.
            batch = list(dict.fromkeys(r for r in wanted if r not in generated))
            before = engine.stats.snapshot()
            generated.update(zip(batch, engine.generate(batch), strict=True))
            reusable.update(replace(r, prefix=r.prefix[len(prompt_ids) :]) for r in batch)
            flat = [generated[r] for r in wanted]
            call_time_s = engine.stats.call_time_s - before.call_time_s
            if batch:  # a cost-aware rule learns what a call costs
                self.traversal.observe_call(
                    {
                        "call_time_s": call_time_s,
                        "generated_tokens": engine.stats.generated_tokens - before.generated_tokens,
                        "unique_requests": engine.stats.unique_requests - before.unique_requests,
                        "longest_suffix": max(r.num_new_tokens for r in batch),
                        "row_pairs": squared_row_steps([r.num_new_tokens for r in batch]),
                    }
                )
            results, offset = {}, 0
            for depth, group in requests.items():
                results[depth] = flat[offset : offset + len(group)]
                offset += len(group)

            path: list[Decision] = []
            for depth in range(depth_cap):
                if depth not in plan:
                    break
                cut = plan[depth]
                # Deferred: the realized path rewrote the prefix this proposal used, or (a
                # state-dependent cut law) the speculated cut does not hold for the realized
                # state. The same test the traversals use to predict or replay walks.
                if not walk_decides(kernel, root, state, cut, inputs(depth)):
                    if kernel.state_depends_cut and state.shares_prefix(root, cut):
                        trace.discarded_requests += 1  # a speculative proposal its cut invalidated
                    break
                decision = kernel.decide(state, cut, results[depth], inputs(depth))
                path.append(decision)
                state = decision.state
                trace.accepts.append(int(decision.accepted))
                trace.log_accepts.append(float(decision.log_accept))
            if not path:
                raise RuntimeError("a prefetch round realized no transition (depth 0 must always be valid)")
            done += len(path)
            trace.rounds += 1
            # A predictive rule learns how far walks really go (also past this round's last request).
            self.traversal.observe_round(len(path), [root, *(decision.state for decision in path)])
            if self.on_round is not None:
                self.on_round(
                    {
                        "stage": stage,
                        "transition": start,
                        "depth_cap": depth_cap,
                        "requested_depths": sorted(plan),
                        "realized": len(path),
                        "call_time_s": call_time_s,  # wall time of this round's one engine call
                        "model_call": bool(batch),  # False when every proposal was reused
                        "requests": len(flat),
                        "generated_requests": len(batch),
                        **({"plan": self.traversal.last_plan} if self.traversal.last_plan is not None else {}),
                        "nodes": log_tree(kernel, root, plan, results, inputs, path, depth_cap, self.max_logged_nodes),
                    }
                )
        return state
