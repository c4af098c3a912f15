"""Split-KV decode kernels (issue 17) on the CPU interpreter, against float64.

Odd key lengths, GQA (packed query heads) and MHA, head dims 64, 128 and odd ones, query
lengths 1-16, no mask / top-left causal / bottom-right causal offsets, more splits than keys
(empty splits must give no NaN), rows that see no key, one split (the kernel writes the output
itself) and many (the log-sum-exp merge), packed rows spilling into a second row block, and
the routing of `flashgen.attention` to it. Real bf16 and speed are on the GPU
(benchmarks/decode.py; the `gpu` tests). The mask tests are in test_decode_masks.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from decode_cases import check, inputs, ref

from flashgen.hardware import decode as hw
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.kernels import decode
from flashgen.kernels.decode import decode_forward, split_len
from flashgen.ops import attention

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
    q, k, v = inputs(b, hq, hkv, sq, sk, d)
    offset = {"full": None, "top": 0, "br": sk - sq}[mask]
    out, lse = decode_forward(q, k, v, causal_offset=offset, scale=None, config=cfg)
    want, want_lse = ref(q, k, v, offset)
    check(out, lse, want, want_lse, 2e-5)


def test_decode_scale_and_strided_inputs():
    """A non-default scale and K/V that are views of a bigger cache (a static KV cache's
    prefix: strides of the full buffer)."""
    q, k, v = inputs(2, 4, 2, 2, 200, 64, seed=3)
    k, v = k[:, :, :123], v[:, :, :123]
    out, lse = decode_forward(
        q, k, v, causal_offset=121, scale=0.3, config=hw.DecodeConfig(32, 4, 2, 4)
    )
    want, want_lse = ref(q, k, v, 121, scale=0.3)
    check(out, lse, want, want_lse, 2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_decode_16_bit(dtype):
    q, k, v = inputs(1, 8, 2, 1, 333, 128, dtype, seed=1)
    out, lse = decode_forward(q, k, v, causal_offset=332, scale=None)
    want, want_lse = ref(q, k, v, 332)
    assert out.dtype == dtype
    check(out, lse, want, want_lse, 2e-2)


def test_growing_cache_reuses_plan_and_stays_right():
    """One more key per step (a dynamic cache): the bucket's plan is reused, results exact."""
    q, k, v = inputs(1, 4, 2, 1, 70, 32, seed=2)
    cfg = hw.DecodeConfig(16, 4, 2, 4)
    for sk in (64, 65, 66, 70):
        out, lse = decode_forward(
            q, k[:, :, :sk], v[:, :, :sk], causal_offset=sk - 1, scale=None, config=cfg
        )
        check(out, lse, *ref(q, k[:, :, :sk], v[:, :, :sk], sk - 1), 2e-5)


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
        q, k, v = inputs(1, 4, 2, sq, 45, 32, seed=sq)
        q.requires_grad_()
        out = attention(q, k, v, causal=True, causal_align="bottom_right")
        want, _ = ref(q.detach(), k, v, 45 - sq)
        torch.testing.assert_close(out.detach().double(), want, atol=2e-5, rtol=2e-5)
        out.sum().backward()
        assert not q.grad.isnan().any()
    assert calls == [1, 16]
    monkeypatch.setenv("FLASHGEN_DECODE", "0")
    attention(*inputs(1, 4, 2, 1, 45, 32), causal=False)
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
    q, k, v = (t.cuda() for t in inputs(2, hq, hkv, 1, 4099, d, torch.bfloat16))
    out, lse = decode_forward(q, k, v, causal_offset=4098, scale=None)
    want, want_lse = ref(q.cpu(), k.cpu(), v.cpu(), 4098)
    check(out.cpu(), lse.cpu(), want, want_lse, 2e-2)


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
    q, k, v = inputs(b, hq, hkv, sq, sk, d)
    offset = {"full": None, "top": 0, "br": sk - sq}[mask]
    out, lse = decode_forward(q, k, v, causal_offset=offset, scale=None, config=cfg)
    check(out, lse, *ref(q, k, v, offset), 2e-5)


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
    q, k, v = inputs(1, 4, 2, 1, 500, 64, seed=5)
    out, lse = decode_forward(q, k, v, causal_offset=None, scale=None,
                              config=hw.DecodeConfig(16, 4, 2, 7))  # fmt: skip
    check(out, lse, *ref(q, k, v), 2e-5)
