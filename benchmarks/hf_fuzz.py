"""Random HF transformers models (built from configs: random weights, no download) compiled with
the flashgen backend and compared with eager: a correctness sweep of the backend on the model
code people run (no timing).

Each seed draws a model family (Llama, Mistral and Qwen2 with or without a sliding window,
Qwen3, Gemma-2/3, Phi-3, OLMo, StableLM, Starcoder2, Cohere, GPT-2, GPT-NeoX, OPT, GPT-J,
Falcon, BLOOM, BERT; with `--families` also MPT, the encoders ModernBERT, RoBERTa,
DistilBERT, DeBERTa-v2 and XLM, the encoder-decoders BART and T5, GPT-Neo, CodeGen and the
decoders of EXTRA_DECODERS), its attention implementation (`sdpa` or `eager`), head count and
head dim, GQA, a batch with right, left or no padding, and the compile mode (static, automatic
dynamic, `dynamic=True`). It compiles the model with `flashgen.backend(fallback="aot_eager")`,
then compares with eager: the logits (encoders: the last hidden state) at the padded batch's
valid positions, at a second length, and for causal LMs a prefill with a KV cache followed by
two decoding steps, each side with its own cache (encoder-decoders: every target position, then
the scores of three greedy `generate()` steps). With `--grad` it also compares the gradients of
every parameter of a random-weighted loss over the valid positions (no dropout: the configs
have none unless --dropout; the backward kernels with the same masks), an unpadded batch then
called as HF's training call (no attention_mask; decoders `use_cache=False`: the mask from HF's
own position ids); `--checkpointing` adds HF's gradient checkpointing (non-reentrant, training
mode) to that call, the attention then inside each layer's checkpoint. `--dropout P` (with
--grad) builds the models with attention dropout P (every other dropout 0) and runs that
gradient check in training mode: the compiled model's kernels draw their keep masks, the
seeds they are handed are recorded, and the eager reference (HF's eager attention, the same
weights) replays them, its `F.dropout` on the 4-d attention weights applying the kernels' mask
of each seed
(`flashgen.kernels.dropout.keep_mask`: keys numbered from 0, as the pass hands padding to the
kernels as a mask, never as lengths); its output at the valid positions and every parameter's
gradient are compared (a model whose attention code drops nothing in the installed
transformers, HF's Falcon before its attention refactor, is compared as it is and recorded as
"none applied"; where the pass keeps a site in training, PyTorch's attention drops there with
its own generator, so the gradients are not compared: "not replayed", with the site's reason).
It reports the largest difference, how
many attention sites the backend replaced of those it found in the graphs that ran (not those
Dynamo compiled and then discarded), and the reasons for the others.

On the GPU (`--device cuda`, with `--dtype bfloat16` or `float16`) the models run in that
dtype and the kernels the CPU never runs take part (the Hopper family, by FLASHGEN_FWD_FAMILY
and FLASHGEN_BWD_KIND, at `--head-dims 64,128`); each figure is then the compiled model's error
over the eager model's, both against a float32 copy of the model (`Judge`). `--dtype float16`
runs on the CPU too (the interpreter's numpy has float16, not bfloat16): what model code does
in a low precision (GPT-J's float32 casts of q and k, softmax upcasts) reaches the pass there.
`--autocast float16` (or bfloat16 on the GPU) keeps the model in float32 and runs both sides
under `torch.autocast` (compiling too), as mixed-precision training does, judged the same way
against the model run without autocast (rotary embeddings leave q and k float32 beside a
low-precision v there, which autocast casts for each product).

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
# added in session 63: GPT-Neo (its scores in float32 from float32 casts of q and k, the causal
# mask a slice of a bool buffer applied with a 0-d tensor fill, its local layers a band of that
# buffer) and CodeGen (GPT-J's float32 casts of q and k)
EXTRA += ["gpt_neo", "codegen"]
# added in session 65: DeBERTa-v2/v3 (its scale a 0-d tensor, sqrt(tensor(d) * 3), on the keys;
# the scores [batch x heads]-flattened, viewed back before HF's mask, the outer product of the
# padding with itself; with relative attention its c2p/p2c bias, computed from q and k, added)
EXTRA += ["deberta_v2"]
# and XLM (its scores filled in place with the padding `.expand_as(scores)`, the float32
# softmax cast back with `.type_as(scores)`)
EXTRA += ["xlm"]
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
ENCODERS = {"bert", "modernbert", "roberta", "distilbert", "deberta_v2", "xlm"}
# encoder-decoders: logits of a target shorter than the source, then `generate()` (`_generate`)
SEQ2SEQ = {"bart", "t5"}
# families whose HF code has no SDPA path (they run their eager attention)
EAGER_ONLY = {
    "gemma2", "bloom", "mpt", "gpt_oss", "vaultgemma", "gpt_neo", "codegen", "deberta_v2", "xlm",
}  # fmt: skip
# the head dims drawn by default (--head-dims 64,128 on the GPU: those the Hopper kernels take)
HEAD_DIMS = (16, 32)
# the first call's lengths drawn by default; up to MAX_LENGTH (the configs' 128 positions hold
# the second call's 3 more and the two decoding steps). On the GPU, longer ones (33,77,120) run
# the forward kernels where these run the decode kernels (16 query rows or fewer)
LENGTHS = (5, 7, 11)
MAX_LENGTH = 120
# a low-precision case is BAD when the compiled model's error exceeds this many times the eager
# low-precision model's (both against a float32 copy: `Judge`)
LOW_TOL = 3.0


def config_for(family: str, r: random.Random, head_dims=HEAD_DIMS):
    """(config, auto class) of a small random model of `family`, its head dim one of
    `head_dims` (two choices: the same draws follow whichever two)."""
    import transformers

    heads = r.choice([2, 4])
    dim = r.choice(list(head_dims))
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
    elif family == "deberta_v2":  # v3's relative attention (c2p and p2c) or none
        relative = r.random() < 0.7
        cfg = transformers.DebertaV2Config(
            hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=2,
            intermediate_size=2 * hidden, vocab_size=VOCAB, max_position_embeddings=128,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
            relative_attention=relative, position_biased_input=not relative,
            pos_att_type=["p2c", "c2p"], position_buckets=r.choice([4, 16]),
            norm_rel_ebd="layer_norm", max_relative_positions=-1,
        )  # fmt: skip
        return cfg, transformers.AutoModel
    elif family == "xlm":
        cfg = transformers.XLMConfig(
            emb_dim=hidden, n_heads=heads, n_layers=2, vocab_size=VOCAB,
            max_position_embeddings=128, dropout=0.0, attention_dropout=0.0, pad_index=0,
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
    elif family == "gpt_neo":  # a global layer, then a local one (a band of window_size keys)
        cfg = transformers.GPTNeoConfig(
            hidden_size=hidden, num_heads=heads, num_layers=2, vocab_size=VOCAB,
            max_position_embeddings=128, intermediate_size=2 * hidden,
            attention_types=[[["global", "local"], 1]], window_size=r.choice([3, 5, 8]),
            embed_dropout=0.0, resid_dropout=0.0, attention_dropout=0.0,
        )  # fmt: skip
    elif family == "codegen":
        # four heads at least: CodeGen's fused projection is split over 4 shards, and
        # transformers before its attention refactor (5.17 on the device) views it as
        # heads // 4 heads a shard (2 heads: a view of size 0; session 64)
        heads = max(heads, 4)
        cfg = transformers.CodeGenConfig(
            n_embd=heads * dim, n_head=heads, n_layer=2, vocab_size=VOCAB, n_positions=128,
            n_ctx=128, rotary_dim=dim // 2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
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
    "gpt2": "attn_pdrop", "gptj": "attn_pdrop", "codegen": "attn_pdrop",
    "bert": "attention_probs_dropout_prob",
    "roberta": "attention_probs_dropout_prob", "deberta_v2": "attention_probs_dropout_prob",
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
    dropout: float = 0.0, device: str = "cpu", dtype: str = "float32", head_dims=HEAD_DIMS,
    lengths=LENGTHS, autocast: str | None = None,
) -> dict:  # fmt: skip
    """Build, compile and compare one drawn model (of `families`, default FAMILIES); with
    `grad`, also its parameters' gradients (`_grad_diff`), with `checkpointing` under HF's
    gradient checkpointing, with `dropout` in training mode with that attention dropout
    (`_dropout_grad_diff`); the record (errors are raised). `plain`: the same case compiled
    with PyTorch's aot_eager alone (no flashgen pass), to tell whether an error is flashgen's
    (then no masks are replayed: the gradients are not compared). `device`, `dtype`: where and
    in what the model runs (built in float32 on the CPU from the seed, then moved; a low
    precision is judged against a float32 copy, `Judge`); `head_dims`, `lengths`: the two head
    dims and three first lengths drawn from (the second call's is 3 longer); `autocast`
    ("float16" or "bfloat16"): the float32 model compiled and run under `torch.autocast` to
    that dtype, eager under it too, both judged against the model run without it."""
    import contextlib

    import torch

    from flashgen.compile.backend import backend
    from flashgen.compile.patterns import attention_pass

    r, family = _first_draw(seed, families)
    attn = "eager" if family in EAGER_ONLY else r.choice(["sdpa", "eager"])
    cfg, auto = config_for(family, r, head_dims)
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
    judge = Judge.place(model, device, getattr(torch, dtype), autocast and getattr(torch, autocast))
    batch, length = r.choice([1, 2, 3]), r.choice(list(lengths))
    side = r.choice(["none", "right", "left"])
    dynamic = r.choice([None, True, False])
    rec = {"seed": seed, "family": family, "attn": attn, "padding": side, "dynamic": dynamic,
           "batch": batch, "length": length, "diff": 0.0, "found": 0, "replaced": 0,
           "skips": []}  # fmt: skip
    if device != "cpu" or dtype != "float32":
        rec.update(device=device, dtype=dtype)
    amp = contextlib.ExitStack()  # (autocast: around compiling and every call but the judge's)
    if autocast:
        rec["autocast"] = autocast
        amp.enter_context(torch.autocast(device, dtype=getattr(torch, autocast)))
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
                ids = torch.randint(1, VOCAB, (batch, t)).to(device)
                mask = padding_mask(r, batch, t, side).to(device)
                kw = {"input_ids": ids, "attention_mask": mask}
                valid = mask.bool()[..., None]
                if family in SEQ2SEQ:  # every target position is compared
                    kw["decoder_input_ids"] = torch.randint(1, VOCAB, (batch, t - 2)).to(device)
                    valid = True
                want = getattr(model(**kw), key)
                got = getattr(compiled(**kw), key)
                diffs.append(judge.outputs(got, want, judge.run(key, **kw), valid))
                if n == 0 and family in SEQ2SEQ:
                    diffs.append(_generate(model, compile_graph, dynamic, ids, mask, judge))
                elif n == 0 and family not in ENCODERS:
                    diffs.append(_decode_steps(model, compiled, ids, mask, judge))
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
                    before = len(graphs)  # (training mode compiles graphs of its own)
                    try:
                        rec["grad"], drawn = _dropout_grad_diff(
                            model, compiled, kw, valid, key, judge
                        )
                    except AssertionError:
                        kept = [s.reason for s in _ran_sites(graphs, ran, before) if not s.replaced]
                        if not kept:
                            raise
                        # PyTorch's own attention drops there, with its own generator: the
                        # masks cannot be replayed, so the gradients are not compared
                        rec["dropout"] = f"not replayed: {len(kept)} site(s) kept ({kept[0]})"
                        drawn = None
                    if drawn == 0:  # (older HF code: Falcon's before its attention refactor)
                        rec["dropout"] = f"none applied: {family}'s attention code drops nothing"
                else:
                    rec["grad"] = _grad_diff(model, compiled, kw, valid, key, judge)
            if "grad" in rec:
                diffs.append(rec["grad"])
    except AssertionError as exc:  # the replay's refusals: say what the backend saw
        raise AssertionError(f"{exc} [{_graphs_seen(graphs, ran)}]") from exc
    finally:
        amp.close()
        torch._dynamo.reset()
    rec["diff"] = _worst(diffs)  # (NaN: BAD)
    # Only the graphs that ran count: under dynamic=True Dynamo first traces a float module
    # attribute (BLOOM's inv_norm_factor, Gemma-2's softcap) as a tensor, which the pass
    # refuses, then retraces with it specialised and runs that graph instead.
    rec["discarded"] = len(graphs) - len(ran)
    for site in _ran_sites(graphs, ran):
        rec["found"] += 1
        rec["replaced"] += site.replaced
        if not site.replaced and site.reason not in rec["skips"]:
            rec["skips"].append(site.reason)
    return rec


def _ran_sites(graphs: list[list], ran: set[int], first: int = 0) -> list:
    """The sites of the graphs that ran (`ran`: their indices), from graph `first` on."""
    return [site for index in sorted(ran) if index >= first for site in graphs[index]]


def _graphs_seen(graphs: list[list], ran: set[int]) -> str:
    """What the backend compiled, for an error's message: how many graphs, which ran, and each
    graph's sites as replaced (R) or kept (K: its reason)."""
    parts = []
    for index, sites in enumerate(graphs):
        marks = [("R" if s.replaced else f"K: {s.reason}") for s in sites]
        parts.append(f"graph {index}{' (ran)' if index in ran else ''}: {marks}")
    return f"{len(graphs)} graphs compiled; " + "; ".join(parts)


class Judge:
    """How `run_case` compares the compiled model with eager. In float32 (the CPU's, or the
    GPU's with the kernels' IEEE products): the largest absolute difference, BAD above --tol
    (1e-3). In bfloat16 or float16 (float16 on the CPU too) the two sides round differently,
    from each other and from exact arithmetic, so both are compared with a float32 copy of the
    model on the same device, run eagerly (`ref`), and the figure is the compiled model's largest
    error over the eager low-precision model's, BAD above --tol (LOW_TOL): PyTorch's own
    rounding is the yardstick (under `--autocast`, the float32 model run without autocast is the
    copy). The eager error is floored at the dtype's eps (times the reference's largest entry
    for outputs), so a lucky eager match does not inflate the ratio."""

    def __init__(self, ref=None, eps: float = 0.0):
        self.ref, self.eps = ref, eps

    @classmethod
    def place(cls, model, device: str, dtype, autocast=None) -> Judge:
        """Move `model` (float32, on the CPU) to `device` and `dtype`, keeping a float32 copy
        on `device` where `dtype` is a low precision; with `autocast` (a dtype: the compared
        calls run under `torch.autocast` to it) the copy runs with autocast switched off."""
        import copy
        import functools

        import torch

        low = autocast or dtype
        ref = None if low == torch.float32 else copy.deepcopy(model).to(device)
        model.to(device=device, dtype=dtype)
        if autocast and ref is not None:  # (generate() and the replay call it too)
            ref.forward = functools.partial(_without_autocast, device, ref.forward)
        return cls(ref, 0.0 if ref is None else torch.finfo(low).eps)

    def run(self, key: str, **kw):
        """The float32 copy's output `key` for the call `kw` (None in float32)."""
        return None if self.ref is None else getattr(self.ref(**kw), key)

    def outputs(self, got, want, ref=None, valid=True) -> float:
        """The figure for one output at the `valid` positions (`ref`: the float32 copy's)."""
        if ref is None:
            return _largest((got - want).abs(), valid)
        ref = ref.float()

        def error(x):
            return _largest((x.float() - ref).abs(), valid)

        floor = self.eps * _largest(ref.abs(), valid)
        return error(got) / max(error(want), floor, 1e-30)

    def grads(self, got, want, ref=None) -> float:
        """The figure for two lists of parameter gradients (`_relative_diff`'s measure)."""
        if ref is None:
            return _relative_diff(got, want)
        return _relative_diff(got, ref) / max(_relative_diff(want, ref), self.eps)

    def ref_grads(self, key: str, weight, training: bool, **kw):
        """The float32 copy's parameter gradients of the loss sum(weight * output) (None in
        float32), in `training` mode as the compared model."""
        if self.ref is None:
            return None
        import torch

        self.ref.train(training)
        params = [p for p in self.ref.parameters() if p.requires_grad]
        out = getattr(self.ref(**kw), key)
        return torch.autograd.grad((out * weight).sum(), params, allow_unused=True)


def _without_autocast(device: str, forward, *args, **kw):
    """`forward(*args, **kw)` with autocast off on `device` (the judge's float32 copy)."""
    import torch

    with torch.autocast(device, enabled=False):
        return forward(*args, **kw)


def _largest(x, valid) -> float:
    """The largest entry of `x` at the `valid` positions (a bool tensor broadcast to it, or
    True); NaN there is NaN (a NaN elsewhere, at a padded position, is not compared)."""
    import torch

    if valid is not True:
        x = torch.where(valid, x, 0.0)
    return x.max().item() if x.numel() else 0.0


def _grad_diff(model, compiled, kw, valid, key, judge: Judge | None = None) -> float:
    """Largest difference between the compiled and the eager model's parameter gradients of the
    loss sum(w * output) over the valid positions (`valid`: a padded query row's output is
    zeros in flashgen's kernels and HF's own choice eagerly, and reaches no valid position), w
    random. Each parameter's difference is taken relative to its largest eager entry, but not
    below 1e-3 of the largest entry of any parameter: a key projection's bias has a zero
    gradient in exact arithmetic (adding q.b to a whole row of scores leaves the softmax as it
    was), so both sides' values there are rounding noise. A parameter that does not reach the
    loss has no gradient eagerly and zeros from the compiled graph: both count as zeros. In a
    low precision, `judge`'s ratio against the float32 copy's gradients."""
    import torch

    judge = judge or Judge()
    params = [p for p in model.parameters() if p.requires_grad]
    out = getattr(model(**kw), key)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.device)
    weight = weight * valid
    want = torch.autograd.grad((out * weight).sum(), params, allow_unused=True)
    got = torch.autograd.grad(
        (getattr(compiled(**kw), key) * weight).sum(), params, allow_unused=True
    )
    return judge.grads(got, want, judge.ref_grads(key, weight, model.training, **kw))


def _relative_diff(got, want) -> float:
    """`_grad_diff`'s measure of two lists of parameter gradients (None: no gradient)."""
    import torch

    zero = torch.zeros(())
    want = [zero if w is None else w for w in want]
    got = [zero if g is None else g for g in got]
    floor = 1e-3 * max(w.abs().max().item() for w in want)
    return _worst(
        ((g - w).abs().max() / max(w.abs().max().item(), floor, 1e-30)).item()
        for g, w in zip(got, want, strict=True)
    )


def _worst(figures) -> float:
    """The largest of `figures`, NaN if one is NaN (Python's max keeps whichever came first)."""
    figures = list(figures)
    return float("nan") if any(f != f for f in figures) else max(figures)


def _dropout_grad_diff(
    model, compiled, kw, valid, key, judge: Judge | None = None
) -> tuple[float, int]:
    """`_grad_diff`'s measure, and the output's largest difference, in training mode with
    attention dropout, and how many seeds the kernels drew: the compiled model first, recording
    the seeds its kernels are handed in the forward; then the eager model with HF's eager
    attention, `F.dropout` on 4-d attention weights replaced by the kernels' keep mask of each
    recorded seed in turn, scaled by 1 / (1 - p) (`_replay`; in a low precision the float32
    copy replays them too, `judge`). Raises where the eager model's dropout calls and the seeds
    do not pair up (a site not replaced, or dropout applied elsewhere). No seed and no eager
    dropout call: the model's attention code applies none (HF's Falcon before its attention
    refactor drops nothing without ALiBi), and the two sides are compared as they are."""
    import torch

    from flashgen.kernels import dropout

    judge = judge or Judge()
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
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        weight = weight.to(out.device) * valid
        got = torch.autograd.grad((out * weight).sum(), params, allow_unused=True)
    finally:
        dropout.launch_args = launch_args
    eager, want = _replay(model, kw, key, weight, drawn)
    ref, ref_grads = (
        (None, None) if judge.ref is None else _replay(judge.ref, kw, key, weight, drawn)
    )
    figure = _worst([judge.outputs(out, eager, ref, valid), judge.grads(got, want, ref_grads)])
    return figure, len(drawn)


def _replay(model, kw, key, weight, drawn: list[int]):
    """`_dropout_grad_diff`'s eager side: `model`'s output `key` in training mode with HF's
    eager attention, its 4-d `F.dropout` calls applying the kernels' keep masks of the seeds
    `drawn` in turn, and its parameters' gradients of sum(weight * output)."""
    import torch
    import torch.nn.functional as F

    from flashgen.kernels import dropout

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
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
        if seed is None and not drawn:
            raise AssertionError(
                "no kernel drew a dropout mask, but eager HF drops its attention weights: a "
                "site was not replaced, or replaced without its dropout"
            )
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
    return ref, want


def _generate(model, backend, dynamic, ids, mask, judge: Judge, steps: int = 3) -> float:
    """Largest difference of the scores of `steps` greedy tokens that an encoder-decoder's
    `generate()` gives eagerly and with its forward compiled (the decoding steps' self-attention
    over the cache and cross-attention over the padded source), where the reference's scores
    are finite (a logits processor's -inf elsewhere: the pattern must match); inf where the
    tokens differ. In a low precision (`judge`'s float32 copy generating too) a near-tie
    between two tokens may fall either way on each side: the steps compared are those whose
    earlier tokens all three sides agree on (the first always)."""
    import torch

    kw = {"attention_mask": mask, "max_new_tokens": steps, "do_sample": False, "num_beams": 1,
          "output_scores": True, "return_dict_in_generate": True}  # fmt: skip
    want = model.generate(ids, **kw)
    ref = None if judge.ref is None else judge.ref.generate(ids, **kw)
    model.forward = torch.compile(model.forward, backend=backend, dynamic=dynamic)
    try:
        got = model.generate(ids, **kw)
    finally:
        del model.forward
    if ref is None and not torch.equal(got.sequences, want.sequences):
        return float("inf")
    sides = (got, want) if ref is None else (got, want, ref)
    worst = 0.0
    for i in range(min(len(side.scores) for side in sides)):
        # (a logits processor's -inf, BART's forced end token: compared as a pattern)
        finite = torch.isfinite(sides[-1].scores[i])
        if not torch.equal(torch.isfinite(got.scores[i]), finite):
            return float("inf")
        g, w, *f = (torch.where(finite, side.scores[i].float(), 0.0) for side in sides)
        worst = _worst([worst, judge.outputs(g, w, f[0] if f else None)])
        tokens = [s.sequences[:, s.sequences.shape[1] - len(s.scores) + i] for s in sides]
        if not all(torch.equal(tokens[0], t) for t in tokens[1:]):
            break
    return worst


def _decode_steps(model, compiled, ids, mask, judge: Judge, steps: int = 2) -> float:
    """Largest logit difference over a prefill with a KV cache and `steps` decoding steps, the
    eager and the compiled model (and `judge`'s float32 copy) each with its own cache."""
    import torch

    models = [model, compiled] + ([] if judge.ref is None else [judge.ref])
    outs = [m(input_ids=ids, attention_mask=mask, use_cache=True) for m in models]
    valid = mask.bool()[..., None]
    worst = 0.0
    for step in range(steps + 1):
        want, got, *ref = outs
        ref = ref[0].logits if ref else None
        worst = _worst([worst, judge.outputs(got.logits, want.logits, ref, valid)])
        if step == steps:
            break
        token = torch.randint(1, VOCAB, (ids.shape[0], 1)).to(ids.device)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        valid = True
        outs = [
            m(input_ids=token, attention_mask=mask, past_key_values=o.past_key_values,
              use_cache=True)
            for m, o in zip(models, outs, strict=True)
        ]  # fmt: skip
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--cases", type=int, default=20, help="how many seeds")
    parser.add_argument(
        "--tol", type=float, default=None,
        help=f"largest difference allowed (default 1e-3; in bfloat16/float16 the largest ratio of "
        f"the compiled model's error to eager's, both against float32, default {LOW_TOL})",
    )  # fmt: skip
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
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where the models run (cpu: the kernels in Triton's interpreter)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
        help="the models' dtype (bfloat16 needs --device cuda; bfloat16 and float16 are judged "
        "against a float32 copy of each model, see --tol)",
    )  # fmt: skip
    parser.add_argument(
        "--autocast", choices=("float16", "bfloat16"), default=None,
        help="run the float32 models under torch.autocast to this dtype (compiled and eager), "
        "judged against the model without it as --dtype bfloat16 is (bfloat16: --device cuda)",
    )  # fmt: skip
    parser.add_argument(
        "--head-dims", default=",".join(map(str, HEAD_DIMS)),
        help="the two head dims drawn from (64,128: those the Hopper kernels take on the GPU)",
    )  # fmt: skip
    parser.add_argument(
        "--lengths", default=",".join(map(str, LENGTHS)),
        help=f"the three first lengths drawn from, 4 to {MAX_LENGTH} (on the GPU 33,77,120: "
        "the forward kernels rather than the decode kernels)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    head_dims = _ints(args.head_dims)
    if len(head_dims) != 2 or min(head_dims) < 8 or any(d % 8 for d in head_dims):
        parser.error(f"--head-dims: two multiples of 8, e.g. 64,128; got {args.head_dims!r}")
    lengths = _ints(args.lengths)
    if len(lengths) != 3 or min(lengths) < 4 or max(lengths) > MAX_LENGTH:
        parser.error(f"--lengths: three lengths from 4 to {MAX_LENGTH}; got {args.lengths!r}")
    if args.dtype == "bfloat16" and args.device != "cuda":
        parser.error("--dtype bfloat16 runs on --device cuda only (the interpreter's numpy has "
                     "no bfloat16; float16 runs on either)")  # fmt: skip
    if args.autocast and args.dtype != "float32":
        parser.error("--autocast runs float32 models: leave --dtype out")
    if args.autocast == "bfloat16" and args.device != "cuda":
        parser.error("--autocast bfloat16 runs on --device cuda only (as --dtype bfloat16)")
    low = args.autocast or args.dtype
    if args.tol is None:
        args.tol = 1e-3 if low == "float32" else LOW_TOL
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
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    args.place = {
        "device": args.device, "dtype": args.dtype, "head_dims": head_dims, "lengths": lengths,
        "autocast": args.autocast,
    }  # fmt: skip
    mode = args.dtype + (f" under autocast to {args.autocast}" if args.autocast else "")
    print(
        f"hf_fuzz on {args.device}, {mode}, head dims {head_dims}, lengths {lengths}: "
        f"BAD above {args.tol}" + ("" if low == "float32" else " (error ratio to eager's)")
    )
    bad, torch_errors = [], []
    found = replaced = 0
    for seed in range(args.seed, args.seed + args.cases):
        try:
            rec = run_case(
                seed, families, args.grad, args.checkpointing, dropout=args.dropout, **args.place
            )
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
        status = "ok" if rec["diff"] <= args.tol else "BAD"  # (NaN too)
        if status == "BAD":
            bad.append(seed)
        print(f"{status} {rec}", flush=True)
    print(f"\n{args.cases} cases: {len(bad)} bad {bad}; {replaced} of {found} sites replaced")
    if torch_errors:
        print(f"{len(torch_errors)} cases PyTorch's own compile fails as well: {torch_errors}")
    return 1 if bad else 0


def _ints(text: str) -> tuple[int, ...]:
    """The comma-separated integers of `text` (an empty tuple where one is not an integer)."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        return ()


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
        run_case(
            seed, families, args.grad, args.checkpointing, plain=True, dropout=args.dropout,
            **args.place,
        )  # fmt: skip
    except Exception as again:  # noqa: BLE001
        return type(again) is type(exc) and str(again) == str(exc)
    return False


if __name__ == "__main__":
    sys.exit(main())
