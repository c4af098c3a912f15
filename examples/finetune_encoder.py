"""Fine-tune a Hugging Face encoder (random weights, no download) on padded batches with attention
dropout, eagerly, under Inductor and under flashgen.

    python examples/finetune_encoder.py                           # BERT-base, 32 x 512, p = 0.1
    python examples/finetune_encoder.py --family modernbert --shapes 8x2048
    python examples/finetune_encoder.py --smoke                   # tiny, CPU interpreter (CI)

What people fine-tune: `transformers.AutoModelForSequenceClassification` (BERT, RoBERTa or
ModernBERT, built from a config: default BERT-base, 12 layers, hidden 768, 12 heads of 64) in
bf16, trained with AdamW on batches of random token sequences of random lengths (each between a
quarter of the batch's length and all of it, right-padded; the attention_mask says which) and
random labels, with the attention dropout of the model's config (`--dropout`, BERT's 0.1; the
hidden dropouts are off, so attention is what the backends differ in). HF builds a [B, 1, T, T]
padding mask; flashgen's backend reads it as one entry per key (ModernBERT's local layers: a
two-sided window beside it) and draws the dropout in its kernels, forward and backward; Inductor
runs SDPA with the mask and dropout (with `--attn sdpa`, HF's default) or compiles HF's eager
attention. On a GPU, with `--attn sdpa`, a masked call too small for flashgen's kernels to gain
(BERT-base at 32 x 512 with its attention dropout: 26 GFLOP a layer, below 30; with `--dropout
0`, below 50) keeps PyTorch's SDPA (`flashgen.explain` says so; the sites count as kept, not
replaced): there flashgen's row is Inductor's graph. With `--attn eager` the hand-written rule's
25 GFLOP applies (HF's padding read one row, per key, beside the dropout), so at 32 x 512
flashgen's kernels run.

For each batch shape it reports tokens/s (padding included: what the GPU runs) and peak memory
over the timed steps, and the loss curves against eager's: each backend draws its own dropout
masks (PyTorch's generator, Inductor's, flashgen's kernels'), so the curves agree only as far as
different masks let them (`--loss-tol` on the mean gap, default 0.05; with `--dropout 0` they
agree to rounding). Exit status 1 when a curve disagrees or no attention site was replaced or
kept.
"""

from __future__ import annotations

import common

FAMILIES = ("bert", "roberta", "modernbert")


def parse(argv=None):
    p = common.base_parser(__doc__)
    common.add_gpu_lock(p)
    p.add_argument("--family", default="bert", choices=FAMILIES)
    p.add_argument("--shapes", default="32x512", help="BxT items (default 32x512)")
    p.add_argument("--backends", default="eager,inductor,flashgen")
    p.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"))
    p.add_argument("--dropout", type=float, default=0.1, help="attention dropout (default 0.1)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--steps", type=int, default=6, help="timed steps (default 6)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--loss-tol", type=float, default=0.05,
                   help="the largest mean |loss - eager loss| over the steps (default 0.05)")  # fmt: skip
    args = p.parse_args(argv)
    if not 0.0 <= args.dropout < 1.0:
        p.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.smoke:
        args.shapes, args.layers, args.hidden, args.heads = "3x24", 2, 64, 4
        args.vocab, args.steps, args.warmup = 128, 2, 1
    args.shapes = common.shape_list(args.shapes)
    args.backends = common.backend_list(args)
    return args


def build(args, device, dtype, max_len):
    import torch
    import transformers

    torch.manual_seed(0)
    common_kw = dict(
        vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
        max_position_embeddings=max_len + 2, num_labels=2, pad_token_id=0,
    )  # fmt: skip
    if args.family == "modernbert":  # a 128-key local layer between global ones, as released
        cfg = transformers.ModernBertConfig(
            global_attn_every_n_layers=3, local_attention=128, attention_dropout=args.dropout,
            embedding_dropout=0.0, mlp_dropout=0.0, classifier_dropout=0.0,
            reference_compile=False, **common_kw,
        )  # fmt: skip
    else:
        config_class = {"bert": transformers.BertConfig, "roberta": transformers.RobertaConfig}
        cfg = config_class[args.family](
            attention_probs_dropout_prob=args.dropout, hidden_dropout_prob=0.0,
            classifier_dropout=0.0, **common_kw,
        )  # fmt: skip
    model = transformers.AutoModelForSequenceClassification.from_config(
        cfg, attn_implementation=args.attn
    )
    return model.to(device=device, dtype=dtype).train()


def padded_batch(batch: int, seq: int, vocab: int, gen, device):
    """(input_ids, attention_mask, labels): sequence lengths drawn in [seq / 4, seq], the first
    at full length, right-padded with token 0."""
    import torch

    lengths = torch.randint(max(seq // 4, 1), seq + 1, (batch,), generator=gen)
    lengths[0] = seq
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    ids = torch.randint(1, vocab, (batch, seq), generator=gen) * mask
    labels = torch.randint(0, 2, (batch,), generator=gen)
    return ids.to(device), mask.to(device), labels.to(device)


def main(argv=None) -> int:
    args = parse(argv)
    device = common.setup(args)
    import torch

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    max_len = max(s for _, s in args.shapes)
    rows: list[dict] = []
    extra = {"args": {k: v for k, v in vars(args).items()}}

    def save(row):
        common.write_json(args.json, {"rows": rows + [row], **extra})

    for batch, seq in args.shapes:
        gen = torch.Generator().manual_seed(1)
        batches = [padded_batch(batch, seq, args.vocab, gen, device) for _ in range(3)]
        rows += common.compare_training(
            lambda: build(args, device, dtype, max_len),
            batches,
            lambda net, b: net(input_ids=b[0], attention_mask=b[1], labels=b[2]).loss,
            backends=args.backends, warmup=args.warmup, steps=args.steps,
            tokens_per_step=batch * seq, device=device, smoke=args.smoke,
            label=f"{args.family} {batch}x{seq}", loss_tol=args.loss_tol, on_row=save,
            gpu_lock=args.gpu_lock,
        )  # fmt: skip
    return common.finish(rows, args.json, extra)


if __name__ == "__main__":
    raise SystemExit(main())
