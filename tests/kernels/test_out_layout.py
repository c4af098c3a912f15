"""The forward output's layout (flashgen.kernels.layout): dense, its strides in q's dimension order,
as SDPA's backends give it, so that for a q laid out as [B, S, H, D] in memory (a model's
`view(B, S, H, D).transpose(1, 2)`) the model's `transpose(1, 2).reshape(B, S, H * D)` back is a
view and a compiled graph has no copy there. Every forward path writes at
the output's strides (the pointer kernel, the TMA kernels, decode's merge, bottom-right
alignment, the padded rows' fill) and the ops' fake functions give the same strides, which
Inductor asserts at run time. Values against float64, gradients through the layout too."""

from __future__ import annotations

import pytest
import torch

from flashgen.hardware.decode import DecodeConfig
from flashgen.kernels.decode import decode_forward
from flashgen.kernels.layout import new_out
from flashgen.kernels.reference import attention_ref
from flashgen.ops import attention


def _bshd(b, h, s, d, gen, device, dtype=torch.float32):
    """[B, S, H, D] storage viewed as [B, H, S, D], as models make q."""
    return torch.randn(b, s, h, d, generator=gen).to(device, dtype).transpose(1, 2)


def _is_bshd(t) -> bool:
    return t.transpose(1, 2).is_contiguous()


# (q as a model makes it, the output's strides): dense, in q's dimension order
ORDER_CASES = {
    "contiguous": (torch.empty(2, 3, 5, 8), (120, 40, 8, 1)),
    "bshd": (torch.empty(2, 5, 3, 8).transpose(1, 2), (120, 8, 24, 1)),
    "bshd, one batch entry": (torch.empty(1, 5, 3, 8).transpose(1, 2), (120, 8, 24, 1)),
    "bshd, rows sliced off": (torch.empty(2, 7, 3, 8).transpose(1, 2)[:, :, 2:], (120, 8, 24, 1)),
    "packed qkv [B, S, 3, H, D]": (
        torch.empty(2, 5, 3, 3, 8)[:, :, 0].transpose(1, 2),
        (120, 8, 24, 1),
    ),
    "head-dim slice": (torch.empty(2, 3, 5, 16)[..., :8], (120, 40, 8, 1)),
    "heads outermost": (torch.empty(3, 2, 5, 8).transpose(0, 1), (40, 80, 8, 1)),
    "batch broadcast": (torch.empty(1, 3, 5, 8).expand(2, -1, -1, -1), (120, 40, 8, 1)),
}


@pytest.mark.parametrize("name", list(ORDER_CASES))
def test_new_out_is_dense_in_q_dimension_order(name):
    q, strides = ORDER_CASES[name]
    out = new_out(q)
    assert out.shape == q.shape and out.dtype == q.dtype and out.stride() == strides
    zeros = new_out(q, zeros=True)
    assert zeros.stride() == strides and not zeros.any()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_and_gradients_in_the_bshd_layout(causal, device):
    """GQA, odd lengths: out laid out like q, out and dq/dk/dv against float64."""
    gen = torch.Generator().manual_seed(0)
    q = _bshd(2, 4, 37, 32, gen, device).requires_grad_()
    k = _bshd(2, 2, 37, 32, gen, device).requires_grad_()
    v = _bshd(2, 2, 37, 32, gen, device).requires_grad_()
    out = attention(q, k, v, causal=causal)
    assert _is_bshd(out)
    do = torch.randn(out.shape, generator=gen).to(device)
    out.backward(do)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want, _ = attention_ref(qd, kd, vd, causal=causal)
    want.backward(do.double())
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    for got, ref in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)


def test_padded_rows_fill_and_mask_tensor_in_that_layout(device):
    """Key and query lengths (the kernel stores only the valid rows: the rest of the zero-filled
    output stays zero) and a mask tensor (the portable pointer kernel), both into an output
    laid out like q."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (_bshd(2, 3, 21, 16, gen, device) for _ in range(3))
    lens = torch.tensor([21, 13], device=device)
    out = attention(q, k, v, causal=True, key_lengths=lens, query_lengths=lens)
    assert _is_bshd(out)
    want, _ = attention_ref(q[1:, :, :13].double(), k[1:, :, :13].double(), v[1:, :, :13].double(),
                            causal=True)  # fmt: skip
    torch.testing.assert_close(out[1:, :, :13].double(), want, atol=2e-5, rtol=2e-5)
    assert not out[1, :, 13:].any()  # padded query rows: zeros
    keep = torch.rand(2, 1, 21, 21, generator=gen) > 0.3
    keep[..., 0] = True  # every row sees a key
    out = attention(q, k, v, attn_mask=keep.to(device))
    assert _is_bshd(out)
    s = (q.double() @ k.double().transpose(-1, -2)) * 16**-0.5
    s = s.masked_fill(~keep.to(device), float("-inf"))
    torch.testing.assert_close(out.double(), s.softmax(-1) @ v.double(), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("splits", [1, 3], ids=["final", "merged"])
def test_decode_rows_in_that_layout(splits, device):
    """A short query (decode's kernels): one split writes the output itself, several are merged
    by the combine kernel at the output's strides."""
    gen = torch.Generator().manual_seed(2)
    q = _bshd(2, 4, 3, 32, gen, device)
    k, v = (torch.randn(2, 2, 90, 32, generator=gen).to(device) for _ in range(2))
    out, lse = decode_forward(q, k, v, causal_offset=87, scale=None,
                              config=DecodeConfig(16, 4, 1, splits))  # fmt: skip
    assert _is_bshd(out)
    i = torch.arange(3, device=device)[:, None]
    j = torch.arange(90, device=device)[None, :]
    s = (q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)) * 32**-0.5
    s = s.masked_fill(j > i + 87, float("-inf"))
    want = s.softmax(-1) @ v.double().repeat_interleave(2, 1)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse.double(), s.logsumexp(-1), atol=2e-5, rtol=2e-5)


def test_bottom_right_alignment_in_that_layout(device):
    """More queries than keys, bottom-right: the first rows see no key (zeros), the rest come
    from the forward on q's later rows, copied into an output laid out like q."""
    gen = torch.Generator().manual_seed(3)
    q = _bshd(1, 2, 40, 16, gen, device)
    k, v = (_bshd(1, 2, 30, 16, gen, device) for _ in range(2))
    out = attention(q, k, v, causal=True, causal_align="bottom_right")
    assert _is_bshd(out)
    s = (q.double() @ k.double().transpose(-1, -2)) * 16**-0.5
    i = torch.arange(40, device=device)[:, None]
    j = torch.arange(30, device=device)[None, :]
    s = s.masked_fill(j > i - 10, float("-inf"))
    want = torch.nan_to_num(s.softmax(-1)) @ v.double()
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("layout", ["bshd", "bhsd", "sliced"])
def test_fake_output_strides_match_the_kernels(layout, device):
    """The op's fake (meta) function, which Inductor plans buffers with and then asserts
    against the real output's strides, gives the strides the kernels' output has."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gen = torch.Generator().manual_seed(4)
    if layout == "bshd":
        q = _bshd(2, 4, 24, 32, gen, device)
    elif layout == "bhsd":
        q = torch.randn(2, 4, 24, 32, generator=gen).to(device)
    else:
        q = _bshd(2, 4, 30, 32, gen, device)[:, :, 6:]
    k = v = torch.randn(2, 2, 24, 32, generator=gen).to(device)
    real, _ = torch.ops.flashgen.attention_fwd(q, k, v, True, 32**-0.5)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fake, _ = torch.ops.flashgen.attention_fwd(fq, fk, fv, True, 32**-0.5)
    assert fake.stride() == real.stride()
    assert _is_bshd(real) == (layout != "bhsd")  # (rows sliced off a [B, S, H, D] view: too)


def test_compiled_block_has_no_copy_after_attention(device):
    """A Llama-style block (q from a linear, viewed and transposed; the output transposed back
    and reshaped) compiled with the backend: the attention op's output feeds the output
    projection as a view, with no copy kernel between, and the result matches eager."""
    import torch.nn.functional as F
    from torch._inductor.utils import run_and_get_code

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.kv, self.o = (torch.nn.Linear(64, n, bias=False) for n in (64, 64, 64))

        def forward(self, x):
            b, t, c = x.shape
            q = self.q(x).view(b, t, 4, 16).transpose(1, 2)
            k, v = self.kv(x).view(b, t, 2, 2, 16).permute(2, 0, 3, 1, 4).unbind(0)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return self.o(y.transpose(1, 2).reshape(b, t, c))

    torch.manual_seed(0)
    model = Block().to(device)
    x = torch.randn(2, 24, 64, device=device)
    compiled = torch.compile(model, backend="flashgen")
    with torch.no_grad():
        got, codes = run_and_get_code(compiled, x)
        want = model(x)
    code = "\n".join(codes)
    assert "flashgen.attention_fwd" in code  # the site was replaced
    assert "clone" not in code, code
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
