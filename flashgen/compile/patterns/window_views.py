"""Scores viewed per window for a mask, then viewed back (HF Swin v2 and the Swin family's
older code): `s.view(B // W, W, H, N, N) + mask.unsqueeze(1).unsqueeze(0)`, then
`.view(-1, H, N, N)` before the softmax, where W windows of N patches share one mask each.

The walk from the softmax (`softmax_walk`) reads the masks added to the 4-D scores it reaches.
`fold` gives it those: while the pass runs, the adds are made on the 4-D scores themselves,
the masks summed into one (the kernels add one), expanded over the split's two leading dims
and flattened as the scores were ([B, h, N, N] with h the mask's own 1 or H; the copy is of
the mask alone).
`Fold.settle` keeps that where the site was replaced (the old chain is then unused) and undoes
it otherwise, so a graph the pass leaves is the graph it was given.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from torch import fx

from .core import (
    ADD_FNS,
    FOLDED_AWAY,
    SUB_FNS,
    _is_view,
    erase_dead,
    example_value,
    fake_mode,
    is_fn,
    is_tensor_node,
    known_eq,
    set_example_values,
)

_ADD_FNS = ADD_FNS - SUB_FNS - {operator.iadd}  # (in-place adds would write the scores)


@dataclass
class Fold:
    """One folded chain: `merge` (the view back, its users moved to `last`), `users` (merge's
    users then), `added` (the nodes `fold` made), `split` (the old chain's read of the scores,
    marked FOLDED_AWAY meanwhile)."""

    merge: fx.Node
    last: fx.Node
    users: list[fx.Node]
    added: list[fx.Node]
    split: fx.Node

    def settle(self, g: fx.Graph) -> None:
        """Keep the fold where the site was replaced (merge's users gone with the match's
        interior: the old chain is erased); else give merge its users back and erase the
        fold's nodes."""
        self.split.meta.pop(FOLDED_AWAY, None)
        alive = set(g.nodes)
        if not any(u in alive for u in self.users):
            erase_dead(g, [self.merge])
            return
        self.last.replace_all_uses_with(self.merge)
        erase_dead(g, list(reversed(self.added)))


def _regroups(n: Any, src_rank: int) -> Any:
    """x if n views x between 5-D [A, W, h, S, T] and 4-D [A * W, h, S, T], x of `src_rank`
    dims; else None."""
    if not (_is_view(n) and is_tensor_node(n.args[0])):
        return None
    src = n.args[0]
    a, b = example_value(src), example_value(n)
    if a.dim() != src_rank or b.dim() != 9 - src_rank:
        return None
    five, four = (a, b) if src_rank == 5 else (b, a)
    if not known_eq(four.shape[0], five.shape[0] * five.shape[1]):
        return None
    return src if _same_shape(five.shape[2:], four.shape[1:]) else None


def _same_shape(a: tuple, b: tuple) -> bool:
    """Proven equal shapes (no guard added)."""
    return len(a) == len(b) and all(known_eq(x, y) for x, y in zip(a, b, strict=True))


def _merges(n: Any) -> Any:
    """x if n views 5-D x [A, W, h, S, T] as [A * W, h, S, T], else None."""
    return _regroups(n, 5)


def _merges_back(n: Any) -> Any:
    """s if n views 4-D s [A * W, h, S, T] as [A, W, h, S, T] (the split), else None."""
    return _regroups(n, 4)


def _chain(merge: fx.Node) -> tuple[fx.Node, fx.Node, list[fx.Node]] | None:
    """(the split, the 4-D scores, the masks added in order) when merge's input is a chain of
    adds on the scores split by a view (each add and the split read once there), else None."""
    x, masks = _merges(merge), []
    while is_fn(x, _ADD_FNS, ("add",)) and len(x.args) == 2 and not x.kwargs:
        if len(x.users) != 1:
            return None
        full = example_value(x)
        ins = [a for a in x.args if isinstance(a, fx.Node) and is_tensor_node(a)]
        chain = [a for a in ins if _same_shape(example_value(a).shape, full.shape)]
        if len(ins) != 2 or not chain:
            return None
        nxt = next((a for a in chain if _merges_back(a) or is_fn(a, _ADD_FNS, ("add",))), None)
        if nxt is None or example_value(nxt).dtype != full.dtype:
            return None
        masks.append(ins[1] if nxt is ins[0] else ins[0])
        x = nxt
    scores = _merges_back(x)
    if scores is None or not masks or len(x.users) != 1:
        return None
    return x, scores, masks[::-1]


def _split_sizes(split: fx.Node) -> tuple[Any, Any] | None:
    """The split's first two sizes (A, W) as its view call was given them, ints or the graph's
    size nodes (HF's `batch_size // mask_shape`: computed apart from the scores), a -1 taken
    from its shape where static; None otherwise."""
    sizes = split.args[1:]
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) != 5 or split.kwargs:
        return None
    lead = []
    for given, traced in zip(sizes[:2], example_value(split).shape[:2], strict=True):
        if isinstance(given, int) and given == -1:
            given = traced if isinstance(traced, int) else None
        if given is None or not isinstance(given, (int, fx.Node)):
            return None
        lead.append(given)
    return lead[0], lead[1]


def _add_flat(g: fx.Graph, scores: fx.Node, masks: list[fx.Node], split: fx.Node, fm: Any):
    """(scores + the masks' sum laid out as the 4-D scores are, the nodes made), or None. The
    sum, of 5-D [A or 1, W or 1, h, S, T] once its leading dims are added, is flattened over
    its first two; where one of them broadcasts and the other not, that one is expanded first
    to the split's size (`_split_sizes`: not read from the old chain, which is erased where
    the fold is kept)."""
    added: list[fx.Node] = []

    def make(node: fx.Node) -> fx.Node:
        set_example_values(fm, [node])
        added.append(node)
        return node

    m = masks[0]
    for other in masks[1:]:  # (one mask for the kernels: their sum)
        m = make(g.call_function(operator.add, (m, other)))
    rank = example_value(m).dim()
    if rank < 5:
        m = make(g.call_function(operator.getitem, (m, (None,) * (5 - rank) + (...,))))
    ones = [known_eq(d, 1) for d in example_value(m).shape[:2]]
    if ones[0] != ones[1]:  # (a symbolic size is never 1: Dynamo specialises sizes 0 and 1)
        lead = _split_sizes(split)
        if lead is None:
            return None, added
        sizes = (lead[0], -1) if ones[0] else (-1, lead[1])
        m = make(g.call_method("expand", (m, *sizes, -1, -1, -1)))
    flat = make(g.call_method("flatten", (m, 0, 1)))
    return make(g.call_function(operator.add, (scores, flat))), added


def fold(gm: fx.GraphModule) -> list[Fold]:
    """Fold every split-mask-merge chain (module docstring); `Fold.settle` each after the pass."""
    g, folds = gm.graph, []
    for merge in list(g.nodes):
        if len(merge.users) != 1:
            continue
        got = _chain(merge)
        if got is None:
            continue
        split, scores, masks = got
        dtype, fm = example_value(scores).dtype, fake_mode(example_value(merge))
        if fm is None:  # (not a graph Dynamo traced: no example values to make)
            continue
        if any(example_value(m).dtype != dtype for m in masks):  # (their sum keeps it)
            continue
        with g.inserting_before(merge):
            x, added = _add_flat(g, scores, masks, split, fm)
        if x is None:  # (sizes not found: nothing made is used)
            erase_dead(g, list(reversed(added)))
            continue
        users = list(merge.users)
        merge.replace_all_uses_with(x)
        split.meta[FOLDED_AWAY] = True  # (its read of the scores does not count: `Fold`)
        folds.append(Fold(merge, x, users, added, split))
    return folds
