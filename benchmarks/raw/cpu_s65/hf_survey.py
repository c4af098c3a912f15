"""Session 65's survey of HF model families outside hf_fuzz's draws (vision, audio, multimodal,
encoder-decoders and older text encoders), each built small from a config (random weights, no
download), compiled with the flashgen backend (aot_eager for the rest) under both attention
implementations, and compared with float64 eager: the sites found and replaced (with the
reasons of the kept ones) and the error of the compiled float32 output beside eager float32's.
With `--grad`: training mode with every dropout at 0, the parameters' gradients of a loss over
the valid positions against float64 (each parameter's error over its largest float64 entry, or
1e-3 of the largest entry of all, whichever is larger: a bias whose gradient is zero in exact
arithmetic, as attention's key bias is, does not divide by its own noise).

A family without an SDPA path refuses `sdpa` (an ERROR line: transformers' ValueError) or
runs its eager attention under it. ViTMAE masks random patches at every call (its error is
the harness's), Swin/SegFormer drop paths in training. (The draft this replaced, draft/,
forced `config._attn_implementation` instead, under which such models added SDPA's boolean
mask to their scores: those sites were kept, and eager's output was not the model's.)

Usage (CPU, Triton's interpreter): TRITON_INTERPRET=1 PYTHONPATH=. python
    benchmarks/raw/cpu_s65/hf_survey.py [--grad] [--only vit,deberta_v3,...]
"""

from __future__ import annotations

import argparse
import copy
import traceback

import torch
import transformers as T

from flashgen.compile.backend import backend
from flashgen.compile.patterns import attention_pass

B = 2
ENC = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
VIT = dict(ENC, image_size=32, patch_size=8)
TXT = dict(ENC, vocab_size=96, max_position_embeddings=64)
S2S = dict(
    vocab_size=96, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
    max_position_embeddings=64, pad_token_id=0,
)  # fmt: skip
AUDIO = dict(
    ENC, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
    num_conv_pos_embedding_groups=4,
)  # fmt: skip
DEBERTA = dict(
    TXT, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=16,
    norm_rel_ebd="layer_norm", max_relative_positions=-1, position_biased_input=False,
)  # fmt: skip


def images(size=32):
    return {"pixel_values": torch.randn(B, 3, size, size)}


def video():
    return {"pixel_values": torch.randn(B, 4, 3, 32, 32)}


def tokens(length=9, pad=True):
    mask = torch.ones(B, length, dtype=torch.long)
    if pad:
        mask[0, -3:] = 0
    return {"input_ids": torch.randint(1, 96, (B, length)), "attention_mask": mask}


def seq2seq():
    return {**tokens(), "decoder_input_ids": torch.randint(1, 96, (B, 6))}


def waves():
    mask = torch.ones(B, 400, dtype=torch.long)
    mask[1, 300:] = 0
    return {"input_values": torch.randn(B, 400), "attention_mask": mask}


# family -> (model builder, inputs builder)
CASES = {
    "vit": (lambda: T.ViTModel(T.ViTConfig(**VIT)), images),
    "deit": (lambda: T.DeiTModel(T.DeiTConfig(**VIT)), images),
    "beit": (lambda: T.BeitModel(T.BeitConfig(**VIT, use_relative_position_bias=True)), images),
    "dinov2": (lambda: T.Dinov2Model(T.Dinov2Config(**VIT)), images),
    "vitmae": (lambda: T.ViTMAEModel(T.ViTMAEConfig(**VIT, mask_ratio=0.0)), images),
    "swin": (lambda: T.SwinModel(T.SwinConfig(
        image_size=32, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
        window_size=4)), images),
    "swinv2": (lambda: T.Swinv2Model(T.Swinv2Config(
        image_size=32, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
        window_size=4)), images),
    "segformer": (lambda: T.SegformerModel(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[32, 64],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
        decoder_hidden_size=32)), images),
    "pvt_v2": (lambda: T.PvtV2Model(T.PvtV2Config(
        hidden_sizes=[32, 64], num_attention_heads=[1, 2], depths=[1, 1], sr_ratios=[2, 1],
        num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])), images),
    "levit": (lambda: T.LevitModel(T.LevitConfig(
        image_size=64, hidden_sizes=[64, 96, 128], num_attention_heads=[2, 3, 4],
        depths=[1, 1, 1], key_dim=[16, 16, 16])), lambda: images(64)),
    "videomae": (lambda: T.VideoMAEModel(T.VideoMAEConfig(**VIT, num_frames=4, tubelet_size=2)),
                 video),
    "vivit": (lambda: T.VivitModel(T.VivitConfig(**VIT, num_frames=4, tubelet_size=[2, 8, 8])),
              video),
    "clip": (lambda: T.CLIPModel(T.CLIPConfig(text_config=TXT, vision_config=VIT)),
             lambda: {**tokens(), **images()}),
    "siglip": (lambda: T.SiglipModel(T.SiglipConfig(text_config=TXT, vision_config=VIT)),
               lambda: {**tokens(pad=False), **images()}),
    "siglip_vision": (lambda: T.SiglipVisionModel(T.SiglipVisionConfig(**VIT)), images),
    "git_vision": (lambda: T.GitVisionModel(T.GitVisionConfig(**VIT)), images),
    "whisper": (lambda: T.WhisperModel(T.WhisperConfig(
        vocab_size=96, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16,
        max_target_positions=32, pad_token_id=0)),
        lambda: {"input_features": torch.randn(B, 16, 32),
                 "decoder_input_ids": torch.randint(1, 96, (B, 7))}),
    "speech2text": (lambda: T.Speech2TextModel(T.Speech2TextConfig(
        vocab_size=96, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, input_feat_per_channel=16, max_source_positions=64,
        max_target_positions=64, conv_channels=32, pad_token_id=0)),
        lambda: {"input_features": torch.randn(B, 40, 16),
                 "decoder_input_ids": torch.randint(1, 96, (B, 7))}),
    "wav2vec2": (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
        **AUDIO, feat_extract_norm="layer", do_stable_layer_norm=True)), waves),
    "hubert": (lambda: T.HubertModel(T.HubertConfig(**AUDIO)),
               lambda: {"input_values": torch.randn(B, 400)}),
    "wavlm": (lambda: T.WavLMModel(T.WavLMConfig(**AUDIO)), waves),
    "data2vec_audio": (lambda: T.Data2VecAudioModel(T.Data2VecAudioConfig(**AUDIO)), waves),
    "sew": (lambda: T.SEWModel(T.SEWConfig(**AUDIO, squeeze_factor=2)), waves),
    "unispeech": (lambda: T.UniSpeechModel(T.UniSpeechConfig(**AUDIO)), waves),
    "electra": (lambda: T.ElectraModel(T.ElectraConfig(**TXT, embedding_size=64)), tokens),
    "xlmr": (lambda: T.XLMRobertaModel(T.XLMRobertaConfig(**TXT)), tokens),
    "camembert": (lambda: T.CamembertModel(T.CamembertConfig(**TXT)), tokens),
    "albert": (lambda: T.AlbertModel(T.AlbertConfig(**TXT, embedding_size=32)), tokens),
    "mpnet": (lambda: T.MPNetModel(T.MPNetConfig(**TXT)), tokens),
    "esm": (lambda: T.EsmModel(T.EsmConfig(**TXT, pad_token_id=1,
                                           position_embedding_type="rotary")), tokens),
    "roformer": (lambda: T.RoFormerModel(T.RoFormerConfig(**TXT, embedding_size=64)), tokens),
    "layoutlm": (lambda: T.LayoutLMModel(T.LayoutLMConfig(**TXT)), tokens),
    "big_bird": (lambda: T.BigBirdModel(T.BigBirdConfig(**TXT, attention_type="original_full")),
                 tokens),
    "convbert": (lambda: T.ConvBertModel(T.ConvBertConfig(**TXT, embedding_size=64)), tokens),
    "blip_text": (lambda: T.BlipTextModel(T.BlipTextConfig(**TXT)), tokens),
    "funnel": (lambda: T.FunnelModel(T.FunnelConfig(
        vocab_size=96, d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1],
        num_decoder_layers=1)), tokens),
    "deberta_v2": (lambda: T.DebertaV2Model(T.DebertaV2Config(
        **{**DEBERTA, "relative_attention": False, "position_biased_input": True})), tokens),
    "deberta_v3": (lambda: T.DebertaV2Model(T.DebertaV2Config(**DEBERTA)), tokens),
    "deberta": (lambda: T.DebertaModel(T.DebertaConfig(
        **TXT, relative_attention=True, pos_att_type=["p2c", "c2p"],
        max_relative_positions=-1, position_biased_input=False)), tokens),
    "xlm": (lambda: T.XLMModel(T.XLMConfig(vocab_size=96, emb_dim=64, n_layers=2, n_heads=4)),
            tokens),
    "ctrl": (lambda: T.CTRLModel(T.CTRLConfig(
        vocab_size=96, n_embd=64, n_layer=2, n_head=4, dff=128, n_positions=64)), tokens),
    "biogpt": (lambda: T.BioGptModel(T.BioGptConfig(**TXT)), tokens),
    "gpt_bigcode": (lambda: T.GPTBigCodeModel(T.GPTBigCodeConfig(
        vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_positions=64)), tokens),
    "marian": (lambda: T.MarianModel(T.MarianConfig(**S2S, decoder_start_token_id=0)), seq2seq),
    "pegasus": (lambda: T.PegasusModel(T.PegasusConfig(**S2S)), seq2seq),
    "mbart": (lambda: T.MBartModel(T.MBartConfig(**S2S)), seq2seq),
    "m2m100": (lambda: T.M2M100Model(T.M2M100Config(**S2S)), seq2seq),
    "blenderbot": (lambda: T.BlenderbotModel(T.BlenderbotConfig(**S2S)), seq2seq),
    "fsmt": (lambda: T.FSMTModel(T.FSMTConfig(
        src_vocab_size=96, tgt_vocab_size=96, langs=["en", "de"],
        **{k: v for k, v in S2S.items() if k != "vocab_size"})), seq2seq),
    "mt5": (lambda: T.MT5Model(T.MT5Config(
        vocab_size=96, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)), seq2seq),
}  # fmt: skip


def _first(out):
    """The output compared: the last hidden state, else the first output."""
    hidden = getattr(out, "last_hidden_state", None)
    if hidden is not None:
        return hidden
    return out.logits_per_image if hasattr(out, "logits_per_image") else out[0]


def _compiled(model, sites):
    """The model compiled with flashgen's backend, each graph's sites appended to `sites`."""
    inner = backend(fallback="aot_eager")

    def compile_graph(gm, example_inputs):
        sites.extend(attention_pass(gm, list(example_inputs), None, rewrite_graph=False))
        return inner(gm, example_inputs)

    torch._dynamo.reset()
    return torch.compile(model, backend=compile_graph)


def _sites(sites) -> str:
    kept = sorted({s.reason for s in sites if not s.replaced})
    return f"sites {sum(s.replaced for s in sites)}/{len(sites)} {kept}"


def _no_dropout(model) -> None:
    """Every dropout module and float dropout attribute at 0 (training mode compared)."""
    for k, v in list(vars(model.config).items()):
        if isinstance(v, float) and ("dropout" in k or k.endswith("_prob") or "layerdrop" in k):
            setattr(model.config, k, 0.0)
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        for name in ("dropout", "attention_dropout", "dropout_p", "layerdrop"):
            if isinstance(getattr(mod, name, None), float):
                setattr(mod, name, 0.0)


def forward_case(name: str, attn: str) -> str:
    make, inputs = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    model.set_attn_implementation(attn)
    torch.manual_seed(1)
    kw = inputs()
    kw64 = {k: v.double() if v.is_floating_point() else v for k, v in kw.items()}
    ref_model = copy.deepcopy(model).double()
    sites: list = []
    got = _first(_compiled(model, sites)(**kw)).double()
    ref = _first(ref_model(**kw64))
    err = (got - ref).abs().max().item()
    eager = (_first(model(**kw)).double() - ref).abs().max().item()
    return f"{_sites(sites)} err {err:.2e} eager {eager:.2e} ratio {err / max(eager, 1e-30):.2f}"


def grad_case(name: str, attn: str) -> str:
    make, inputs = CASES[name]
    torch.manual_seed(0)
    model = make()
    _no_dropout(model)
    model.set_attn_implementation(attn)
    model.train()
    ref_model = copy.deepcopy(model).double()
    torch.manual_seed(1)
    kw = inputs()
    kw64 = {k: v.double() if v.is_floating_point() else v for k, v in kw.items()}
    valid = kw["attention_mask"].bool()[..., None] if "input_ids" in kw else None

    def loss(out, w):
        out = _first(out)
        if valid is not None and out.shape[:2] == valid.shape[:2]:
            out = out * valid
        return (out * w.to(out.dtype)).sum()

    torch.manual_seed(2)
    w = torch.randn_like(_first(model(**kw)))
    sites: list = []
    loss(_compiled(model, sites)(**kw), w).backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss(model(**kw), w).backward()
    eager = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    loss(ref_model(**kw64), w).backward()
    ref = {n: p.grad for n, p in ref_model.named_parameters() if p.grad is not None}
    top = max(r.abs().max().item() for r in ref.values())
    worst = worst_eager = 0.0
    for n, r in ref.items():
        scale = max(r.abs().max().item(), 1e-3 * top)
        mine = (got[n].double() - r).abs().max().item() / scale if n in got else float("inf")
        worst = max(worst, mine)
        worst_eager = max(worst_eager, (eager[n].double() - r).abs().max().item() / scale)
    ratio = worst / max(worst_eager, 1e-30)
    return f"GRAD {_sites(sites)} rel {worst:.2e} eager {worst_eager:.2e} ratio {ratio:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grad", action="store_true", help="training-mode gradients")
    parser.add_argument("--only", default="", help="comma-separated families")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    for name in names:
        for attn in ("eager", "sdpa"):
            try:
                line = (grad_case if args.grad else forward_case)(name, attn)
            except Exception as e:  # noqa: BLE001 - a survey: report the case and go on
                traceback.print_exc(limit=-2)
                line = f"ERROR {type(e).__name__}: {str(e)[:200]}"
            print(name, attn, line, flush=True)


if __name__ == "__main__":
    main()
