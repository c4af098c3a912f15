"""Attention-mask tensors (boolean and additive) in the portable kernels (issue 16), on the CPU
interpreter.

Forward and backward against float64 with the same mask: masks of every broadcast shape SDPA
takes ([Sk], [Sq, Sk], [B, 1, 1, Sk] key padding, [B, 1, Sq, Sk], [B, Hq, Sq, Sk]), boolean
and additive (HF's finfo.min padding and a T5-like bias), with causal, a window, softcap, GQA
and odd lengths; rows the mask hides completely give zeros (never NaN); pointer and TMA
builds. `flashgen.attention(attn_mask=)` against SDPA, its argument errors, torch.compile
(dynamic) and opcheck. Bf16 numerics need the GPU (the `gpu` test at the end).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from refusals import assert_refused

from flashgen.core.config import TileConfig
from flashgen.core.spec import DENSE_KEYS, KernelSpec
from flashgen.kernels.bwd import backward
from flashgen.kernels.fwd import forward
from flashgen.kernels.reference import hidden_ref, rows_ref, scores_ref
from flashgen.kernels.validate import expand_mask
from flashgen.ops import attention

TILES = TileConfig(16, 16, 4, 1)


@pytest.fixture(autouse=True)
def _fresh_signatures(monkeypatch):
    """Each test starts without the per-signature answers earlier tests in the process left
    (the masked forward's routes, the key-hull answers): the spies below see the full path."""
    from flashgen.runtime import primitives, routes

    monkeypatch.setattr(routes, "_routes", {})
    monkeypatch.setattr(primitives, "_hulls", {})


def ref(q, k, v, mask, *, causal=False, window=None, softcap=None):
    """float64 attention with a boolean or additive mask (broadcast as SDPA does); rows that
    see nothing give zeros."""
    s = scores_ref(q, k, softcap=softcap)
    if mask.dtype == torch.bool:
        s = s.masked_fill(~mask, float("-inf"))
    else:  # -inf hides a key; masked_fill keeps NaN out of the gradient of an all -inf row
        neg_inf = mask == float("-inf")
        s = (s + mask.double().masked_fill(neg_inf, 0.0)).masked_fill(neg_inf, float("-inf"))
    hide = hidden_ref(q.shape[2], k.shape[2], causal=causal, window=window)
    return rows_ref(s.masked_fill(hide, float("-inf")), v)[0]


def _matches_float64(q, k, v, mask, causal):
    """`attention(q, k, v, attn_mask=mask)` and its gradients (float32, the interpreter) equal
    float64's `ref`, and every gradient is finite; returns the output."""
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=causal, attn_mask=mask)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, do)
    ref_in = [t.double().requires_grad_() for t in (q, k, v)]
    want = ref(*ref_in, mask, causal=causal)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    exp = torch.autograd.grad(want, ref_in, do.double())
    for g, e in zip(got, exp, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), e, atol=5e-5, rtol=1e-4)
    return out


def _inputs(b, hq, hkv, sq, sk, d, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).to(dtype)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


def _launch_and_compare(q, k, v, do, mask, causal):
    """flashgen's forward and backward launchers (TILES, scale 0.25) on `mask` (as given to
    SDPA), each equal to float64's `ref` and its gradients; returns (out, the forward's plan,
    the backward's plan), the only ones in the launchers' caches."""
    from flashgen.kernels import bwd, fwd

    fwd._plans.clear()
    bwd._plans.clear()
    full = expand_mask(mask, q, k)
    out, lse = forward(q, k, v, causal=causal, scale=0.25, config=TILES, mask=full)
    grads = backward(do, q, k, v, out, lse, causal=causal, scale=0.25, config=TILES,
                     needs=(True, True, True), mask=full)  # fmt: skip
    (plan,) = fwd._plans.values()
    (bplan,) = bwd._plans.values()
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    want = ref(*leaves, mask, causal=causal)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    exp = torch.autograd.grad(want, leaves, do.double())
    for g, e in zip(grads, exp, strict=True):
        torch.testing.assert_close(g.double(), e, atol=5e-5, rtol=1e-4)
    return out, plan, bplan


def _mask(kind, shape, seed=1):
    gen = torch.Generator().manual_seed(seed)
    if kind == "bool":
        m = torch.rand(shape, generator=gen) > 0.3
        if m.dim() == 4 and m.shape[0] > 1:
            m[1] = False  # a batch entry that sees nothing
        return m
    if kind == "hf":  # HF's padding mask: 0 or finfo.min
        keep = torch.rand(shape, generator=gen) > 0.3
        return torch.zeros(shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    return torch.randn(shape, generator=gen)  # a T5-like bias


CASES = [
    # b, hq, hkv, sq, sk, d, causal, mask kind, mask shape
    (2, 2, 1, 37, 45, 32, False, "bool", (2, 1, 1, 45)),
    (2, 2, 1, 37, 45, 32, False, "hf", (2, 1, 1, 45)),
    (2, 4, 2, 53, 53, 16, True, "bias", (4, 53, 53)),
    (2, 2, 2, 29, 61, 40, False, "bias", (61,)),
    (1, 2, 1, 50, 50, 16, True, "bool", (1, 2, 50, 50)),
    (2, 2, 1, 33, 33, 16, False, "hf", (2, 1, 33, 33)),
]


def _ids(case):
    return f"{case[3]}x{case[4]}-{'causal' if case[6] else 'full'}-{case[7]}-{len(case[8])}d"


@pytest.mark.parametrize("tma", ["0", "1"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_backward_match_float64(case, tma, monkeypatch):
    if tma == "1" and case not in (CASES[0], CASES[2]):
        pytest.skip("the TMA build shares the mask code: two cases cover it (CI time)")
    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", tma)
    b, hq, hkv, sq, sk, d, causal, kind, shape = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, d)
    mask = _mask(kind, shape)
    full = expand_mask(mask, q, k)
    out, lse = forward(q, k, v, causal=causal, scale=None, config=TILES, mask=full)
    want = ref(q, k, v, mask, causal=causal)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, causal=causal, scale=1 / math.sqrt(d), config=TILES,
                     mask=full)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    exp = torch.autograd.grad(ref(qd, kd, vd, mask, causal=causal), (qd, kd, vd), do.double())
    for name, got, e in zip(("dq", "dk", "dv"), grads, exp, strict=True):
        assert not torch.isnan(got).any(), name
        torch.testing.assert_close(got.double(), e, atol=5e-5, rtol=1e-4, msg=name)


def test_with_window_and_softcap():
    q, k, v = _inputs(2, 2, 1, 47, 47, 16, seed=3)
    mask = _mask("bias", (2, 1, 47, 47))
    full = expand_mask(mask, q, k)
    out, lse = forward(q, k, v, causal=True, scale=None, config=TILES, window=(9, 0),
                       softcap=4.0, mask=full)  # fmt: skip
    torch.testing.assert_close(out.double(), ref(q, k, v, mask, causal=True, window=(9, 0),
                               softcap=4.0), atol=2e-5, rtol=1e-4)  # fmt: skip
    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, causal=True, scale=0.25, config=TILES, window=(9, 0),
                     softcap=4.0, mask=full)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    r = ref(qd, kd, vd, mask, causal=True, window=(9, 0), softcap=4.0)
    for got, e in zip(grads, torch.autograd.grad(r, (qd, kd, vd), do.double()), strict=True):
        torch.testing.assert_close(got.double(), e, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["bool", "hf"])
def test_public_function_matches_sdpa_with_autograd(kind):
    """An HF-style padding mask through `flashgen.attention(attn_mask=)`: forward and gradients
    equal SDPA's with the same mask (every row sees a key here)."""
    q, k, v = (t.requires_grad_() for t in _inputs(2, 4, 4, 31, 31, 32, seed=6))
    mask = _mask(kind, (2, 1, 1, 31), seed=7)
    mask[..., 0] = True if kind == "bool" else 0.0
    out = attention(q, k, v, attn_mask=mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-4)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    exp = torch.autograd.grad(want, (q, k, v), do)
    for g, e in zip(got, exp, strict=True):
        torch.testing.assert_close(g, e, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (torch.ones(2, 1, 17, 18, dtype=torch.bool), r"does not broadcast"),
        (torch.ones(3, 17, 17, dtype=torch.bool), r"does not broadcast"),
        (torch.ones(1, 1, 1, 17, 17, dtype=torch.bool), "at most 4 dims"),
        (torch.ones(17, 17, dtype=torch.int64), "boolean .* or floating"),
        ([[True]], "attn_mask must be a tensor"),
    ],
)
def test_bad_mask_names_the_argument(mask, message):
    qkv = _inputs(2, 2, 1, 17, 17, 16)
    assert_refused(qkv, {"attn_mask": mask}, message)
    both = {"attn_mask": torch.ones(17, dtype=torch.bool), "key_lengths": [3, 4]}
    assert_refused(qkv, both, "attn_mask together with key_lengths")


def test_spec_uri_round_trip():
    for kind, part in (("bool", "causalbmask"), ("add", "causalbias")):
        spec = KernelSpec(64, True, "float16", "bwd", attn_mask=kind)
        assert KernelSpec.from_uri(spec.uri()) == spec
        assert spec.uri() == f"attn_bwd_d64_{part}_f16"
    spec = KernelSpec(32, False, "bfloat16", window=True, softcap=True, attn_mask="add")
    assert KernelSpec.from_uri(spec.uri()) == spec
    with pytest.raises(ValueError, match="attn_mask must be"):
        KernelSpec(64, True, "float16", attn_mask="mul")


def test_op_under_compile_dynamic_and_opcheck():
    def f(q, k, v, m):
        return attention(q, k, v, attn_mask=m) * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for n in (23, 41):
        q, k, v = (t.requires_grad_() for t in _inputs(2, 2, 1, n, n, 16, seed=n))
        m = _mask("hf", (2, 1, 1, n), seed=n)
        out = compiled(q, k, v, m)
        torch.testing.assert_close(out.double(), 2 * ref(q, k, v, m), atol=2e-5, rtol=1e-4)
        out.sum().backward()
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        (2 * ref(qd, kd, vd, m)).sum().backward()
        torch.testing.assert_close(k.grad.double(), kd.grad, atol=5e-5, rtol=1e-4)
    q, k, v = _inputs(2, 2, 1, 19, 19, 16)
    m = _mask("bool", (2, 1, 1, 19))
    torch.library.opcheck(
        torch.ops.flashgen.attention_fwd.default,
        (q, k, v, False, 0.25, None, None, "top_left", None, m),
    )


def test_key_hull_flags_the_ranges_a_key_padding_mask_leaves_whole():
    """`padding.key_hull` adds DENSE_KEYS to len_k of the entries whose key range the mask
    leaves whole (right padding, no key at all) and not to those it reads inside (a gap, left
    padding); an additive mask's range is whole only where its bias is exactly 0; a mask that
    varies along heads gets no range."""
    from flashgen.kernels.padding import key_hull

    q, k, _ = _inputs(5, 2, 1, 7, 40, 16, seed=3)
    keep = torch.zeros(5, 1, 1, 40, dtype=torch.bool)
    keep[0, ..., :] = True  # whole
    keep[1, ..., :13] = True  # right padding
    keep[2, ..., :13] = True
    keep[2, ..., 5] = False  # a gap inside the range
    keep[3, ..., 9:] = True  # left padding: the range starts at 0, so it is read inside
    hull = key_hull(expand_mask(keep, q, k))
    flag = DENSE_KEYS
    assert hull.tolist() == [
        [0, 7, 0, 40 + flag], [0, 7, 0, 13 + flag], [0, 7, 0, 13], [0, 7, 0, 40], [0, 7, 0, flag]
    ]  # fmt: skip
    bias = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    bias[1, ..., 2] = 0.5  # a finite bias is read: not whole
    flagged = key_hull(expand_mask(bias, q, k))[:, 3]
    assert (flagged >= flag).tolist() == [True, False, False, False, True]
    assert (flagged % flag).tolist() == [40, 13, 13, 40, 0]
    assert key_hull(expand_mask(keep.expand(5, 2, 1, 40).clone(), q, k)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_key_hull_hides_hf_finfo_min_padding_with_a_margin(dtype):
    """An additive mask's keys at or below `padding.HIDDEN_BIAS` (HF's finfo.min padding, any
    of its dtypes) are past the range where the entry's other keys all clear HIDDEN_BIAS / 2;
    an entry all at finfo.min keeps its keys (PyTorch's average), one with a bias between the
    two does too (no margin), and -inf stays hidden as before."""
    from flashgen.kernels.padding import HIDDEN_BIAS, key_hull

    q, k, _ = _inputs(6, 2, 1, 7, 40, 16, seed=4)
    low = torch.finfo(dtype).min
    bias = torch.zeros(6, 1, 1, 40, dtype=dtype)
    bias[0, ..., 25:] = low  # HF right padding: 25 keys
    bias[1, ..., 25:] = low
    bias[1, ..., 3] = -1.0e3  # a finite bias inside: read, still hidden past it
    bias[2] = low  # every key at finfo.min: all kept
    bias[3, ..., 25:] = low
    bias[3, ..., 10] = HIDDEN_BIAS * 0.75  # no margin (representable in every dtype here)
    bias[4, ..., 25:] = float("-inf")  # -inf: hidden
    bias[5, ..., :30] = low  # left padding: the range starts at 0, ends at the last key
    hull = key_hull(expand_mask(bias, q, k))[:, 3]
    flag = DENSE_KEYS
    assert (hull % flag).tolist() == [25, 25, 40, 40, 25, 40]
    assert (hull >= flag).tolist() == [True, False, False, False, True, False]
    # what the hull skips weighs nothing: the forward over the range equals the whole one
    v = torch.randn(6, 1, 40, 16, dtype=torch.float64)
    s = torch.randn(6, 2, 7, 40, dtype=torch.float64) * 10 + bias.double()
    for b, end in enumerate((hull % flag).tolist()):
        whole = torch.softmax(s[b], -1) @ v[b]
        part = torch.softmax(s[b, ..., :end], -1) @ v[b, :, :end]
        torch.testing.assert_close(whole, part, rtol=1e-12, atol=0)


def _hull_masks():
    """Key-padding masks of every kind `padding.key_hull` reads: boolean and additive in three
    dtypes, right and left padding, gaps, -inf, HF's finfo.min with and without a margin, an
    entry with no visible key, a batch-broadcast view and a strided key axis."""
    gen = torch.Generator().manual_seed(11)
    out = []
    for seq_k in (1, 40, 300, 2500):  # one key, several blocks of the kernel's loop
        lens = torch.randint(0, seq_k + 1, (7,), generator=gen)
        keep = torch.arange(seq_k)[None, :] < lens[:, None]
        keep[1] = keep[1].flip(0)  # left padding
        keep[2, seq_k // 3] = False  # a gap
        out.append(keep)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            low = torch.finfo(dtype).min
            bias = torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, low)
            bias[3] = bias[3].masked_fill(~keep[3], float("-inf"))
            bias[4, 0] = -49152.0  # in (HIDDEN_BIAS, HIDDEN_BIAS / 2]: no margin
            bias[5] = low  # every key at finfo.min
            bias[6, seq_k // 2 :] = torch.randn(seq_k - seq_k // 2, generator=gen).to(dtype)
            out.append(bias)
    wide = torch.ones(1, 600, dtype=torch.bool)
    wide[0, 450:] = False
    out.append(wide.expand(3, 600))  # batch stride 0
    out.append(torch.zeros(4, 2 * 70, dtype=torch.bfloat16)[:, ::2])  # key stride 2
    return [m[:, None, None, :] for m in out]


def _hull_reference(mask) -> torch.Tensor:
    """`padding.key_hull` of a mask it applies to with plain torch ops (what it computed before
    its kernel): the reference the kernel must equal, int32 for int32."""
    from flashgen.kernels.padding import HIDDEN_BIAS

    batch, _, seq_q, seq_k = mask.shape
    keys = mask[:, 0, 0, :]
    position = torch.arange(1, seq_k + 1, device=mask.device, dtype=torch.int32)
    if keys.dtype == torch.bool:
        visible = plain = keys
        k_end = (visible.to(torch.int32) * position).amax(-1)  # last visible key + 1, 0 if none
    else:
        plain = keys == 0
        k_end = ((keys != float("-inf")).to(torch.int32) * position).amax(-1)
        # HF's finfo.min padding hides its keys too where the rest clear HIDDEN_BIAS / 2
        above = keys > HIDDEN_BIAS
        k_above = (above.to(torch.int32) * position).amax(-1)
        margin = ~(above & (keys <= HIDDEN_BIAS / 2)).any(-1)
        k_end = torch.where(margin & (k_above > 0), k_above, k_end)
    # every key before k_end untouched (no visible key lies past it)
    whole = plain.sum(-1, dtype=torch.int32) == k_end
    zeros = torch.zeros_like(k_end)
    len_k = k_end + whole.to(torch.int32) * DENSE_KEYS
    return torch.stack((zeros, torch.full_like(k_end, seq_q), zeros, len_k), 1)


def test_key_hull_kernel_equals_the_torch_ops():
    """The kernel behind `padding.key_hull` (here under Triton's interpreter) gives exactly the
    int32 bounds of the torch ops it replaced, for every kind of mask, and an empty batch
    gives no rows."""
    from flashgen.kernels.padding import key_hull

    for mask in _hull_masks():
        q = torch.zeros(mask.shape[0], 2, 5, 8)
        k = torch.zeros(mask.shape[0], 1, mask.shape[-1], 8)
        m = expand_mask(mask, q, k)
        got = key_hull(m)
        assert got.dtype == torch.int32 and got.is_contiguous()
        assert got.tolist() == _hull_reference(m).tolist(), (mask.dtype, mask.shape)
    empty = torch.ones(0, 1, 1, 40, dtype=torch.bool).expand(0, 2, 5, 40)
    assert key_hull(empty).shape == (0, 4)


def test_key_hull_launches_are_kept_per_signature():
    """`padding.key_hull` keeps one launch per mask signature (dtype, alignment, batch, strides,
    lengths) and runs it again for new values of the same signature; another signature gets
    its own."""
    from flashgen.kernels import padding

    padding._hull_launches.clear()
    q = torch.zeros(3, 2, 5, 8)
    k = torch.zeros(3, 1, 40, 8)
    masks = [torch.rand(3, 1, 1, 40, generator=torch.Generator().manual_seed(s)) < 0.6
             for s in range(3)]  # fmt: skip
    for mask in masks:
        m = expand_mask(mask, q, k)
        assert padding.key_hull(m).tolist() == _hull_reference(m).tolist()
    assert len(padding._hull_launches) == 1
    m = expand_mask(masks[0].float().masked_fill(~masks[0], float("-inf")), q, k)
    assert padding.key_hull(m).tolist() == _hull_reference(m).tolist()
    assert len(padding._hull_launches) == 2


_HULL_AOT = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from flashgen.kernels.hull_kernel import key_hull_kernel
done = []
for ptr, additive in json.loads(sys.argv[1]):
    sig = {"Keys": ptr, "Out": "*i32", "stride_b": "i32", "stride_n": "i32", "SEQ_Q": "i32",
           "SEQ_K": "i32", "HIDDEN": "fp32", "HALF": "fp32", "ADDITIVE": "constexpr",
           "DENSE": "constexpr", "BLOCK": "constexpr"}
    src = ASTSource(fn=key_hull_kernel, signature=sig,
                    constexprs={"ADDITIVE": additive, "DENSE": 1 << 30, "BLOCK": 2048})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    done.append(len(kernel.asm["ptx"]) > 0)
print(json.dumps(done))
"""


def test_key_hull_kernel_compiles_for_sm90():
    """The kernel behind `padding.key_hull` on a GPU compiles for sm_90 (ahead of time, no GPU;
    the interpreter test above checks its values): the pointer kinds `padding.key_hull` passes,
    a boolean mask's bytes and the three float dtypes of an additive one."""
    import aot_compile

    if not aot_compile.cuda_backend_available():
        pytest.skip("Triton's CUDA backend is not installed")
    kinds = [["*u8", False], ["*bf16", True], ["*fp16", True], ["*fp32", True]]
    assert aot_compile.run_without_interpreter(_HULL_AOT, kinds, timeout=600) == [True] * 4


_DKDV_AOT = """
import json, sys
sys.path.insert(0, "benchmarks")
from sram_vs_compiler import compile_ahead
from flashgen.core.spec import KernelSpec
from flashgen.core.config import TileConfig
done = []
for d, causal, kind, build in json.loads(sys.argv[1]):
    spec = KernelSpec(d, causal, "bfloat16", "bwd", False, False, True, kind, False)
    flags = {"MASK_PER_KEY": True, "MASK_SHARED": 1, "BLOCK_SPARSE": False}
    kernel, _ = compile_ahead(spec, build, TileConfig(64, 64, 4, 2), 90, flags)
    done.append(len(kernel.asm["ptx"]) > 0)
print(json.dumps(done))
"""


def test_dkdv_kernel_with_a_key_range_compiles_for_sm90():
    """The split backward's dK/dV kernel with a key range and a key-padding mask (which zeroes
    the keys past the range and stores every row from the key start:
    `test_key_padding_outputs_are_not_filled_and_every_row_is_written`) compiles for sm_90
    ahead of time, both builds (pointers and TMA descriptors), boolean and additive masks."""
    import aot_compile

    if not aot_compile.cuda_backend_available():
        pytest.skip("Triton's CUDA backend is not installed")
    jobs = [[64, False, "bool", "attn_bwd_dkdv"], [64, False, "bool", "attn_bwd_dkdv_tma"],
            [128, True, "add", "attn_bwd_dkdv"], [128, True, "add", "attn_bwd_dkdv_tma"]]  # fmt: skip
    assert aot_compile.run_without_interpreter(_DKDV_AOT, jobs, timeout=600) == [True] * 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_key_hull_on_the_gpu_equals_the_torch_ops():
    """Compiled for the GPU, the kernel behind `padding.key_hull` gives the torch ops' bounds."""
    from flashgen.kernels.padding import key_hull

    for mask in _hull_masks():
        mask = mask.cuda()
        q = torch.zeros(mask.shape[0], 2, 5, 8, device="cuda")
        k = torch.zeros(mask.shape[0], 1, mask.shape[-1], 8, device="cuda")
        m = expand_mask(mask, q, k)
        assert key_hull(m).tolist() == _hull_reference(m).tolist(), (mask.dtype, mask.shape)
        # the same signature again, other values: the direct launch after the JIT's first
        m2 = expand_mask(mask.flip(-1).clone(), q, k)
        assert key_hull(m2).tolist() == _hull_reference(m2).tolist(), (mask.dtype, mask.shape)


def _record_hulls(monkeypatch) -> list:
    """The key ranges `flashgen.runtime.primitives` builds from here on, in order."""
    from flashgen.kernels.padding import key_hull
    from flashgen.runtime import primitives, routes

    hulls = []
    record = lambda m, **kw: hulls.append(key_hull(m, **kw)) or hulls[-1]  # noqa: E731
    monkeypatch.setattr(primitives, "key_hull", record)
    monkeypatch.setattr(routes, "key_hull", record)  # (a repeated call's route)
    return hulls


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_key_padding_ranges_are_flagged_where_whole_and_match_float64(causal, monkeypatch):
    """A boolean key-padding mask's key ranges are flagged where the mask leaves them whole
    (`padding.key_hull`), for the forward and the backward alike: right padding and a whole
    entry are flagged, an entry with a gap is not; forward and gradients equal float64 (the
    portable forward strips the flag, the split backward decodes it)."""

    hulls = _record_hulls(monkeypatch)
    q, k, v = _inputs(3, 2, 1, 70, 90, 16, seed=24)
    keep = torch.zeros(3, 1, 1, 90, dtype=torch.bool)
    keep[0, ..., :61] = True  # right padding
    keep[1, ..., :90] = True
    keep[2, ..., :77] = True
    keep[2, ..., 40:43] = False  # a gap: read inside the range
    _matches_float64(q, k, v, keep, causal)
    assert len(hulls) == 2  # the forward's (no TMA here) and the backward's
    for hull in hulls:
        assert (hull[:, 3] >= DENSE_KEYS).tolist() == [True, True, False]
        assert (hull[:, 3] % DENSE_KEYS).tolist() == [61, 90, 77]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_split_backward_does_not_read_the_mask_inside_a_flagged_range(causal):
    """The flag is what the split backward obeys (templates/attn_bwd.py.jinja, `inside`): given
    a range flagged whole, it does not read the mask inside it, so a gap there changes
    nothing; the same range unflagged reads the gap. (Forged bounds: key_hull never flags a
    range with a gap.)"""
    q, k, v = _inputs(2, 2, 1, 40, 48, 16, seed=31)
    whole = torch.zeros(2, 1, 1, 48, dtype=torch.bool)
    whole[0, ..., :48] = True
    whole[1, ..., :35] = True
    gap = whole.clone()
    gap[:, ..., 10:14] = False
    flagged = torch.tensor([[0, 40, 0, 48 + DENSE_KEYS], [0, 40, 0, 35 + DENSE_KEYS]],
                           dtype=torch.int32)  # fmt: skip
    plain = flagged % DENSE_KEYS
    kw = dict(causal=causal, scale=0.25, config=TILES)
    out, lse = forward(q, k, v, mask=expand_mask(whole, q, k), bounds=flagged, **kw)
    do = torch.randn_like(out)

    def grads(mask, bounds):
        return backward(do, q, k, v, out, lse, mask=expand_mask(mask, q, k), bounds=bounds, **kw)

    want = grads(whole, flagged)
    for g, w in zip(grads(gap, flagged), want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)  # the gap was not read
    read = grads(gap, plain)
    assert any(not torch.equal(g, w) for g, w in zip(read, want, strict=True))


def test_the_hopper_forward_reads_the_flag_only_with_a_mask_and_lengths():
    """The rendered Hopper kernels: with a mask tensor and lengths, len_k is read without the
    flag and the tiles inside the band are masked only where it is absent (`_reads_inside`);
    renderings without a mask tensor or without lengths have neither."""
    from flashgen.core.spec import spec_for
    from flashgen.kernels import codegen, hopper

    if hopper.gluon_api()[0] is None:
        pytest.skip("this Triton has no Gluon API the Hopper family renders against")
    src = codegen.render(spec_for(128, True, "bfloat16", "fwd", lengths=True, attn_mask="bool"),
                         "hopper")  # fmt: skip
    assert f"len_k = gl.load(base + 3) & {DENSE_KEYS - 1}" in src
    assert f"return gl.load(SeqBounds + off_b * 4 + 3) < {DENSE_KEYS}" in src
    assert "inside | (j < n_lo) | (j >= n_full)" in src
    for args in ({"lengths": True}, {"attn_mask": "bool"}):
        src = codegen.render(spec_for(128, True, "bfloat16", "fwd", **args), "hopper")
        assert "_reads_inside" not in src and str(DENSE_KEYS - 1) not in src


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_key_padding_whole_ranges_on_gpu(causal, d, monkeypatch):
    """bf16 on the GPU: a boolean [B, 1, 1, N] key-padding mask with right-padded entries
    (flagged whole: the Hopper forward runs their inside tiles unmasked), a gap, left padding
    and an entry without keys, long enough for the Hopper family; forward and gradients equal
    float64, and the Hopper forward got the flagged ranges."""
    from flashgen.kernels import fwd

    hulls = _record_hulls(monkeypatch)
    b, hq, hkv, n = 5, 4, 2, 1500
    q, k, v = (t.cuda() for t in _inputs(b, hq, hkv, n, n, d, torch.bfloat16, seed=23))
    keep = torch.zeros(b, 1, 1, n, dtype=torch.bool)
    keep[0, ..., :] = True
    keep[1, ..., :1000] = True
    keep[2, ..., :777] = True
    keep[2, ..., 300:310] = False
    keep[3, ..., 200:] = True
    keep = keep.cuda()
    fwd._plans.clear()
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=causal, attn_mask=keep, impl="flashgen")
    (plan,) = fwd._plans.values()
    assert plan.hopper is not None and hulls  # the Hopper forward got the flagged ranges
    assert (hulls[0][:, 3] >= DENSE_KEYS).tolist() == [True, True, False, False, True]
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, do)
    ref_in = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    want = ref(*ref_in, keep.cpu(), causal=causal)
    exp = torch.autograd.grad(want, ref_in, do.cpu().double())
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
    for g, e in zip(grads, exp, strict=True):
        scale = max(1.0, e.abs().max().item())
        assert (g.cpu().double() - e).abs().max().item() <= 3e-2 * scale


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", ["bool", "hf"])
def test_bf16_on_gpu(kind):
    q, k, v = (t.cuda() for t in _inputs(3, 8, 2, 1003, 1003, 128, torch.bfloat16, seed=7))
    mask = _mask(kind, (3, 1, 1, 1003)).cuda()
    out = attention(q, k, v, causal=True, attn_mask=mask)
    want = ref(q.cpu(), k.cpu(), v.cpu(), mask.cpu(), causal=True).cuda()
    torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("d", [64, 128])
def test_block_sparse_boolean_mask_on_gpu(d, monkeypatch):
    """bf16 on the GPU, above MIN_SCORES: HF's [B, 1, N, N] causal-and-padding mask given as a
    tensor (no causal flag) walks the block-sparse lists; forward and gradients equal float64
    (a padded entry's rows past its length see keys; its keys past it are hidden)."""
    from flashgen.kernels import block_mask, fwd

    monkeypatch.setenv(block_mask.ENV, "1")
    built = []
    real = block_mask.tile_lists
    monkeypatch.setattr(
        block_mask, "tile_lists", lambda *a, **kw: built.append(a) or real(*a, **kw)
    )

    b, hq, hkv, n = 2, 4, 2, 1500
    assert n * n >= block_mask.MIN_SCORES
    q, k, v = (t.cuda() for t in _inputs(b, hq, hkv, n, n, d, torch.bfloat16, seed=21))
    keep = torch.arange(n)[None, :] < torch.tensor([[n], [777]])
    mask = (torch.ones(n, n, dtype=torch.bool).tril()[None, None] & keep[:, None, None]).cuda()
    fwd._plans.clear()
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, attn_mask=mask, impl="flashgen")
    assert built  # the forward walked the lists (a plan is kept only once its config settles)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, do)
    ref_in = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    want = ref(*ref_in, mask.cpu())
    exp = torch.autograd.grad(want, ref_in, do.cpu().double())
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
    for g, e in zip(grads, exp, strict=True):
        scale = max(1.0, e.abs().max().item())
        assert (g.cpu().double() - e).abs().max().item() <= 3e-2 * scale


def _hiding_mask(sq, sk, dtype):
    """An HF-style additive mask [2, 1, Sq, Sk] in `dtype` whose rows 3..8 of batch 1 carry
    finfo(dtype).min on every key (a padded query row: finite, so not a hidden row for
    PyTorch), row 5 of batch 0 -inf on every key (hidden), and -inf/finfo.min/0 elsewhere."""
    gen = torch.Generator().manual_seed(11)
    low = torch.finfo(dtype).min
    m = torch.zeros(2, 1, sq, sk).masked_fill(torch.rand(2, 1, sq, sk, generator=gen) > 0.7, low)
    m = m.masked_fill(torch.rand(2, 1, sq, sk, generator=gen) > 0.9, float("-inf"))
    m[1, :, 3:9] = low
    m[1, :, 4, ::3] = float("-inf")  # -inf keys among the finite ones: those stay hidden
    m[0, :, 5] = float("-inf")
    return m.to(dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32mask", "bf16mask"])
def test_finite_bias_rows_average_like_pytorch(causal, dtype):
    """A row whose visible keys all carry HF's finfo.min (finite) is no hidden row for PyTorch:
    its softmax is uniform over those keys, so the output is their values' mean (float64 and
    SDPA agree); the kernel used to overflow finfo.min * log2(e) to -inf and return zeros.
    An all -inf row still gives zeros. The backward gives such rows no gradient (their lse
    cannot hold log(l) beside a max of -3e38): with no upstream gradient on them, as a padded
    row has, dq/dk/dv equal float64's; with one, everything stays finite."""
    b, hq, hkv, sq, sk, d = 2, 2, 1, 37, 45, 24
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, seed=12)
    mask = _hiding_mask(sq, sk, dtype)
    full = expand_mask(mask, q, k)
    out, lse = forward(q, k, v, causal=causal, scale=None, config=TILES, mask=full)
    want = ref(q, k, v, mask, causal=causal)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    # the finite rows really are averages (not zeros), the -inf row really is zeros
    assert out[1, :, 6].abs().sum() > 0 and out[0, :, 5].abs().sum() == 0
    above = torch.ones(sq, sk, dtype=torch.bool).tril().logical_not() & causal
    sdpa_mask = mask.float().masked_fill(above, float("-inf"))
    kv = (t.repeat_interleave(hq // hkv, 1) for t in (k, v))
    sdpa = F.scaled_dot_product_attention(q, *kv, attn_mask=sdpa_mask)
    rows = torch.arange(sq) != 5  # SDPA gives NaN on the all -inf row
    torch.testing.assert_close(out[:, :, rows], sdpa[:, :, rows], atol=2e-5, rtol=1e-4)
    # rows where no visible key carries a bias above -1e30 (1 3..8 by construction; causal adds
    # rows whose few keys all carry finfo.min)
    causal_ok = torch.ones(sq, sk, dtype=torch.bool).tril() | (not causal)
    hidden = ~((mask.float() > -1e30) & causal_ok).any(-1, keepdim=True)
    assert hidden[1, :, 3:9].all()
    do = torch.randn_like(out).masked_fill(hidden, 0.0)
    grads = backward(do, q, k, v, out, lse, causal=causal, scale=1 / math.sqrt(d), config=TILES,
                     mask=full)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    exp = torch.autograd.grad(ref(qd, kd, vd, mask, causal=causal), (qd, kd, vd), do.double())
    for name, got, e in zip(("dq", "dk", "dv"), grads, exp, strict=True):
        torch.testing.assert_close(got.double(), e, atol=5e-5, rtol=1e-4, msg=name)
    grads = backward(torch.randn_like(out), q, k, v, out, lse, causal=causal,
                     scale=1 / math.sqrt(d), config=TILES, mask=full)  # fmt: skip
    assert all(torch.isfinite(g).all() for g in grads)


def test_key_padding_mask_is_read_as_one_vector_per_tile():
    """A mask constant along query rows ([B, 1, 1, Sk], stride 0 there) launches the forward
    and both backward kernels with MASK_PER_KEY (one vector load of keys per tile), a
    [B, 1, Sq, Sk] one without; both equal float64, forward and gradients."""
    q, k, v = _inputs(2, 2, 1, 23, 35, 16, seed=9)
    keep = torch.rand(2, 1, 1, 35, generator=torch.Generator().manual_seed(9)) > 0.3
    do = torch.randn(2, 2, 23, 16, generator=torch.Generator().manual_seed(10))
    for mask, per_key in ((keep, True), (keep.expand(2, 1, 23, 35).clone(), False)):
        _, plan, bplan = _launch_and_compare(q, k, v, do, mask, causal=True)
        assert plan.run.constexprs["MASK_PER_KEY"] is per_key
        assert bplan.dkdv.constexprs["MASK_PER_KEY"] is per_key
        assert bplan.dq.constexprs["MASK_PER_KEY"] is per_key


@pytest.mark.parametrize(
    ("shape", "shared"),
    [((3, 1, 31, 43), 1), ((1, 4, 31, 43), 2), ((31, 43), 3), ((3, 4, 31, 43), 0)],
    ids=["heads", "batch", "both", "none"],
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_shared_mask_launches_its_readers_side_by_side(shape, shared, causal):
    """A mask tensor broadcast over heads, batch entries or both (stride 0 there) launches the
    forward and both backward kernels with MASK_SHARED (the programs reading the same mask
    tiles made neighbours in launch order); every program still computes its own (batch entry,
    head, block) once: forward and gradients equal float64 (3 batch entries, 4 query heads
    over 2 kv heads, ragged blocks)."""
    q, k, v = _inputs(3, 4, 2, 31, 43, 16, seed=12)
    mask = _mask("bias", shape, seed=13)
    do = torch.randn(3, 4, 31, 16, generator=torch.Generator().manual_seed(14))
    _, plan, bplan = _launch_and_compare(q, k, v, do, mask, causal)
    assert plan.run.constexprs["MASK_SHARED"] == shared
    assert bplan.dkdv.constexprs["MASK_SHARED"] == shared
    assert bplan.dq.constexprs["MASK_SHARED"] == shared


@pytest.mark.parametrize(
    ("causal", "additive"),
    [(False, False), (True, False), (False, True)],
    ids=["full", "causal", "additive"],
)
def test_key_padding_mask_skips_the_tiles_past_its_last_key(causal, additive, monkeypatch):
    """A [B, 1, 1, Sk] key-padding mask (boolean, or additive with -inf) through
    `flashgen.attention`: the launchers get the range
    of keys up to each entry's last visible one (`padding.key_hull`) and skip the tiles past
    it; right padding, a gap inside the range, an entry without any key: forward and
    gradients equal float64."""
    from flashgen.kernels.padding import key_hull

    q, k, v = _inputs(3, 2, 1, 29, 45, 16, seed=11)
    keep = torch.zeros(3, 1, 1, 45, dtype=torch.bool)
    keep[0, ..., :45] = True
    keep[1, ..., :13] = True
    keep[1, ..., 5] = False  # a gap: the mask is still read inside the range
    hull = key_hull(expand_mask(keep, q, k))
    flag = DENSE_KEYS  # (the ranges left whole: `key_hull`)
    assert hull.tolist() == [[0, 29, 0, 45 + flag], [0, 29, 0, 13], [0, 29, 0, flag]]
    assert key_hull(expand_mask(keep.expand(3, 1, 29, 45).clone(), q, k)) is None
    if additive:  # -inf hides a key; a finite bias (here 0.5) does not, and is read
        keep = torch.zeros(keep.shape).masked_fill(~keep, float("-inf")) + 0.5 * keep
        assert key_hull(expand_mask(keep, q, k))[:, 3].tolist() == [45, 13, flag]
    hulls = _record_hulls(monkeypatch)
    out = _matches_float64(q, k, v, keep, causal)
    assert (out[2] == 0).all()
    assert len(hulls) == 2 and all(h is not None for h in hulls)  # forward and backward


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_key_padding_outputs_are_not_filled_and_every_row_is_written(causal, monkeypatch):
    """A key-padding mask's key range leaves every query row valid and starts every key range
    at 0, so the launchers are told so (`rows_whole`) and allocate out, lse, dQ, dK and dV
    without filling them first: the kernels must write every row (dK/dV's past the range as
    zeros). With the deterministic mode's fill on (a new tensor is NaN; the
    backward's own pause of that fill switched off here) forward and gradients still equal
    float64 and are finite, an entry that sees no key included. Key lengths (rows outside
    their bounds) are not `rows_whole`."""
    from flashgen.kernels import bwd, fwd

    seen = []

    def spy(real, name):
        def wrapped(*args, **kwargs):
            seen.append((name, kwargs.get("bounds") is not None, kwargs.get("rows_whole")))
            return real(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(fwd, "forward", spy(fwd.forward, "fwd"))
    monkeypatch.setattr(bwd, "backward", spy(bwd.backward, "bwd"))
    monkeypatch.setattr(bwd, "pause_fill", lambda: False)
    q, k, v = _inputs(3, 2, 1, 37, 45, 16, seed=12)
    keep = torch.zeros(3, 1, 1, 45, dtype=torch.bool)
    keep[0, ..., :30] = True
    keep[1, ..., :45] = True  # (entry 2 sees no key)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.isnan(torch.empty(4)).all()  # the fill this test relies on is on
        out = _matches_float64(q, k, v, keep, causal)
        assert (out[2] == 0).all()
        assert seen == [("fwd", True, True), ("bwd", True, True)]
        seen.clear()
        lengths = {
            "key_lengths": torch.tensor([30, 45, 0]),
            "query_lengths": torch.tensor([20, 37, 5]),
        }
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attention(*leaves, causal=causal, **lengths)
        out.sum().backward()
        assert seen == [("fwd", True, False), ("bwd", True, False)]
        for t in (out, *(leaf.grad for leaf in leaves)):
            assert torch.isfinite(t).all()
    finally:
        torch.use_deterministic_algorithms(was)


def test_no_key_range_skip_on_a_gpu_with_tma(monkeypatch):
    """Bounds take the portable family's pointer-load forward, so where the TMA builds exist
    the forward reads a key-padding mask without the skip (measured faster on the H200), unless
    the Hopper forward takes the call with the hull as lengths (the forward's `hopper_hull`,
    asked only there); elsewhere the skip stands. The backward's TMA builds take bounds: its
    `_backward_bounds` takes the hull everywhere."""
    from types import SimpleNamespace

    from flashgen.runtime import primitives

    asked = []

    def hopper_hull(answer):
        return lambda: asked.append(answer) or answer

    mask = SimpleNamespace(is_cuda=True, device=SimpleNamespace(index=0))
    monkeypatch.setattr(primitives, "key_hull", lambda m, fills_hide: "hull")
    monkeypatch.setattr(primitives, "device_has_tma", lambda index: True)
    assert primitives._bounds(None, mask) is None
    assert primitives._bounds(None, mask, hopper_hull(False)) is None
    assert primitives._bounds(None, mask, hopper_hull(True)) == "hull"
    assert asked == [False, True]
    monkeypatch.setattr(primitives, "device_has_tma", lambda index: False)
    assert primitives._bounds(None, mask) == "hull"
    assert primitives._bounds(None, mask, hopper_hull(False)) == "hull"
    assert asked == [False, True]  # not asked without TMA: the hull is taken anyway
    assert primitives._bounds("given", mask, hopper_hull(True)) == "given"
    for tma in (True, False):
        monkeypatch.setattr(primitives, "device_has_tma", lambda index, tma=tma: tma)
        assert primitives._backward_bounds(None, mask) == "hull"
        assert primitives._backward_bounds("given", mask) == "given"
        assert primitives._backward_bounds(None, None) is None


@pytest.mark.parametrize("alibi", [False, True], ids=["plain", "alibi"])
def test_the_forward_asks_the_hopper_choice_for_the_key_hull(alibi, monkeypatch):
    """The forward primitive hands `_bounds` a callable that asks `hopper.takes_key_hull` with
    the call's flags (`_bounds` calls it only on a TMA GPU: test above); the backward hands
    none (it takes `_backward_bounds`). `_bounds` is replaced here by one that always asks
    and takes the hull on True."""
    from flashgen.kernels import fwd, hopper
    from flashgen.runtime import primitives

    q, k, v = _inputs(2, 2, 1, 29, 45, 16, seed=3)
    keep = torch.ones(2, 1, 1, 45, dtype=torch.bool)
    keep[1, ..., 30:] = False
    asked, launched, callables = [], [], []

    def bounds(seq_bounds, mask, hopper_hull=None, window=None):
        callables.append(hopper_hull)
        return primitives.key_hull(mask) if hopper_hull is not None and hopper_hull() else None

    monkeypatch.setattr(primitives, "_bounds", bounds)
    monkeypatch.setattr(hopper, "takes_key_hull", lambda *a, **kw: asked.append(kw) or True)
    monkeypatch.setattr(primitives, "_hulls", {})  # (answers kept per signature: test below)
    monkeypatch.setattr(fwd, "forward", lambda *a, **kw: launched.append(kw) or (None, None))
    slopes = torch.rand(2) if alibi else None
    primitives._attention_fwd(q, k, v, True, None, [3, 0], 20.0, attn_mask=keep,
                              alibi_slopes=slopes)  # fmt: skip
    (kw,) = asked
    assert kw == dict(causal=True, window=True, softcap=True, dropout=False, alibi=alibi)
    flag = DENSE_KEYS  # (both ranges whole: flagged, `key_hull`)
    assert launched[0]["bounds"].tolist() == [[0, 29, 0, 45 + flag], [0, 29, 0, 30 + flag]]
    given = []
    monkeypatch.setattr(primitives.bwd, "backward",
                        lambda *a, **kw: given.append(kw) or (None, None, None))  # fmt: skip
    primitives._attention_bwd(q, q, k, v, q, q[..., 0], True, None, True, True, True,
                              attn_mask=keep)  # fmt: skip
    assert len(callables) == 1  # the backward does not ask the forward's choice
    assert given[0]["bounds"].tolist() == [[0, 29, 0, 45 + flag], [0, 29, 0, 30 + flag]]


def test_the_key_hull_answer_is_kept_per_call_signature(monkeypatch):
    """`_forward_hull` asks `hopper.takes_key_hull` once per call signature: again for another
    shape, flag, mask layout or alignment, under another forward-family override, and after the
    run-time choice's caches are cleared (`dispatch.clear_cache`)."""
    from flashgen.kernels import hopper
    from flashgen.runtime import dispatch, primitives

    asked = []
    monkeypatch.setattr(hopper, "takes_key_hull", lambda *a, **kw: asked.append(kw) or True)
    monkeypatch.setattr(primitives, "_hulls", {})
    monkeypatch.setattr(dispatch, "_clear_hooks", [primitives._hulls.clear])
    q, k, v = _inputs(2, 2, 1, 29, 45, 16, seed=3)
    keys = torch.ones(2, 1, 1, 45, dtype=torch.bool)
    mask = keys.expand(2, 2, 29, 45)
    flags = (True, None, None, None, None)
    assert primitives._forward_hull(q, k, v, mask, *flags)
    assert primitives._forward_hull(q, k, v, mask, *flags)
    assert len(asked) == 1
    primitives._forward_hull(q, k, v, mask, False, None, None, None, None)  # causal
    primitives._forward_hull(q, k, v, mask, True, (3, 0), None, None, None)  # a window
    primitives._forward_hull(q, k, v, mask.float(), *flags)  # another mask dtype
    primitives._forward_hull(q[:, :, 1:], k, v, mask[:, :, 1:], *flags)  # another shape
    odd = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)  # not 16-byte aligned
    primitives._forward_hull(odd, k, v, mask, *flags)
    assert len(asked) == 6
    monkeypatch.setenv(hopper.FAMILY_ENV, "portable")
    primitives._forward_hull(q, k, v, mask, *flags)
    assert len(asked) == 7
    monkeypatch.delenv(hopper.FAMILY_ENV)
    primitives._forward_hull(q, k, v, mask, *flags)
    assert len(asked) == 7  # (the first answer again)
    dispatch.clear_cache()
    primitives._forward_hull(q, k, v, mask, *flags)
    assert len(asked) == 8


def test_expand_mask_checks_each_signature_and_refuses_after_a_kept_one():
    """`expand_mask` keeps the shape a checked signature expands to; a mask that fails the
    checks is never kept, so it is refused at every call, and a kept one still expands."""
    q = torch.zeros(2, 3, 5, 16)
    k = torch.zeros(2, 3, 7, 16)
    good = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    for _ in range(2):
        assert expand_mask(good, q, k).shape == (2, 3, 5, 7)
        assert expand_mask(good, q, k).stride() == (7, 0, 0, 1)
        with pytest.raises(ValueError, match="does not broadcast"):
            expand_mask(torch.ones(2, 1, 1, 6, dtype=torch.bool), q, k)
        with pytest.raises(ValueError, match="boolean .* or floating"):
            expand_mask(torch.ones(2, 1, 1, 7, dtype=torch.int32), q, k)
        with pytest.raises(ValueError, match="tensor or None"):
            expand_mask([1, 0], q, k)
    # the same mask against other q/k shapes is checked again
    with pytest.raises(ValueError, match="does not broadcast"):
        expand_mask(good, q, torch.zeros(2, 3, 8, 16))


def test_the_composite_op_and_the_primitive_share_the_kept_checks(monkeypatch):
    """`flashgen.attention` checks an attn_mask (naming it) and the primitive op expands it:
    both through `validate.mask_shape`, so a signature's checks run once over both and over
    later calls; a mask that fails them is refused at every call."""
    from flashgen.kernels import validate

    monkeypatch.setattr(validate, "_checked", {})
    calls = []
    check = validate.check_mask
    monkeypatch.setattr(validate, "check_mask", lambda *a: calls.append(1) or check(*a))
    q, k, v = _inputs(2, 2, 1, 9, 11, 16, seed=5)
    keys = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    keys[1, ..., 7:] = False
    first = attention(q, k, v, attn_mask=keys)
    torch.testing.assert_close(attention(q, k, v, attn_mask=keys.clone()), first)
    assert len(calls) == 1
    for _ in range(2):
        with pytest.raises(ValueError, match="attn_mask"):
            attention(q, k, v, attn_mask=torch.ones(3, 1, 1, 11, dtype=torch.bool))
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("causal", "additive"),
    [(False, False), (True, False), (False, True), (True, True), (False, "hf"), (True, "hf")],
    ids=["full", "causal", "additive", "additive_causal", "hf", "hf_causal"],
)
def test_backward_hull_after_a_forward_without_it(causal, additive, monkeypatch):
    """What a TMA GPU runs when the Hopper forward does not take the call (an additive mask,
    fewer than 1,024 query rows): the portable forward reads the whole key-padding mask (no
    hull) and the backward skips the key tiles past the hull (`primitives._backward_bounds`).
    The hull hides only keys the mask hides, so the forward's lse is what the backward's
    range expects: gradients equal float64 with left and right padding, an entry without keys
    (zeros, no NaN) and, additive, finite biases and HF's finfo.min on the padding; "hf": HF's
    own mask, 0 on the keys and finfo.min on the padding, whose right-padded ranges are flagged
    whole, so the backward adds no bias inside them (`inside` False)."""
    from flashgen.runtime import primitives

    monkeypatch.setattr(primitives, "_bounds", lambda seq_bounds, mask, *a: None)
    backward_hulls = []
    real = primitives._backward_bounds
    monkeypatch.setattr(
        primitives, "_backward_bounds",
        lambda s, m, w=None: backward_hulls.append(real(s, m, w)) or backward_hulls[-1],
    )  # fmt: skip
    q, k, v = _inputs(4, 2, 1, 37, 45, 16, seed=12)
    keep = torch.zeros(4, 1, 1, 45, dtype=torch.bool)
    keep[0] = True
    keep[1, ..., :20] = True  # right padding
    keep[2, ..., 9:] = True  # left padding: causal rows before 9 see no key
    mask = keep
    low = torch.finfo(torch.float32).min
    if additive == "hf":
        mask = torch.zeros(keep.shape).masked_fill(~keep, low)
        # rows that see only finfo.min keys get PyTorch's average and no gradient (README,
        # attn_mask): the left padding and the empty entry hide their keys with -inf here
        mask[2, ..., :9] = float("-inf")
        mask[3] = float("-inf")
    elif additive:
        gen = torch.Generator().manual_seed(5)
        mask = (torch.rand(keep.shape, generator=gen) * 2 - 1).masked_fill(~keep, float("-inf"))
        mask[1, ..., 20:] = low  # HF's padding value: hidden
    _matches_float64(q, k, v, mask, causal)
    (hull,) = backward_hulls  # the backward took the key range
    flag = DENSE_KEYS  # the ranges left whole carry key_hull's flag
    whole = [False, False, False, True] if additive is True else [True, True, False, True]
    assert (hull[:, 3] % flag).tolist() == [45, 20, 45, 0]
    assert (hull[:, 3] >= flag).tolist() == whole


def test_key_padding_masks_take_the_general_tile_row(monkeypatch):
    """With no config given, a mask tensor's forward runs the defaults' "mask" row (measured on
    [Sq, Sk] tiles) and a key-padding mask (constant along query rows) the general row, which
    read it faster on the H200; both equal float64."""
    from flashgen.core.spec import KernelSpec
    from flashgen.hardware.tiles import default_config
    from flashgen.kernels import fwd

    monkeypatch.setenv("FLASHGEN_GPU", "nvidia-h200")
    # bf16 at head dim 128: the rows measured (in fp32 the mask row does not fit)
    q, k, v = _inputs(1, 2, 1, 20, 24, 128, dtype=torch.bfloat16, seed=15)
    spec = KernelSpec(128, False, "bfloat16", "fwd", attn_mask="add")
    for shape, per_key in (((1, 1, 1, 24), True), ((1, 1, 20, 24), False)):
        mask = _mask("hf", shape, seed=16)
        fwd._plans.clear()
        out, _ = forward(q, k, v, causal=False, scale=None, mask=expand_mask(mask, q, k))
        (plan,) = fwd._plans.values()
        want = default_config(spec, per_key=per_key)
        got = (plan.run.constexprs["BLOCK_M"], plan.run.constexprs["BLOCK_N"],
               plan.run.options["num_warps"], plan.run.options["num_stages"])  # fmt: skip
        assert got == (want.block_m, want.block_n, want.num_warps, want.num_stages)
        leaves = [t.double() for t in (q, k, v)]
        torch.testing.assert_close(out.double(), ref(*leaves, mask), atol=2e-2, rtol=2e-2)
    assert default_config(spec, per_key=True) != default_config(spec)


@pytest.mark.parametrize("tma", ["0", "1"])
@pytest.mark.parametrize(
    "shape",
    [(2, 1, 45, 70), (1, 2, 45, 70), (45, 70), (2, 2, 45, 70)],
    ids=["heads", "batch", "both", "none"],
)
def test_boolean_masks_walk_block_sparse_lists(shape, tma, monkeypatch):
    """A boolean mask varying along query rows, without causal/window/lengths, on a call large
    enough (MIN_SCORES lowered here): the forward walks the host's lists of whole and partial
    key tiles per query block (BLOCK_SPARSE), skipping the rest. A causal+padding mask with a
    fully hidden query block, a hidden row, a whole row of tiles and ragged edges: forward
    equals float64 (zeros where a row sees nothing), and the backward on that forward's out
    and lse (its dQ kernel walks the lists too, its dK/dV kernel the lists per key block, GQA's
    two query heads each their own) equals float64."""
    from flashgen.kernels import block_mask

    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", tma)
    monkeypatch.setattr(block_mask, "MIN_SCORES", 0)
    monkeypatch.setenv(block_mask.ENV, "1")
    q, k, v = _inputs(2, 2, 1, 45, 70, 16, seed=17)
    gen = torch.Generator().manual_seed(18)
    mask = torch.ones(45, 70, dtype=torch.bool).tril(diagonal=20) & (
        torch.rand(45, 70, generator=gen) > 0.1
    )
    mask[:, 32:48] = True  # key tile 2 (16 keys): whole for the query blocks without row 30
    mask[:16] = False  # the first query block sees no key
    mask[30] = False  # and a row of another
    mask = mask.expand(shape) if len(shape) == 2 else mask.expand(shape[0], shape[1], 45, 70)
    if shape == (2, 2, 45, 70):  # every (entry, head) its own: the two heads of a kv group differ
        mask = mask.clone()
        mask[1, 1] = mask[1, 1].flip(-1)
        mask[0, 1, :, 48:] = False
    do = torch.randn(2, 2, 45, 16, generator=torch.Generator().manual_seed(19))
    out, plan, bplan = _launch_and_compare(q, k, v, do, mask, causal=False)
    assert plan.run.constexprs["BLOCK_SPARSE"] is True
    assert bplan.dq.constexprs["BLOCK_SPARSE"] is True  # both backward kernels walk them too
    assert bplan.dkdv.constexprs["BLOCK_SPARSE"] is True
    assert (out[:, :, :16] == 0).all() and (out[:, :, 30] == 0).all()
    _, cnt, _, _ = block_mask.tile_lists(expand_mask(mask, q, k), TILES.block_m, TILES.block_n)
    assert cnt[..., 0, :].sum() == 0  # the hidden query block walks nothing
    assert cnt[..., 0].sum() > 0 and cnt[..., 1].sum() > 0  # whole and partial tiles elsewhere


def test_tile_lists_name_whole_partial_and_hidden_tiles():
    """`block_mask.tile_lists` against a tile-by-tile reading of the mask: per query block the
    key tiles whose valid rows all see every key (whole; a ragged last key tile never is),
    those some rows see (partial), ascending, and none of the hidden ones; per key block
    (per="key") the query tiles likewise (a ragged last query tile never whole); shared dims
    once; an unknown `per` is refused."""
    from flashgen.kernels.block_mask import tile_lists

    gen = torch.Generator().manual_seed(20)
    b, h, sq, sk, bm, bn = 2, 3, 37, 45, 16, 16
    mask = torch.rand(b, 1, sq, sk, generator=gen) > 0.5
    mask[0, 0, :16, :16] = True
    mask[1, 0, 16:32] = False
    mask[1, 0, 32:, 16:32] = True  # tile (2, 1), rows ragged: whole per query, not per key
    full = mask.expand(b, h, sq, sk)
    nm, nn = -(-sq // bm), -(-sk // bn)

    def tile(bi, hi, m, n):
        return full[bi, hi, m * bm : (m + 1) * bm, n * bn : (n + 1) * bn]

    for per, blocks, length in (("query", nm, nn), ("key", nn, nm)):
        idx, cnt, stride_b, stride_h = tile_lists(full, bm, bn, per=per)
        assert idx.shape == (b, 1, blocks, 2, length) and (stride_b, stride_h) == (blocks, 0)
        for bi in range(b):
            for hi in range(h):
                for x in range(blocks):
                    pairs = [(x, y) if per == "query" else (y, x) for y in range(length)]
                    ragged_k = [(n + 1) * bn > sk for _, n in pairs]
                    ragged_q = [(m + 1) * bm > sq and per == "key" for m, _ in pairs]
                    whole = [
                        y
                        for y, (m, n) in enumerate(pairs)
                        if not ragged_k[y] and not ragged_q[y] and tile(bi, hi, m, n).all()
                    ]
                    part = [
                        y
                        for y, (m, n) in enumerate(pairs)
                        if y not in whole and tile(bi, hi, m, n).any()
                    ]
                    j = bi * stride_b + hi * stride_h + x
                    lists = idx.view(-1)[j * 2 * length : (j + 1) * 2 * length].view(2, length)
                    counts = cnt.view(-1)[2 * j : 2 * j + 2].tolist()
                    assert lists[0, : counts[0]].tolist() == whole, (per, bi, x)
                    assert lists[1, : counts[1]].tolist() == part, (per, bi, x)
        if per == "query":
            assert cnt[0, 0, 0].tolist() == [1, 2]  # the whole first tile, two partial ones
            assert cnt[1, 0, 1].tolist() == [0, 0]  # a hidden query block
            assert 1 in idx[1, 0, 2, 0, : cnt[1, 0, 2, 0]].tolist()  # tile (2, 1): whole
        else:
            assert 2 not in idx[1, 0, 1, 0, : cnt[1, 0, 1, 0]].tolist()  # tile (2, 1): partial
            assert 2 in idx[1, 0, 1, 1, : cnt[1, 0, 1, 1]].tolist()
    with pytest.raises(ValueError, match="per must be"):
        tile_lists(full, bm, bn, per="keys")


@pytest.mark.parametrize("per", ["query", "key"])
def test_tile_lists_read_any_strides(per):
    """`tile_lists` reads the mask through its strides (`flashgen.kernels.tile_kinds`): a
    mask that is a strided view (every other key of a wider one, a transposed one, heads of
    its own) gives the lists of its contiguous copy."""
    from flashgen.kernels.block_mask import tile_lists

    gen = torch.Generator().manual_seed(25)
    sq, sk = 37, 45
    wide = torch.rand(2, 3, sq, 2 * sk, generator=gen) > 0.4
    wide[:, :, :16, : 2 * 16] = True  # whole tiles too
    square = torch.rand(2, 1, 40, 40, generator=gen) > 0.4
    for view in (wide[..., ::2], square.transpose(2, 3)):
        want = tile_lists(view.contiguous(), 16, 16, per=per)
        got = tile_lists(view, 16, 16, per=per)
        assert got[0].equal(want[0]) and got[1].equal(want[1]) and got[2:] == want[2:]


def test_tile_lists_kernel_compacts_in_chunks():
    """`tile_lists_kernel` alone, on kinds drawn at random and a chunk smaller than the lists
    (the running count across chunks): per walk block the ALL tiles ascending, then the SOME
    ones, each list padded with -1, and the two counts, for both walks' strides."""
    from flashgen.kernels.tile_kinds import ALL, SOME, tile_lists_kernel

    gen = torch.Generator().manual_seed(31)
    entries, nm, nn = 2, 3, 40
    kinds = torch.randint(0, 3, (entries, nm, nn), generator=gen, dtype=torch.int8)
    kinds[0, 1] = ALL  # a block whose tiles are all whole
    for per_key in (False, True):
        blocks, length = (nn, nm) if per_key else (nm, nn)
        steps = (1, nn) if per_key else (nn, 1)
        idx = torch.empty(entries, blocks, 2, length, dtype=torch.int32)
        cnt = torch.empty(entries, blocks, 2, dtype=torch.int32)
        tile_lists_kernel[(entries, blocks)](kinds, idx, cnt, *steps, blocks, length, CHUNK=16)
        for e in range(entries):
            for x in range(blocks):
                row = kinds[e, :, x] if per_key else kinds[e, x]
                for which, kind in ((0, ALL), (1, SOME)):
                    want = [y for y in range(length) if row[y] == kind]
                    got = idx[e, x, which].tolist()
                    assert got == want + [-1] * (length - len(want)), (per_key, e, x, which)
                    assert cnt[e, x, which] == len(want)


def test_tile_lists_launches_are_kept_per_signature():
    """`block_mask.tile_lists` keeps one pair of launches per signature (the mask's shared
    shape, strides and alignment, the walk, the tiles) and runs it again for new masks of
    that signature; another walk gets its own."""
    from flashgen.kernels import block_mask

    block_mask._launches.clear()
    gen = torch.Generator().manual_seed(32)
    for _ in range(2):
        mask = (torch.rand(2, 1, 37, 45, generator=gen) > 0.5).expand(2, 3, 37, 45)
        idx, cnt, _, _ = block_mask.tile_lists(mask, 16, 16)
        want, want_cnt, _, _ = block_mask.tile_lists(mask.contiguous(), 16, 16)  # heads apart
        assert idx.equal(want[:, :1]) and cnt.equal(want_cnt[:, :1])
    assert len(block_mask._launches) == 2  # the expanded view, the contiguous copy
    block_mask.tile_lists(mask, 16, 16, per="key")
    assert len(block_mask._launches) == 3


def _tile_lists_reference(full, bm, bn, per):
    """`tile_lists`'s (idx, cnt) by tensor operations (the stable sort it used before its
    kernel), for a [B, H, Sq, Sk] boolean mask without broadcast dims."""
    b, h, sq, sk = full.shape
    nm, nn = -(-sq // bm), -(-sk // bn)
    pad = torch.zeros(b, h, nm * bm, nn * bn, dtype=torch.bool)
    pad[..., :sq, :sk] = full
    tiles = pad.view(b, h, nm, bm, nn, bn)
    seen = tiles.any(5).any(3)  # [b, h, nm, nn]
    row_all = tiles.all(5)  # [b, h, nm, bm, nn]: the row sees every key of the tile
    if per == "query":  # rows past Sq are never stored: they do not count
        past = (torch.arange(nm * bm) >= sq).view(nm, bm)
        row_all = row_all | past[None, None, :, :, None]
    whole = row_all.all(3)
    if per == "key":
        whole, seen = whole.transpose(2, 3), seen.transpose(2, 3)
    lists = torch.stack((whole, seen & ~whole), dim=3)  # [b, h, blocks, 2, L]
    idx = torch.sort((~lists).to(torch.uint8), dim=-1, stable=True).indices.to(torch.int32)
    cnt = lists.sum(-1, dtype=torch.int32)
    slots = torch.arange(idx.shape[-1])
    return idx.masked_fill(slots >= cnt[..., None], -1), cnt


@pytest.mark.parametrize("per", ["query", "key"])
def test_tile_lists_match_the_tensor_reading(per):
    """`tile_lists` (its two kernels) equals `_tile_lists_reference` (the GPU test's
    reference) on banded masks with random holes, ragged tiles and heads of their own."""
    from flashgen.kernels import block_mask

    gen = torch.Generator().manual_seed(34)
    for b, h, sq, sk, bm, bn in ((2, 1, 37, 45, 16, 16), (2, 3, 50, 200, 16, 32)):
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        mask = (j <= 3 * i + 5).expand(b, h, sq, sk) & (
            torch.rand(b, h, sq, sk, generator=gen) > 0.01
        )
        mask[-1, :, :, sk // 2 :] = True
        want_idx, want_cnt = _tile_lists_reference(mask, bm, bn, per)
        idx, cnt, _, _ = block_mask.tile_lists(mask, bm, bn, per=per)
        assert idx.equal(want_idx) and cnt.equal(want_cnt), (b, h, sq, sk)
        assert (want_cnt[..., 0] > 0).any() and (want_cnt[..., 1] > 0).any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("per", ["query", "key"])
def test_tile_lists_on_gpu(per):
    """`tile_lists` on the GPU (its kernels compiled, launched directly from the second call)
    equals the tensor-operation reading, with more tiles a list than one chunk of the lists
    kernel holds (1250 key tiles a query block): a band, random holes and a ragged last tile."""
    from flashgen.kernels import block_mask

    gen = torch.Generator().manual_seed(33)
    b, h, sq, sk, bm, bn = 2, 1, 300, 20000, 16, 16
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    mask = (j <= 60 * i + 16).expand(b, h, sq, sk) & (
        torch.rand(b, h, sq, sk, generator=gen) > 0.001
    )
    mask[1, :, :, 5000:] = True  # whole tiles past the band in one entry
    want_idx, want_cnt = _tile_lists_reference(mask, bm, bn, per)
    for _ in range(2):
        idx, cnt, stride_b, stride_h = block_mask.tile_lists(mask.cuda(), bm, bn, per=per)
        assert idx.cpu().equal(want_idx) and cnt.cpu().equal(want_cnt)
    assert (want_cnt[..., 0] > 0).any() and (want_cnt[..., 1] > 0).any()


def test_block_sparse_walk_is_on_unless_switched_off(monkeypatch):
    """A boolean mask's forward walks the lists by default (and with FLASHGEN_BLOCK_SPARSE=1);
    FLASHGEN_BLOCK_SPARSE=0 reads the mask tile by tile. Both equal float64."""
    from flashgen.kernels import block_mask, fwd

    monkeypatch.setattr(block_mask, "MIN_SCORES", 0)
    q, k, v = _inputs(1, 2, 1, 33, 40, 16, seed=22)
    mask = torch.ones(33, 40, dtype=torch.bool).tril(diagonal=3)
    full = expand_mask(mask, q, k)
    want = ref(*(t.double() for t in (q, k, v)), mask)
    for env, sparse in ((None, True), ("0", False), ("1", True)):
        if env is None:
            monkeypatch.delenv(block_mask.ENV, raising=False)
        else:
            monkeypatch.setenv(block_mask.ENV, env)
        fwd._plans.clear()
        out, _ = forward(q, k, v, causal=False, scale=0.25, config=TILES, mask=full)
        (plan,) = fwd._plans.values()
        assert plan.run.constexprs["BLOCK_SPARSE"] is sparse
        torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("kind,lengths", [("bool", False), ("add", True)])
def test_tuner_checks_the_mask_kernel_itself(direction, kind, lengths, monkeypatch):
    """`flashgen tune` on a mask-tensor spec (one `--pending` lists after a compiled model met
    it) checks and times the kernel with the mask, not the unmasked one: a key-padding mask
    that hides nothing (`flashgen.tune.bench.bench_mask`), with every row valid where the spec
    has lengths too."""
    from flashgen.hardware.costmodel import Shape
    from flashgen.kernels import bwd as bwd_mod
    from flashgen.kernels import fwd as fwd_mod
    from flashgen.tune.bench import bench_mask, check, launcher, make_inputs

    spec = KernelSpec(32, True, "float32", direction, lengths=lengths, attn_mask=kind)
    loaded = []
    for module in (fwd_mod, bwd_mod):
        real = module.load
        monkeypatch.setattr(module, "load", lambda s, real=real: loaded.append(s) or real(s))
    fwd_mod._plans.clear()
    bwd_mod._plans.clear()
    assert check(spec, TILES, Shape(2, 2, 1, 45, 45), "cpu").status == "ok"
    assert spec in loaded  # the mask kernel ran (the bwd check runs no forward)
    q, k, _, _ = make_inputs(spec, Shape(2, 2, 1, 45, 30), "cpu")
    mask = bench_mask(spec, q, k)
    assert mask.shape == (2, 2, 45, 30) and mask.stride()[1:3] == (0, 0)
    assert mask.dtype == (torch.bool if kind == "bool" else torch.float32)
    assert bool(mask.all()) if kind == "bool" else not bool(mask.any())
    assert bench_mask(KernelSpec(32, True, "float32", direction), q, k) is None
    if direction == "fwd":  # what gets timed: the launcher runs the mask kernel too
        loaded.clear()
        fwd_mod._plans.clear()
        launcher(spec, TILES, *make_inputs(spec, Shape(1, 2, 1, 20, 20), "cpu")[:3])()
        assert loaded == [spec]
