"""The exhaustive search a set plan (`multi.plan_set`) is checked against, for sets small enough to enumerate.

Every split of the models that fit alone into resident and swapped ones, every combination of the residents' chain
points, and for each swapped model every chain point: of the feasible ones (the residents fit together and with
any one swapped model at its point, every device within its capacity) the best by `multi.multi_key`. It shares the
chains (the same estimates) and the capacities with `plan_set`, and none of its search.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from fitplan.core.plan.multi import (
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

__all__ = ["MultiOracle", "exhaustive_multi"]


@dataclass(frozen=True, slots=True)
class MultiOracle:
    key: MultiKey  # the best `multi_key` over the whole space
    loadable: tuple[bool, ...]  # per model: fits the machine alone
    combinations: int  # resident combinations enumerated


def exhaustive_multi(req: MultiRequest) -> MultiOracle:
    chains = chains_of(req)
    caps = capacities(req.machine, req.margin)
    loadable = tuple(any(within(v, caps) for v in c.vecs) for c in chains)
    live = [i for i, ok in enumerate(loadable) if ok]
    n = len(caps)
    best: MultiKey | None = None
    count = 0
    for r in range(req.resident_limit(len(live)) + 1):
        for members in itertools.combinations(live, r):
            others = [i for i in live if i not in members]
            for picks in itertools.product(*(range(len(chains[i].vecs)) for i in members)):
                count += 1
                used: Vec = (0,) * n
                for i, j in zip(members, picks, strict=True):
                    used = add(used, chains[i].vecs[j])
                if not within(used, caps):
                    continue
                swaps: dict[int, int] = {}
                for w in others:
                    fitting = [j for j, v in enumerate(chains[w].vecs) if within(add(used, v), caps)]
                    if not fitting:
                        break
                    swaps[w] = max(fitting, key=lambda j, w=w: chains[w].keys[j])
                if len(swaps) != len(others):
                    continue
                statuses: list[str] = []
                keys = []
                chosen = dict(zip(members, picks, strict=True))
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
                k = multi_key(statuses, keys)
                if best is None or k > best:
                    best = k
    assert best is not None  # the empty resident set is feasible: every live model fits alone
    return MultiOracle(best, loadable, count)
