"""Host time of each step under one launch-bound `flashgen.attention` call (needs CUDA; issue 15).

    python benchmarks/host_steps.py [--shape 1,1,128,128] [--causal] [--calls 2000] [--rounds 7]

`benchmarks/host_time.py` times whole calls and a few layers; this script splits the two paths
a launch-bound forward takes into their steps, so the next microsecond to remove is named:

- the forced path (`impl="flashgen"`, no gradient): the public function's plain-call test,
  `check_inputs`, `needs_backward`, `plain_eager`, `plain_forward` and, inside the launcher
  (`flashgen.kernels.fwd.forward`), the output allocation, the plan key, the plan lookup and
  the plan's launch;
- the auto path (no `impl=`): `flashgen.runtime.vendor.winner`, `launch_bound`, `route` and
  the SDPA call it ends in;
- with `--backward`, the forward with grad and the backward instead: `torch.autograd.grad` of
  one output (graph kept) for flashgen (forced) and SDPA, the general and the plain autograd
  node of flashgen's attention called directly (forward with grad, and its grad), the same engine round trip around a
  multiplication (a C++ node) and around an identity `torch.autograd.Function` (a Python node),
  `plain_backward` and `bwd.backward` called directly, the backward plan's launch alone, its
  four allocations, and cuDNN's backward op (what SDPA's backward runs) on the same tensors.

Each step is a lambda called `--calls` times back to back per round without synchronising
(host time per call, µs), the median of `--rounds` rounds, minus the same loop around an empty
lambda. Steps that launch a kernel are launch-bound here (the GPU finishes before the host
issues the next), so their figure is host time. Steps run in a fixed order, one after
another: compare steps of one run, not across runs.
"""

from __future__ import annotations

import argparse
import sys


def timed(fn, calls: int, rounds: int, sync) -> float:
    """Median host µs per call of `fn` over `rounds` rounds of `calls` calls
    (`flashgen.bench.harness.host_us`, after up to 200 warm-up calls)."""
    from flashgen.bench.harness import host_us

    return host_us(fn, calls=calls, rounds=rounds, sync=sync, warmup=min(calls, 200))


def steps(q, k, v, causal: bool) -> dict:
    import torch
    import torch.nn.functional as F

    import flashgen
    from flashgen.kernels import fwd
    from flashgen.kernels.plans import extra_classes
    from flashgen.kernels.validate import check_inputs
    from flashgen.runtime import eager, primitives, vendor
    from flashgen.runtime.dispatch import plan_config

    scale = q.shape[-1] ** -0.5
    out = torch.empty_like(q)
    with torch.no_grad():
        fwd.forward(q, k, v, causal=causal, scale=scale, config=plan_config, keep_lse=False)
    (plan,) = [p for key, p in fwd._plans.items() if key[0] == q.shape and key[7] == causal]
    aligned = True

    def key_parts():
        # the launcher's plan key for a call without extras, as `fwd.forward` builds it
        return (
            q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, causal,
            plan_config, aligned, fwd._env(), fwd._family(), False, False, False,
            fwd.mask_kind(None), None, False, extra_classes(None, None, None, None),
        )  # fmt: skip

    assert fwd._plans.get(key_parts()) is plan
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)

    def extras_test(
        window=None, softcap=None, attn_mask=None, key_lengths=None, query_lengths=None,
        dropout_p=0.0, alibi_slopes=None, causal_align="top_left", padding="right",
    ):  # fmt: skip
        # the public function's test for a call without extras (flashgen.ops.attention)
        return (
            window is None and softcap is None and attn_mask is None and key_lengths is None
            and query_lengths is None and type(dropout_p) is float and dropout_p == 0.0
            and alibi_slopes is None and causal_align == "top_left" and padding == "right"
            and not torch.compiler.is_compiling()
        )  # fmt: skip

    return {
        "empty_loop": lambda: None,
        "q.shape": lambda: q.shape,
        "q.stride()": lambda: q.stride(),
        "is_compiling": torch.compiler.is_compiling,
        "extras_test": extras_test,
        "check_inputs": lambda: check_inputs(q, k, v, causal=causal, scale=None),
        "needs_backward": lambda: vendor.needs_backward(q, k, v),
        "plain_eager": lambda: eager.plain_eager(q),
        "empty_like_out": lambda: torch.empty_like(q, memory_format=torch.contiguous_format),
        "plan_key": key_parts,
        "plan_get": lambda: fwd._plans.get(key_parts()),
        "plan_launch": lambda: plan.launch(q, k, v, out, lse, scale),
        "fwd.forward": lambda: fwd.forward(
            q, k, v, causal=causal, scale=scale, config=plan_config, keep_lse=False
        ),
        "plain_forward": lambda: primitives.plain_forward(q, k, v, causal, scale, keep_lse=False),
        "attention_forced": lambda: flashgen.attention(q, k, v, causal=causal, impl="flashgen"),
        "winner": lambda: vendor.winner(q, k, v, causal, False),
        "launch_bound": lambda: vendor.launch_bound(q, k),
        "route": lambda: vendor.route(q, k, v, causal, scale, None, None, None, False),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale),
        "attention_auto": lambda: flashgen.attention(q, k, v, causal=causal),
    }


def backward_steps(q, k, v, causal: bool) -> dict:
    import torch
    import torch.nn.functional as F

    import flashgen
    from flashgen.bench.harness import identity_node
    from flashgen.kernels import bwd
    from flashgen.runtime import primitives, vendor
    from flashgen.runtime.dispatch import plan_config

    scale = q.shape[-1] ** -0.5
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    grads_of = (qg, kg, vg)
    out_f = flashgen.attention(qg, kg, vg, causal=causal, impl="flashgen")
    out_s = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale)
    g = torch.randn_like(out_f)
    doubled = qg * 2

    ident = identity_node().apply(qg)
    # the two autograd nodes a plain call can take: the general one (14 arguments) and, where
    # the tree has it, the plain one (`autograd._PlainAttention`), in the same process
    from flashgen.runtime import autograd

    general_args = (qg, kg, vg, causal, scale, None, None, "top_left", None, None, None, 0.0,
                    None, None)  # fmt: skip
    out_general = autograd._attention_apply(*general_args)
    plain_apply = getattr(autograd, "_plain_apply", None)
    out_plain = None if plain_apply is None else plain_apply(qg, kg, vg, causal, scale, None, False)
    with torch.no_grad():
        out, lse = primitives.plain_forward(q, k, v, causal, scale)
    needs = (True, True, True)
    bwd.backward(g, q, k, v, out, lse, causal=causal, scale=scale, config=plan_config,
                 deterministic=False)  # fmt: skip
    plans = [p for key, p in bwd._plans.items() if key[0] == q.shape and key[9] == causal]
    plan = plans[-1]

    def grad(y):
        return lambda: torch.autograd.grad(y, grads_of if y is not doubled and y is not ident
                                           else (qg,), g, retain_graph=True)  # fmt: skip

    def allocations():
        torch.empty_like(lse)
        torch.empty_like(q, memory_format=torch.contiguous_format)
        torch.empty_like(k, memory_format=torch.contiguous_format)
        torch.empty_like(v, memory_format=torch.contiguous_format)

    return {
        "empty_loop": lambda: None,
        "fwd_grad_flashgen": lambda: flashgen.attention(qg, kg, vg, causal=causal, impl="flashgen"),
        "fwd_grad_sdpa": lambda: F.scaled_dot_product_attention(
            qg, kg, vg, is_causal=causal, scale=scale
        ),
        "node_general_fwd": lambda: autograd._attention_apply(*general_args),
        "node_general_grad": grad(out_general),
        **(
            {}
            if plain_apply is None
            else {
                "node_plain_fwd": lambda: plain_apply(qg, kg, vg, causal, scale, None, False),
                "node_plain_grad": grad(out_plain),
            }
        ),
        "grad_flashgen": grad(out_f),
        "grad_sdpa": grad(out_s),
        "grad_mul_node": grad(doubled),
        "grad_py_node": grad(ident),
        "plain_backward": lambda: primitives.plain_backward(
            g, q, k, v, out, lse, causal, scale, needs, False
        ),
        "bwd.backward": lambda: bwd.backward(
            g,
            q,
            k,
            v,
            out,
            lse,
            causal=causal,
            scale=scale,
            config=plan_config,
            deterministic=False,
        ),  # fmt: skip
        "bwd_plan_launch": lambda: plan.launch(g, q, k, v, out, lse, scale),
        "bwd_allocations": allocations,
        "cudnn_backward": lambda: vendor.cudnn_backward(g, q, k, v, out, lse, causal, scale),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    p.add_argument("--shape", default="1,1,128,128", help="B,H,S,D of q, k and v")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--backward",
        action="store_true",
        help="the forward with grad and the backward's steps instead",
    )
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("host_steps.py needs a CUDA GPU", file=sys.stderr)
        return 2
    b, h, s, d = (int(x) for x in args.shape.split(","))
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if args.backward:
        fns = backward_steps(q, k, v, args.causal)
        times = {name: timed(fn, args.calls, args.rounds, torch.cuda.synchronize)
                 for name, fn in fns.items()}  # fmt: skip
    else:
        with torch.no_grad():
            fns = steps(q, k, v, args.causal)
            times = {name: timed(fn, args.calls, args.rounds, torch.cuda.synchronize)
                     for name, fn in fns.items()}  # fmt: skip
    base = times.pop("empty_loop")
    print(f"host µs per call, shape {(b, h, s, d)} bf16 causal={args.causal} "
          f"(median of {args.rounds} x {args.calls}, empty loop {base:.2f} µs subtracted)")  # fmt: skip
    for name, us in times.items():
        print(f"  {name:<18} {us - base:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
