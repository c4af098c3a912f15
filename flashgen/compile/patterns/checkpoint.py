"""Attention inside activation checkpointing: the bodies of `tag_activation_checkpoint`.

Dynamo traces `torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)` (a training
loop that checkpoints every block; HF's `gradient_checkpointing_enable`) as the higher-order op
`tag_activation_checkpoint(body, *operands)`, `body` a submodule of the graph the backend gets
with one placeholder per operand. `passes.attention_pass` visits each body as a graph of its
own (`bodies`) and rewrites it in place; AOTAutograd then recomputes the op in the backward as
it would have recomputed SDPA.

What a body cannot see is how an operand was computed. HF builds the causal-and-padding mask
once, in the model's forward, and hands it to every checkpointed layer: inside the body it is a
placeholder, which the kernels could only read whole (the N x N tensor), where outside a
checkpoint the same mask is proven causal with the padding read per key (BLOOM's ALiBi bias,
built outside as well, is proven ALiBi only where its arange is seen). `inline_masks` copies
the parent's computation of such an operand (a boolean or floating tensor of two or more dims,
built from the parent's inputs and state by ops the proof follows, `COPYABLE`, nothing that
requires grad) into the body, so the proof sees the ops that build it; `attention_pass` keeps
the copy only where it lets more sites be replaced, or as many read less of a mask tensor
(`cost`), and undoes it otherwise (a mask the body would then build again at every layer and
at every recompute, for nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from .core import SDPA_FNS, erase_dead, example_value, is_fn, node_arg
from .mask_values import ARITH, CASTS, CMP, CREATE, FULL, LOGIC, VIEWS, op_name
from .matchers import is_softmax

# the most parent nodes copied for one operand: HF's mask builders take 20-40
MAX_COPIED = 96
# The ops a copied computation may hold: those the mask proof follows, sizes, and those of
# BLOOM's ALiBi bias (its slopes, a power per head, repeated over the batch). A copy runs
# again in every body and in the backward's recompute, so a random op (a mask drawn with
# torch.rand) would draw a different mask there: none is on the list.
COPYABLE = frozenset(
    {*CMP, *LOGIC, *ARITH, *CASTS, *CREATE, *FULL, *VIEWS, "bitwise_not", "logical_not", "neg",
     "abs", "tril", "triu", "arange", "masked_fill", "tensor", "scalar_tensor", "where", "diff",
     "cumsum", "size", "sym_size", "pow", "repeat", "cat"}
)  # fmt: skip


def _hop() -> Any:
    return getattr(torch.ops.higher_order, "tag_activation_checkpoint", None)


def bodies(gm: fx.GraphModule, real: dict[Any, Any]) -> list[tuple[fx.GraphModule, list, Any]]:
    """(body, example inputs of its placeholders, the call) for each activation-checkpointed
    region of `gm` whose body no other call shares. `real`: `gm`'s placeholders' example inputs
    (`Values.by_node`). A placeholder takes the operand's real example input where the operand
    is one of `gm`'s placeholders (else its fake example value), and Dynamo's record of where the
    operand came from (`grapharg`), so that a mask built from a module buffer (a `tril` buffer)
    is proven inside the body as outside."""
    hop = _hop()
    if hop is None:
        return []
    calls: dict[int, list] = {}
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not hop or not n.args:
            continue
        ref = n.args[0]
        if not (isinstance(ref, fx.Node) and ref.op == "get_attr"):
            continue
        body = gm.get_submodule(str(ref.target))
        if isinstance(body, fx.GraphModule):
            calls.setdefault(id(body), []).append((body, n))
    found = []
    for uses in calls.values():
        if len(uses) != 1:  # (a body two calls share: its operands need not agree)
            continue
        body, call = uses[0]
        phs = _placeholders(body)
        if len(phs) != len(call.args) - 1:
            continue
        examples = [_example(ph, a, real) for ph, a in zip(phs, call.args[1:], strict=True)]
        found.append((body, examples, call))
    return found


# marks a body placeholder's `grapharg` as lent by `_example` for the pass alone (`unlend`)
_LENT = "flashgen_lent_grapharg"


def unlend(body: fx.GraphModule) -> None:
    """Take back the records `_example` lent the body's placeholders: Dynamo puts `grapharg` on
    the top graph's inputs only, and nothing after the pass should find one on a body's."""
    for ph in _placeholders(body):
        if ph.meta.pop(_LENT, False):
            ph.meta.pop("grapharg", None)


def _placeholders(body: fx.GraphModule) -> list[fx.Node]:
    return [p for p in body.graph.nodes if p.op == "placeholder"]


def _example(ph: fx.Node, arg: Any, real: dict[Any, Any]) -> Any:
    """The example input of body placeholder `ph` for operand `arg` (see `bodies`)."""
    if not isinstance(arg, fx.Node):
        return arg
    if "grapharg" in arg.meta and "grapharg" not in ph.meta:
        ph.meta["grapharg"] = arg.meta["grapharg"]
        ph.meta[_LENT] = True
    return real[arg] if arg in real else example_value(arg)


@dataclass
class Inlined:
    """What `inline_masks` changed, to keep (`keep`) or undo (`undo`)."""

    gm: fx.GraphModule
    body: fx.GraphModule
    call: Any
    args: tuple  # the call's arguments before
    # (body placeholder, the copy of its operand now in its place)
    swapped: list[tuple[fx.Node, fx.Node]] = field(default_factory=list)
    copied: list[fx.Node] = field(default_factory=list)
    added: list[fx.Node] = field(default_factory=list)  # new placeholders (the copies' leaves)
    inputs: list = field(default_factory=list)  # their example inputs

    def undo(self) -> None:
        for ph, copy in self.swapped:
            copy.replace_all_uses_with(ph)
        for n in reversed(self.copied):
            self.body.graph.erase_node(n)
        for ph in reversed(self.added):
            self.body.graph.erase_node(ph)
        self.call.args = self.args

    def keep(self, inputs: list) -> list:
        """Drop the placeholders the copies replaced, their operands from the call, and the
        parent's computation of those operands where nothing else reads it; the body's example
        inputs after (`inputs`: before the change)."""
        gone = {ph for ph, _ in self.swapped}
        phs = _placeholders(self.body)
        pairs = list(zip(phs, self.call.args[1:], strict=True))
        examples = [*inputs, *self.inputs]
        self.call.args = (self.call.args[0], *(a for ph, a in pairs if ph not in gone))
        for ph in gone:
            self.body.graph.erase_node(ph)
        dropped = [a for ph, a in pairs if ph in gone]
        erase_dead(self.gm.graph, [a for a in dropped if not a.users])
        self.body.recompile()
        self.gm.recompile()
        return [x for (ph, _), x in zip(pairs, examples, strict=True) if ph not in gone]


def mask_operands(call: Any, body: fx.GraphModule) -> list[tuple[fx.Node, fx.Node, list]]:
    """(body placeholder, the call's operand, the parent's nodes computing it) for each operand
    `inline_masks` would copy in (see the module's docstring); nothing is changed yet."""
    found = []
    for ph, arg in zip(_placeholders(body), call.args[1:], strict=True):
        if _mask_like(arg) and _feeds_a_mask(ph) and (nodes := _computation(arg)) is not None:
            found.append((ph, arg, nodes))
    return found


def inline_masks(
    gm: fx.GraphModule, call: Any, body: fx.GraphModule, real: dict, operands: list
) -> Inlined:
    """Copy `operands` (`mask_operands`) into `body`: each placeholder's uses go to the copy of
    its operand; the copies' leaves (the parent's placeholders and attributes they read) are
    the body's placeholders for them, or new operands."""
    change = Inlined(gm, body, call, tuple(call.args))
    # parent node -> the body node holding its value
    pairs = zip(_placeholders(body), call.args[1:], strict=True)
    leaves = {a: ph for ph, a in pairs if isinstance(a, fx.Node)}
    first = next((n for n in body.graph.nodes if n.op != "placeholder"), None)
    for ph, arg, nodes in operands:
        env: dict[fx.Node, fx.Node] = {}
        for n in nodes:
            for leaf in n.all_input_nodes:
                if leaf.op in ("placeholder", "get_attr") and leaf not in env:
                    env[leaf] = leaves.get(leaf) or _add_operand(change, leaf, real)
                    leaves[leaf] = env[leaf]
        with body.graph.inserting_before(first):
            for n in nodes:
                env[n] = body.graph.node_copy(n, lambda x, env=env: env[x])
                change.copied.append(env[n])
        ph.replace_all_uses_with(env[arg])
        change.swapped.append((ph, env[arg]))
    return change


def _mask_like(arg: Any) -> bool:
    v = example_value(arg)
    return (
        isinstance(arg, fx.Node)
        and arg.op in ("call_function", "call_method")
        and isinstance(v, torch.Tensor)
        and v.dim() >= 2
        and (v.dtype == torch.bool or v.is_floating_point())
        and not v.requires_grad
    )


# ops a mask does not pass through on its way to the scores (a tensor that reaches the softmax
# only through q or k, as rotary tables do, is not a mask), but as the added term of baddbmm
# and addmm (their first argument: BLOOM's ALiBi bias)
_PRODUCTS = frozenset({"matmul", "bmm", "baddbmm", "linear", "einsum", "mm", "addmm"})
_ADDED_TERM = frozenset({"baddbmm", "addmm"})


def _feeds_a_mask(ph: fx.Node, depth: int = 8) -> bool:
    """Whether `ph` reaches an SDPA call's attn_mask, or a softmax, within `depth` ops and
    through no product but as its added term."""
    frontier = [ph]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for user in n.users:
                if is_fn(user, SDPA_FNS):
                    if node_arg(user, 3, "attn_mask") is n:
                        return True
                elif is_softmax(user):
                    return True
                else:  # (F.linear is torch._C._nn's, which op_name leaves out)
                    name = op_name(user) or getattr(user.target, "__name__", "")
                    added = name in _ADDED_TERM and user.args and user.args[0] is n
                    if name not in _PRODUCTS or added:
                        nxt.append(user)
        frontier = nxt
    return False


def _computation(arg: fx.Node) -> list[fx.Node] | None:
    """The parent's nodes that compute `arg` from its placeholders and attributes, in graph
    order; None when there are more than MAX_COPIED, or one is an op not in COPYABLE, impure,
    or a tensor that requires grad (a learned bias stays an operand)."""
    seen: set[fx.Node] = set()
    work = [arg]
    while work:
        n = work.pop()
        if n in seen or n.op in ("placeholder", "get_attr"):
            continue
        v = example_value(n)
        # (op_name names functions and methods only; an in-place method is on no list)
        if (
            op_name(n) not in COPYABLE
            or n.is_impure()
            or (isinstance(v, torch.Tensor) and v.requires_grad)
        ):
            return None
        seen.add(n)
        if len(seen) > MAX_COPIED:
            return None
        work.extend(n.all_input_nodes)
    return [n for n in arg.graph.nodes if n in seen]


def _add_operand(change: Inlined, leaf: fx.Node, real: dict) -> fx.Node:
    """A new last placeholder of the body for parent node `leaf`, and `leaf` as the call's new
    last operand."""
    body = change.body
    last = _placeholders(body)[-1]
    with body.graph.inserting_after(last):
        ph = body.graph.placeholder(f"{leaf.name}_inlined")
    ph.meta.update({k: v for k, v in leaf.meta.items() if k != "grapharg"})
    change.added.append(ph)
    change.inputs.append(_example(ph, leaf, real))
    change.call.args = (*change.call.args, leaf)
    return ph


def cost(sites: list) -> tuple[int, int, int]:
    """What a body's sites leave undone or read, to compare two readings of it (lower is
    better): minus the sites replaced, then the replaced sites that read a mask tensor whole
    (not per key), then those that read a mask tensor at all (a per-key one rather than none:
    BLOOM's ALiBi proven from its arange, read as slopes)."""
    done = [s for s in sites if s.replaced]
    whole = sum(1 for s in done if s.mask and not s.key_mask)
    return -len(done), whole, sum(1 for s in done if s.mask)
