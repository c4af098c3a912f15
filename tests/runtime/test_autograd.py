"""flashgen.runtime.autograd: the tensor positions `function_apply` unwraps come from the op's
schema, and a Function whose arguments drift from the schema fails loudly."""

from __future__ import annotations

import pytest
import torch

from flashgen.runtime import autograd


def _schema():
    return torch.ops.flashgen.attention.default._schema


def test_positions_are_the_schemas_tensor_arguments():
    positions = autograd.tensor_positions(_schema(), autograd._Attention.forward)
    names = [a.name for a in _schema().arguments]
    assert [names[i] for i in positions] == [
        "q",
        "k",
        "v",
        "seq_bounds",
        "attn_mask",
        "dropout_seed",
        "alibi_slopes",
        "sinks",
    ]


def test_a_forward_that_drifts_from_the_schema_is_refused():
    def forward(ctx, q, k, v, causal, scale):  # fewer arguments than the op
        return q

    with pytest.raises(RuntimeError, match="takes"):
        autograd.tensor_positions(_schema(), forward)
