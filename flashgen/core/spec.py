"""What a generated kernel is specialised on, and the one name for it.

A `KernelSpec` holds exactly the values that change the generated source: head dim, causal
masking, whether the kernel takes a sliding window, a logit softcap, per-sequence valid
ranges (key padding) or ALiBi slopes, dtype and direction. Everything else (batch,
heads, sequence lengths, GQA group size, strides, the window's sizes, the cap, the slopes) is a run-time argument, so
one compiled kernel serves every shape. `uri()` is the
single name used for kernel files, database keys and log lines, so they can never disagree.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

DTYPES = ("float16", "bfloat16", "float32")
DIRECTIONS = ("fwd", "bwd")
MIN_HEAD_DIM = 16
MAX_HEAD_DIM = 256
_DTYPE_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
# (causal, window) -> the mask part of a uri
_MASKS = {
    (False, False): "full",
    (True, False): "causal",
    (False, True): "win",
    (True, True): "causalwin",
}
_LEN = "len"  # appended to the mask part for a kernel with per-sequence valid ranges
_PACK = "pack"  # in place of `len` for one over packed sequences (cumulative offsets)
_ALIBI = "alibi"  # appended to the mask part for an ALiBi kernel (after the attn_mask kind)
_CAP = "cap"  # appended to the mask part for a softcapped kernel
_DROP = "drop"  # appended (last) to the mask part for a kernel with attention dropout
# attn_mask kind -> what is appended to the mask part (after `len`, before `cap`)
ATTN_MASKS = {"": "", "bool": "bmask", "add": "bias"}


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << (max(int(n), 1) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for b > 0 (grid sizes: the blocks of `b` rows that cover `a`)."""
    return -(-a // b)


@dataclass(frozen=True)
class KernelSpec:
    """The compile-time specialisation of one attention kernel.

    head_dim: the real head dim (16..256); the kernel pads it to `block_d` with masks.
    causal: SDPA's `is_causal` (top-left aligned: query i sees keys j <= i).
    dtype: element type of q, k, v and the output.
    direction: "fwd" (output and logsumexp) or "bwd" (dq, dk, dv).
    window: the kernel takes a band of visible keys as two run-time ints (left, right): query i
      sees key j iff i - left <= j <= i + right (and j <= i when causal). The sizes are launch
      arguments, so one compiled kernel serves every window; tiles outside the band are skipped.
    softcap: the scaled scores s go through cap * tanh(s / cap) before the softmax (Gemma-2);
      the cap is a run-time float.
    lengths: the kernel reads each batch entry's valid query and key rows from a small int32
      tensor [B, 4] (query start, query length, key start, key length): key padding on either
      side without an N^2 mask. Rows and keys outside are never read as such; the causal mask
      and the window apply within the valid part (local positions), as in FlashAttention's
      varlen API; a query row outside its range, or one that sees no key, gets zeros.
    attn_mask: "" (none), "bool" or "add": the kernel reads a mask tensor broadcastable to
      [B, Hq, Sq, Sk] (strides are run-time arguments, 0 along broadcast dims), boolean (True:
      visible) or an additive bias on the scaled scores, as SDPA's attn_mask.
    packed: (with lengths) the sequences lie one after another along one sequence dim of
      [1, H, T, D] tensors (FlashAttention's varlen layout): SeqBounds rows hold each sequence's
      offsets into it (cumulative lengths), the kernels read the inputs with batch stride 0 and
      store out/lse (and the gradients) in the packed layout, where the padded kernel stores
      per batch entry. Portable family only; no dropout.
    dropout: attention dropout (training): the kernel takes a drop probability and a
      seed as run-time arguments and drops probabilities by a counter-based mask it can
      regenerate (the backward draws the same mask from the same seed); p = 0 is the plain
      kernel.
    alibi: the kernel takes one float32 slope per (batch entry, query head) and adds
      slope * (j - i) to the scaled scores of query i and key j (ALiBi, computed in the kernel
      from the positions: no N^2 tensor), after a softcap; positions are local with lengths.
      Portable family only; not with packed sequences.
    """

    head_dim: int
    causal: bool
    dtype: str
    direction: str = "fwd"
    window: bool = False
    softcap: bool = False
    lengths: bool = False
    attn_mask: str = ""
    dropout: bool = False
    packed: bool = False
    alibi: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int):
            raise ValueError(f"head_dim must be an int, got {self.head_dim!r}")
        if not MIN_HEAD_DIM <= self.head_dim <= MAX_HEAD_DIM:
            raise ValueError(
                f"head_dim must be between {MIN_HEAD_DIM} and {MAX_HEAD_DIM}, got {self.head_dim}"
            )
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal must be a bool, got {self.causal!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        for name in ("window", "softcap", "lengths", "attn_mask", "dropout", "packed", "alibi"):
            value = getattr(self, name)
            if name == "attn_mask":
                if value not in ATTN_MASKS:
                    raise ValueError(f"attn_mask must be '', 'bool' or 'add', got {value!r}")
            elif not isinstance(value, bool):
                raise ValueError(f"{name} must be a bool, got {value!r}")
        if self.packed and (not self.lengths or self.dropout or self.attn_mask):
            raise ValueError("packed needs lengths and takes neither dropout nor attn_mask")
        if self.packed and self.alibi:
            raise ValueError("packed takes no alibi")

    @property
    def has_extras(self) -> bool:
        """Whether the kernel takes anything beyond q, k, v and causal (a window, softcap,
        lengths, a mask tensor, dropout, packed sequences or ALiBi): the plain kernels have
        builds the others lack (the backward's dQ kernel that computes delta itself)."""
        return bool(
            self.window or self.softcap or self.lengths or self.attn_mask or self.dropout
            or self.packed or self.alibi
        )  # fmt: skip

    @property
    def block_d(self) -> int:
        """Head dim padded to a power of two (tl.arange needs one)."""
        return next_pow2(self.head_dim)

    def uri(self) -> str:
        """Stable name: e.g. `attn_fwd_d128_causal_bf16`; a windowed kernel's mask part is
        `causalwin` or `win` (`attn_fwd_d128_causalwin_bf16`), with `cap` appended for a
        softcapped one (`attn_fwd_d256_causalwincap_bf16`), and `len` before that for one with
        per-sequence valid ranges (`attn_bwd_d64_fulllen_f16`, `attn_fwd_d64_causallencap_bf16`),
        and `drop` last for one with dropout (`attn_fwd_d64_causaldrop_bf16`); `pack` in place of
        `len` for packed sequences (`attn_fwd_d128_causalpack_bf16`); `alibi` after the mask
        tensor's kind, before `cap` (`attn_fwd_d128_causalalibi_bf16`)."""
        mask = _MASKS[(self.causal, self.window)]
        mask += _PACK if self.packed else _LEN if self.lengths else ""
        mask += ATTN_MASKS[self.attn_mask]
        mask += _ALIBI if self.alibi else ""
        mask += _CAP if self.softcap else ""
        mask += _DROP if self.dropout else ""
        return f"attn_{self.direction}_d{self.head_dim}_{mask}_{_DTYPE_SHORT[self.dtype]}"

    def with_direction(self, direction: str) -> KernelSpec:
        return dataclasses.replace(self, direction=direction)

    def sibling(self) -> KernelSpec | None:
        """The same kernel in the other 16-bit dtype (float16 <-> bfloat16), None for float32.

        Same element size, so the same shared memory and the same tile trade-offs: on the H200,
        in 7 of the tuner benchmark's 8 held-out fp16 cases the config `flashgen tune` found for
        bf16 at the nearest length was the fp16 grid's winner or within 1% of it (the eighth:
        7% slower; benchmarks/RESULTS.md, runs 7-8). Lookups and the tuner's seeds use it as a
        prior, never over a record of the dtype itself."""
        other = {"float16": "bfloat16", "bfloat16": "float16"}.get(self.dtype)
        return None if other is None else dataclasses.replace(self, dtype=other)

    @classmethod
    def from_uri(cls, uri: str) -> KernelSpec:
        """Inverse of `uri()`; raises ValueError on anything else."""
        parts = uri.split("_")
        if len(parts) != 5 or parts[0] != "attn" or not parts[2].startswith("d"):
            raise ValueError(f"not a kernel uri: {uri!r}")
        short_to_dtype = {v: k for k, v in _DTYPE_SHORT.items()}
        dropout = parts[3].endswith(_DROP)
        rest = parts[3].removesuffix(_DROP)
        softcap = rest.endswith(_CAP)
        rest = rest.removesuffix(_CAP)
        alibi = rest.endswith(_ALIBI)
        rest = rest.removesuffix(_ALIBI)
        attn_mask = ""
        for kind, suffix in ATTN_MASKS.items():
            if suffix and rest.endswith(suffix):
                attn_mask, rest = kind, rest.removesuffix(suffix)
        packed = rest.endswith(_PACK)
        rest = rest.removesuffix(_PACK)
        lengths = packed or rest.endswith(_LEN)
        mask = {v: k for k, v in _MASKS.items()}.get(rest.removesuffix(_LEN))
        if mask is None or parts[4] not in short_to_dtype:
            raise ValueError(f"not a kernel uri: {uri!r}")
        try:
            head_dim = int(parts[2][1:])
        except ValueError as exc:
            raise ValueError(f"not a kernel uri: {uri!r}") from exc
        return cls(
            head_dim, mask[0], short_to_dtype[parts[4]], parts[1], mask[1], softcap, lengths,
            attn_mask, dropout, packed, alibi,
        )  # fmt: skip


def dtype_name(dtype) -> str:
    """`torch.float16` -> "float16", the name KernelSpec uses (no torch import needed)."""
    return str(dtype).removeprefix("torch.")


@functools.cache
def spec_for(
    head_dim: int,
    causal: bool,
    dtype: str,
    direction: str,
    window: bool = False,
    softcap: bool = False,
    lengths: bool = False,
    attn_mask: str = "",
    dropout: bool = False,
    packed: bool = False,
    alibi: bool = False,
) -> KernelSpec:
    """The KernelSpec of one launch, built and validated once: the launchers ask on every call."""
    return KernelSpec(
        int(head_dim), bool(causal), dtype, direction, bool(window), bool(softcap), bool(lengths),
        attn_mask, bool(dropout), bool(packed), bool(alibi),
    )  # fmt: skip


# A flag a key range's len_k (SeqBounds' fourth column) may carry when the launch has a mask
# tensor: a power of two above any sequence length, added where the mask leaves every key of the
# range visible (`flashgen.kernels.padding.key_hull`; the templates decode it as `dense_keys`).
DENSE_KEYS = 1 << 30

MIN_BUCKET = 16


def seq_bucket(n: int) -> int:
    """Sequence lengths are tuned per power-of-two bucket (ceil), at least MIN_BUCKET."""
    return max(MIN_BUCKET, next_pow2(n))


def shape_bucket(seq_q: int, seq_k: int) -> tuple[int, int]:
    """The shape key a tuned record is stored under: (query bucket, key bucket)."""
    return seq_bucket(seq_q), seq_bucket(seq_k)


# Kinds of spec whose untuned tiles were measured apart from the unmasked kernels'
# (flashgen.hardware.tiles' defaults file, flashgen.hardware.dq_tiles): "window" (a sliding
# window, no other mask kind) and "mask" (a mask tensor, no other); "" every other spec.
MASK_VARIANTS = ("", "window", "mask")


def mask_variant(spec: KernelSpec) -> str:
    """The `MASK_VARIANTS` entry of `spec`: "window" or "mask" when that is its only mask kind,
    else "" (plain specs and every combination)."""
    others = spec.softcap or spec.lengths or spec.dropout or spec.alibi or spec.packed
    if others or (spec.window and spec.attn_mask):
        return ""
    if spec.window:
        return "window"
    return "mask" if spec.attn_mask else ""
