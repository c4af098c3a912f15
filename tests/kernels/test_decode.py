"""Split-KV decode kernels (issue 17) on the CPU interpreter, against float64.

Odd key lengths, GQA (packed query heads) and MHA, head dims 64, 128 and odd ones, query
lengths 1-16, no mask / top-left causal / bottom-right causal offsets, more splits than keys
(empty splits must give no NaN), rows that see no key, one split (the kernel writes the output
itself) and many (the log-sum-exp merge), packed rows spilling into a second row block, and
the routing of `flashgen.attention` to it. Real bf16 and speed are on the GPU
(benchmarks/decode.py; the `gpu` test at the end).
"""

from __future__ import annotations

import json

import pytest
import torch

from flashgen.hardware import decode as hw
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.kernels import decode
from flashgen.kernels.decode import decode_forward, split_len
from flashgen.kernels.reference import rows_ref, scores_ref
from flashgen.ops import attention


def ref(q, k, v, offset=None, scale=None):
    """float64 attention, query i seeing keys j <= i + offset (all keys when offset is None);
    a row that sees nothing gives zeros and lse +inf."""
    return rows_ref(_offset(scores_ref(q, k, scale=scale), offset), v)


def _offset(s, offset):
    """Scores with keys j > i + offset hidden (none when offset is None)."""
    if offset is None:
        return s
    i = torch.arange(s.shape[2])[:, None]
    j = torch.arange(s.shape[3])[None, :]
    return s.masked_fill(j > i + offset, float("-inf"))


def _inputs(b, hq, hkv, sq, sk, d, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).to(dtype)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


def _check(out, lse, want, want_lse, tol):
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(lse.double(), want_lse, atol=tol, rtol=tol)


CASES = [
    # b, hq, hkv, sq, sk, d, mask ("full", "top", "br"), config (None: the default)
    (2, 8, 2, 1, 301, 64, "full", None),
    (1, 32, 8, 1, 517, 128, "br", hw.DecodeConfig(32, 4, 2, 4)),
    (1, 4, 4, 3, 77, 37, "top", None),  # MHA, odd head dim, top-left causal
    (2, 6, 2, 5, 150, 128, "br", hw.DecodeConfig(16, 4, 2, 4)),
    (1, 2, 1, 16, 40, 64, "br", hw.DecodeConfig(16, 4, 2, 8)),  # splits past the keys: empty
    (1, 2, 1, 7, 3, 80, "br", hw.DecodeConfig(16, 4, 2, 2)),  # rows 0-3 see no key
    (1, 16, 1, 9, 33, 16, "br", hw.DecodeConfig(16, 2, 2, 2)),  # 144 packed rows: 3 row blocks
    (3, 3, 3, 2, 1, 96, "full", None),  # one key
]


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,d,mask,cfg", CASES, ids=lambda c: c.short() if hasattr(c, "short") else None
)
def test_decode_matches_float64(b, hq, hkv, sq, sk, d, mask, cfg):
    q, k, v = _inputs(b, hq, hkv, sq, sk, d)
    offset = {"full": None, "top": 0, "br": sk - sq}[mask]
    out, lse = decode_forward(q, k, v, causal_offset=offset, scale=None, config=cfg)
    want, want_lse = ref(q, k, v, offset)
    _check(out, lse, want, want_lse, 2e-5)


def test_decode_scale_and_strided_inputs():
    """A non-default scale and K/V that are views of a bigger cache (a static KV cache's
    prefix: strides of the full buffer)."""
    q, k, v = _inputs(2, 4, 2, 2, 200, 64, seed=3)
    k, v = k[:, :, :123], v[:, :, :123]
    out, lse = decode_forward(
        q, k, v, causal_offset=121, scale=0.3, config=hw.DecodeConfig(32, 4, 2, 4)
    )
    want, want_lse = ref(q, k, v, 121, scale=0.3)
    _check(out, lse, want, want_lse, 2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_decode_16_bit(dtype):
    q, k, v = _inputs(1, 8, 2, 1, 333, 128, dtype, seed=1)
    out, lse = decode_forward(q, k, v, causal_offset=332, scale=None)
    want, want_lse = ref(q, k, v, 332)
    assert out.dtype == dtype
    _check(out, lse, want, want_lse, 2e-2)


def test_growing_cache_reuses_plan_and_stays_right():
    """One more key per step (a dynamic cache): the bucket's plan is reused, results exact."""
    q, k, v = _inputs(1, 4, 2, 1, 70, 32, seed=2)
    cfg = hw.DecodeConfig(16, 4, 2, 4)
    for sk in (64, 65, 66, 70):
        out, lse = decode_forward(
            q, k[:, :, :sk], v[:, :, :sk], causal_offset=sk - 1, scale=None, config=cfg
        )
        _check(out, lse, *ref(q, k[:, :, :sk], v[:, :, :sk], sk - 1), 2e-5)


def test_split_len_covers_keys():
    for sk in (1, 15, 16, 17, 1000, 65536):
        for splits in (1, 3, 64):
            cfg = hw.DecodeConfig(64, 4, 2, splits)
            n = split_len(sk, cfg)
            assert n % 64 == 0 and n * splits >= sk and n * (splits - 1) < sk + 64 * splits


def test_attention_routes_short_queries_to_decode(monkeypatch):
    """flashgen.attention sends Sq <= 16 to the decode kernels (and Sq = 17 to the forward),
    forward and backward through the same op."""
    calls = []
    real = decode.decode_forward

    def spy(*args, **kwargs):
        calls.append(args[0].shape[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "decode_forward", spy)
    for sq in (1, 16, 17):
        q, k, v = _inputs(1, 4, 2, sq, 45, 32, seed=sq)
        q.requires_grad_()
        out = attention(q, k, v, causal=True, causal_align="bottom_right")
        want, _ = ref(q.detach(), k, v, 45 - sq)
        torch.testing.assert_close(out.detach().double(), want, atol=2e-5, rtol=2e-5)
        out.sum().backward()
        assert not q.grad.isnan().any()
    assert calls == [1, 16]
    monkeypatch.setenv("FLASHGEN_DECODE", "0")
    attention(*_inputs(1, 4, 2, 1, 45, 32), causal=False)
    assert calls == [1, 16]


def test_defaults_fill_the_gpu_and_fit():
    """The heuristic (what runs without a measured config for the bucket)."""
    device = KNOWN_GPUS["nvidia-h200"]
    one = hw.heuristic_config(128, "bfloat16", 1, 8, 4, 1, 65536, device)
    assert one.num_splits * 8 >= device.sm_count  # batch 1: the keys are split
    many = hw.heuristic_config(128, "bfloat16", 64, 8, 4, 1, 2048, device)
    assert many.num_splits == 1  # enough programs already: no merge
    short = hw.heuristic_config(64, "float16", 1, 8, 4, 1, 250, device)  # bucket 256
    assert short.num_splits == 1  # splits never shorter than MIN_KEYS_PER_SPLIT
    for cfg in (one, many, short):
        assert hw.fits(128, "bfloat16", cfg, 16, device)
    assert hw.candidates(256, "float32", 64, 100, device)  # never empty


@pytest.mark.parametrize(
    "field,value", [("block_n", 48), ("num_warps", 3), ("num_stages", 0), ("num_splits", 0)]
)
def test_decode_config_rejects_bad_values(field, value):
    args = {"block_n": 64, "num_warps": 4, "num_stages": 2, "num_splits": 8, field: value}
    with pytest.raises(ValueError, match=field):
        hw.DecodeConfig(**args)


@pytest.mark.gpu
@pytest.mark.parametrize("hq,hkv,d", [(32, 8, 128), (16, 16, 64)])
def test_decode_gpu_bf16(hq, hkv, d):
    q, k, v = (t.cuda() for t in _inputs(2, hq, hkv, 1, 4099, d, torch.bfloat16))
    out, lse = decode_forward(q, k, v, causal_offset=4098, scale=None)
    want, want_lse = ref(q.cpu(), k.cpu(), v.cpu(), 4098)
    _check(out.cpu(), lse.cpu(), want, want_lse, 2e-2)


def test_tuned_configs_file_is_used_and_validated(tmp_path, monkeypatch, caplog):
    """A decode configs file (what flashgen.tune.decode writes) decides its bucket's config;
    a malformed one is ignored with a warning (the heuristic default runs)."""
    device = KNOWN_GPUS["nvidia-h200"]
    rec = {"head_dim": 128, "dtype": "bfloat16", "hkv": 8, "group": 4, "bucket": [1, 65536],
           "config": {"block_n": 32, "num_warps": 8, "num_stages": 4, "num_splits": 16}}  # fmt: skip
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"format": hw.CONFIGS_FORMAT, "version": 1, "records": [rec]}))
    monkeypatch.setenv(hw.CONFIGS_ENV, str(good))
    hw.default_config.cache_clear()
    assert hw.default_config(128, "bfloat16", 1, 8, 4, 1, 40000, device) == hw.DecodeConfig(
        32, 8, 4, 16
    )
    other = hw.default_config(128, "bfloat16", 2, 8, 4, 1, 40000, device)  # another bucket
    assert other != hw.DecodeConfig(32, 8, 4, 16)
    bad = tmp_path / "bad.json"
    rec["config"]["num_splits"] = 1000
    bad.write_text(json.dumps({"format": hw.CONFIGS_FORMAT, "version": 1, "records": [rec]}))
    monkeypatch.setenv(hw.CONFIGS_ENV, str(bad))
    hw.default_config.cache_clear()
    assert hw.default_config(128, "bfloat16", 1, 8, 4, 1, 40000, device).num_splits <= 256
    assert "ignoring decode configs file" in caplog.text
    hw.default_config.cache_clear()


def test_tune_decode_cli_rejects_bad_arguments():
    from flashgen.tune.decode import main

    with pytest.raises(SystemExit, match="multiple"):
        main(["--heads", "32/5", "--out", "x.json"])
    with pytest.raises(SystemExit, match="integers"):
        main(["--batch", "a", "--out", "x.json"])


@pytest.mark.gpu
def test_tune_decode_bucket_on_gpu():
    from flashgen.tune.decode import tune_bucket

    rec = tune_bucket(1, 8, 2, 4096, 64, "bfloat16", budget_s=5.0)
    assert rec is not None and rec["time_ms"] > 0
    hw.DecodeConfig(**rec["config"])


def test_flashgen_kernel_prints_decode_family(capsys):
    """`flashgen kernel --family decode` prints the generated decode source (readable kernels)."""
    import argparse

    from flashgen.kernels import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(
        ["--head-dim", "80", "--causal", "--dtype", "bfloat16", "--family", "decode"]
    )
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    assert "# Kernel: attn_decode_d80_causal_bf16" in out and "def attn_decode_combine" in out
    assert "CAUSAL_OFFSET" in out
    args = parser.parse_args(["--head-dim", "80", "--family", "decode", "--direction", "bwd"])
    assert cli.run(args) == 2


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,d,mask,cfg",
    [c for c in CASES if (c[5] * 4) % 16 == 0],  # TMA needs 16-byte strides
    ids=lambda c: c.short() if hasattr(c, "short") else None,
)
def test_decode_tma_build_matches_float64(b, hq, hkv, sq, sk, d, mask, cfg, monkeypatch):
    """The K/V-through-descriptors build (FLASHGEN_DECODE_TMA=1; the interpreter emulates TMA,
    zero fill past the keys included)."""
    monkeypatch.setenv("FLASHGEN_DECODE_TMA", "1")
    q, k, v = _inputs(b, hq, hkv, sq, sk, d)
    offset = {"full": None, "top": 0, "br": sk - sq}[mask]
    out, lse = decode_forward(q, k, v, causal_offset=offset, scale=None, config=cfg)
    _check(out, lse, *ref(q, k, v, offset), 2e-5)


def _masked_ref(q, k, v, mask, offset=None):
    """float64 attention with SDPA's attn_mask (bool: True visible; float: added to the scaled
    scores) and the causal offset; rows that see no key give zeros and lse +inf."""
    s = scores_ref(q, k)
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return rows_ref(_offset(s, offset), v)


def _hf_cache_mask(b, sq, sk, pos, pad_left):
    """HF generate()'s KV-cache mask, [B, 1, Sq, Sk] bool: query i (at position pos + i) sees
    keys j <= pos + i, minus each entry's first pad_left[b] keys (left padding); keys past the
    current position (a static cache's empty slots) are masked."""
    i = torch.arange(sq)[:, None] + pos
    j = torch.arange(sk)[None, :]
    causal = (j <= i)[None, None]
    pad = torch.arange(sk)[None, :] >= torch.tensor(pad_left)[:, None]
    return causal & pad[:, None, None, :]


MASK_CASES = [
    # b, hq, hkv, sq, sk, d, config, mask kind
    (2, 8, 2, 1, 301, 64, hw.DecodeConfig(32, 4, 2, 4), "hf"),  # static cache: slots past pos
    (3, 4, 4, 3, 77, 37, None, "hf"),  # MHA, odd head dim, 3 query rows
    (1, 16, 1, 9, 133, 16, hw.DecodeConfig(16, 2, 2, 2), "heads"),  # a mask per head: 3 row blocks
    (2, 6, 2, 5, 150, 128, hw.DecodeConfig(16, 4, 2, 16), "add"),  # additive, empty splits
]


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,d,cfg,kind", MASK_CASES,
    ids=lambda c: c.short() if hasattr(c, "short") else None,
)  # fmt: skip
@pytest.mark.parametrize("causal", [False, True], ids=["nocausal", "causal"])
def test_decode_reads_attn_mask(b, hq, hkv, sq, sk, d, cfg, kind, causal):
    """SDPA's attn_mask read by the decode kernels (what HF generate()'s sites pass): a KV
    cache's causal-and-padding mask broadcast over heads, a mask per head, an additive one;
    a left-padded entry whose rows see no key at all gives zeros, never NaN."""
    from flashgen.kernels.validate import expand_mask

    q, k, v = _inputs(b, hq, hkv, sq, sk, d, seed=sk)
    gen = torch.Generator().manual_seed(7)
    if kind == "hf":
        pad = [0, sk, 3][:b]  # entry 1 is padding only: its rows see no key
        mask = _hf_cache_mask(b, sq, sk, sk // 2, pad)
    elif kind == "heads":
        mask = torch.rand(b, hq, sq, sk, generator=gen) > 0.3
    else:
        mask = torch.randn(b, 1, sq, sk, generator=gen)
        mask[..., 5:9] = float("-inf")
    offset = 0 if causal else None
    out, lse = decode_forward(
        q, k, v, causal_offset=offset, scale=None, config=cfg, mask=expand_mask(mask, q, k)
    )
    _check(out, lse, *_masked_ref(q, k, v, mask, offset), 2e-5)


def test_attention_with_attn_mask_runs_decode(monkeypatch):
    """flashgen.attention(attn_mask=...) with a short query runs the decode kernels (HF's
    generate() sites under the compile backend), a longer one the forward kernels."""
    calls = []
    real = decode.decode_forward

    def spy(*args, **kwargs):
        calls.append(kwargs.get("mask") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "decode_forward", spy)
    for sq in (1, 17):
        q, k, v = _inputs(2, 4, 2, sq, 50, 32, seed=sq)
        mask = _hf_cache_mask(2, sq, 50, 50 - sq, [0, 4])
        out = attention(q, k, v, attn_mask=mask)
        want, _ = _masked_ref(q, k, v, mask)
        torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    assert calls == [True]


@pytest.mark.gpu
def test_decode_attn_mask_gpu_bf16():
    q, k, v = (t.cuda() for t in _inputs(2, 32, 8, 1, 4099, 128, torch.bfloat16))
    mask = _hf_cache_mask(2, 1, 4099, 3000, [0, 17])
    out = attention(q, k, v, attn_mask=mask.cuda())
    want, _ = _masked_ref(q.cpu(), k.cpu(), v.cpu(), mask)
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)


def test_near_default_short_list():
    """The tuner's short list: holds the heuristic, only configs that fit, splits never shorter
    than MIN_KEYS_PER_SPLIT, and split counts that fill whole waves of resident programs."""
    device = KNOWN_GPUS["nvidia-h200"]
    got = hw.near_default(128, "bfloat16", 64, 8, 4, 1, 8192, device)
    assert hw.heuristic_config(128, "bfloat16", 64, 8, 4, 1, 8192, device) in got
    assert all(hw.fits(128, "bfloat16", c, 16, device) for c in got)
    assert all(c.num_splits <= 8192 // hw.MIN_KEYS_PER_SPLIT for c in got)
    # 512 programs (64 x 8 kv heads) on 132 SMs x 3 resident (n64, 3 stages): 396 slots; two
    # whole waves are 792 = 512 x 1.55: no integer split count, so 1 (the heuristic) stays.
    tile = hw.DecodeConfig(64, 4, 3, 1)
    assert hw.programs_per_sm(128, "bfloat16", tile, 16, device) == 3
    one = hw.near_default(128, "bfloat16", 1, 8, 4, 1, 65536, device)
    # batch 1: 8 programs; 396 slots: 49 splits fill one wave, 99 two.
    assert {hw.DecodeConfig(64, 4, 3, 49), hw.DecodeConfig(64, 4, 3, 99)} <= set(one)
    assert hw.near_default(256, "float32", 1, 1, 1, 1, 100, device)  # never empty


def test_decode_non_power_of_two_splits():
    """Split counts that fill whole waves are not powers of two: the merge masks the rest."""
    q, k, v = _inputs(1, 4, 2, 1, 500, 64, seed=5)
    out, lse = decode_forward(q, k, v, causal_offset=None, scale=None,
                              config=hw.DecodeConfig(16, 4, 2, 7))  # fmt: skip
    _check(out, lse, *ref(q, k, v), 2e-5)


def test_repeated_signature_skips_prepare_and_reads_new_values(monkeypatch):
    """A static cache's decoding steps repeat one call signature: the second call takes the
    cached `_Call` (no `_prepare`), yet computes from its own tensors (new values, a new mask
    at a new address); an un-expanded [B, 1, 1, Sk] mask is read with stride 0 over heads."""
    prepared = []
    real = decode._prepare

    def spy(*args, **kwargs):
        prepared.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "_prepare", spy)
    cfg = hw.DecodeConfig(16, 4, 2, 4)
    for seed in (11, 12):
        q, k, v = _inputs(2, 4, 2, 1, 90, 32, seed=seed)
        mask = _hf_cache_mask(2, 1, 90, 60 + seed, [0, seed - 8])
        out, lse = decode_forward(q, k, v, causal_offset=None, scale=None, config=cfg, mask=mask)
        _check(out, lse, *_masked_ref(q, k, v, mask), 2e-5)
    assert len(prepared) == 1


def test_decode_mask_checked_once_per_signature():
    """The raw mask is checked (`expand_mask`): a mask that does not broadcast is refused."""
    q, k, v = _inputs(1, 4, 2, 1, 40, 32)
    with pytest.raises(ValueError, match="does not broadcast"):
        decode_forward(q, k, v, causal_offset=None, scale=None, mask=torch.ones(1, 3, 1, 40) > 0)


def _finite_min_mask(b, sq, sk, dtype):
    """HF-style additive mask [b, 1, sq, sk]: 0 / finfo(dtype).min at random, some -inf; batch 1
    carries finfo.min on every key (rows PyTorch averages over), -inf among them on row 0 (those
    keys stay hidden), and batch 0's row 1 (if any) is -inf everywhere (zeros)."""
    gen = torch.Generator().manual_seed(5)
    low = torch.finfo(dtype).min
    m = torch.zeros(b, 1, sq, sk).masked_fill(torch.rand(b, 1, sq, sk, generator=gen) > 0.6, low)
    m = m.masked_fill(torch.rand(b, 1, sq, sk, generator=gen) > 0.9, float("-inf"))
    m[1] = low
    m[1, :, 0, 1::4] = float("-inf")
    if sq > 1:
        m[0, :, 1] = float("-inf")
    return m.to(dtype)


@pytest.mark.parametrize(
    "sq,cfg", [(1, hw.DecodeConfig(16, 4, 2, 4)), (3, hw.DecodeConfig(16, 4, 2, 1)),
               (3, hw.DecodeConfig(16, 4, 2, 7))],
    ids=["splits4", "final", "splits7"],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32mask", "bf16mask"])
@pytest.mark.parametrize("causal", [False, True], ids=["nocausal", "causal"])
def test_decode_finite_min_bias_rows_average(sq, cfg, dtype, causal):
    """HF's finfo.min additive mask: a row whose visible keys all carry it averages their values
    as PyTorch's softmax does (the kernel used to overflow finfo.min * log2(e) to -inf and
    return zeros); with several splits of unequal key counts (150 keys in splits of 48) the
    merge weighs them by count, so the result is the mean over all the row's keys. Such rows get
    lse = +inf (as the forward kernel gives them); an all -inf row gives zeros."""
    b, sk = 2, 150
    q, k, v = _inputs(b, 4, 2, sq, sk, 32, seed=3)
    mask = _finite_min_mask(b, sq, sk, dtype)
    offset = 0 if causal else None
    out, lse = decode_forward(q, k, v, causal_offset=offset, scale=None, config=cfg, mask=mask)
    want, want_lse = _masked_ref(q, k, v, mask, offset)
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    assert out[1].abs().sum() > 0  # batch 1's rows are means, not zeros
    hidden = want_lse < -1e30  # rows whose scores all sit near finfo.min
    assert hidden[1].all()
    assert torch.isinf(lse[hidden]).all() and (lse[hidden] > 0).all()
    torch.testing.assert_close(lse.double()[~hidden], want_lse[~hidden], atol=2e-5, rtol=1e-4)


@pytest.mark.gpu
def test_decode_finite_min_bias_gpu_bf16():
    """The finfo.min rows on the GPU (bf16 inputs, a float32 HF mask, 8 splits of unequal key
    counts): means where PyTorch averages, zeros where every key is -inf, no NaN."""
    q, k, v = _inputs(2, 32, 8, 1, 1030, 128, torch.bfloat16, seed=9)
    mask = _finite_min_mask(2, 1, 1030, torch.float32)
    cfg = hw.DecodeConfig(64, 4, 3, 8)
    out, lse = decode_forward(
        q.cuda(), k.cuda(), v.cuda(), causal_offset=None, scale=None, config=cfg, mask=mask.cuda()
    )
    want, _ = _masked_ref(q, k, v, mask)
    assert not out.isnan().any()
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
    assert torch.isinf(lse[1].cpu()).all()
