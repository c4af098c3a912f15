"""Session 66's survey of the HF Swin family (session 65's `hf_survey.py` harness, its cases
replaced by these): Swin v2 and the models that copy its attention (Swin2SR) or Swin v1's
older spelling (DonutSwin, MaskFormerSwin, CLAP's audio tower), whose shifted windows' mask is
added to scores viewed per window. Every drop path at 0 too (`drop_prob`), so that training
gradients compare with float64.

Usage (CPU, Triton's interpreter): TRITON_INTERPRET=1 PYTHONPATH=. python
    benchmarks/raw/cpu_s66/swin_survey.py [--grad] [--only swinv2,...]
"""

from __future__ import annotations

import importlib.util
import pathlib

import torch
import transformers as T

_path = pathlib.Path(__file__).parents[1] / "cpu_s65" / "hf_survey.py"
_spec = importlib.util.spec_from_file_location("hf_survey", _path)
survey = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(survey)

SWIN = dict(image_size=32, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
            window_size=4)  # fmt: skip


def _clap_audio():
    cfg = T.ClapAudioConfig(
        spec_size=64, patch_size=4, patch_stride=(4, 4), patch_embeds_hidden_size=32,
        hidden_size=64, depths=[2, 2], num_attention_heads=[2, 4], window_size=4,
        num_mel_bins=16, enable_fusion=False, projection_dim=32,
    )  # fmt: skip
    return T.ClapAudioModel(cfg)


def _mel():
    return {"input_features": torch.randn(survey.B, 1, 64, 16)}


survey.CASES.clear()
survey.CASES.update({
    "swinv2": (lambda: T.Swinv2Model(T.Swinv2Config(**SWIN)), survey.images),
    "swin2sr": (lambda: T.Swin2SRModel(T.Swin2SRConfig(
        image_size=16, patch_size=1, embed_dim=32, depths=[2, 2], num_heads=[2, 2],
        window_size=4, upscale=1)), lambda: survey.images(16)),
    "donut_swin": (lambda: T.DonutSwinModel(T.DonutSwinConfig(**SWIN)), survey.images),
    "maskformer_swin": (lambda: T.MaskFormerSwinModel(T.MaskFormerSwinConfig(**SWIN)),
                        survey.images),
    "clap_audio": (_clap_audio, _mel),
})  # fmt: skip

_no_dropout = survey._no_dropout


def _no_dropout_or_drop_path(model) -> None:
    _no_dropout(model)
    for mod in model.modules():
        if isinstance(getattr(mod, "drop_prob", None), float):
            mod.drop_prob = 0.0


survey._no_dropout = _no_dropout_or_drop_path

if __name__ == "__main__":
    survey.main()
