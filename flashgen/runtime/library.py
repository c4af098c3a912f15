"""The `flashgen` operator library: the schemas of its three ops. Their bodies are registered by
`flashgen.runtime.primitives` (`attention_fwd`, `attention_bwd`) and `flashgen.runtime.composite`
(`attention`); `flashgen.ops.attention` is the public function above them.

Ops (namespace `flashgen`):

- `torch.ops.flashgen.attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale,
  int[]? window=None, float? softcap=None) -> (Tensor out, Tensor lse)`: opaque; `out` in q's
  dtype, dense, its strides in q's dimension order (`flashgen.kernels.layout`: as SDPA's, so a
  model's transpose back of a [B, S, H, D] view is a view), `lse` float32 [B, Hq, Sq] (natural
  log). Not differentiable by itself: autograd lives one level up.
- `torch.ops.flashgen.attention_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out,
  Tensor lse, bool causal, float scale, bool need_dq, bool need_dk, bool need_dv,
  int[]? window=None, float? softcap=None, str causal_align='top_left',
  bool? deterministic=None) -> (Tensor dq, Tensor dk, Tensor dv)`: a gradient that is not
  needed is not computed and comes back as an empty tensor of shape (0,) (ops cannot return
  None). `deterministic` picks the backward kind (`flashgen.kernels.bwd_kind.resolve_kind`; None:
  torch's deterministic-algorithms flag).
- `torch.ops.flashgen.attention(Tensor q, Tensor k, Tensor v, bool causal=False,
  float? scale=None, int[]? window=None, float? softcap=None, str causal_align='top_left',
  bool? deterministic=None) -> Tensor`:
  CompositeImplicitAutograd. It validates its inputs
  (`flashgen.kernels.validate.check_inputs`), runs an SDPA backend where the run-time choice says so
  (`flashgen.runtime.vendor.route`), else `_Attention` (a `torch.autograd.Function` whose forward calls
  `attention_fwd` and whose backward calls `attention_bwd`), so Dynamo and AOTAutograd
  decompose it into `attention_fwd` (+ `attention_bwd` in the backward graph) or SDPA's op.

- `torch.ops.flashgen.attention_bwd_bias(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out,
  Tensor lse, Tensor attn_mask, bool causal, float scale, int[]? window=None,
  float? softcap=None, float dropout_p=0.0, Tensor? dropout_seed=None, Tensor?
  alibi_slopes=None, str causal_align="top_left") -> (Tensor dq, Tensor dbias)`: the gradients of q and of an additive `attn_mask` that requires grad (`dbias`
  in the mask's own shape and dtype, summed over the dims it was broadcast along;
  `flashgen.kernels.bias_grad`). The autograd runs `attention_bwd` for dk/dv beside it.

- `torch.ops.flashgen.attention_varlen_fwd(q, k, v, seq_bounds, max_q, max_k, causal, scale,
  window=None, softcap=None) -> (out, lse)` and `attention_varlen_bwd(do, q, k, v, out, lse,
  seq_bounds, max_q, max_k, causal, scale, window=None, softcap=None) -> (dq, dk, dv)`: packed
  variable-length sequences (`flashgen.kernels.varlen`) on the 4-D views [1, heads, T, D];
  seq_bounds int32 [N, 4] of offsets and lengths; `flashgen.runtime.varlen` is their autograd
  and `flashgen.ops.attention_varlen` the public function.

Which callable a graph rewrite should insert: `torch.ops.flashgen.attention.default` with
arguments `(q, k, v, causal, scale)` (scale a Python float or None), plus `window` (a list
[left, right] of ints, `flashgen.kernels.validate.normalize_window`) for a sliding window. In the
two primitives `window` is that normalised pair (query i sees keys i - left <= j <= i + right).
`softcap`: the scaled scores s become softcap * tanh(s / softcap) before the softmax.
`dropout_p` and `dropout_seed` (after those, in all three ops): the dropout probability and an
int64 CPU tensor of one element, the draw's seed (`flashgen.kernels.dropout`; the composite op
draws one from PyTorch's generator when it is None, and the backward gets the forward's).
`alibi_slopes` (last, in all four attention ops): None or float32 ALiBi slopes, [Hq] or
[B, Hq] (`flashgen.kernels.alibi.check_slopes`; the primitives take the checked [B, Hq] view):
slope * (j - i) is added to the scaled scores in the kernels; constants, no gradient.
`sinks` (last, in the composite op only): None or a floating tensor [Hq], one logit per query
head joining each row's softmax as a key without a value (GPT-OSS); differentiable. The
primitives do not take it: the composite op scales their output and logsumexp with
`sinks_fwd(out, lse, sinks) -> (out, lse)` and gets the sinks' gradient from
`sinks_bwd(dout, out, lse, sinks) -> Tensor` (`flashgen.runtime.sinks`).
`seq_bounds` and `attn_mask` (before those): None, or contiguous int32
[B, 4] on q's device, each batch entry's valid query rows and keys as (q_start, len_q, k_start,
len_k) (`flashgen.kernels.padding.bounds` builds it from lengths and a padding side; the public
function's key_lengths=/query_lengths=/padding= do, so a compiled graph records plain torch
ops), and a boolean or additive mask tensor broadcastable to [B, Hq, Sq, Sk] (the public
function's attn_mask=). The Python
function `flashgen.ops.attention(q, k, v, *, causal=False, scale=None, window=None,
softcap=None)` is the same thing for users
(eager, and inside functions given to `torch.compile(fullgraph=True)`, where it becomes that op).

Why library ops: their bodies run at run time with concrete sequence lengths even under
`torch.compile(dynamic=True)`, so the per-shape config lookup lives inside them and a
new length never recompiles. Why `Library.define`/`impl` and an autograd.Function outside the
op, not `torch.library.custom_op` + `register_autograd`: the eager call is the launch path of
every attention call, and the custom_op layers (Python dispatch wrapper, the autograd kernel
registered on the op, redispatch below autograd) cost more host time than the kernel takes on a
short sequence (benchmarks/RESULTS.md, host time). Here an eager call is one dispatcher hop to a
backend kernel, plus `_Attention.apply` only when a gradient is wanted.
"""

from __future__ import annotations

import torch

# What the ops' fake functions give (shapes, dtypes, strides), as a number: raised whenever
# they change, so that code Inductor cached for the previous ones is not reused
# (`flashgen.compile.backend._cache_tag`). 3: the forward's output dense in q's dimension
# order (`flashgen.kernels.layout`; before, contiguous; 2 was an intermediate rule of session
# 37's development that some local caches hold).
OPS_REVISION = 3

_LIB = torch.library.Library("flashgen", "FRAGMENT")
_TAGS = (torch.Tag.pt2_compliant_tag,)
_LIB.define(
    "attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale, int[]? window=None, "
    "float? softcap=None, str causal_align='top_left', Tensor? seq_bounds=None, "
    "Tensor? attn_mask=None, float dropout_p=0.0, Tensor? dropout_seed=None, "
    "Tensor? alibi_slopes=None) -> (Tensor, Tensor)",
    tags=_TAGS,
)
_LIB.define(
    "attention_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, "
    "float scale, bool need_dq, bool need_dk, bool need_dv, int[]? window=None, "
    "float? softcap=None, str causal_align='top_left', bool? deterministic=None, "
    "Tensor? seq_bounds=None, Tensor? attn_mask=None, float dropout_p=0.0, "
    "Tensor? dropout_seed=None, Tensor? alibi_slopes=None) -> (Tensor, Tensor, Tensor)",
    tags=_TAGS,
)
_LIB.define(
    "attention_bwd_bias(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor attn_mask, bool causal, float scale, int[]? window=None, float? softcap=None, "
    "float dropout_p=0.0, Tensor? dropout_seed=None, Tensor? alibi_slopes=None, "
    'str causal_align="top_left") -> (Tensor, Tensor)',
    tags=_TAGS,
)
_LIB.define(
    "attention_varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor seq_bounds, SymInt max_q, "
    "SymInt max_k, bool causal, float scale, int[]? window=None, float? softcap=None) "
    "-> (Tensor, Tensor)",
    tags=_TAGS,
)
_LIB.define(
    "attention_varlen_bwd(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor seq_bounds, SymInt max_q, SymInt max_k, bool causal, float scale, int[]? window=None, "
    "float? softcap=None) -> (Tensor, Tensor, Tensor)",
    tags=_TAGS,
)
_LIB.define("sinks_fwd(Tensor out, Tensor lse, Tensor sinks) -> (Tensor, Tensor)", tags=_TAGS)
_LIB.define("sinks_bwd(Tensor dout, Tensor out, Tensor lse, Tensor sinks) -> Tensor", tags=_TAGS)
_LIB.define(
    "attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None, "
    "int[]? window=None, float? softcap=None, str causal_align='top_left', "
    "bool? deterministic=None, Tensor? seq_bounds=None, Tensor? attn_mask=None, "
    "float dropout_p=0.0, Tensor? dropout_seed=None, Tensor? alibi_slopes=None, "
    "Tensor? sinks=None) -> Tensor",
    tags=_TAGS,
)


def register_primitive(name: str, kernel, fake) -> None:
    """Register one `flashgen::` primitive: `kernel` for the CPU and CUDA backend keys (a backend
    kernel, not CompositeExplicitAutograd: the shortest dispatch), the Autograd key falling
    through (the primitives are not differentiable by themselves; an autograd.Function is their
    autograd, so their outputs never carry a grad_fn of their own), and `fake` for tracing."""
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, kernel, key)
    _LIB.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"flashgen::{name}", fake, lib=_LIB)
