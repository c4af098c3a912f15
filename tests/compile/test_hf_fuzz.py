"""benchmarks/hf_fuzz.py, the random HF-model sweep of the backend, on the CPU: every family's
config builds a model, and one drawn case (Mistral's eager attention, a 5-key sliding window, a
left-padded batch of two, `dynamic=True`, then a KV cache's prefill and two decoding steps)
compiles, replaces every attention site and matches eager; so does a left-padded BLOOM under
`dynamic=True` (its ALiBi from the attention_mask read as a bias beside the padding; the graph
Dynamo discards, its float attribute traced as a tensor, not counted), and a left-padded MPT
(drawn with `--families`), whose decoding steps run ALiBi beside the padding on the decode
kernels, and a BART and a T5 with `generate()` (drawn with `--families` too); with `--grad`, a
padded T5's parameter gradients (its relative bias's through the kernels), Granite's scale,
GPT-OSS's attention sinks and DeepSeek-V3's kept latent attention (EXTRA_DECODERS), and the
gradient check's own reading of a planted 1% error; GPT-J, CodeGen and GPT-Neo in float16
(their scores from float32 casts of q and k; float16 runs on the CPU) every site replaced
within the low-precision judge's bound; float32 models under autocast to float16 (Mistral,
Llama, BERT with dropout, GPT-J), every site replaced, and a wrong mask caught there; with
`--dropout`, models trained with
attention dropout against eager HF replaying the kernels' keep masks (BERT, GPT-2, Llama, BLOOM,
Mistral; SDPA and eager attention; no, right and left padding; under gradient checkpointing),
and a wrong mask caught; a model whose attention code drops nothing compared as it is, and
kernels without the dropout eager HF applies refused. The GPU mode (`--device cuda --dtype
bfloat16`, marked `gpu`): drawn models against a float32 copy, with the defaults' kernels and
the Hopper family forced, and a wrong mask caught there too; on the CPU its judge and argument
checks. The sweep itself is the script's."""

from __future__ import annotations

import random
import types

import pytest
import repo_scripts

pytest.importorskip("transformers")
fuzz = repo_scripts.load("benchmarks/hf_fuzz.py", "hf_fuzz_under_test")


@pytest.mark.parametrize("family", fuzz.FAMILIES + fuzz.EXTRA)
def test_every_family_builds(family):
    cfg, auto = fuzz.config_for(family, random.Random(0))
    attn = "eager" if family in fuzz.EAGER_ONLY else "sdpa"
    model = auto.from_config(cfg, attn_implementation=attn)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_a_windowed_left_padded_decoder_matches_eager():
    rec = fuzz.run_case(54)
    assert (rec["family"], rec["padding"], rec["dynamic"]) == ("mistral", "left", True), rec
    assert rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


def test_a_left_padded_bloom_matches_eager():
    rec = fuzz.run_case(50)
    assert (rec["family"], rec["padding"], rec["dynamic"]) == ("bloom", "left", True), rec
    assert rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec
    assert rec["discarded"] > 0, rec  # (the float attribute's first trace)


def test_a_left_padded_mpt_with_decoding_steps_matches_eager():
    rec = fuzz.run_case(900, ["mpt", "bloom"])
    assert (rec["family"], rec["padding"]) == ("mpt", "left"), rec
    assert rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


@pytest.mark.parametrize(
    "seed,family,side", [(100, "bart", "left"), (103, "t5", "right")], ids=["bart", "t5"]
)
def test_an_encoder_decoder_with_generate_matches_eager(seed, family, side):
    """The encoder-decoders (drawn with `--families`): a padded source under `dynamic=True`,
    the target's logits, then `generate()`'s decoding steps (self-attention over the cache,
    cross-attention over the source's padding per key), every site replaced."""
    rec = fuzz.run_case(seed, ["bart", "t5"])
    assert (rec["family"], rec["padding"], rec["dynamic"]) == (family, side, True), rec
    assert rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


def test_gradients_of_a_padded_t5_match_eager():
    """`--grad`: every parameter's gradient through the compiled model, here T5's (its learned
    relative position bias reaches the kernels as an additive mask that requires grad, beside
    the source's right padding)."""
    rec = fuzz.run_case(103, ["bart", "t5"], grad=True)
    assert (rec["family"], rec["padding"]) == ("t5", "right"), rec
    assert rec["grad"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


@pytest.mark.parametrize(
    "seed,family", [(33, "granite"), (1, "gpt_oss"), (1, "deepseek_v3"), (6, "deepseek_v3")],
    ids=["granite", "gpt_oss", "deepseek_v3_sdpa", "deepseek_v3_eager"],
)  # fmt: skip
def test_extra_decoders_match_eager_with_gradients(seed, family):
    """Decoders drawn with `--families` (EXTRA_DECODERS), left-padded under `dynamic=True`, with
    their parameters' gradients: Granite's attention_multiplier (0.37, not 1/sqrt(d)) reaches
    the kernels as their scale; GPT-OSS's attention sinks (a learned logit per head beside the
    keys' scores, in sliding-window and global layers) reach them as `sinks=`, the sinks'
    gradient included; every site of both replaced. DeepSeek-V3's latent attention (values of
    another head dim than the keys'): written by hand (HF's eager) every site replaced, the
    values padded to the keys' width (`flashgen.runtime.value_dim`); through SDPA, which takes
    such values as they are, found and kept, saying why."""
    rec = fuzz.run_case(seed, [family], grad=True)
    assert (rec["family"], rec["padding"], rec["dynamic"]) == (family, "left", True), rec
    assert rec["diff"] <= 1e-3 and rec["grad"] <= 1e-3, rec
    if family == "deepseek_v3" and rec["attn"] == "sdpa":
        assert rec["found"] > 0 and rec["replaced"] == 0, rec
        assert any("another head dim" in s for s in rec["skips"]), rec
    else:
        assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


UPCASTS = ["gptj", "codegen", "gpt_neo"]


@pytest.mark.parametrize(
    "seed,family", [(7000, "codegen"), (7001, "gptj"), (7003, "gpt_neo")],
    ids=["codegen", "gptj", "gpt_neo"],
)  # fmt: skip
def test_float32_scores_of_float16_q_and_k_are_replaced(seed, family):
    """GPT-J and CodeGen (eager only) compute the scores from float32 casts of q and k, GPT-Neo
    too, its causal mask a slice of a boolean buffer applied with a 0-d tensor fill and its
    local layers a band of it: in float16 (on the CPU: the interpreter's numpy has float16)
    every site is replaced, and the compiled model's error against a float32 copy (logits at
    two lengths, decoding steps, every parameter's gradient) stays within LOW_TOL times eager
    float16's. Before session 63 GPT-J's and CodeGen's sites were kept ("q, k, v and the output
    must share one dtype", seen on the GPU) and GPT-Neo's not even found."""
    rec = fuzz.run_case(seed, UPCASTS, grad=True, dtype="float16")
    assert (rec["family"], rec["dtype"]) == (family, "float16"), rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec
    assert rec["diff"] <= fuzz.LOW_TOL, rec


@pytest.mark.parametrize(
    "seed,kw",
    [(54, {}), (14, {"grad": True}), (103, {"grad": True, "dropout": 0.2}),
     (7001, {"families": UPCASTS, "grad": True})],
    ids=["mistral_window_left", "llama_sdpa_left_grad", "bert_dropout", "gptj_grad"],
)  # fmt: skip
def test_float32_models_under_autocast_match_eager_within_its_rounding(seed, kw):
    """`--autocast float16`: the float32 model compiled and run under `torch.autocast` (the usual
    mixed-precision training), eager under it too, both against the model without autocast.
    Rotary embeddings leave q and k in float32 beside a float16 v (Llama, Mistral, GPT-J), and
    autocast casts them for the products: every site is replaced with q, k and v cast as
    autocast casts them (before session 63 such sites were kept, "q, k, v and the output must
    share one dtype"), within LOW_TOL times eager's error; with dropout replayed (BERT)."""
    rec = fuzz.run_case(seed, **kw, autocast="float16")
    assert rec["autocast"] == "float16" and rec["diff"] <= fuzz.LOW_TOL, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


def test_a_wrong_mask_under_autocast_is_caught(monkeypatch):
    """The judge under autocast catches what the float32 check catches: masks replayed from
    other seeds than the kernels' read far above LOW_TOL."""
    from flashgen.kernels import dropout

    keep_mask = dropout.keep_mask
    monkeypatch.setattr(dropout, "keep_mask", lambda seed, *a, **k: keep_mask(seed + 1, *a, **k))
    rec = fuzz.run_case(103, grad=True, dropout=0.2, autocast="float16")
    assert rec["diff"] > 10 * fuzz.LOW_TOL, rec


def test_grad_diff_reports_a_one_percent_error():
    """The gradient check itself: a compiled side whose output is 1% off reads ~0.01; a
    parameter that reaches no loss (None eagerly) is not a difference."""
    import torch

    class Out:
        def __init__(self, logits):
            self.logits = logits

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.unused = torch.nn.Linear(2, 2)

        def forward(self, input_ids):
            return Out(self.lin(input_ids))

    model = Tiny()
    kw = {"input_ids": torch.randn(2, 5, 4)}
    valid = torch.ones(2, 5, 1, dtype=torch.bool)
    assert fuzz._grad_diff(model, model, kw, valid, "logits") == 0.0
    off = fuzz._grad_diff(model, lambda **k: Out(model(**k).logits * 1.01), kw, valid, "logits")
    assert 0.009 < off < 0.011, off


@pytest.mark.parametrize("plain_fails", [True, False], ids=["torch's", "flashgen's"])
def test_an_error_is_told_apart_by_compiling_without_flashgen(monkeypatch, capsys, plain_fails):
    """A case that raises is run again with aot_eager alone: the same error there is PyTorch's
    (reported as TORCH, not bad, exit 0); an error only flashgen's pass raises stays bad."""

    def run_case(seed, families, grad, checkpointing, plain=False, dropout=0.0, **place):
        if plain and not plain_fails:
            return {}
        raise AssertionError("lift_tracked_freevar_to_input")

    monkeypatch.setattr(fuzz, "run_case", run_case)
    for name, value in (("FLASHGEN_IMPL", "flashgen"), ("TRITON_INTERPRET", "1")):
        monkeypatch.setenv(name, value)  # (main sets both when unset: undone after the test)
    code = fuzz.main(["--seed", "8002", "--cases", "1"])
    out = capsys.readouterr().out
    assert code == (0 if plain_fails else 1), out
    assert ("TORCH seed 8002 (gptj)" in out) == plain_fails, out
    assert ("BAD seed 8002" in out) != plain_fails, out


@pytest.mark.parametrize(
    "family", sorted(set(fuzz.FAMILIES + fuzz.EXTRA) - fuzz.NO_ATTENTION_DROPOUT)
)
def test_every_family_takes_attention_dropout(family):
    """`--dropout` sets each family's own attention-dropout entry (and no other dropout)."""
    cfg, _ = fuzz.config_for(family, random.Random(0))
    before = {k: v for k, v in cfg.to_dict().items() if "drop" in k}
    assert fuzz.set_attention_dropout(cfg, family, 0.2)
    after = {k: v for k, v in cfg.to_dict().items() if "drop" in k}
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {fuzz.DROPOUT_FIELDS.get(family, "attention_dropout")}, (before, after)


@pytest.mark.parametrize(
    "seed,family,attn,side",
    [(103, "bert", "sdpa", "right"), (9, "bert", "eager", "none"), (172, "gpt2", "sdpa", "none"),
     (70, "llama", "eager", "none"), (12, "bloom", "eager", "none"),
     (1, "mistral", "sdpa", "right"), (14, "llama", "sdpa", "left")],
    ids=["bert_sdpa", "bert_eager", "gpt2_sdpa", "llama_eager", "bloom_alibi", "mistral_window",
         "llama_left"],
)  # fmt: skip
def test_training_with_attention_dropout_matches_eager_replaying_the_masks(
    seed, family, attn, side
):
    """`--grad --dropout`: in training mode every site runs the kernels' dropout (beside right
    and left padding, ALiBi, a sliding window; causal and not), and the output at the valid
    positions and every parameter's gradient equal eager HF's given the same keep masks."""
    rec = fuzz.run_case(seed, grad=True, dropout=0.2)
    assert (rec["family"], rec["attn"], rec["padding"]) == (family, attn, side), rec
    assert rec["dropout"] == 0.2 and rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


def test_attention_dropout_under_gradient_checkpointing_matches_eager():
    """`--checkpointing --dropout`: the compiled model's checkpointed layers recompute their
    forward in the backward; the kernels there drop what the forward dropped."""
    rec = fuzz.run_case(6200, grad=True, checkpointing=True, dropout=0.2)
    assert (rec["family"], rec["checkpointing"], rec["dropout"]) == ("qwen2", True, 0.2), rec
    assert rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


def test_a_dropout_outside_the_attention_weights_is_refused(monkeypatch):
    """ModernBERT's attention_dropout also drops the attention's output (with PyTorch's
    generator, which the compiled graph draws from otherwise): the replay says so rather than
    reading a difference; --dropout leaves ModernBERT without (NO_ATTENTION_DROPOUT)."""
    assert "modernbert" in fuzz.NO_ATTENTION_DROPOUT
    monkeypatch.setattr(fuzz, "NO_ATTENTION_DROPOUT", fuzz.NO_ATTENTION_DROPOUT - {"modernbert"})
    with pytest.raises(AssertionError, match="outside the attention weights"):
        fuzz.run_case(7000, ["modernbert"], grad=True, dropout=0.2)


def test_a_replayed_mask_other_than_the_kernels_is_caught(monkeypatch):
    """The replay's check itself: masks drawn from other seeds than the kernels' read as a
    large difference."""
    from flashgen.kernels import dropout

    keep_mask = dropout.keep_mask
    monkeypatch.setattr(dropout, "keep_mask", lambda seed, *a, **k: keep_mask(seed + 1, *a, **k))
    rec = fuzz.run_case(103, grad=True, dropout=0.2)
    assert rec["diff"] > 1e-2, rec


def test_the_low_precision_judge_reads_the_error_over_eagers():
    """`Judge` in a low precision: the compiled model's error against the float32 copy over the
    eager model's, at the valid positions only (a NaN there is NaN, one at a padded position is
    not compared); in float32 the plain largest difference. Gradients: the same ratio of
    `_relative_diff`'s measure."""
    import math

    import torch

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(3, 5, 8, generator=g)
    noise = 1e-2 * torch.randn(3, 5, 8, generator=g)
    valid = torch.ones(3, 5, 1, dtype=torch.bool)
    valid[1, 3:] = False
    judge = fuzz.Judge(ref=object(), eps=2.0**-8)
    assert judge.outputs(ref + noise, ref + noise, ref, valid) == 1.0
    assert 1.9 < judge.outputs(ref + 2 * noise, ref + noise, ref, valid) < 2.1
    wrong = ref.clone()
    wrong[0, 0, 0] += 1.0
    assert judge.outputs(wrong, ref + noise, ref, valid) > 10 * fuzz.LOW_TOL
    padded = (ref + noise).clone()
    padded[1, 4, 2] = float("nan")  # at a padded position: not compared
    assert judge.outputs(padded, ref + noise, ref, valid) == 1.0
    padded[0, 4, 2] = float("nan")
    assert math.isnan(judge.outputs(padded, ref + noise, ref, valid))
    plain = fuzz.Judge()
    assert plain.outputs(wrong, ref, None, valid) == pytest.approx(1.0)
    assert plain.outputs(padded, ref, None, True) != plain.outputs(padded, ref, None, True)
    grads = [ref, ref[0]]
    eager = [x + noise[: len(x)] for x in grads]
    assert judge.grads(eager, eager, grads) == 1.0
    off = [x * 1.5 for x in grads]
    assert judge.grads(off, eager, grads) > 10 * fuzz.LOW_TOL
    nan_last = [grads[0], torch.full_like(grads[1], float("nan"))]  # (not only when first)
    assert math.isnan(fuzz._relative_diff(nan_last, grads))
    assert math.isnan(judge.grads(nan_last, eager, grads))


@pytest.mark.parametrize(
    "argv,message",
    [(["--dtype", "bfloat16"], "runs on --device cuda only"),
     (["--autocast", "bfloat16"], "runs on --device cuda only"),
     (["--autocast", "float16", "--dtype", "float16"], "runs float32 models"),
     (["--head-dims", "64"], "two multiples of 8"), (["--head-dims", "64,x"], "two multiples"),
     (["--lengths", "5,7,200"], "three lengths from 4 to 120")],
)  # fmt: skip
def test_bad_placement_arguments_are_refused(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        fuzz.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.fixture
def gpu_flashgen(monkeypatch):
    """flashgen's own kernels at every site (no SDPA route), as the script's main sets them."""
    from flashgen.runtime import dispatch

    dispatch.set_impl("flashgen")
    yield monkeypatch
    dispatch.set_impl(None)


@pytest.mark.gpu
@pytest.mark.parametrize("family_env", ["default", "hopper"])
@pytest.mark.parametrize(
    "seed,kw",
    [(54, {}), (14, {"grad": True}), (103, {"grad": True, "dropout": 0.2}),
     (100, {"families": ["bart", "t5"]}), (103, {"families": ["bart", "t5"], "grad": True})],
    ids=["mistral_window_left", "llama_left_grad", "bert_dropout", "bart_generate", "t5_grad"],
)  # fmt: skip
def test_models_in_bfloat16_on_the_gpu_match_eager_within_its_rounding(
    gpu_flashgen, family_env, seed, kw
):
    """`--device cuda --dtype bfloat16`: every site replaced by flashgen's kernels (the Hopper
    family's forward and backward where forced, at head dims 64/128 and lengths past the
    decode kernels'), the compiled model's error against a float32 copy at most LOW_TOL times
    eager bfloat16's."""
    if family_env == "hopper":
        gpu_flashgen.setenv("FLASHGEN_FWD_FAMILY", "hopper")
        gpu_flashgen.setenv("FLASHGEN_BWD_KIND", "hopper")
    rec = fuzz.run_case(
        seed, **kw, device="cuda", dtype="bfloat16", head_dims=(64, 128), lengths=(33, 77, 120)
    )
    assert rec["dtype"] == "bfloat16" and rec["diff"] <= fuzz.LOW_TOL, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


@pytest.mark.gpu
def test_a_wrong_mask_in_bfloat16_on_the_gpu_is_caught(gpu_flashgen):
    """The low-precision judge catches what the float32 check catches: masks replayed from other
    seeds than the kernels' read far above LOW_TOL."""
    from flashgen.kernels import dropout

    keep_mask = dropout.keep_mask
    gpu_flashgen.setattr(dropout, "keep_mask", lambda seed, *a, **k: keep_mask(seed + 1, *a, **k))
    rec = fuzz.run_case(103, grad=True, dropout=0.2, device="cuda", dtype="bfloat16")
    assert rec["diff"] > 10 * fuzz.LOW_TOL, rec


@pytest.mark.gpu
@pytest.mark.parametrize("family_env", ["default", "hopper"])
def test_a_float32_model_under_autocast_on_the_gpu_matches_eager(gpu_flashgen, family_env):
    """`--device cuda --autocast bfloat16`: HF Llama (SDPA, left padded, with gradients) as a
    float32 model under autocast, its rotary q and k float32 beside a bfloat16 v: every site
    replaced by the bfloat16 kernels (the Hopper family's where forced), within LOW_TOL times
    eager autocast's error against the model without autocast."""
    if family_env == "hopper":
        gpu_flashgen.setenv("FLASHGEN_FWD_FAMILY", "hopper")
        gpu_flashgen.setenv("FLASHGEN_BWD_KIND", "hopper")
    rec = fuzz.run_case(
        14, grad=True, device="cuda", autocast="bfloat16", head_dims=(64, 128),
        lengths=(33, 77, 120),
    )  # fmt: skip
    assert rec["autocast"] == "bfloat16" and rec["diff"] <= fuzz.LOW_TOL, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec


def test_a_model_whose_attention_code_drops_nothing_is_compared_as_it_is(monkeypatch):
    """`--dropout` on a model whose attention code applies no dropout (HF's Falcon before its
    attention refactor; here the config left without it): no kernel draws a seed and eager HF
    drops nothing, so the sides are compared as they are and the record says so."""
    monkeypatch.setattr(fuzz, "set_attention_dropout", lambda cfg, family, p: True)
    rec = fuzz.run_case(103, grad=True, dropout=0.2)
    assert rec["dropout"].startswith("none applied: bert"), rec
    assert rec["diff"] <= 1e-3 and rec["replaced"] == rec["found"] > 0, rec


def test_kernels_without_the_dropout_eager_hf_applies_are_caught(monkeypatch):
    """The other way round: the compiled model's kernels run without dropout (their seeds
    dropped here) while eager HF drops its attention weights: refused, naming what ran."""
    from flashgen.kernels import dropout

    monkeypatch.setattr(dropout, "launch_args", lambda p, seed: None)
    with pytest.raises(AssertionError, match="no kernel drew a dropout mask, but eager HF"):
        fuzz.run_case(103, grad=True, dropout=0.2)


def test_a_kept_site_with_dropout_is_reported_not_replayed():
    """A site the pass keeps in training (BLOOM's finfo.min padding fill beside ALiBi with
    dropout: a row it hides entirely would need eager's dropped uniform row) drops with
    PyTorch's generator, which no replay can follow: the gradients are not compared and the
    record says why, the outputs in eval mode still compared."""
    rec = fuzz.run_case(6415, grad=True, dropout=0.2)
    assert (rec["family"], rec["padding"]) == ("bloom", "right"), rec
    assert rec["dropout"].startswith("not replayed: 2 site(s) kept"), rec
    assert "dropout on the rows it hides entirely" in rec["dropout"], rec
    assert "grad" not in rec and rec["diff"] <= 1e-3, rec


def test_generate_scores_compare_their_minus_inf_as_a_pattern():
    """`_generate`: a logits processor's -inf (BART's forced end token) sits at the same places
    on both sides and is not a difference (the old (g - w).abs().max() read NaN there, which
    the verdict took for "ok" whatever else differed); a -inf on one side only is."""
    import torch

    inf = float("inf")

    class Stub:  # generate() hands back the eager result, then the compiled one
        def __init__(self, *outs):
            self.outs = iter(outs)

        def forward(self, *args, **kwargs):
            raise AssertionError("not called by the stub's generate")

        def generate(self, ids, **kwargs):
            return next(self.outs)

    def result(forced, free):
        scores = (torch.tensor([[-inf, -inf, forced]]), torch.tensor([[0.5, free, -1.0]]))
        return types.SimpleNamespace(sequences=torch.tensor([[0, 2, 1]]), scores=scores)

    ids, mask = torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long)
    judge = fuzz.Judge()
    stub = Stub(result(0.0, 1.0), result(0.0, 1.25))
    assert fuzz._generate(stub, "eager", None, ids, mask, judge) == 0.25
    stub = Stub(result(0.0, 1.0), result(-inf, 1.0))
    assert fuzz._generate(stub, "eager", None, ids, mask, judge) == inf
