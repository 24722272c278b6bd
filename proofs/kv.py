"""Symbolic KV accounting: free queue, private pages, prefix-cache entries with
holder counts; the transitions that change them; conservation as an invariant.

K requests and C cache entries; `planes` and `num_blocks` may be symbolic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3


@dataclass(frozen=True)
class KVState:
    free: z3.ArithRef                         # blocks on the free queue
    priv: tuple[z3.ArithRef, ...]             # private pages per request
    hold: tuple[tuple[z3.BoolRef, ...], ...]  # hold[i][c]: request i holds entry c
    present: tuple[z3.BoolRef, ...]           # entry c is in the prefix cache
    holders: tuple[z3.ArithRef, ...]          # its holder count

    @property
    def K(self) -> int:
        return len(self.priv)

    @property
    def C(self) -> int:
        return len(self.present)


def fresh_kv(prefix: str, K: int, C: int) -> KVState:
    return KVState(
        free=z3.Int(f"{prefix}free"),
        priv=tuple(z3.Int(f"{prefix}priv{i}") for i in range(K)),
        hold=tuple(tuple(z3.Bool(f"{prefix}hold{i}_{c}") for c in range(C)) for i in range(K)),
        present=tuple(z3.Bool(f"{prefix}present{c}") for c in range(C)),
        holders=tuple(z3.Int(f"{prefix}holders{c}") for c in range(C)),
    )


def b2i(b: z3.BoolRef) -> z3.ArithRef:
    return z3.If(b, 1, 0)


def cache_only(s: KVState, c: int) -> z3.BoolRef:
    return z3.And(s.present[c], s.holders[c] == 0)


def free_count(s: KVState, planes: z3.ArithRef) -> z3.ArithRef:
    """Free as admission sees it: the free queue plus cache-only entries."""
    return s.free + planes * z3.Sum([b2i(cache_only(s, c)) for c in range(s.C)] + [z3.IntVal(0)])


def conservation(s: KVState, planes: z3.ArithRef, num_blocks: z3.ArithRef) -> z3.BoolRef:
    """free + planes * (private pages + cache entries) == num_blocks, holder counts
    equal holders, only present entries are held, nothing negative."""
    pages = z3.Sum(list(s.priv) + [b2i(p) for p in s.present] + [z3.IntVal(0)])
    parts = [s.free >= 0, s.free + planes * pages == num_blocks]
    parts += [p >= 0 for p in s.priv]
    for c in range(s.C):
        parts.append(s.holders[c] == z3.Sum([b2i(s.hold[i][c]) for i in range(s.K)] + [z3.IntVal(0)]))
        parts += [z3.Implies(s.hold[i][c], s.present[c]) for i in range(s.K)]
    return z3.And(parts)


def _set(seq: tuple, index: int, value: object) -> tuple:
    return seq[:index] + (value,) + seq[index + 1:]


@dataclass(frozen=True)
class Rules:
    """Switches that tests flip to break a rule on purpose (mutation checks)."""

    release_shared_refs: bool = True


RULES = Rules()


def release(s: KVState, i: int, planes: z3.ArithRef, rules: Rules = RULES) -> KVState:
    """Request i drops everything: private pages to the free queue, one holder
    less on each entry it holds (an entry left with none stays as cache-only)."""
    holders = tuple(h - b2i(s.hold[i][c]) if rules.release_shared_refs else h
                    for c, h in enumerate(s.holders))
    return replace(s, free=s.free + planes * s.priv[i], priv=_set(s.priv, i, z3.IntVal(0)),
                   hold=_set(s.hold, i, tuple(z3.BoolVal(False) for _ in range(s.C))),
                   holders=holders)


def share(s: KVState, i: int, hits: tuple[z3.BoolRef, ...]) -> KVState:
    """Request i becomes a holder of each present entry marked in `hits`."""
    take = tuple(z3.And(h, s.present[c], z3.Not(s.hold[i][c])) for c, h in enumerate(hits))
    return replace(s, hold=_set(s.hold, i, tuple(z3.Or(s.hold[i][c], take[c]) for c in range(s.C))),
                   holders=tuple(s.holders[c] + b2i(take[c]) for c in range(s.C)))


def take_private(s: KVState, i: int, n: z3.ArithRef, evict: tuple[z3.BoolRef, ...],
                 planes: z3.ArithRef) -> tuple[KVState, z3.BoolRef]:
    """Request i takes n private pages, evicting the cache-only entries marked in
    `evict`. Returns the new state and the step's precondition (only cache-only
    entries are evicted, and the free queue then covers the pages)."""
    evicted = z3.Sum([b2i(e) for e in evict] + [z3.IntVal(0)])
    pre = z3.And([z3.Implies(evict[c], cache_only(s, c)) for c in range(s.C)]
                 + [n >= 0, s.free + planes * evicted >= planes * n])
    after = replace(s, free=s.free + planes * evicted - planes * n,
                    priv=_set(s.priv, i, s.priv[i] + n),
                    present=tuple(z3.And(p, z3.Not(evict[c])) for c, p in enumerate(s.present)),
                    holders=tuple(z3.If(evict[c], 0, h) for c, h in enumerate(s.holders)))
    return after, pre


def publish(s: KVState, i: int, c: int) -> tuple[KVState, z3.BoolRef]:
    """One private page of request i becomes cache entry c with i as its holder."""
    pre = z3.And(s.priv[i] >= 1, z3.Not(s.present[c]))
    after = replace(s, priv=_set(s.priv, i, s.priv[i] - 1), present=_set(s.present, c, z3.BoolVal(True)),
                    holders=_set(s.holders, c, z3.IntVal(1)),
                    hold=_set(s.hold, i, _set(s.hold[i], c, z3.BoolVal(True))))
    return after, pre
