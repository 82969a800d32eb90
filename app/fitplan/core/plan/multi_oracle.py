"""The exhaustive search a set plan (`multi.plan_set`) is checked against, for sets small enough to enumerate.

Every split of the models that fit alone into resident and swapped ones, every combination of the residents' chain
points, and for each swapped model every chain point: of the feasible ones (the residents fit together and with
any one swapped model at its point, every device within its capacity) the best by `multi.multi_key`. It shares the
chains (the same estimates) and the capacities with `plan_set`, and none of its search.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from fitplan.core.plan.multi import (
    Chain,
    MultiKey,
    MultiRequest,
    Status,
    Vec,
    add,
    capacities,
    chains_of,
    multi_key,
    within,
)
from fitplan.core.plan.objective import PlacementKey

__all__ = ["MultiOracle", "exhaustive_multi"]


@dataclass(frozen=True, slots=True)
class MultiOracle:
    key: MultiKey  # the best `multi_key` over the whole space
    loadable: tuple[bool, ...]  # per model: fits the machine alone
    combinations: int  # resident combinations enumerated


def _best_swaps(
    chains: Sequence[Chain], others: Sequence[int], used: Vec, caps: Vec
) -> dict[int, int] | None:
    """Each swapped model's best point beside `used` (all of its points tried); None when one has none."""
    swaps: dict[int, int] = {}
    for w in others:
        fitting = [j for j, v in enumerate(chains[w].vecs) if within(add(used, v), caps)]
        if not fitting:
            return None
        keys = chains[w].keys
        swaps[w] = max(fitting, key=lambda j: keys[j])
    return swaps


def _key_of(chains: Sequence[Chain], chosen: dict[int, int], swaps: dict[int, int]) -> MultiKey:
    statuses: list[str] = []
    keys: list[PlacementKey] = []
    for i, c in enumerate(chains):
        if i in chosen:
            statuses.append(Status.RESIDENT)
            keys.append(c.keys[chosen[i]])
        elif i in swaps:
            statuses.append(Status.SWAPPED)
            keys.append(c.keys[swaps[i]])
        else:
            statuses.append(Status.NO_FIT)
            keys.append(c.keys[0])
    return multi_key(statuses, keys)


def exhaustive_multi(req: MultiRequest) -> MultiOracle:
    chains = chains_of(req)
    caps = capacities(req.machine, req.margin)
    loadable = tuple(any(within(v, caps) for v in c.vecs) for c in chains)
    live = [i for i, ok in enumerate(loadable) if ok]
    best: MultiKey | None = None
    count = 0
    for r in range(req.resident_limit(len(live)) + 1):
        for members in itertools.combinations(live, r):
            others = [i for i in live if i not in members]
            for picks in itertools.product(*(range(len(chains[i].vecs)) for i in members)):
                count += 1
                used: Vec = (0,) * len(caps)
                for i, j in zip(members, picks, strict=True):
                    used = add(used, chains[i].vecs[j])
                swaps = _best_swaps(chains, others, used, caps) if within(used, caps) else None
                if swaps is None:
                    continue
                k = _key_of(chains, dict(zip(members, picks, strict=True)), swaps)
                if best is None or k > best:
                    best = k
    assert best is not None  # the empty resident set is feasible: every live model fits alone
    return MultiOracle(best, loadable, count)
