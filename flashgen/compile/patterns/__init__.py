"""Find attention in a Dynamo-level FX graph and replace it with the flashgen op.

Why walk the graph instead of `subgraph_rewriter.replace_pattern`: Dynamo keeps the user's own
spelling (`torch.matmul` vs `@`, `F.softmax` vs `Tensor.softmax`, `* s` vs `/ d`, masks from
buffers or built inline), and one FX pattern matches one spelling only. Starting from every
`softmax` node and walking up to the scores product and down to the value product covers the
spellings with one matcher, and lets each step say in words why a site was not taken.

Every site is CHECKED before it is rewritten: the scale must be a compile-time constant (a
Python number, or an expression of the head dim, which is then guarded), a mask must be proven
causal for every sequence length the graph accepts (symbolically, from the ops that build it:
`masks`), shapes and dtypes must be ones the kernels take.
Anything else is left as it is (Inductor compiles it) and reported with a reason.

Layout: `core` (records, node helpers, products, GQA), `masks` (proving a mask causal for every length),
`matchers` (softmax walk, SDPA), `mha` (nn.MultiheadAttention), `encoder_layer`
(nn.TransformerEncoderLayer's fused inference op, written out for `mha`), `passes` (checks,
rewrite, the pass), `checkpoint` (the bodies of activation-checkpointed regions, which the pass
visits too).

Masks read from module buffers are checked once, at compile time: mutating such a buffer in
place afterwards is not seen (Dynamo does not guard on buffer values).
"""

from __future__ import annotations

from .core import Match, Site, Skip, counters, kept_total, location, replaced_total
from .masks import diagonal_pattern, prove_causal
from .matchers import match_sdpa, match_softmax
from .mha import match_mha
from .passes import attention_pass, check_match, rewrite

__all__ = [
    "Match",
    "Site",
    "Skip",
    "attention_pass",
    "check_match",
    "counters",
    "diagonal_pattern",
    "kept_total",
    "location",
    "match_mha",
    "replaced_total",
    "match_sdpa",
    "match_softmax",
    "prove_causal",
    "rewrite",
]
