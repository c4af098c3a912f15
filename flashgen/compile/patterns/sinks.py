"""How model code writes attention sinks (GPT-OSS) and a softmax's row-max shift, for the walk
of `softmax_walk`: one learned logit per query head concatenated to each row of the scores as
an extra column, the softmax over both, and that column dropped before the value product:

    sinks = module.sinks.reshape(1, -1, 1, 1).expand(B, -1, Sq, -1)
    logits = torch.cat([scores, sinks], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values     # (optional)
    probs = softmax(logits, dim=-1)[..., :-1]

The kernels take the sinks as `flashgen.attention(sinks=[Hq])` (`flashgen.runtime.sinks`). The
row-max shift is a no-op of the softmax's (it subtracts the same number from a whole row) and
is recognised with or without sinks, directly under the softmax only: further up, a mask's
finite fill applied after it would not be shifted with the scores.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from .core import SUB_FNS, equal_heads, example_value, is_fn, known_eq, node_arg

_CAT_FNS = {torch.cat, torch.concat, torch.concatenate}
_MAX_FNS = {torch.max, torch.Tensor.max}
_AMAX_FNS = {torch.amax, torch.Tensor.amax}


def _last_dim(dim: Any, ndim: int) -> bool:
    return isinstance(dim, int) and not isinstance(dim, bool) and dim % ndim == ndim - 1


def _row_max_of(m: Any) -> Any:
    """c if `m` is the max of c over its last dim with keepdim (`c.max(-1, keepdim=True)[0]`,
    its `.values`, `amax`, maybe detached), else None."""
    if is_fn(m, {torch.detach, torch.Tensor.detach}, ("detach",)):
        m = m.args[0]
    if not isinstance(m, fx.Node):
        return None
    if m.op == "call_function" and m.target is operator.getitem and m.args[1] == 0:
        inner = m.args[0]
        if is_fn(inner, _MAX_FNS, ("max",)) and node_arg(inner, 2, "keepdim", False) is True:
            src = inner.args[0]
            if _last_dim(node_arg(inner, 1, "dim"), example_value(src).dim()):
                return src
        return None
    if is_fn(m, _AMAX_FNS, ("amax",)) and node_arg(m, 2, "keepdim", False) is True:
        src, dim = m.args[0], node_arg(m, 1, "dim")
        dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
        if _last_dim(dim, example_value(src).dim()):
            return src
    return None


def row_max_shift(x: Any) -> tuple[Any, list[fx.Node], list[fx.Node]] | None:
    """(c, the nodes of the shift, the unread ones among them) if `x` is `c - rowmax(c)`, else
    None. Unread: the max's indices, which a graph may take out of its (values, indices) pair
    without reading them (a checkpointed region's body does)."""
    if not (is_fn(x, SUB_FNS, ("sub",)) and len(x.args) == 2 and not x.kwargs):
        return None
    c, m = x.args
    if not (isinstance(c, fx.Node) and isinstance(m, fx.Node)) or _row_max_of(m) is not c:
        return None
    interior, unread, n = [x], [], m
    while n is not c:  # the getitem / amax, the max, a detach
        interior.append(n)
        if is_fn(n, _MAX_FNS, ("max",)):
            unread += [u for u in n.users if u not in interior and not u.users]
        n = n.args[0]
    return c, interior + unread, unread


def sink_concat(x: Any) -> tuple[Any, Any, bool] | None:
    """(scores, sinks, last) if `x` concatenates the scores [B, H, Sq, Sk] with one column of
    per-head logits along the last dim (`last`: the sink column after the keys'), where that
    column is an expand of a tensor with one entry per query head ([H, 1, 1] or
    [1, H, 1, 1]); `sinks` is that tensor. None otherwise."""
    if not is_fn(x, _CAT_FNS, ("cat",)):
        return None
    parts = node_arg(x, 0, "tensors")
    ev = example_value(x)
    if not isinstance(ev, torch.Tensor) or ev.dim() != 4:
        return None
    if not (isinstance(parts, (list, tuple)) and len(parts) == 2):
        return None
    if not _last_dim(node_arg(x, 1, "dim", 0), 4):
        return None
    for side, last in ((parts[1], True), (parts[0], False)):
        base = _per_head(side, ev.shape[1])
        if base is not None:
            return (parts[0] if last else parts[1]), base, last
    return None


def _per_head(s: Any, heads: Any) -> Any:
    """The tensor `s` expands, when it holds one logit per head (`sink_concat`), else None."""
    if not (isinstance(s, fx.Node) and is_fn(s, set(), ("expand",))):
        return None
    base = s.args[0]
    out, src = example_value(s), example_value(base)
    if not (isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor)):
        return None
    if not known_eq(out.shape[-1], 1) or not src.is_floating_point() or src.dim() > 4:
        return None
    shape = (1,) * (4 - src.dim()) + tuple(src.shape)
    if not (known_eq(shape[0], 1) and known_eq(shape[2], 1) and known_eq(shape[3], 1)):
        return None
    return base if equal_heads(shape[1], heads) else None


def drops_sink_column(u: Any, p: Any, last: bool) -> bool:
    """Whether `u` is `p[..., :-1]` (`last`) or `p[..., 1:]`: the probabilities without the
    sink column (also spelled with a full slice for each leading dim)."""
    getitem = u.op == "call_function" and u.target is operator.getitem
    if not (getitem and len(u.args) == 2 and u.args[0] is p):
        return False
    index = u.args[1]
    if not isinstance(index, tuple) or not index:
        return False
    *lead, tail = index
    full = slice(None, None, None)
    if lead == [Ellipsis]:
        pass
    elif len(lead) != 3 or any(i != full for i in lead):
        return False
    want = slice(None, -1, None) if last else slice(1, None, None)
    return tail == want
