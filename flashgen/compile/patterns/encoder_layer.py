"""nn.TransformerEncoderLayer's fused inference path: in eval mode with no gradient wanted
(`torch.no_grad`, `torch.inference_mode`), its forward calls `torch._transformer_encoder_layer_fwd`,
one C++ op for the whole layer, and Dynamo keeps that op as one node. The attention inside it
is out of the pass's sight, so a compiled nn.TransformerEncoder served for inference kept
PyTorch's attention while the same model in training had its sites replaced.

Here such a node is written out as the layer's own unfused forward (layer norms, the residual
adds, the feed-forward block) around one `F.multi_head_attention_forward` call, which the mha
matcher then takes (`mha.match_mha`) like any nn.MultiheadAttention. The two forwards compute
the same thing except for masks: the fused op reads its mask (the layer merges src_mask and
src_key_padding_mask into one, 0 / -inf for a boolean one) as boolean, any nonzero entry
hiding its key, and a row with every key hidden comes out NaN; the unfused one adds a
floating mask and gives such a row zeros. So the written-out layer is kept only where the
two agree for every input: no mask, or a src_mask proven causal (its entries 0 where shown,
hidden elsewhere, no row hidden whole, for every length the graph accepts). Anything else,
and any site the mha checks would not replace, leaves the fused node as it was: PyTorch's
fused path is never traded for the unfused one unless the kernels take its attention. On a
GPU the size rule `choice.fused_layer_keep_reason` keeps it too where the fused path was
measured faster (no mask at any size; a causal mask below its threshold).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from .core import (
    Skip,
    example_value,
    fake_mode,
    guarded_number,
    known_eq,
    set_example_values,
)

# torch._transformer_encoder_layer_fwd's arguments, in order
_ARGS = (
    "src", "embed_dim", "num_heads", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias",
    "use_gelu", "norm_first", "eps", "norm_weight_1", "norm_bias_1", "norm_weight_2",
    "norm_bias_2", "ffn_weight_1", "ffn_bias_1", "ffn_weight_2", "ffn_bias_2", "mask",
    "mask_type",
)  # fmt: skip
_FUSED = getattr(torch, "_transformer_encoder_layer_fwd", None)


def is_fused_layer(n: Any) -> bool:
    """Whether node n is the fused encoder-layer op."""
    return (
        _FUSED is not None and isinstance(n, fx.Node) and n.op == "call_function"
        and n.target is _FUSED
    )  # fmt: skip


@dataclass
class Expansion:
    """The unfused layer written beside a fused node (which still holds every use)."""

    fused: fx.Node
    out: fx.Node  # the unfused layer's output
    mha: fx.Node  # its F.multi_head_attention_forward call
    added: list[fx.Node] = field(default_factory=list)

    def undo(self, g: fx.Graph) -> None:
        """Erase the written-out layer: the graph is as it was."""
        for n in reversed(self.added):
            g.erase_node(n)

    def commit(self, g: fx.Graph) -> None:
        """The unfused layer takes the fused node's place."""
        self.fused.replace_all_uses_with(self.out)
        g.erase_node(self.fused)


def arguments(n: fx.Node) -> dict[str, Any]:
    """The fused node's arguments by name (Skip on a call of another shape)."""
    args = list(n.args) + [None] * (len(_ARGS) - len(n.args))
    if len(args) != len(_ARGS) or set(n.kwargs) - set(_ARGS):
        raise Skip("unexpected torch._transformer_encoder_layer_fwd call")
    p = dict(zip(_ARGS, args, strict=True))
    p.update(n.kwargs)
    return p


def _src_mask(p: dict[str, Any]) -> Any:
    """The src_mask node behind the fused op's merged mask, when it is the only mask: the
    layer passes mask_type 2 and `src_mask.view(1, 1, L, L).expand(B, heads, -1, -1)`; None
    without a mask. Skip for a key padding mask (mask_type 1, or one added in) or any other
    shape: the fused op gives a row hidden whole NaN, the kernels zeros."""
    mask, kind = p["mask"], p["mask_type"]
    if mask is None:
        return None
    if kind == 1:
        raise Skip(
            "nn.TransformerEncoderLayer's fused inference path with a src_key_padding_mask: "
            "it gives a row that sees no key NaN, the kernels zeros; left to PyTorch"
        )
    base = mask
    for _ in range(2):  # expand, then view
        if not (isinstance(base, fx.Node) and base.op == "call_method"
                and base.target in ("expand", "view")):  # fmt: skip
            break
        base = base.args[0]
    am = example_value(base) if isinstance(base, fx.Node) else None
    n = example_value(p["src"]).shape[1]
    square = (
        isinstance(am, torch.Tensor)
        and am.dim() == 2
        and all(known_eq(size, n) for size in am.shape)
    )  # (what the view read as [L, L] is one: a [2, L * L / 2] tensor views the same)
    if kind != 2 or base is mask or not square:
        raise Skip(
            "nn.TransformerEncoderLayer's fused inference path with a mask other than one "
            "[L, L] src_mask (a key padding mask or a per-head one): left to PyTorch"
        )
    return base


def expand(gm: fx.GraphModule, n: fx.Node) -> Expansion:
    """Write the layer out beside fused node n (Skip where it may not be: `_src_mask`, or
    arguments that are not plain constants)."""
    p = arguments(n)
    if not all(isinstance(p[k], bool) for k in ("use_gelu", "norm_first")):
        raise Skip("the fused encoder layer's use_gelu / norm_first are not Python constants")
    # (dynamic=True makes a module's float attribute a tensor input read with .item(): eps is
    # guarded to its value, as `core.dropout_prob` guards a dropout p)
    eps = guarded_number(p["eps"])
    if not isinstance(eps, float) or not all(
        isinstance(p[k], int) for k in ("embed_dim", "num_heads")
    ):
        raise Skip("the fused encoder layer's eps / sizes are not Python constants")
    attn_mask = _src_mask(p)
    g = gm.graph
    added: list[fx.Node] = []

    def call(fn: Any, *args: Any) -> fx.Node:
        node = g.call_function(fn, args) if callable(fn) else g.call_method(fn, args)
        added.append(node)
        return node

    e = p["embed_dim"]

    def norm(x: Any, which: int) -> fx.Node:
        w, b = p[f"norm_weight_{which}"], p[f"norm_bias_{which}"]
        return call(F.layer_norm, x, (e,), w, b, eps)

    src = p["src"]
    with g.inserting_before(n):
        h = norm(src, 1) if p["norm_first"] else src
        t = call("transpose", h, 0, 1)  # the layer is batch-first; MHA's calls are [L, B, E]
        mha = call(
            F.multi_head_attention_forward, t, t, t, e, p["num_heads"], p["qkv_weight"],
            p["qkv_bias"], None, None, False, 0.0, p["proj_weight"], p["proj_bias"],
            False,  # training: the fused path runs in eval mode only
            None, False, attn_mask,  # key_padding_mask, need_weights, attn_mask
        )  # fmt: skip
        x = call(operator.add, src, call("transpose", call(operator.getitem, mha, 0), 0, 1))
        if not p["norm_first"]:
            x = norm(x, 1)
        f = norm(x, 2) if p["norm_first"] else x
        f = call(F.linear, f, p["ffn_weight_1"], p["ffn_bias_1"])
        f = call(F.gelu if p["use_gelu"] else F.relu, f)
        y = call(operator.add, x, call(F.linear, f, p["ffn_weight_2"], p["ffn_bias_2"]))
        if not p["norm_first"]:
            y = norm(y, 2)
    set_example_values(fake_mode(example_value(n)), added)
    for node in added:
        node.meta["stack_trace"] = n.meta.get("stack_trace")
    return Expansion(n, y, mha, added)


def agrees(m: Any) -> None:
    """Skip unless the matched attention reads its mask as the fused op does: no mask, or one
    proven causal (the flag; no mask tensor left for the kernels to add)."""
    p = m.mha
    if p["attn_mask"] is not None and (not m.causal or p["tensor_mask"] is not None):
        raise Skip(
            "nn.TransformerEncoderLayer's fused inference path with a src_mask not proven "
            "causal: it reads the mask as boolean (any nonzero entry hides), the unfused "
            "attention adds it; left to PyTorch"
        )
