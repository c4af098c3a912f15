"""benchmarks/op_fuzz.py, random `flashgen.attention` calls with their arguments combined, on a
few dozen seeds: every case matches the float64 reference or is refused with a ValueError that
names the argument. The reference is checked against SDPA where SDPA has the same semantics,
and the sweep is shown to catch a wrong answer. The full sweep (thousands of seeds) is the
script's."""

from __future__ import annotations

import random

import pytest
import repo_scripts
import torch
import torch.nn.functional as F

import flashgen

fuzz = repo_scripts.load("benchmarks/op_fuzz.py", "op_fuzz_under_test")


def test_a_run_of_seeds_matches_float64():
    """Seeds 0-39: plain, causal both ways, windows, softcap, ALiBi, masks, lengths, dropout,
    sinks, compiled and packed calls and refusals among them (run_case raises on any
    mismatch)."""
    lines = [fuzz.run_case(seed) for seed in range(40)]
    assert any(line.startswith("refused") for line in lines)
    assert any("[varlen" in line for line in lines)
    assert any("compile=True" in line for line in lines)


def _first(predicate) -> int:
    """The first seed whose draw satisfies `predicate`, not refused and, unless the predicate
    asks for an SDPA backend, running flashgen's kernels."""

    def runs(c):
        return not c["refused"] and predicate(c) and (
            c["impl"] in (None, "flashgen") or predicate({**c, "impl": None}) is False
        )  # fmt: skip

    return next(s for s in range(20000) if runs(fuzz.draw(random.Random(s))))


COMBINED = {
    # softcap as an argument of a compiled function (failed the compile before 838c985)
    "compiled_softcap": lambda c: c["compile"] and c["softcap"],
    "window_softcap_left_padding_dropout": lambda c: (
        c["window"] and c["softcap"] and c["lengths"] and c["lengths"][0] == "left" and c["dropout"]
    ),
    "bottom_right_window_mask_dropout": lambda c: (
        c["align"] == "bottom_right" and c["window"] and c["mask"] and c["dropout"]
    ),
    # finfo.min on every visible key of some rows, beside a sink (zeros) or not (their mean)
    "fill_beside_sinks": lambda c: c["mask"] and c["mask"][0] == "fill" and c["sinks"] is not None,
    "fill_with_grad": lambda c: c["mask"] and c["mask"][0] == "fill" and c["grad"],
    "alibi_per_entry_sinks_grad": lambda c: c["alibi"] == "batch" and c["sinks"] and c["grad"],
    "values_of_another_dim_compiled": lambda c: c["dv"] != c["d"] and c["compile"],
    "varlen_compiled_with_rows_of_no_sequence": lambda c: (
        c["varlen"] and c["compile"] and c["varlen"][2]
    ),
    "varlen_window_softcap_gqa": lambda c: (
        c["varlen"] and c["window"] and c["softcap"] and c["group"] > 1
    ),
    # an SDPA backend forced on a call without extras (the CPU has SDPA's flash kernel)
    "sdpa_forced_plain": lambda c: (
        c["impl"] == "sdpa_flash"
        and not c["varlen"]
        and not any(c[n] for n in ("window", "softcap", "alibi", "mask", "lengths", "dropout"))
        and c["sinks"] is None
        and c["align"] == "top_left"
        and c["dv"] == c["d"]
    ),
    "frozen_keys_fused_qkv_layout": lambda c: (
        c["grad"] and c["needs"] == "q" and c["layout"] == "qkv" and not c["varlen"]
    ),
    "decode_over_a_long_cache": lambda c: c["sq"] <= 16 and c["sk"] >= 100 and not c["varlen"],
    # ALiBi beside sinks where the aligned plan drops rows (more queries than keys) or keys (a
    # window): the lse the sinks read was the plan's, off by slope * (start - skip), until
    # aligned._alibi_shift
    "bottom_right_rows_dropped_alibi_sinks": lambda c: (
        c["align"] == "bottom_right" and c["alibi"] and c["sinks"] is not None and c["sq"] > c["sk"]
    ),
    "bottom_right_keys_dropped_alibi_sinks": lambda c: (
        c["align"] == "bottom_right"
        and c["alibi"]
        and c["sinks"] is not None
        and isinstance(c["window"], int)
        and c["sk"] - c["sq"] > c["window"]
        and c["sq"] > 16
    ),
}


@pytest.mark.parametrize("name", list(COMBINED))
def test_cases_that_combine_the_most(name):
    line = fuzz.run_case(_first(COMBINED[name]))
    assert line.startswith("worst"), line  # compared, not declined


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_rows_under_finfo_min_have_no_gradient_as_documented(dtype):
    """float16's finfo.min (-65504, which does not absorb the scores) and float32's (which
    does) under every key of one row: the op gives that row the softmax of its scores (float32:
    the values' mean) but no gradient, as `attention` documents and `reference` encodes (SDPA
    would give q and k one there); the other rows match with their gradients."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 16, generator=gen).to(dtype).requires_grad_() for _ in "qkv")
    mask = torch.zeros(1, 1, 6, 6, dtype=dtype)
    mask[..., 2, :] = torch.finfo(dtype).min
    out = flashgen.attention(q, k, v, attn_mask=mask)
    c = {"batch": 1, "sq": 6, "sk": 6, "lengths": None}
    kw = {"causal": False, "causal_align": "top_left", "scale": None, "window": None,
          "softcap": None, "attn_mask": mask.double()}  # fmt: skip
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = fuzz.reference(*leaves, c, kw, None, torch)
    tol = 1e-2 if dtype == torch.float16 else 1e-4
    torch.testing.assert_close(out.double(), want.detach(), atol=tol, rtol=tol)
    if dtype == torch.float32:  # an absorbing fill: the row is the values' mean
        torch.testing.assert_close(
            out[0, :, 2].double(), v[0, :].double().mean(-2), atol=tol, rtol=tol
        )
    g = torch.randn(out.shape, generator=gen)
    got = torch.autograd.grad(out, (q, k, v), g.to(dtype))
    exp = torch.autograd.grad(want, leaves, g.double())
    assert not got[0][0, :, 2].any()  # no gradient for the hidden row
    for a, b in zip(got, exp, strict=True):
        torch.testing.assert_close(a.double(), b, atol=5 * tol, rtol=5 * tol)


def test_float16_inputs():
    """Seeds 0-11 with float16 inputs (the kernels' 16-bit loads and products), at float16's
    tolerance."""
    for seed in range(12):
        fuzz.run_case(seed, dtype_name="float16")


def test_every_refusal_names_its_argument():
    """One seed for each refusal the sweep draws: the call raises ValueError naming it."""
    found = {}
    for seed in range(5000):
        c = fuzz.draw(random.Random(seed))
        if c["refused"] and c["refused"] not in found:
            found[c["refused"]] = seed
    assert len(found) == 8, found
    for what, seed in found.items():
        line = fuzz.run_case(seed)
        assert line.startswith("refused"), (what, line)


def _sdpa_ref(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"causal": True},
        {"scale": 0.3},
        {"mask": "bool"},
        {"mask": "add"},
        {"causal": True, "group": 2},
    ],
    ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()) or "plain",
)
def test_the_reference_is_sdpa_where_sdpa_has_the_same_semantics(kw):
    """`reference` against float64 SDPA on what both express (no extras, causal top-left, a
    scale, a boolean or additive mask whose rows each see a key, GQA)."""
    gen = torch.Generator().manual_seed(0)
    group = kw.get("group", 1)
    q = torch.randn(2, 2 * group, 9, 16, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 13, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    c = {"batch": 2, "sq": 9, "sk": 13, "lengths": None}
    args = {"causal": kw.get("causal", False), "causal_align": "top_left",
            "scale": kw.get("scale"), "window": None, "softcap": None}  # fmt: skip
    sdpa = {"is_causal": args["causal"], "scale": args["scale"], "enable_gqa": group > 1}
    if kw.get("mask") == "bool":
        mask = torch.rand(2, 1, 9, 13, generator=gen) > 0.4
        mask[..., 0] = True
        args["attn_mask"] = sdpa["attn_mask"] = mask
    elif kw.get("mask") == "add":
        args["attn_mask"] = sdpa["attn_mask"] = torch.randn(1, 2, 9, 13, generator=gen).double()
    want = _sdpa_ref(q, k, v, **sdpa)
    torch.testing.assert_close(fuzz.reference(q, k, v, c, args, None, torch), want)


def test_a_wrong_answer_fails_the_case(monkeypatch):
    """The sweep can fail: with the op's softcap silently dropped, a softcapped case fails."""
    seed = next(
        s for s in range(500)
        if (c := fuzz.draw(random.Random(s)))["softcap"] and not c["refused"] and not c["compile"]
    )  # fmt: skip
    fuzz.run_case(seed)
    real = flashgen.attention

    def no_softcap(q, k, v, **kw):
        kw["softcap"] = None
        return real(q, k, v, **kw)

    monkeypatch.setattr(flashgen, "attention", no_softcap)
    with pytest.raises(AssertionError, match="off by"):
        fuzz.run_case(seed)


def test_the_draws_reach_every_argument():
    """Over 400 draws each argument and its variants occur (what the sweep is for)."""
    seen = set()
    for seed in range(400):
        c = fuzz.draw(random.Random(seed))
        seen |= {f"causal={c['causal']}", f"align={c['align']}", f"layout={c['layout']}"}
        seen |= {f"window={type(c['window']).__name__}", f"alibi={c['alibi']}"}
        seen |= {f"sinks={c['sinks']}", f"refused={c['refused']}", f"compile={c['compile']}"}
        if c["mask"]:
            seen.add(f"mask={c['mask'][0]}")
        if c["lengths"]:
            seen |= {f"padding={c['lengths'][0]}", f"tensor={c['lengths'][3]}"}
        seen |= {"softcap"} if c["softcap"] else set()
        seen |= {"dropout"} if c["dropout"] else set()
        seen |= {"scale"} if c["scale"] else set()
        seen |= {"dv"} if c["dv"] != c["d"] else set()
        seen |= {"short"} if c["sq"] <= 16 else set()
        seen |= {"gqa"} if c["group"] > 1 else set()
        seen |= {"varlen"} if c["varlen"] else set()
        seen |= {f"needs={c['needs']}", f"impl={c['impl']}"}
    want = {
        "causal=True", "causal=False", "align=bottom_right", "layout=bshd", "window=int",
        "window=tuple", "alibi=heads", "alibi=batch", "sinks=True", "sinks=False",
        "compile=True", "mask=bool", "mask=add", "mask=bias", "mask=fill", "padding=left",
        "padding=right", "tensor=True", "tensor=False", "softcap", "dropout", "scale", "dv",
        "short", "gqa", "varlen", "layout=padded", "layout=qkv", "needs=q", "needs=kv",
        "needs=v", "impl=flashgen", "impl=sdpa_flash",
    }  # fmt: skip
    assert want <= seen, want - seen


def test_arguments():
    args = fuzz.parse_args(
        ["--cases", "3", "--device", "cuda", "--dtype", "bfloat16", "--no-compile"]
    )
    assert (args.cases, args.dtype, args.no_compile) == (3, "bfloat16", True)
    for bad in (["--cases", "0"], ["--dtype", "bfloat16"], ["--device", "tpu"]):
        with pytest.raises(SystemExit):
            fuzz.parse_args(bad)


def test_the_second_call_keeps_the_case_and_changes_its_values():
    """`vary`: the second call of a case has its arguments' kinds (mask kind and broadcast,
    lengths' side, short or long query, equal lengths or not) with new sizes half the time and
    new lengths: what exercises the caches keyed by signature, and a compiled graph's dynamic
    sizes."""
    resized = relengthed = 0
    for seed in range(300):
        rng = random.Random(seed)
        c = fuzz.draw(rng)
        again = fuzz.vary(c, rng)
        assert (again["sq"] <= 16) == (c["sq"] <= 16)
        assert (again["sq"] == again["sk"]) or c["sq"] != c["sk"]
        if c["mask"]:
            assert again["mask"][0] == c["mask"][0] and again["mask"][1][:2] == c["mask"][1][:2]
            assert again["mask"][1][2] in (1, again["sq"]) and again["mask"][1][3] == again["sk"]
        resized += (again["sq"], again["sk"]) != (c["sq"], c["sk"])
        if c["lengths"]:
            assert again["lengths"][0] == c["lengths"][0]
            assert all(0 <= n <= again["sk"] for n in again["lengths"][1])
            relengthed += again["lengths"][1] != c["lengths"][1]
    assert resized > 100 and relengthed > 20


@pytest.mark.parametrize(
    "window,sq,sk", [((24, 2), 60, 28), (3, 12, 12)], ids=["two_sided", "causal_window"]
)
def test_a_window_over_trailing_finfo_min_keys_only(window, sq, sk):
    """A key-padding mask with finfo.min on its last keys, under a window that shows a row only
    those keys (op_fuzz seed 60801's second call: row 51 sees key 27 alone under (24, 2); a
    causal window of 3 with the last three keys filled: row 11): the key range that skips
    trailing finfo.min keys (`padding.key_hull`) gave such a row zeros; it gets the softmax of
    its keys (their mean), eagerly and again through the call's route."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, sq, 16, generator=gen)
    k, v = (torch.randn(1, 2, sk, 16, generator=gen) for _ in "kv")
    mask = torch.zeros(1, 1, 1, sk)
    mask[..., -(1 if isinstance(window, tuple) else 3) :] = torch.finfo(torch.float32).min
    causal = not isinstance(window, tuple)
    c = {"batch": 1, "sq": sq, "sk": sk, "lengths": None}
    kw = {"causal": causal, "causal_align": "top_left", "scale": None, "window": window,
          "softcap": None, "attn_mask": mask}  # fmt: skip
    want = fuzz.reference(q.double(), k.double(), v.double(), c, {**kw, "attn_mask": mask.double()},
                          None, torch)  # fmt: skip
    for _ in range(2):  # the second call runs the route the first one kept
        out = flashgen.attention(q, k, v, **kw)
        torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-4)
    row = 51 if isinstance(window, tuple) else 11  # the row that sees only filled keys
    seen = v[0, :, 27:] if isinstance(window, tuple) else v[0, :, 9:]
    torch.testing.assert_close(out[0, :, row], seen.mean(-2), atol=1e-5, rtol=1e-4)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    g = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(flashgen.attention(*leaves, **kw), leaves, g.float())
    rkw = {**kw, "attn_mask": mask.double()}
    exp = torch.autograd.grad(fuzz.reference(*ref_leaves, c, rkw, None, torch), ref_leaves, g)
    for a, b in zip(got, exp, strict=True):
        torch.testing.assert_close(a.double(), b, atol=5e-5, rtol=1e-4)
