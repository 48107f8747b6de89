"""The exact offline optimum of `strata replay`'s slot model, as a min-cost flow (`oracle-opt`).

Model (instant service, no RAM cache): requests arrive in order; each runs in one of n slots, and
afterwards that slot holds its history (prompt + output), so right after request t the slots hold
t's history and n - 1 others. A history h pays off when a later request continues it (a child c:
`c.parent == h`) while h is still in a slot; the child reuses w(h, c) = the common prefix of c and
h's history (in h's slot, or copied from it to another slot). Keeping h until its j-th child c_j
earns w_1 + ... + w_j and occupies one of the n - 1 other slots at every request strictly between
h and c_j. Choosing how long to keep each history is then a maximum-weight selection of intervals
with at most n - 1 of them over any request: an interval matrix, solved exactly by successive
shortest paths (n - 1 augmenting paths over a DAG of about 2 x requests nodes).

The optimum bounds what any policy reuses from a request's parent history. A policy can also reuse
a prefix of another history (a grandparent copy, a shared system prompt): that is not counted here
and is measured separately (`parent_reuse`). Not a policy to serve: it knows the whole timeline.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from .timeline import Request, common_prefix


@dataclass(frozen=True)
class Optimum:
    """`keep_until[h]`: index of the last child h is kept for (absent: not kept past its creation
    except for a child that comes right after it); `reuse`: the parent reuse the optimum earns."""

    n_slots: int
    reuse: int
    keep_until: dict[int, int]


def child_reuse(requests: Sequence[Request]) -> dict[int, list[tuple[int, int]]]:
    """For each history, its children in order: (child index, tokens the child reuses of it)."""
    kids: dict[int, list[tuple[int, int]]] = {}
    for c, r in enumerate(requests):
        p = r.parent
        if p is None or not 0 <= p < c:
            continue
        h = requests[p]
        w = common_prefix(r.ids, r.lens, h.ids + (h.out_id,), h.lens + (h.n_output,))
        kids.setdefault(p, []).append((c, min(w, r.n_prompt)))
    return kids


class _Graph:
    __slots__ = ("head", "to", "cap", "cost", "nxt")

    def __init__(self, n: int) -> None:
        self.head = [-1] * n
        self.to: list[int] = []
        self.cap: list[int] = []
        self.cost: list[int] = []
        self.nxt: list[int] = []

    def add(self, u: int, v: int, cap: int, cost: int) -> None:
        for a, b, c, w in ((u, v, cap, cost), (v, u, 0, -cost)):  # edge e and its reverse e ^ 1
            self.to.append(b)
            self.cap.append(c)
            self.cost.append(w)
            self.nxt.append(self.head[a])
            self.head[a] = len(self.to) - 1


def solve(requests: Sequence[Request], n_slots: int) -> Optimum:
    """The largest parent reuse any placement of `requests` (time order) in `n_slots` slots earns."""
    if n_slots < 1:
        raise ValueError(f"--slots {n_slots}: expected >= 1")
    n = len(requests)
    kids = child_reuse(requests)
    free = 0  # a child right after its parent always finds it
    chains: list[tuple[int, list[tuple[int, int]]]] = []
    for h, cs in kids.items():
        if cs[0][0] == h + 1:
            free += cs[0][1]
            cs = cs[1:]
        if cs:
            chains.append((h, cs))
    # Nodes: line node t (0..n) in topological order, then each chain's nodes right after line node
    # h + 1 (every chain child is at h + 2 or later). Line edge t -> t + 1 is request t's instant.
    order: list[tuple[int, int, int]] = [(t, -1, t) for t in range(n + 1)]
    node_count = n + 1
    chain_nodes: list[list[int]] = []
    for h, cs in chains:
        ids = list(range(node_count, node_count + len(cs)))
        node_count += len(cs)
        chain_nodes.append(ids)
        order += [(h + 1, j, x) for j, x in enumerate(ids)]
    order.sort()
    topo = [x for _, _, x in order]
    g = _Graph(node_count)
    units = n_slots - 1
    if units == 0 or n == 0:
        return Optimum(n_slots, free, {h: cs[0][0] for h, cs in kids.items() if cs[0][0] == h + 1})
    for t in range(n):
        g.add(t, t + 1, units, 0)
    chain_edges: list[list[int]] = []  # per chain, the edge index of each exit X_j -> line(c_j)
    for (h, cs), ids in zip(chains, chain_nodes, strict=True):
        g.add(h + 1, ids[0], 1, 0)
        exits = []
        for j, (c, w) in enumerate(cs):
            exits.append(len(g.to))
            g.add(ids[j], c, 1, -w)
            if j + 1 < len(cs):
                g.add(ids[j], ids[j + 1], 1, -w)
        chain_edges.append(exits)
    # potentials: shortest distances from line node 0 over the DAG (negative costs, no cycles)
    inf = float("inf")
    pot = [inf] * node_count
    pot[0] = 0
    for u in topo:
        if pot[u] == inf:
            continue
        e = g.head[u]
        while e >= 0:
            if g.cap[e] > 0 and pot[u] + g.cost[e] < pot[g.to[e]]:
                pot[g.to[e]] = pot[u] + g.cost[e]
            e = g.nxt[e]
    sink = n
    gained = 0
    for _ in range(units):
        dist = [inf] * node_count
        via = [-1] * node_count
        dist[0] = 0
        heap = [(0, 0)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist[u]:
                continue
            e = g.head[u]
            while e >= 0:
                if g.cap[e] > 0:
                    v = g.to[e]
                    nd = d + g.cost[e] + pot[u] - pot[v]
                    if nd < dist[v]:
                        dist[v] = nd
                        via[v] = e
                        heapq.heappush(heap, (nd, v))
                e = g.nxt[e]
        if dist[sink] == inf:
            break
        for v in range(node_count):
            if dist[v] < inf:
                pot[v] += dist[v]
        path_cost = pot[sink] - pot[0]
        if path_cost >= 0:  # no interval left that earns anything
            break
        v = sink
        while v != 0:
            e = via[v]
            g.cap[e] -= 1
            g.cap[e ^ 1] += 1
            v = g.to[e ^ 1]
        gained -= path_cost
    keep_until: dict[int, int] = {h: cs[0][0] for h, cs in kids.items() if cs[0][0] == h + 1}
    for (h, cs), exits in zip(chains, chain_edges, strict=True):
        for (c, _), e in zip(cs, exits, strict=True):
            if g.cap[e] == 0:  # the unit of flow left the chain at child c
                keep_until[h] = c
    return Optimum(n_slots, free + gained, keep_until)


@dataclass
class ReuseSplit:
    """What a replay reused, split: from the request's parent history (in the slot it ran in or the
    slot it copied from) and from anything else (another history sharing a prefix)."""

    parent: int = 0
    other: int = 0


class SplitReuse:
    """Wraps a replay policy and splits the slot reuse of its choices (`split`): the simulator's
    reuse is max(common prefix with the chosen slot, with the source slot)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.split = ReuseSplit()

    def reset(self, slots, requests, opts) -> None:
        self.slots = slots
        self.requests = requests
        self.inner.reset(slots, requests, opts)

    def served(self, slot: int, i: int, end: float) -> None:
        self.inner.served(slot, i, end)

    def choose(self, i, now, commons):
        t, src, reason = self.inner.choose(i, now, commons)
        used = [t] if src is None else [t, src]
        r = self.requests[i]
        reused = min(max(commons[k] for k in used), r.n_prompt)
        from_parent = 0
        if r.parent is not None:
            from_parent = max((commons[k] for k in used if self.slots[k].req == r.parent), default=0)
        self.split.parent += min(from_parent, reused)
        self.split.other += reused - min(from_parent, reused)
        return t, src, reason
