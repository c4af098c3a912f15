"""benchmarks/pattern_fuzz.py, the random-model correctness sweep of the backend, on a few
seeds: every generated module compiles, and the compiled model matches float64 eager at every
length (forward and gradients), replacing its attention where the pass proves it. The full
sweep (hundreds of seeds) is the script's; these keep it and the pass honest in CI."""

from __future__ import annotations

import dataclasses

import pytest
import repo_scripts

from flashgen.compile.backend import backend

fuzz = repo_scripts.load("benchmarks/pattern_fuzz.py", "pattern_fuzz_under_test")


def _case(**fields):
    """A drawn case with some fields set (a spelling the test must cover); values of the keys'
    head dim unless `vdim` is given, its dropout (if any) in eval mode unless `train` is, no
    per-head factor unless `head_scale` is."""
    fixed = {"vdim": fuzz.D, "train": False, "head_scale": False}
    return dataclasses.replace(fuzz.draw(0), **{**fixed, **fields})


CASES = {
    # a two-sided band written with abs(j - i) and ALiBi before a `where` (both once unmatched)
    "abs_band_alibi_where": _case(
        style="manual", gqa="none", past="none", struct="two_sided", build="offset", pad="none",
        apply="where", fill="-1e9", score="mul", softcap=False, alibi="relative",
        softmax="method", dynamic="true",
    ),
    # HF's padded decoder batch through SDPA: causal & keys kept, left padding, automatic dynamic
    "sdpa_causal_left_padding": _case(
        style="sdpa", gqa="sdpa", past="none", struct="causal", build="arange", pad="left",
        apply="bool", fill="-inf", score="div_sqrt", softcap=False, alibi="none",
        softmax="method", dynamic="auto",
    ),
    # a KV cache's bottom-right causal mask from a sliced buffer, finite fill, float32 softmax
    "kv_cache_buffer": _case(
        style="manual", gqa="expand", past="vary", struct="causal", build="buffer", pad="none",
        apply="masked_fill", fill="finfo_min", score="prescale", softcap=False, alibi="none",
        softmax="float32", dynamic="auto",
    ),
    # a softcapped window with right padding (finite fill: read as a tensor), static shapes
    "softcap_window_padding": _case(
        style="manual", gqa="repeat_interleave", past="none", struct="window", build="tril",
        pad="right", apply="hf_additive", fill="finfo_min", score="einsum", softcap=True,
        alibi="none", softmax="torch", dynamic="false",
    ),
    # GQA by repeat_interleave under dynamic=True leaves q's head count a symbol (2 * s) beside
    # the ALiBi slopes' constant 4 heads: equal by a guard on the head count (once refused)
    "alibi_symbolic_heads": _case(
        style="sdpa", gqa="repeat_interleave", past="fixed", struct="none", build="arange",
        pad="none", apply="where", fill="finfo_min", score="prescale", softcap=False,
        alibi="key", softmax="method", dynamic="true", dropout="functional",
    ),
    # the same with an additive causal mask of the slopes' 4 heads as SDPA's attn_mask
    "mask_symbolic_heads": _case(
        style="sdpa", gqa="repeat_interleave", past="none", struct="causal", build="arange",
        pad="none", apply="hf_additive", fill="finfo_min", score="prescale", softcap=False,
        alibi="key", softmax="torch", dynamic="true",
    ),
    # latent attention (values of another head dim than the keys', DeepSeek's) by hand, with
    # right padding under dynamic=True: the op pads the values to the keys' width
    "latent_values_padding": _case(
        style="manual", gqa="expand", past="none", struct="causal", build="arange", pad="right",
        apply="hf_where", fill="finfo_min", score="div_sqrt", softcap=False, alibi="none",
        softmax="float32", dynamic="true", vdim=24,
    ),
    # attention dropout in training mode (nn.Dropout, p 0.25) beside right padding with HF's
    # finite fill (BERT's eager attention: the padding read one row, per key) under automatic
    # dynamic shapes: compared given the mask the kernels drew
    "training_dropout_padding": _case(
        style="manual", gqa="none", past="none", struct="none", build="arange", pad="right",
        apply="hf_where", fill="finfo_min", score="div_sqrt", softcap=False, alibi="none",
        softmax="method", dynamic="auto", dropout="module", train=True,
    ),
    # a learned factor per head (Swin v2's logit scale) inside a softcap, GQA, left padding,
    # dynamic=True: the op gets q times the factor
    "head_scale_softcap_padding": _case(
        style="manual", gqa="repeat_interleave", past="fixed", struct="causal", build="tril",
        pad="left", apply="masked_fill", fill="finfo_min", score="mul", softcap=True, alibi="none",
        softmax="method", dynamic="true", head_scale=True,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_generated_model_matches_float64_eager(name):
    case = CASES[name]
    rec = fuzz.run_case(case, lambda: backend(fallback="aot_eager"))
    assert rec["error"] is None, f"{fuzz.source(case)}\n{rec['error']}"
    assert len(rec["calls"]) == len(fuzz.QLENS)
    for call in rec["calls"]:
        assert call["out"] <= 1.0, (fuzz.source(case), call)
        assert call["grads"] is not None and call["grads"] <= 1.0, (fuzz.source(case), call)
    assert rec["replaced"] >= 1 and not rec["skips"], (fuzz.source(case), rec["skips"])


def test_drawn_cases_are_reproducible_and_their_sources_compile():
    for seed in range(40):
        case = fuzz.draw(seed)
        assert fuzz.draw(seed) == case
        compile(fuzz.source(case), f"<case {seed}>", "exec")  # valid Python for every draw


def test_visible_rows_follow_the_case_definition():
    """`visible` (what the comparison keeps) from the definition: causal with left padding
    hides the first rows of the padded entry, a window never hides a row on its own."""
    torch = pytest.importorskip("torch")
    case = _case(struct="causal", pad="left", past="none")
    q, k, v, pad = fuzz.inputs(case, 6, 6, 0)
    seen = fuzz.visible(case, 6, 6, pad)[:, 0, :, 0]
    assert seen[0].all() and seen[1].tolist() == [False, False, False, True, True, True]
    case = _case(struct="window", pad="none", past="none")
    assert bool(fuzz.visible(case, 6, 6, None).all())
    assert torch.equal(fuzz.inputs(case, 4, 7, 3)[0], fuzz.inputs(case, 4, 7, 3)[0])
