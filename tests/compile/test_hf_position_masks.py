"""HF's masks built from position ids (transformers' `masking_utils`): in a training call with
no attention_mask and no cache, HF looks for packed sequences in the position ids
(`find_packed_sequence_indices`: `(diff(pos, prepend=pos[:, :1] - 1) != 1).cumsum(-1)`, one id
per sequence) and, under torch.compile, always builds `causal & same_sequence` with both parts
indexed by batch, query and key aranges (`pos[b, kv] <= pos[b, q]`). With the position ids
HF makes itself (an arange) the proof follows it to the causal flag: `diff` of an arange with
that prepend is all ones, so the ids are zeros (`cumsum` of zeros) and every pair is in one
sequence; an arange indexed by an arange is an arange. Position ids given as an input (packed
sequences) cannot be proven: the mask is read whole, and the result still matches eager."""

from __future__ import annotations

import pytest
import torch

import flashgen

transformers = pytest.importorskip("transformers")
from model_checks import params_match_eager, tiny_llama  # noqa: E402  (tests/ is on the path)


def _matches_eager(model, dynamic, **kw):
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=dynamic, backend=flashgen.backend(fallback="aot_eager"))
    params_match_eager(model, compiled, **kw)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_training_call_without_attention_mask_is_causal(dynamic):
    model = tiny_llama()
    for t in (9, 14):
        ids = torch.randint(1, 64, (2, t))
        report = flashgen.explain(model, input_ids=ids, use_cache=False)
        assert len(report.sites) == 2, report
        assert all(s.replaced and s.causal and not s.mask for s in report.sites), report
        _matches_eager(model, dynamic, input_ids=ids, use_cache=False)


def test_packed_position_ids_are_read_whole_and_match_eager():
    """Two sequences packed in each row (position ids restart): the mask depends on the input,
    so the kernels read it as a tensor; output and gradients equal eager's."""
    model = tiny_llama()
    ids = torch.randint(1, 64, (2, 10))
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6, 0, 1, 2]])
    report = flashgen.explain(model, input_ids=ids, position_ids=pos, use_cache=False)
    assert all(s.replaced and s.mask == "bool" and not s.causal for s in report.sites), report
    _matches_eager(model, False, input_ids=ids, position_ids=pos, use_cache=False)


def _packed_ids(pos, first):
    """HF's packed-sequence ids, with the prepend given (`first`)."""
    diff = torch.diff(pos, prepend=first, dim=-1)
    return (diff != 1).cumsum(-1)


@pytest.mark.parametrize("prepend", ["first - 1", "first", "first - 2", "two columns"])
def test_diff_prepend_must_continue_the_arange(prepend):
    """The proof of `diff` follows only the prepend that continues the arange (its first value
    minus one, one column); any other is refused and the mask read whole (with `first` the ids
    happen to be all ones, still one sequence: refused all the same)."""
    import torch.nn.functional as F

    def attend(q, k, v):
        t = q.shape[-2]
        pos = torch.arange(t).unsqueeze(0).expand(q.shape[0], -1)
        first = {
            "first - 1": pos[:, :1] - 1,
            "first": pos[:, :1],
            "first - 2": pos[:, :1] - 2,
            "two columns": pos[:, :2] - 2,
        }[prepend]
        seq = _packed_ids(pos, first)
        b = torch.arange(q.shape[0])[:, None, None, None]
        i, j = torch.arange(t)[None, None, :, None], torch.arange(t)[None, None, None, :]
        mask = (pos[b, j] <= pos[b, i]) & (seq[b, i] == seq[b, j])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q, k, v = (torch.randn(2, 2, 7, 16) for _ in range(3))
    site = flashgen.explain(attend, q, k, v).sites[0]
    proven = prepend == "first - 1"
    assert site.replaced and site.causal == proven and (site.mask == "") == proven, site
    torch._dynamo.reset()
    got = torch.compile(attend, backend=flashgen.backend(fallback="eager"))(q, k, v)
    torch.testing.assert_close(got, attend(q, k, v), atol=2e-5, rtol=1e-4)
