"""Proving a mask causal: evaluate the subgraph that builds it on real values (buffers,
sizes), refusing masks that come from forward() arguments, which may change every call."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import fx

from .core import _METADATA_ATTRS, _METADATA_METHODS, _NEAR_NEG_INF, Skip, _ev, _hint, _known_eq


class _Values:
    """Real values for placeholders/get_attrs: what a mask evaluation may read."""

    def __init__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> None:
        self.gm = gm
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.by_node = dict(zip(phs, example_inputs, strict=False))

    def leaf(self, n: Any) -> Any:
        if n.op == "get_attr":
            obj: Any = self.gm
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
            return obj
        if n not in self.by_node:
            raise Skip(f"no example value for {n.name}")
        val = self.by_node[n]
        if isinstance(val, torch.SymInt):
            return _hint(val)
        if isinstance(val, torch.Tensor) and isinstance(val, torch._subclasses.FakeTensor):
            raise Skip(f"{n.name} has no real value at compile time")
        return val


def _is_buffer_placeholder(n: Any) -> bool:
    """True for module state (buffers, parameters, tensor attributes, globals) that Dynamo
    lifted into graph inputs; False for forward() arguments, which may differ on every call.

    Dynamo names a forward() argument `L['mask']` (or `L['args'][0]`, `L['kwargs']['mask']`);
    state is reached through an attribute (`L['self']._buffers['bias']`) or is a global.
    """
    arg = n.meta.get("grapharg")
    source = getattr(arg, "source", None) if arg is not None else None
    name = getattr(source, "name", "") if source is not None else ""
    name = name() if callable(name) else name
    if not isinstance(name, str) or not name:
        return False
    if name.startswith("G["):
        return True
    return bool(re.fullmatch(r"L\[[^\]]+\](\[[^\]]+\])*", name)) is False


def _is_metadata(n: Any) -> bool:
    if n.op == "call_method" and n.target in _METADATA_METHODS:
        return True
    return (
        n.op == "call_function"
        and n.target is getattr
        and len(n.args) == 2
        and n.args[1] in _METADATA_ATTRS
    )


def _triangular(t: torch.Tensor) -> bool:
    """True if every trailing 2-D slice of t is lower-triangular or strictly upper (as bool)."""
    if t.dim() < 2:
        return False
    nz = t != 0
    r, c = nz.shape[-2:]
    lower = torch.ones(r, c, dtype=torch.bool, device=nz.device).tril()
    return bool((nz == lower).all()) or bool((nz == ~lower).all())


def eval_mask(mask: Any, values: _Values) -> torch.Tensor:
    """Evaluate the subgraph that builds `mask` on real values; refuse input-dependent masks.

    Leaves may be constants, sizes of any tensor, module buffers (which must themselves be
    triangular, so that a top-left slice for another sequence length stays causal), and
    tensors the graph creates (ones/arange/triu...). A mask read from a forward() argument may
    change on every call without a recompile, so it can never be proven causal.
    """
    order: list[fx.Node] = []
    seen: set[fx.Node] = set()

    def visit(n: Any) -> None:
        if n in seen:
            return
        seen.add(n)
        if n.op == "placeholder":
            val = values.leaf(n)
            if isinstance(val, torch.Tensor):
                if not _is_buffer_placeholder(n):
                    raise Skip(
                        f"the mask is read from the forward() input {n.name}; only masks from "
                        "module buffers or built inside forward() can be proven causal (for a "
                        "causal mask use is_causal=True / a tril buffer)"
                    )
                if not _triangular(val):
                    raise Skip(f"mask buffer {n.name} is not triangular, so it is not causal")
        elif n.op == "get_attr":
            val = values.leaf(n)
            if isinstance(val, torch.Tensor) and not _triangular(val):
                raise Skip(f"mask tensor {n.target} is not triangular, so it is not causal")
        elif not _is_metadata(n):
            for a in n.all_input_nodes:
                visit(a)
        order.append(n)

    visit(mask)
    env: dict[Any, Any] = {}
    n: Any
    for n in order:
        if n.op in ("placeholder", "get_attr"):
            env[n] = values.leaf(n)
            continue
        if _is_metadata(n):
            src: Any = n.args[0]
            obj = env[src] if src in env else values.leaf(src) if src.op == "placeholder" else None
            if obj is None:
                obj = _concrete_like(_ev(src))
            env[n] = (
                getattr(obj, n.args[1])
                if n.op == "call_function"
                else getattr(obj, n.target)(*fx.map_arg(n.args[1:], env.__getitem__), **n.kwargs)
            )
            continue
        args = fx.map_arg(n.args, env.__getitem__)
        kwargs = fx.map_arg(n.kwargs, env.__getitem__)
        try:
            if n.op == "call_function":
                env[n] = n.target(*args, **kwargs)
            elif n.op == "call_method":
                env[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
            else:
                raise Skip(f"mask uses {n.op} {n.target}, which flashgen cannot evaluate")
        except Skip:
            raise
        except Exception as e:  # any evaluation failure just means "not provably causal"
            raise Skip(f"could not evaluate the mask ({type(e).__name__}: {e})") from e
    out = env[mask]
    if not isinstance(out, torch.Tensor):
        raise Skip("the mask is not a tensor")
    return out


def _concrete_like(fake: Any) -> torch.Tensor:
    """A real empty tensor with the hinted shape of a fake one (for .size()/.device reads)."""
    if not isinstance(fake, torch.Tensor):
        raise Skip("could not find the tensor a mask size is read from")
    shape = [_hint(s) for s in fake.shape]
    return torch.empty(shape, dtype=fake.dtype, device="meta")


def is_causal_mask(mask: torch.Tensor, tq: int, tk: int, *, keep: bool) -> bool:
    """mask (broadcastable to [..., tq, tk]) is exactly the top-left causal pattern.

    keep=False: True marks masked-out entries (masked_fill); keep=True: True marks kept entries
    (SDPA boolean attn_mask); float masks are additive (0 kept, -inf masked).
    """
    if mask.dim() < 2 or tuple(mask.shape[-2:]) != (tq, tk):
        return False
    kept = torch.ones(tq, tk, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        got = mask if keep else ~mask
        return bool((got == kept).all())
    if mask.is_floating_point():
        ok_kept = (mask == 0) | ~kept
        ok_masked = (mask <= _NEAR_NEG_INF) | kept
        return bool(ok_kept.all()) and bool(ok_masked.all())
    return False


def prove_causal(mask: Any, values: _Values, tq: Any, tk: Any, *, keep: bool) -> None:
    """Raise Skip (with the reason) unless `mask` is a top-left causal mask for every query and
    key length the graph may be called with: the two lengths must be provably equal (a mask
    slice that is causal at the traced pair, e.g. `tril(ones(tk, tk))[-tq:]`, may not be at
    another), and the mask's value at the traced lengths causal. `tq`, `tk`: the (possibly
    symbolic) lengths; `keep`: True where the mask marks kept positions."""
    if not isinstance(mask, fx.Node):
        raise Skip("the mask is not a tensor computed in the graph")
    if not _known_eq(tq, tk):
        raise Skip("query and key lengths may differ")
    if not is_causal_mask(eval_mask(mask, values), _hint(tq), _hint(tk), keep=keep):
        raise Skip("not a causal mask")
