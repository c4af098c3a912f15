"""Forward kernel against the float64 reference.

Kernels run in Triton's CPU interpreter here (CUDA when present). The interpreter cannot do
bf16 dot products, so on the CPU the bf16 rendering upcasts tiles to fp32
before each tl.dot: the `bf16-interp-fp32dot` cases check the bf16 rendering and its load/store
path, not bf16 tensor-core arithmetic. `test_forward_bf16_gpu` checks real bf16 on a GPU.

The case grid is a representative cross-product (dims x dtypes at one shape, shapes x causal
at one dim, then GQA, strides, configs) so the file stays within a few minutes in the
interpreter.
"""

from __future__ import annotations

import math

import pytest
import torch

from flashgen.core.config import TileConfig
from flashgen.kernels.fwd import forward
from flashgen.kernels.reference import attention_ref, max_abs_err, sdpa_same_dtype, tolerance
from flashgen.kernels.tma import tma_compatible
from flashgen.kernels.validate import check_inputs

HAS_CUDA = torch.cuda.is_available()
BF16_ID = "bf16" if HAS_CUDA else "bf16-interp-fp32dot"
DTYPES = [
    pytest.param(torch.float32, id="f32"),
    pytest.param(torch.float16, id="f16"),
    pytest.param(torch.bfloat16, id=BF16_ID),
]
SMALL = TileConfig(32, 32, 4, 1)


@pytest.fixture(params=["ptr", "tma"])
def kernel_path(request, monkeypatch):
    """Run a test through both kernels: pointer loads and TMA descriptors (see flashgen.kernels.fwd)."""
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "1" if request.param == "tma" else "0")
    return request.param


def make_qkv(b, hq, hkv, sq, sk, d, dtype, device, seed=0, amplitude=1.0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen) * amplitude).to(dtype).to(device)

    return rand(b, hq, sq, d), rand(b, hkv, sk, d), rand(b, hkv, sk, d)


def assert_matches_reference(q, k, v, *, causal, scale=None, config=SMALL):
    """Compare out and lse with float64; half types get twice SDPA's own error plus a floor."""
    out, lse = forward(q, k, v, causal=causal, scale=scale, config=config)
    ref_out, ref_lse = attention_ref(q, k, v, causal=causal, scale=scale)
    b, hq, sq, d = q.shape
    assert out.shape == (b, hq, sq, d) and out.dtype == q.dtype
    # dense, in q's dimension order (flashgen.kernels.layout): here contiguous, or [B, Sq, H, D]
    # for a q laid out so
    bshd = q.stride(1) < q.stride(2) and q.shape[1] > 1 and q.shape[2] > 1
    assert (out.transpose(1, 2) if bshd else out).is_contiguous()
    assert lse.shape == (b, hq, sq) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()

    sdpa_err = None
    if q.dtype != torch.float32:
        sdpa_err = max_abs_err(sdpa_same_dtype(q, k, v, causal=causal, scale=scale), ref_out)
    rtol, atol = tolerance(q.dtype, sdpa_err)
    err = (out.double() - ref_out).abs()
    bound = atol + rtol * ref_out.abs()
    assert (err <= bound).all(), (
        f"out: max err {err.max().item():.3e}, worst excess {(err - bound).max().item():.3e}, "
        f"sdpa err {sdpa_err}"
    )
    lse_err = (lse.double() - ref_lse).abs()
    assert (lse_err <= 1e-4 + 1e-5 * ref_lse.abs()).all(), f"lse: max err {lse_err.max():.3e}"
    return out, lse


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [16, 64, 80, 128, 192, 256], ids=lambda d: f"d{d}")
def test_head_dims_and_dtypes(head_dim, dtype, device, kernel_path):
    """Every dtype at every head dim, including 80 and 192 (padded inside the kernel)."""
    config = TileConfig(16, 16, 4, 1) if head_dim > 128 else SMALL
    q, k, v = make_qkv(1, 2, 2, 37, 45, head_dim, dtype, device)
    assert_matches_reference(q, k, v, causal=True, config=config)


SHAPES = [(1, 1), (1, 37), (37, 1), (37, 37), (37, 127), (127, 37), (127, 127)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_k", SHAPES, ids=[f"q{a}-k{b}" for a, b in SHAPES])
def test_sequence_lengths(seq_q, seq_k, causal, device, kernel_path):
    """Ragged lengths, not multiples of the block, Sq != Sk in both directions."""
    q, k, v = make_qkv(2, 2, 2, seq_q, seq_k, 64, torch.float16, device)
    assert_matches_reference(q, k, v, causal=causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_long_sequence_501(causal, device, kernel_path):
    q, k, v = make_qkv(1, 1, 1, 501, 501, 32, torch.float32, device)
    assert_matches_reference(q, k, v, causal=causal, config=TileConfig(64, 64, 4, 1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hkv", [1, 2], ids=["mqa", "gqa2"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention(hkv, causal, dtype, device, kernel_path):
    """Query head h reads kv head h // (Hq // Hkv), with no copy of K/V."""
    q, k, v = make_qkv(2, 4, hkv, 37, 53, 64, dtype, device)
    assert_matches_reference(q, k, v, causal=causal)


def test_gqa_uses_the_right_kv_head(device):
    """Distinct kv heads: a wrong head mapping would give a clearly wrong answer."""
    q, k, v = make_qkv(1, 4, 2, 20, 20, 32, torch.float32, device)
    v[:, 1] += 10.0
    out, _ = assert_matches_reference(q, k, v, causal=False)
    assert out[:, 2:].mean() > 5.0 > out[:, :2].mean()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_strided_inputs(causal, device, kernel_path):
    """[B, N, H, D].transpose(1, 2) and a head-dim slice of a wider tensor, without copies."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 37, 4, 64, generator=gen).to(device).transpose(1, 2)
    wide = torch.randn(2, 2, 53, 96, generator=gen).to(device)
    k = wide[..., :64]
    v = torch.randn(2, 53, 2, 64, generator=gen).to(device).transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous() and not v.is_contiguous()
    out, _ = assert_matches_reference(q, k, v, causal=causal)
    # q's layout, as SDPA's output takes it: the model's transpose back is a view
    assert out.transpose(1, 2).is_contiguous()


CONFIGS = [
    TileConfig(16, 16, 4, 1),
    TileConfig(16, 64, 4, 2),
    TileConfig(64, 16, 4, 2),
    TileConfig(64, 64, 8, 3),
    TileConfig(128, 32, 4, 2),
]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.short() for c in CONFIGS])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tile_configs(config, causal, device, kernel_path):
    """Block sizes change the causal split (BLOCK_N > BLOCK_M too); results must not."""
    q, k, v = make_qkv(1, 2, 1, 130, 77, 64, torch.float32, device, seed=1)
    assert_matches_reference(q, k, v, causal=causal, config=config)
    q, k, v = make_qkv(1, 1, 1, 45, 140, 64, torch.float32, device, seed=2)
    assert_matches_reference(q, k, v, causal=causal, config=config)


def test_custom_scale_and_peaky_softmax(device):
    """Logits in the hundreds: the running max keeps exp2 in range; the scale is folded in.

    With logits that large fp32 rounding of q.k alone moves single outputs by ~1e-5 absolute,
    so the 1e-4 relative bound is taken against the output's magnitude, not each element.
    """
    q, k, v = make_qkv(1, 2, 2, 70, 70, 64, torch.float32, device, amplitude=4.0)
    for causal, scale in ((True, 0.5), (False, 2.0)):
        out, lse = forward(q, k, v, causal=causal, scale=scale, config=SMALL)
        ref, ref_lse = attention_ref(q, k, v, causal=causal, scale=scale)
        assert ref_lse.max() > 200
        assert max_abs_err(out, ref) <= 1e-4 * ref.abs().max().item()
        assert ((lse.double() - ref_lse).abs() <= 1e-5 * ref_lse.abs() + 1e-4).all()
    assert_matches_reference(q, k, v, causal=False, scale=1e-3)


def test_default_config_and_scale(device):
    """config=None takes the hardware default; scale=None means 1/sqrt(D)."""
    q, k, v = make_qkv(1, 2, 2, 33, 33, 64, torch.float16, device)
    out, lse = forward(q, k, v, causal=False, scale=None)
    ref, ref_lse = attention_ref(q, k, v, causal=False, scale=1 / math.sqrt(64))
    assert max_abs_err(out, ref) < 2e-3
    assert max_abs_err(lse, ref_lse) < 1e-4


def test_tma_only_for_aligned_cuda_tensors(monkeypatch):
    """Auto mode: CPU tensors never take TMA; 16-byte alignment rules are checked per tensor."""
    from flashgen.kernels import fwd

    monkeypatch.delenv("FLASHGEN_FWD_TMA", raising=False)
    q, k, v = make_qkv(1, 2, 2, 8, 8, 64, torch.float16, "cpu")
    assert not fwd.use_tma(q, k, v)
    assert tma_compatible(q)
    assert tma_compatible(q.transpose(1, 2).contiguous().transpose(1, 2))
    assert not tma_compatible(torch.zeros(1, 2, 8, 20, dtype=torch.float16))  # 40-byte rows
    assert not tma_compatible(torch.zeros(1, 2, 8, 80, dtype=torch.float16)[..., 1:65])
    assert not tma_compatible(q[:1].expand(3, -1, -1, -1))  # stride 0
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "1")
    assert fwd.use_tma(q, k, v)


def test_tma_needs_the_output_aligned_too(monkeypatch):
    """Head dim 20 in fp16 sliced from a wider tensor: q, k, v have aligned strides, but the
    contiguous output `forward` writes has 40-byte rows, so no descriptor kernel (as if on a
    TMA GPU)."""
    from flashgen.kernels import fwd, tma

    monkeypatch.delenv("FLASHGEN_FWD_TMA", raising=False)
    monkeypatch.setattr(tma, "_on_tma_device", lambda t: True)
    wide = torch.zeros(1, 2, 8, 32, dtype=torch.float16)
    q = k = v = wide[..., :20]
    assert all(tma_compatible(t) for t in (q, k, v))
    assert not fwd.use_tma(q, k, v)
    q = k = v = wide[..., :24]  # 48-byte rows: aligned
    assert fwd.use_tma(q, k, v)


def test_empty_batch(device):
    q, k, v = make_qkv(0, 2, 2, 5, 5, 32, torch.float32, device)
    out, lse = forward(q, k, v, causal=False, scale=None, config=SMALL)
    assert out.shape == (0, 2, 5, 32) and lse.shape == (0, 2, 5)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 192, 256], ids=lambda d: f"d{d}")
def test_forward_bf16_gpu(head_dim, causal, kernel_path):
    """Real bf16 tensor-core dots (the interpreter can only check the upcast rendering)."""
    config = TileConfig(64, 32, 4, 2) if head_dim > 128 else TileConfig(64, 64, 4, 2)
    for sq, sk in [(1, 37), (127, 127), (501, 263), (263, 501)]:
        q, k, v = make_qkv(2, 4, 2, sq, sk, head_dim, torch.bfloat16, "cuda")
        assert_matches_reference(q, k, v, causal=causal, config=config)


# ---- input validation -------------------------------------------------------------------


def _ok(device="cpu", dtype=torch.float16):
    return make_qkv(1, 4, 2, 8, 8, 32, dtype, device)


def _bad_cases():
    q, k, v = _ok()
    f32 = tuple(t.float() for t in (q, k, v))
    return [
        ("rank", (q[0], k, v), {}, r"q must be 4-D"),
        ("rank-k", (q, k[0], v), {}, r"k must be 4-D"),
        ("head-dim-mismatch", (q, k[..., :16], v), {}, r"same head_dim"),
        (
            "head-dim-small",
            (q[..., :8], k[..., :8], v[..., :8]),
            {},
            r"head_dim must be between 16",
        ),
        (
            "head-dim-large",
            tuple(torch.zeros(1, 2, 4, 264, dtype=torch.float16) for _ in range(3)),
            {},
            r"head_dim must be between 16 and 256",
        ),
        ("int-dtype", (q.to(torch.int32), k, v), {}, r"q must have dtype float16, bfloat16"),
        ("float64", tuple(t.double() for t in (q, k, v)), {}, r"must have dtype float16"),
        ("mixed-dtype", (f32[0], k, v), {}, r"share one dtype"),
        ("heads-not-divisible", (q[:, :3], k, v), {}, r"multiple of k/v heads"),
        ("kv-shape", (q, k, v[:, :, :5]), {}, r"k and v must have the same shape"),
        ("batch", (q, k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1)), {}, r"batch size"),
        ("empty-q", (q[:, :, :0], k, v), {}, r"q must have a sequence length of at least 1"),
        ("empty-kv", (q, k[:, :, :0], v[:, :, :0]), {}, r"k and v must have a sequence length"),
        (
            "last-dim-stride",
            (q.transpose(2, 3).contiguous().transpose(2, 3), k, v),
            {},
            r"q must be contiguous in its last dim",
        ),
        ("scale-zero", (q, k, v), {"scale": 0.0}, r"scale must be a positive"),
        ("scale-negative", (q, k, v), {"scale": -1.0}, r"scale must be a positive"),
        ("scale-nan", (q, k, v), {"scale": float("nan")}, r"scale must be a positive"),
        ("scale-tensor", (q, k, v), {"scale": torch.tensor(0.1)}, r"scale must be a positive"),
        ("causal-not-bool", (q, k, v), {"causal": 1}, r"causal must be a bool"),
        ("not-tensor", ([[1.0]], k, v), {}, r"q must be a torch.Tensor"),
    ]


BAD = _bad_cases()


@pytest.mark.parametrize("args,kwargs,message", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_check_inputs_rejects(args, kwargs, message):
    kwargs = {"causal": False, "scale": None, **kwargs}
    with pytest.raises(ValueError, match=message):
        check_inputs(*args, **kwargs)


def test_check_inputs_rejects_mixed_devices():
    meta = torch.empty(1, 4, 8, 32, device="meta", dtype=torch.float16)
    q, k, v = _ok()
    with pytest.raises(ValueError, match=r"one device"):
        check_inputs(q, meta[:, :2], v, causal=False, scale=None)


def test_check_inputs_accepts_and_returns_scale():
    q, k, v = _ok()
    assert check_inputs(q, k, v, causal=True, scale=None) == pytest.approx(1 / math.sqrt(32))
    assert check_inputs(q, k, v, causal=False, scale=2) == 2.0
    strided = torch.randn(1, 8, 4, 32).transpose(1, 2)
    check_inputs(strided, k.float(), v.float(), causal=False, scale=0.3)
