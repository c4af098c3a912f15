"""HF decoder and encoder models on a padded batch (random weights from a config, no download)
under torch.compile: the flashgen backend against Inductor, forward and forward+backward, timed
alternately (needs CUDA; --smoke checks the script on the CPU).

    python benchmarks/hf_padded.py --family bloom --out bloom.json

The cases issue 16's coverage added: HF's eager attention adds `where(causal & keep, 0,
finfo.min)` to the scores, which the backend now hands the kernels as the causal flag and the
per-key padding instead of the N x N tensor (Llama, Gemma-2, Mistral eager), and BLOOM's ALiBi
with an attention_mask (positions counted over the kept keys) is read as a per-key bias beside
them; DeepSeek-V3's latent attention (`--family deepseek_v3 --attn eager`: values of another
head dim than the keys', every layer dense) is replaced with its values padded. HF's encoders
(BERT, ModernBERT: `--family bert|modernbert`, best with `--attn sdpa`,
what HF picks by default) build `(q_idx >= 0) & padding[b, kv_idx]` as a [B, 1, N, N] tensor,
now handed over as the per-key padding (ModernBERT's local layers: a two-sided window beside
it); PyTorch runs SDPA with that mask. T5's encoder (`--family t5`, T5EncoderModel) adds its
relative position bias ([1, H, N, N], a learned table's gradient) to the padding's
[B, 1, 1, N] and hands SDPA (or the eager scores) the [B, H, N, N] sum. Each entry of the batch but the first is padded (`--pad`
side) by a share of the length; `--pad none` passes no attention_mask and use_cache=False (HF's
training call: decoders build their mask from their own position ids, proven causal).
`--cudagraphs`: both backends run their graphs as CUDA graphs (a model whose host work outlasts
its kernels, as this ModernBERT's forward at B4 T2048 on an H100, benchmarks/RESULTS.md session
52). `--checkpointing`: HF's `gradient_checkpointing_enable` (non-reentrant) on the compiled
models, the attention then inside each layer's checkpoint (Dynamo told to skip the forward's side
effects in the backward's replay, which HF's hub-kernels layer needs), and a decoder is called
with use_cache=False as HF's gradient checkpointing forces. `--attn-dropout P`: attention
dropout in training (HF BERT's eager attention then adds its padding as a [B, 1, N, N] tensor
that the backend reads one row of); the check below is then not made.
Both backends compile the same model; their logits at the valid positions, and the gradient
of a loss of them with respect to the embeddings, are checked against a float32 copy
(flashgen's error may not exceed twice Inductor's plus 1e-3); then the two are timed in turn
for `--rounds` rounds (do_bench medians, L2 flushed: `flashgen.bench.harness.gpu_timer`). A
ratio is Inductor's median over flashgen's (> 1: flashgen faster); beside them each side's host
time a forward (`host us a forward`). Exit status 1 when the check fails or no attention site
was replaced or left to PyTorch on purpose (`kept`: too small for flashgen to gain,
`flashgen.explain` says why).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time


def config(family: str, width: int, heads: int, layers: int, seq: int, drop: float = 0.0):
    """A small-vocabulary config of `family`: no dropout anywhere but `drop`, the attention
    probabilities' dropout (T5's one rate would drop its hidden states too: not offered)."""
    if drop and family == "t5":
        raise ValueError("--attn-dropout: T5's dropout_rate is not attention's alone")
    import transformers

    common = dict(vocab_size=1024, pad_token_id=0)
    if family == "bloom":
        return transformers.BloomConfig(
            hidden_size=width, n_head=heads, n_layer=layers, attention_dropout=drop,
            hidden_dropout=0.0, **common,
        )  # fmt: skip
    kw = dict(
        hidden_size=width, num_attention_heads=heads, num_key_value_heads=heads // 4 or 1,
        num_hidden_layers=layers, intermediate_size=2 * width, max_position_embeddings=seq,
        attention_dropout=drop, **common,
    )  # fmt: skip
    if family == "llama":
        return transformers.LlamaConfig(**kw)
    if family == "gemma2":
        return transformers.Gemma2Config(head_dim=width // heads, sliding_window=seq // 4, **kw)
    if family == "deepseek_v3":  # latent attention: keys of d + d/2 (rotary) dims, values of d
        d = width // heads
        kw.update(num_key_value_heads=heads, first_k_dense_replace=layers, n_routed_experts=2)
        return transformers.DeepseekV3Config(
            q_lora_rank=None, kv_lora_rank=width // 2, qk_nope_head_dim=d,
            qk_rope_head_dim=d // 2, v_head_dim=d, **kw,
        )  # fmt: skip
    enc = dict(hidden_size=width, num_attention_heads=heads, num_hidden_layers=layers,
               intermediate_size=2 * width, max_position_embeddings=seq, **common)  # fmt: skip
    if family == "bert":
        return transformers.BertConfig(
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=drop, **enc
        )
    if family == "modernbert":  # a local layer (window 128) then a global one, repeated
        # At ModernBERT's initializer_range 0.02 (its output projections scaled down by depth
        # too) the attention branch is ~1% of the last hidden state: zeroing it took the
        # check's error from 0.017 (bf16) to 0.039, against an allowance of 0.036 (float32 on
        # a CPU, width 1024, 512 tokens); at 0.05, from 0.038 to 0.44 (session 53).
        return transformers.ModernBertConfig(
            global_attn_every_n_layers=2, local_attention=128, reference_compile=False,
            embedding_dropout=0.0, mlp_dropout=0.0, attention_dropout=drop,
            initializer_range=0.05, **enc,
        )  # fmt: skip
    if family == "t5":  # the encoder alone: a relative bias [1, H, N, N] beside the padding
        return transformers.T5Config(
            d_model=width, num_heads=heads, d_kv=width // heads, d_ff=2 * width,
            num_layers=layers, dropout_rate=0.0, vocab_size=1024, pad_token_id=0,
        )  # fmt: skip
    raise ValueError(f"unknown family {family!r}")


ENCODERS = ("bert", "modernbert", "t5")


def padded_mask(batch: int, seq: int, side: str, device):
    """[batch, seq] 0/1 mask: entry b padded by b / (2 * batch) of the length on `side`."""
    import torch

    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    for b in range(1, batch):
        n = seq * b // (2 * batch)
        if side == "left":
            mask[b, :n] = 0
        else:
            mask[b, seq - n :] = 0
    return mask


def main(argv: list[str] | None = None) -> int:
    from flashgen.bench.harness import backend_script_args, gpu_or_smoke

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=["bloom", "llama", "gemma2", "deepseek_v3", *ENCODERS],
                    default="bloom")  # fmt: skip
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager",
                    help="HF's attn_implementation (BLOOM and Gemma-2 have eager only)")  # fmt: skip
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--pad", choices=["left", "right", "none"], default="left")
    ap.add_argument("--attn-dropout", type=float, default=0.0, metavar="P",
                    help="attention dropout in training (not T5): the check against the float32 "
                    "copy is then not made (their draws differ), only the timings")  # fmt: skip
    ap.add_argument("--checkpointing", action="store_true",
                    help="HF's gradient checkpointing on the compiled models")  # fmt: skip
    ap.add_argument("--cudagraphs", action="store_true",
                    help="both backends run CUDA graphs (Inductor's mode='reduce-overhead', "
                    "flashgen.backend(cudagraphs=True)): the kernels without the host's work")  # fmt: skip
    backend_script_args(ap, rounds=3, rep=40)
    args = ap.parse_args(argv)
    import torch

    cuda = gpu_or_smoke(args.smoke)
    if cuda is None:
        return 2
    if not cuda:
        args.batch, args.seq, args.width, args.heads, args.layers, args.rounds = 2, 24, 64, 4, 1, 1
    import transformers

    import flashgen
    from flashgen.bench.harness import (
        backend_pair,
        gpu_timer,
        host_us,
        rel_err,
        report_backends,
        run_meta,
        wall_timer,
    )
    from flashgen.compile import patterns

    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    torch.manual_seed(0)
    cfg = config(args.family, args.width, args.heads, args.layers, args.seq, args.attn_dropout)
    auto = transformers.AutoModel if args.family in ENCODERS else transformers.AutoModelForCausalLM
    if args.family == "t5":  # (AutoModel would build the decoder too)
        reference = transformers.T5EncoderModel(cfg)
        reference.set_attn_implementation(args.attn)
    else:
        reference = auto.from_config(cfg, attn_implementation=args.attn)
    reference = reference.to(dev).float().train()

    def output_of(out):  # the logits, or an encoder's last hidden state
        return out.last_hidden_state if args.family in ENCODERS else out.logits

    model = copy.deepcopy(reference).to(dtype)
    if args.checkpointing:
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(1, cfg.vocab_size, (args.batch, args.seq), device=dev)
    if args.pad == "none":  # the training call: no mask, no cache
        mask = torch.ones(args.batch, args.seq, dtype=torch.long, device=dev)
        kw = {} if args.family in ENCODERS else {"use_cache": False}
    else:
        mask = padded_mask(args.batch, args.seq, args.pad, dev)
        kw = {"attention_mask": mask}
        if args.checkpointing and args.family not in ENCODERS:
            kw["use_cache"] = False  # else HF logs a warning inside forward(): a graph break
    valid = mask.bool()[..., None]
    embed = model.get_input_embeddings()
    x = embed(ids).detach().requires_grad_()
    xf = x.detach().float().requires_grad_()

    # An encoder ends in a LayerNorm, whose rows' sum of squares does not move: a loss of it
    # would leave the gradient rounding noise, so its rows are weighted at random.
    weights = valid
    if args.family in ENCODERS:
        weights = valid * torch.randn(*ids.shape, cfg.hidden_size, device=dev)

    def loss_of(logits):
        return (logits.float() * weights).square().mean()

    ref = output_of(reference(inputs_embeds=xf, **kw)) * valid
    (gref,) = torch.autograd.grad(loss_of(ref), xf)
    before, kept_before = patterns.replaced_total(), patterns.kept_total()
    runs = backend_pair(model, cuda, args.cudagraphs)
    report: dict = {"meta": run_meta(dev), "args": vars(args), "compile_s": {}, "err": {}}
    for name, fn in runs.items():
        start = time.perf_counter()
        try:
            out = output_of(fn(inputs_embeds=x, **kw)) * valid
            (grad,) = torch.autograd.grad(loss_of(out), x)
        except Exception:  # (the traceback follows; say whose it is first)
            print(f"hf_padded: the {name} backend failed at its first call", file=sys.stderr)
            raise
        report["err"][name] = [rel_err(out, ref), rel_err(grad, gref)]
        if cuda:
            torch.cuda.synchronize()
        report["compile_s"][name] = round(time.perf_counter() - start, 1)
    report["replaced"] = patterns.replaced_total() - before
    report["kept"] = patterns.kept_total() - kept_before
    report["explain"] = str(flashgen.explain(model, inputs_embeds=x, **kw))
    report["ok"] = report["replaced"] + report["kept"] > 0 and (
        args.attn_dropout > 0  # (dropout: each side draws its own; no check, the errors shown)
        or all(
            ours <= 2 * theirs + 1e-3
            for ours, theirs in zip(
                report["err"]["flashgen"], report["err"]["inductor"], strict=True
            )
        )
    )
    timer = gpu_timer(args.rep) if cuda else wall_timer(1)

    def forward(fn):
        def run():
            with torch.no_grad():
                return output_of(fn(inputs_embeds=x, **kw))

        return run

    def forward_backward(fn):
        return lambda: torch.autograd.grad(loss_of(output_of(fn(inputs_embeds=x, **kw))), x)

    modes = {"fwd": forward, "fwd_bwd": forward_backward}
    if cuda:
        # each side's host work a no-grad forward (20 calls back to back, no sync): where it
        # outlasts the kernels the forward is host-bound, and a slower host shows in its time
        # (session 52's ModernBERT, benchmarks/RESULTS.md)
        sync = torch.cuda.synchronize
        report["host_us_fwd"] = {
            name: round(host_us(forward(fn), calls=20, rounds=5, sync=sync, warmup=2), 1)
            for name, fn in runs.items()
        }
        print(f"host us a forward: {report['host_us_fwd']}")
    # (the first call of each, untimed, compiles the no_grad forward's own graph)
    return report_backends(report, runs, modes, timer, args.rounds, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
