"""benchmarks/mha_fuzz.py, the random nn.MultiheadAttention / nn.Transformer* correctness sweep
of the backend, on a few chosen cases: the compiled module matches float64 eager at every
length (outputs and every gradient), replacing its attention where the pass can; and the
harness itself sees a wrong attention. The full sweep (hundreds of seeds) is the script's."""

from __future__ import annotations

import pytest
import repo_scripts

from flashgen.compile.backend import backend

fuzz = repo_scripts.load("benchmarks/mha_fuzz.py", "mha_fuzz_under_test")


def _case(**fields):
    base = dict(
        seed=3, module="mha", batch_first=True, embed=32, heads=2, bias=True, cross=False,
        kvdim=False, extra_kv="none", need_weights=False, attn_mask="none", hint=False,
        kpm="none", pad="right", norm_first=False, train=False, nograd=False, dynamic="true",
    )  # fmt: skip
    return fuzz.Case(**{**base, **fields})


CASES = {
    # cross-attention with keys and values of other widths and additive key padding
    "mha_kdim_vdim_padding": _case(cross=True, kvdim=True, kpm="float", batch_first=False),
    # the fused inference op of two encoder layers, a causal mask built in forward()
    "encoder_fused_causal": _case(
        module="encoder", attn_mask="causal_float", hint=True, nograd=True, norm_first=True
    ),
    # a decoder layer in training mode, a boolean causal tgt_mask and boolean key padding
    "decoder_causal_padding": _case(
        module="decoder_layer",
        attn_mask="causal_bool",
        kpm="bool",
        pad="left",
        train=True,
        dynamic="auto",
        heads=4,
        embed=64,
    ),  # fmt: skip
}


def _run(case):
    return fuzz.run_case(case, lambda: backend(fallback="aot_eager"))


@pytest.mark.parametrize("name", list(CASES))
def test_module_matches_float64_eager(name):
    case = CASES[name]
    rec = _run(case)
    assert rec["error"] is None, rec["error"]
    assert len(rec["calls"]) == len(fuzz.SELF_LENS)
    for call in rec["calls"]:
        assert call["out"] <= fuzz.TOL, (case, call)
        assert case.nograd or (call["grads"] is not None and call["grads"] <= fuzz.TOL), call
    assert rec["replaced"] >= 1 and not rec["kept"], (case, rec["kept"])


def test_a_wrong_attention_is_seen(monkeypatch):
    """The flashgen op's output scaled by 1.01 where the pass replaced the site: the sweep's
    error for the case goes over its tolerance (the harness can fail)."""
    import torch

    from flashgen.compile import backend as backend_module

    real = backend_module.default_op()

    def off(*args):
        return real(*args) * 1.01

    monkeypatch.setattr(backend_module, "default_op", lambda: off)
    rec = _run(CASES["encoder_fused_causal"])
    assert rec["replaced"] >= 1 and rec["error"] is None
    assert max(c["out"] for c in rec["calls"]) > fuzz.TOL
    torch._dynamo.reset()


def test_drawn_cases_are_reproducible():
    for seed in range(60):
        case = fuzz.draw(seed)
        assert fuzz.draw(seed) == case
        assert case.embed % case.heads == 0 and case.embed // case.heads >= 16
    fused = [fuzz.draw(s) for s in range(200)]
    assert any(c.nograd and c.batch_first and c.module.startswith("encoder") for c in fused)
