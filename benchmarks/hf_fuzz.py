"""Random HF transformers models (built from configs: random weights, no download) compiled with
the flashgen backend and compared with eager: a correctness sweep of the backend on the model
code people run (no timing).

Each seed draws a model family (Llama, Mistral and Qwen2 with or without a sliding window,
Qwen3, Gemma-2/3, Phi-3, OLMo, StableLM, Starcoder2, Cohere, GPT-2, GPT-NeoX, OPT, GPT-J,
Falcon, BLOOM, BERT; with `--families` also MPT, the encoders ModernBERT, RoBERTa and
DistilBERT, the encoder-decoders BART and T5, and the decoders of EXTRA_DECODERS), its
attention implementation (`sdpa` or `eager`), head count and head dim, GQA, a batch with right,
left or no padding, and the compile mode (static, automatic dynamic, `dynamic=True`). It
compiles the model with `flashgen.backend(fallback="aot_eager")`, then compares with eager: the
logits (encoders: the last hidden state) at the padded batch's valid
positions, at a second length, and for causal LMs a prefill with a KV cache followed by two
decoding steps, each side with its own cache (encoder-decoders: every target position, then the
scores of three greedy `generate()` steps). With `--grad` it also compares the gradients of
every parameter of a random-weighted loss over the valid positions (no dropout: the configs
have none unless --dropout; the backward kernels with the same masks), an unpadded batch then
called as HF's training call (no attention_mask; decoders `use_cache=False`: the mask from HF's own position
ids); `--checkpointing` adds HF's gradient checkpointing (non-reentrant, training mode) to that
call, the attention then inside each layer's checkpoint. `--dropout P` (with --grad) builds
the models with attention dropout P (every other dropout 0) and runs that gradient check in
training mode: the compiled model's kernels draw their keep masks, the seeds they are handed are
recorded, and the eager reference (HF's eager attention, the same weights) replays them, its
`F.dropout` on the 4-d attention weights applying the kernels' mask of each seed
(`flashgen.kernels.dropout.keep_mask`: keys numbered from 0, as the pass hands padding to the
kernels as a mask, never as lengths); its output at the valid positions and every parameter's
gradient are compared. It reports the largest difference, how
many attention sites the backend replaced of those it found in the graphs that ran (not those
Dynamo compiled and then discarded), and the reasons for the others.

Usage: python benchmarks/hf_fuzz.py [--seed S] [--cases N]   (CPU: Triton's interpreter;
20-40 s a case). A case is BAD when a difference exceeds --tol or the compiled model fails.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import traceback

VOCAB = 96

# family -> (config class, auto class); the decoder families share one config shape
DECODERS = {
    "llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config", "gemma2": "Gemma2Config", "gemma3": "Gemma3TextConfig",
    "phi3": "Phi3Config", "olmo": "OlmoConfig", "stablelm": "StableLmConfig",
    "starcoder2": "Starcoder2Config", "cohere": "CohereConfig",
}  # fmt: skip
WINDOWED = {"mistral", "gemma2", "gemma3", "qwen2", "starcoder2"}
OTHERS = ["gpt2", "gpt_neox", "opt", "bert", "bloom", "falcon", "gptj"]
FAMILIES = sorted(DECODERS) + OTHERS
# Drawn only when asked (`--families`): adding them to FAMILIES would change every seed's draw,
# and the recorded sweeps' seeds would no longer name the models they ran.
EXTRA = ["mpt", "modernbert", "roberta", "distilbert", "bart", "t5"]
# decoders drawn only when asked, each with what sets it apart: Granite's attention_multiplier
# (a scale other than 1/sqrt(d)), Llama-4's and SmolLM3's layers without rotary embeddings,
# Cohere-2's and EXAONE-4's sliding-window layers beside global ones, Mixtral's experts,
# GPT-OSS's attention sinks (a learned logit per head beside the keys: the op's sinks=) and
# DeepSeek-V3's latent attention (values of another head dim than the keys': replaced
# padded when written by hand, HF's eager; through SDPA kept with a reason)
EXTRA_DECODERS = {
    "granite": "GraniteConfig", "llama4": "Llama4TextConfig", "smollm3": "SmolLM3Config",
    "cohere2": "Cohere2Config", "exaone4": "Exaone4Config", "mixtral": "MixtralConfig",
    "gpt_oss": "GptOssConfig", "deepseek_v3": "DeepseekV3Config",
}  # fmt: skip
# decoders added in session 59 (transformers 5's own code for each; built from the shared
# decoder shape above): among them DiffLlama's differential attention (two SDPA calls on halves
# of the values, one result subtracted), Doge's dynamic additive mask, Gemma-4's sliding and
# global layers (the global ones of head dim 512, which the kernels refuse), experts (JetMoE,
# Qwen3-MoE, GraniteMoE) and attention beside linear attention or convolutions (MiniMax, LFM2)
NEWER_DECODERS = {
    "gemma": "GemmaConfig", "vaultgemma": "VaultGemmaConfig", "glm4": "Glm4Config",
    "phi": "PhiConfig", "olmo2": "Olmo2Config", "olmo3": "Olmo3Config",
    "diffllama": "DiffLlamaConfig", "doge": "DogeConfig", "gemma4": "Gemma4TextConfig",
    "persimmon": "PersimmonConfig", "nemotron": "NemotronConfig", "jetmoe": "JetMoeConfig",
    "qwen3_moe": "Qwen3MoeConfig", "granitemoe": "GraniteMoeConfig", "minimax": "MiniMaxConfig",
    "lfm2": "Lfm2Config", "bitnet": "BitNetConfig", "ernie4_5": "Ernie4_5Config",
    "arcee": "ArceeConfig", "apertus": "ApertusConfig", "seed_oss": "SeedOssConfig",
}  # fmt: skip
EXTRA_DECODERS.update(NEWER_DECODERS)
EXTRA += sorted(EXTRA_DECODERS)
# encoders: compared on their last hidden state, no decoding steps
ENCODERS = {"bert", "modernbert", "roberta", "distilbert"}
# encoder-decoders: logits of a target shorter than the source, then `generate()` (`_generate`)
SEQ2SEQ = {"bart", "t5"}
# families whose HF code has no SDPA path (they run their eager attention)
EAGER_ONLY = {"gemma2", "bloom", "mpt", "gpt_oss", "vaultgemma"}


def config_for(family: str, r: random.Random):
    """(config, auto class) of a small random model of `family`."""
    import transformers

    heads = r.choice([2, 4])
    dim = r.choice([16, 32])
    hidden = heads * dim
    if family in DECODERS or family in EXTRA_DECODERS:
        kw = dict(
            vocab_size=VOCAB, num_hidden_layers=2, hidden_size=hidden,
            intermediate_size=2 * hidden, num_attention_heads=heads,
            num_key_value_heads=r.choice([1, max(heads // 2, 1), heads]),
            max_position_embeddings=128, pad_token_id=0,
        )  # fmt: skip
        if family in ("gemma2", "gemma3", "qwen3"):
            kw["head_dim"] = dim
        if family in WINDOWED and r.random() < 0.7:
            kw["sliding_window"] = r.choice([3, 5, 8])
            if family == "qwen2":
                kw.update(use_sliding_window=True, max_window_layers=1)
        if family == "stablelm":
            kw["num_key_value_heads"] = heads
        kw.update(_extra_decoder(family, r, dim, heads))
        cfg = getattr(transformers, {**DECODERS, **EXTRA_DECODERS}[family])(**kw)
        return cfg, transformers.AutoModelForCausalLM
    causal_lm = transformers.AutoModelForCausalLM
    if family == "gpt2":
        cfg = transformers.GPT2Config(
            n_embd=hidden, n_head=heads, n_layer=2, n_positions=128, vocab_size=VOCAB,
            attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
        )  # fmt: skip
    elif family == "gpt_neox":
        cfg = transformers.GPTNeoXConfig(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=2,
            intermediate_size=2 * hidden, vocab_size=VOCAB, max_position_embeddings=128,
        )  # fmt: skip
    elif family == "opt":
        cfg = transformers.OPTConfig(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=2,
            ffn_dim=2 * hidden, vocab_size=VOCAB, max_position_embeddings=128,
            word_embed_proj_dim=hidden, dropout=0.0,
        )  # fmt: skip
    elif family == "bert":
        cfg = transformers.BertConfig(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=2,
            intermediate_size=2 * hidden, vocab_size=VOCAB, max_position_embeddings=128,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        return cfg, transformers.AutoModel
    elif family == "roberta":
        cfg = transformers.RobertaConfig(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=2,
            intermediate_size=2 * hidden, vocab_size=VOCAB, max_position_embeddings=130,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
        )  # fmt: skip
        return cfg, transformers.AutoModel
    elif family == "distilbert":
        cfg = transformers.DistilBertConfig(
            dim=hidden, n_heads=heads, n_layers=2, hidden_dim=2 * hidden, vocab_size=VOCAB,
            max_position_embeddings=128, dropout=0.0, attention_dropout=0.0,
        )  # fmt: skip
        return cfg, transformers.AutoModel
    elif family == "modernbert":  # local layers: a two-sided window beside the padding
        cfg = transformers.ModernBertConfig(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=3,
            intermediate_size=2 * hidden, vocab_size=VOCAB, max_position_embeddings=128,
            global_attn_every_n_layers=r.choice([2, 3]), local_attention=r.choice([2, 4, 6]),
            pad_token_id=0, reference_compile=False,
        )  # fmt: skip
        return cfg, transformers.AutoModel
    elif family == "bart":  # init_std: BART's 0.02 leaves the scores near zero
        cfg = transformers.BartConfig(
            d_model=hidden, encoder_layers=2, decoder_layers=2, encoder_attention_heads=heads,
            decoder_attention_heads=heads, encoder_ffn_dim=2 * hidden, decoder_ffn_dim=2 * hidden,
            vocab_size=VOCAB, max_position_embeddings=128, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, init_std=0.3, pad_token_id=0, decoder_start_token_id=2,
        )  # fmt: skip
        return cfg, transformers.AutoModelForSeq2SeqLM
    elif family == "t5":  # a relative position bias beside the padding
        cfg = transformers.T5Config(
            d_model=hidden, d_kv=dim, d_ff=2 * hidden, num_layers=2, num_heads=heads,
            vocab_size=VOCAB, relative_attention_num_buckets=8, dropout_rate=0.0,
            pad_token_id=0, decoder_start_token_id=0,
        )  # fmt: skip
        return cfg, transformers.AutoModelForSeq2SeqLM
    elif family == "bloom":
        cfg = transformers.BloomConfig(
            hidden_size=hidden, n_head=heads, n_layer=2, vocab_size=VOCAB
        )
    elif family == "falcon":
        cfg = transformers.FalconConfig(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=2, vocab_size=VOCAB,
            new_decoder_architecture=False, multi_query=r.random() < 0.5, alibi=False,
        )  # fmt: skip
    elif family == "mpt":  # ALiBi over max_seq_len, sliced to the keys
        cfg = transformers.MptConfig(
            d_model=hidden, n_heads=heads, n_layers=2, vocab_size=VOCAB, max_seq_len=128
        )
    elif family == "gptj":
        cfg = transformers.GPTJConfig(
            n_embd=hidden, n_head=heads, n_layer=2, vocab_size=VOCAB, n_positions=128,
            rotary_dim=dim // 2,
        )  # fmt: skip
    else:
        raise ValueError(f"unknown family {family!r}")
    return cfg, causal_lm


def _extra_decoder(family: str, r: random.Random, dim: int, heads: int) -> dict:
    """The config entries an EXTRA_DECODERS family adds to the shared decoder shape (no draw
    for the others, so FAMILIES' seeds keep their models)."""
    if family == "granite":
        return {"attention_multiplier": r.choice([0.37, 1.5 / dim])}
    if family in ("cohere2", "exaone4", "gpt_oss"):  # sliding-window layers, then global ones
        kw = {"sliding_window": r.choice([3, 5, 8])}
        kw["layer_types"] = ["sliding_attention", "full_attention"]
        if family == "gpt_oss":
            kw.update(head_dim=dim, num_local_experts=2, num_experts_per_tok=1)
        return kw
    if family == "mixtral":
        return {"num_local_experts": 2, "num_experts_per_tok": 1}
    if family == "diffllama":  # its two calls split the values along an even number of kv heads
        return {"num_key_value_heads": heads}
    if family == "deepseek_v3":  # keys of 16 + 8 (rotary) dims, values of `dim`; a kv head a head
        return {
            "num_key_value_heads": heads,
            "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "v_head_dim": dim, "n_routed_experts": 2,
            "num_experts_per_tok": 1, "first_k_dense_replace": 2,
        }  # fmt: skip
    return {}


def padding_mask(r: random.Random, batch: int, length: int, side: str):
    """[batch, length] 0/1 attention_mask: entry 0 whole, the others padded on `side`."""
    import torch

    mask = torch.ones(batch, length, dtype=torch.long)
    if side != "none":
        for b in range(1, batch):
            n = r.randint(1, length - 2)
            if side == "right":
                mask[b, length - n :] = 0
            else:
                mask[b, :n] = 0
    return mask


# the config entry holding a family's attention dropout (others: "attention_dropout")
DROPOUT_FIELDS = {
    "gpt2": "attn_pdrop", "gptj": "attn_pdrop", "bert": "attention_probs_dropout_prob",
    "roberta": "attention_probs_dropout_prob",
}  # fmt: skip
# families whose attention dropout is not its own config entry (T5's dropout_rate is every
# dropout of the model; MPT's sits in a sub-config; ModernBERT's attention_dropout also drops
# the attention's output, `out_drop`, with PyTorch's generator) or who have none (ERNIE-4.5's
# and LFM2's configs): --dropout leaves them without
NO_ATTENTION_DROPOUT = {"t5", "mpt", "modernbert", "ernie4_5", "lfm2"}


def set_attention_dropout(cfg, family: str, p: float) -> bool:
    """Give `cfg` attention dropout `p`; False for a family without its own entry."""
    if family in NO_ATTENTION_DROPOUT:
        return False
    field = DROPOUT_FIELDS.get(family, "attention_dropout")
    if not hasattr(cfg, field):
        raise ValueError(f"{family}: its config has no {field}")
    setattr(cfg, field, p)
    return True


def run_case(
    seed: int, families=None, grad: bool = False, checkpointing: bool = False, plain: bool = False,
    dropout: float = 0.0,
) -> dict:  # fmt: skip
    """Build, compile and compare one drawn model (of `families`, default FAMILIES); with
    `grad`, also its parameters' gradients (`_grad_diff`), with `checkpointing` under HF's
    gradient checkpointing, with `dropout` in training mode with that attention dropout
    (`_dropout_grad_diff`); the record (errors are raised). `plain`: the same case compiled
    with PyTorch's aot_eager alone (no flashgen pass), to tell whether an error is flashgen's
    (then no masks are replayed: the gradients are not compared)."""
    import torch

    from flashgen.compile.backend import backend
    from flashgen.compile.patterns import attention_pass

    r, family = _first_draw(seed, families)
    attn = "eager" if family in EAGER_ONLY else r.choice(["sdpa", "eager"])
    cfg, auto = config_for(family, r)
    dropped = bool(dropout) and set_attention_dropout(cfg, family, dropout)
    torch.manual_seed(seed)
    try:
        model = auto.from_config(cfg, attn_implementation=attn).eval()
    except ValueError as e:  # a family with no SDPA path in this transformers (GPT-J in 5.17)
        if attn != "sdpa" or "scaled_dot_product_attention" not in str(e):
            raise
        attn = "eager"
        torch.manual_seed(seed)
        model = auto.from_config(cfg, attn_implementation=attn).eval()
    batch, length = r.choice([1, 2, 3]), r.choice([5, 7, 11])
    side = r.choice(["none", "right", "left"])
    dynamic = r.choice([None, True, False])
    rec = {"seed": seed, "family": family, "attn": attn, "padding": side, "dynamic": dynamic,
           "batch": batch, "length": length, "diff": 0.0, "found": 0, "replaced": 0,
           "skips": []}  # fmt: skip
    if dropout:
        rec["dropout"] = dropout if dropped else f"none: {family} has no entry for it alone"
    inner = torch._dynamo.lookup_backend("aot_eager") if plain else backend(fallback="aot_eager")
    graphs: list[list] = []  # the sites of each compiled graph
    ran: set[int] = set()  # the graphs that ran (Dynamo discards some: below)

    def compile_graph(gm, example_inputs):
        index = len(graphs)
        sites = [] if plain else attention_pass(gm, list(example_inputs), None, rewrite_graph=False)
        graphs.append(sites)
        compiled = inner(gm, example_inputs)

        def run(*args):
            ran.add(index)
            return compiled(*args)

        return run

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=compile_graph, dynamic=dynamic)
    key = "last_hidden_state" if family in ENCODERS else "logits"
    diffs = []
    try:
        with torch.no_grad():
            for n, t in enumerate((length, length + 3)):
                ids = torch.randint(1, VOCAB, (batch, t))
                mask = padding_mask(r, batch, t, side)
                kw = {"input_ids": ids, "attention_mask": mask}
                valid = mask.bool()[..., None]
                if family in SEQ2SEQ:  # every target position is compared
                    kw["decoder_input_ids"] = torch.randint(1, VOCAB, (batch, t - 2))
                    valid = True
                want = getattr(model(**kw), key)
                got = getattr(compiled(**kw), key)
                diffs.append(((got - want).abs() * valid).max().item())
                if n == 0 and family in SEQ2SEQ:
                    diffs.append(_generate(model, compile_graph, dynamic, ids, mask))
                elif n == 0 and family not in ENCODERS:
                    diffs.append(_decode_steps(model, compiled, ids, mask))
        if grad:
            if side == "none":  # HF's training call
                del kw["attention_mask"]
                if family not in ENCODERS:
                    kw["use_cache"] = False
            rec["checkpointing"] = checkpointing and model.supports_gradient_checkpointing
            with torch._dynamo.config.patch(skip_fwd_side_effects_in_bwd_under_checkpoint=True):
                if rec["checkpointing"]:  # (HF checkpoints only in training mode)
                    model.train().gradient_checkpointing_enable({"use_reentrant": False})
                if dropped and not plain:
                    rec["grad"] = _dropout_grad_diff(model, compiled, kw, valid, key)
                else:
                    rec["grad"] = _grad_diff(model, compiled, kw, valid, key)
            diffs.append(rec["grad"])
    finally:
        torch._dynamo.reset()
    rec["diff"] = max(diffs)
    # Only the graphs that ran count: under dynamic=True Dynamo first traces a float module
    # attribute (BLOOM's inv_norm_factor, Gemma-2's softcap) as a tensor, which the pass
    # refuses, then retraces with it specialised and runs that graph instead.
    rec["discarded"] = len(graphs) - len(ran)
    for index in sorted(ran):
        for site in graphs[index]:
            rec["found"] += 1
            rec["replaced"] += site.replaced
            if not site.replaced and site.reason not in rec["skips"]:
                rec["skips"].append(site.reason)
    return rec


def _grad_diff(model, compiled, kw, valid, key) -> float:
    """Largest difference between the compiled and the eager model's parameter gradients of the
    loss sum(w * output) over the valid positions (`valid`: a padded query row's output is
    zeros in flashgen's kernels and HF's own choice eagerly, and reaches no valid position), w
    random. Each parameter's difference is taken relative to its largest eager entry, but not
    below 1e-3 of the largest entry of any parameter: a key projection's bias has a zero
    gradient in exact arithmetic (adding q.b to a whole row of scores leaves the softmax as it
    was), so both sides' values there are rounding noise. A parameter that does not reach the
    loss has no gradient eagerly and zeros from the compiled graph: both count as zeros."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    out = getattr(model(**kw), key)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)) * valid
    want = torch.autograd.grad((out * weight).sum(), params, allow_unused=True)
    got = torch.autograd.grad(
        (getattr(compiled(**kw), key) * weight).sum(), params, allow_unused=True
    )
    return _relative_diff(got, want)


def _relative_diff(got, want) -> float:
    """`_grad_diff`'s measure of two lists of parameter gradients (None: no gradient)."""
    import torch

    zero = torch.zeros(())
    want = [zero if w is None else w for w in want]
    got = [zero if g is None else g for g in got]
    floor = 1e-3 * max(w.abs().max().item() for w in want)
    return max(
        ((g - w).abs().max() / max(w.abs().max().item(), floor, 1e-30)).item()
        for g, w in zip(got, want, strict=True)
    )


def _dropout_grad_diff(model, compiled, kw, valid, key) -> float:
    """`_grad_diff`'s measure, and the output's largest difference, in training mode with
    attention dropout: the compiled model first, recording the seeds its kernels are handed in
    the forward; then the eager model with HF's eager attention, `F.dropout` on 4-d attention
    weights replaced by the kernels' keep mask of each recorded seed in turn, scaled by
    1 / (1 - p). Raises where the eager model's dropout calls and the seeds do not pair up (a
    site not replaced, or dropout applied elsewhere)."""
    import torch
    import torch.nn.functional as F

    from flashgen.kernels import dropout

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    seeds: list[int] = []
    launch_args = dropout.launch_args

    def record(p, seed):
        got = launch_args(p, seed)
        if got is not None:
            seeds.append(got[1])
        return got

    dropout.launch_args = record
    try:
        out = getattr(compiled(**kw), key)
        drawn = list(seeds)  # (the backward reads the same seeds again)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)) * valid
        got = torch.autograd.grad((out * weight).sum(), params, allow_unused=True)
    finally:
        dropout.launch_args = launch_args
    if not drawn:
        raise AssertionError("no kernel drew a dropout mask: no site was replaced with dropout")
    replay = iter(drawn)
    real = F.dropout
    calls = []

    def drop(x, p=0.5, training=True, inplace=False):
        if not training or p == 0.0:
            return real(x, p, training, inplace)
        if x.dim() != 4:  # (PyTorch's generator: the compiled graph's draws differ)
            raise AssertionError(f"a dropout of p={p} outside the attention weights: {x.shape}")
        calls.append(tuple(x.shape))
        seed = next(replay, None)
        if seed is None:
            raise AssertionError(f"eager dropout call {len(calls)}: only {len(drawn)} seeds")
        b, h, sq, sk = x.shape
        return x * dropout.keep_mask(seed, p, b, h, sq, sk, x.device) / (1.0 - p)

    implementation = model.config._attn_implementation
    # (the reference without checkpointing: its recomputed forwards would call F.dropout again,
    # in another order; the eager arithmetic is the same)
    checkpointing = model.is_gradient_checkpointing
    F.dropout = drop
    try:
        if implementation != "eager":
            model.set_attn_implementation("eager")
        if checkpointing:
            model.gradient_checkpointing_disable()
        ref = getattr(model(**kw), key)
        want = torch.autograd.grad((ref * weight).sum(), params, allow_unused=True)
    finally:
        F.dropout = real
        if implementation != "eager":
            model.set_attn_implementation(implementation)
        if checkpointing:
            model.gradient_checkpointing_enable({"use_reentrant": False})
    if len(calls) != len(drawn):
        raise AssertionError(f"{len(drawn)} seeds drawn, {len(calls)} eager dropout calls")
    return max(((out - ref).abs() * valid).max().item(), _relative_diff(got, want))


def _generate(model, backend, dynamic, ids, mask, steps: int = 3) -> float:
    """Largest difference of the scores of `steps` greedy tokens that an encoder-decoder's
    `generate()` gives eagerly and with its forward compiled (the decoding steps' self-attention
    over the cache and cross-attention over the padded source); inf where the tokens differ."""
    import torch

    kw = {"attention_mask": mask, "max_new_tokens": steps, "do_sample": False, "num_beams": 1,
          "output_scores": True, "return_dict_in_generate": True}  # fmt: skip
    want = model.generate(ids, **kw)
    model.forward = torch.compile(model.forward, backend=backend, dynamic=dynamic)
    try:
        got = model.generate(ids, **kw)
    finally:
        del model.forward
    if not torch.equal(got.sequences, want.sequences):
        return float("inf")
    return max((g - w).abs().max().item() for g, w in zip(got.scores, want.scores, strict=True))


def _decode_steps(model, compiled, ids, mask, steps: int = 2) -> float:
    """Largest logit difference over a prefill with a KV cache and `steps` decoding steps, the
    eager and the compiled model each with its own cache."""
    import torch

    kw = {"attention_mask": mask, "use_cache": True}
    want, got = model(input_ids=ids, **kw), compiled(input_ids=ids, **kw)
    cache_w, cache_g = want.past_key_values, got.past_key_values
    worst = ((want.logits - got.logits).abs() * mask.bool()[..., None]).max().item()
    for _ in range(steps):
        token = torch.randint(1, VOCAB, (ids.shape[0], 1))
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        want = model(input_ids=token, attention_mask=mask, past_key_values=cache_w, use_cache=True)
        got = compiled(
            input_ids=token, attention_mask=mask, past_key_values=cache_g, use_cache=True
        )
        cache_w, cache_g = want.past_key_values, got.past_key_values
        worst = max(worst, (want.logits - got.logits).abs().max().item())
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--cases", type=int, default=20, help="how many seeds")
    parser.add_argument("--tol", type=float, default=1e-3, help="largest difference allowed")
    parser.add_argument(
        "--families", default="",
        help=f"comma-separated families to draw from (default: {', '.join(FAMILIES)}; also "
        f"{', '.join(EXTRA)})",
    )  # fmt: skip
    parser.add_argument(
        "--grad", action="store_true",
        help="also compare every parameter's gradient (relative to its largest eager entry)",
    )  # fmt: skip
    parser.add_argument(
        "--checkpointing", action="store_true",
        help="with --grad: under HF's gradient checkpointing (training mode)",
    )  # fmt: skip
    parser.add_argument(
        "--dropout", type=float, default=0.0,
        help="with --grad: attention dropout P, the gradients compared in training mode with the "
        "kernels' masks replayed eagerly",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.checkpointing and not args.grad:
        parser.error("--checkpointing applies to the gradient check: add --grad")
    if args.dropout and not args.grad:
        parser.error("--dropout applies to the gradient check: add --grad")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    families = [f for f in args.families.split(",") if f] or None
    unknown = sorted(set(families or ()) - set(FAMILIES) - set(EXTRA))
    if unknown:
        parser.error(f"--families: unknown {', '.join(unknown)}")
    os.environ.setdefault("FLASHGEN_IMPL", "flashgen")
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    bad, torch_errors = [], []
    found = replaced = 0
    for seed in range(args.seed, args.seed + args.cases):
        try:
            rec = run_case(seed, families, args.grad, args.checkpointing, dropout=args.dropout)
        except Exception as exc:  # noqa: BLE001 - a sweep records every error, with its trace
            trace = traceback.format_exc(limit=8)
            if _fails_without_flashgen(seed, families, args, exc):
                torch_errors.append(seed)
                print(f"TORCH seed {seed} ({drawn_family(seed, families)}): fails the same way "
                      f"without flashgen's pass (aot_eager): {type(exc).__name__}: "
                      f"{str(exc)[:200]}", flush=True)  # fmt: skip
                continue
            bad.append(seed)
            print(f"BAD seed {seed}: error\n{trace}", flush=True)
            continue
        found += rec["found"]
        replaced += rec["replaced"]
        status = "BAD" if rec["diff"] > args.tol else "ok"
        if status == "BAD":
            bad.append(seed)
        print(f"{status} {rec}", flush=True)
    print(f"\n{args.cases} cases: {len(bad)} bad {bad}; {replaced} of {found} sites replaced")
    if torch_errors:
        print(f"{len(torch_errors)} cases PyTorch's own compile fails as well: {torch_errors}")
    return 1 if bad else 0


def _first_draw(seed: int, families=None) -> tuple[random.Random, str]:
    """`run_case`'s generator for `seed` after its first draw, and that draw: the family."""
    r = random.Random(seed)
    return r, r.choice(families or FAMILIES)


def drawn_family(seed: int, families=None) -> str:
    """The family `run_case` draws for `seed`, for a case that raised."""
    return _first_draw(seed, families)[1]


def _fails_without_flashgen(seed, families, args, exc: Exception) -> bool:
    """Whether the case that raised `exc` raises the same exception (type and message)
    compiled with aot_eager alone: then the error is PyTorch's (or the model's) under
    torch.compile, which no backend can avoid, not flashgen's; its seed is reported apart, not
    as bad."""
    try:
        run_case(seed, families, args.grad, args.checkpointing, plain=True, dropout=args.dropout)
    except Exception as again:  # noqa: BLE001
        return type(again) is type(exc) and str(again) == str(exc)
    return False


if __name__ == "__main__":
    sys.exit(main())
