"""The Hopper backward: a warp-specialised Gluon kernel (templates/attn_bwd_hopper.py.jinja).

Why: the portable split backward (templates/attn_bwd.py.jinja) recomputes QK^T and dO V^T in
its dQ kernel (7 products per tile pair) and a `tl.dot` kernel cannot overlap the exponentials
with the tensor cores. This kernel does one pass per key block (5 products), with a TMA
producer warp and one or two consumer warpgroups in separate partitions; dQ partials go to an
fp32 buffer by TMA reduce-add from shared memory (`dq_tma`, `flashgen.kernels.gluon_reduce`)
or element atomics (not bit-identical run to run either way: never the deterministic kind).

Launches (`Plan`, kept per call signature by `flashgen.kernels.bwd`; `backward` builds one
for a single call): delta = rowsum(dO * O) (the portable template's `attn_bwd_preprocess`),
the Gluon kernel, and the dQ conversion (the one-pass template's `attn_bwd_dq_convert`).

Rendered with COMPUTE_DQ=False the kernel computes dK and dV only, with no atomics: the split
kind's dK/dV kernel where `DKDV_AUTO` lists the shape (`dkdv_choice`, `DkdvLaunch`), beside
the portable dQ kernel.

Where it can run (`spec_reason`): fp16/bf16, head dim 64 or 128, no packed sequences, no ALiBi
with lengths, no dropout with softcap, a mask tensor only as a key-padding mask with its key
range, and
a Triton whose Gluon has what the template uses
(`flashgen.kernels.hopper.gluon_api`); at run time (`usable`) also an sm_90 GPU and 16-byte
aligned q/k/v/dO (TMA). flashgen.kernels.bwd runs it as the backward kind "hopper" where
`AUTO` lists the shape or when asked (FLASHGEN_BWD_KIND=hopper or kind="hopper"). Lengths
(per-sequence valid ranges, `flashgen.kernels.padding`) render the kernel with SeqBounds, and
a key-padding mask (boolean or additive, constant along heads and query rows) with its key
range (`padding.key_hull`) adds the mask, read once a work item; such calls take this kind
where `AUTO_EXTRAS` lists them or when asked, with the shipped configs (statistics staged in
shared memory, dQ by TMA reduce-add). A sliding window (WIN_LEFT, WIN_RIGHT as run-time
arguments, alone or with lengths or a key-padding mask) makes each key block visit only the
query blocks of its band and masks only the band's edge steps; windowed calls take this kind
where `AUTO_WINDOW` lists them (with or without a key-padding mask) or when asked.
Softcapping (the tanh's derivative folded into P),
ALiBi (slope * (j - i) added per step, the slope of the step's query head) and dropout (the
forward's keep flags drawn again per score, `flashgen.kernels.dropout_ref`) are rendered too,
taken where `AUTO_SCORE_MODS` lists them (where they measured faster) or when asked.

Configuration (`HopperBwdConfig`): query rows per step (64: one warpgroup's wgmma tile for
dQ), one or two consumer warpgroups of 64 keys each, the Q/dO ring's slots, how many column
chunks dQ's partial is computed in, the launch register cap, how dQ is added, the dS
exchange's slots and the grid (one program per item, or persistent: static or dynamic).
Shipped per head dim (`CONFIGS`) and, for specs without extras, per (head dim, causal)
(`PLAIN_CONFIGS`), for short calls of some pairs their own (`SHORT_CONFIGS`,
`SHORT_MHA_CONFIGS`); `shipped_config` picks.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from ..core.config import check_kinds, check_rules
from ..core.spec import DENSE_KEYS, cdiv
from .tma import env_reader

TEMPLATE = "attn_bwd_hopper.py.jinja"
FAMILY = "hopper_bwd"
RENDERABLE_HEAD_DIMS = (64, 128)
_GL_DTYPE = {"float16": "gl.float16", "bfloat16": "gl.bfloat16"}
REGS_PER_SM = 65_536
BARRIER_BYTES = 8


@dataclass(frozen=True)
class HopperBwdConfig:
    """block_m query rows per step (64); consumers warpgroups of 64 keys each (block_n = 64 *
    consumers); num_buf Q/dO ring slots; dq_split column chunks of a consumer's dQ partial
    (fewer live registers); maxnreg the launch's per-thread register cap; share_ds (two
    consumers): the consumers exchange dS through shared memory and each adds half of dQ's
    columns over all block_n keys (half the atomics of each adding all columns over its own
    64 keys, at the price of meeting once per step); stats_tma: the producer brings each
    step's logsumexp and delta rows into shared memory by TMA, read only where used (fewer
    live registers than loading them into registers ahead; compiles, but faulted at run time
    on the H200, so `backward` refuses it); persistent: one program per SM
    walking work items p, p + grid, ... (the next item's K/V and first Q/dO load while this
    one stores dK/dV) instead of one program per item; kv_bufs 2 (with persistent): the next
    item's K and V load during this one's last steps; dq_tma: each dQ partial goes through
    shared memory and one TMA reduce-add (`flashgen.kernels.gluon_reduce`) instead of element
    atomics from the consumers' registers; stats_smem: each consumer loads a step's logsumexp
    and delta rows one value a thread a step ahead and stages them in shared memory, read
    only where used (32 fewer live registers a thread than loading them into the product's
    layout ahead, without the producer's TMA of stats_tma); dq_turns (share_ds): the
    consumers take the steps' whole dQ products (every column, all block_n keys) in turns; at
    head dim 64, where one consumer's product covers every column anyway, instead of consumer
    0 computing every step's dQ while consumer 1 waits; at 128 instead of each computing half
    the columns every step (one 64x128 product and reduce-add a step instead of two 64x64
    ones; twice the staging bytes); ds_bufs (share_ds) 1 or 2 slots of the dS exchange: with
    2 a consumer stores step t's dS while step t - 1's dQ product still reads the other slot,
    instead of waiting for it (with dq_turns the consumer that did not take that product
    runs on); dynamic (with
    persistent): after its first item a program takes the next untaken one from a counter
    (`flashgen.kernels.hopper.sched_counter`) instead of every grid-th one, so the programs
    finish together when items differ in length (causal masking); dq_bufs (dq_tma, not
    dq_turns) 1 or 2 staging buffers a dQ chunk: with 2 they alternate by step, so staging step
    t's partial waits for step t - 2's reduce-add to have read its buffer, not step t - 1's
    (session 26: 1.004-1.017x at head dim 64 causal, shipped there; level elsewhere);
    dq_first (dq_split 1, not dq_turns): each consumer that computes dQ issues its dQ product
    before dK's and stages and reduce-adds the partial while dK's product runs, instead of
    issuing it once dV's and dK's have finished (FlashAttention-3's order; session 26 B2:
    1.009-1.036x at head dim 128 causal, level or slower elsewhere; B5: dq_turns 1.008x faster
    still there, so no shipped config uses it; with dq_turns, the step's taker ordering them so,
    it measured 0.840x at head dim 128 and 0.949x at 64 in session 27 B8, so the class refuses
    that pair)."""

    consumers: int
    num_buf: int
    dq_split: int
    maxnreg: int
    share_ds: bool = False
    stats_tma: bool = False
    persistent: bool = False
    kv_bufs: int = 1
    block_m: int = 64
    dq_tma: bool = False
    stats_smem: bool = False
    dq_turns: bool = False
    ds_bufs: int = 1
    dynamic: bool = False
    dq_bufs: int = 1
    dq_first: bool = False

    def __post_init__(self) -> None:
        bools = (
            "share_ds",
            "stats_tma",
            "persistent",
            "dq_tma",
            "stats_smem",
            "dq_turns",
            "dynamic",
            "dq_first",
        )
        check_kinds(self, bools=bools)
        checks = (
            ("consumers", self.consumers in (1, 2), "1 or 2"),
            ("num_buf", self.num_buf in (2, 3, 4), "2, 3 or 4"),
            ("dq_split", self.dq_split in (1, 2), "1 or 2"),
            ("block_m", self.block_m == 64, "64"),
            ("kv_bufs", self.kv_bufs in (1, 2), "1 or 2"),
            ("ds_bufs", self.ds_bufs == 1 or (self.ds_bufs == 2 and self.share_ds),
             "1, or 2 with share_ds"),
            ("dynamic", not self.dynamic or self.persistent, "False without persistent"),
            ("dq_bufs", self.dq_bufs == 1 or (self.dq_bufs == 2 and self.dq_tma
                                             and not self.dq_turns),
             "1, or 2 with dq_tma and without dq_turns"),
            ("dq_first", not self.dq_first or (self.dq_split == 1 and not self.dq_turns),
             "False with dq_split 2 or dq_turns"),
            ("share_ds", not self.share_ds or self.consumers == 2, "False with one consumer"),
            ("stats_smem", not (self.stats_smem and self.stats_tma), "False with stats_tma"),
            ("dq_turns", not self.dq_turns or self.share_ds, "False without share_ds"),
            ("maxnreg", 24 <= self.maxnreg <= 248 and self.maxnreg % 8 == 0
             and self.threads() * self.maxnreg <= REGS_PER_SM,
             f"a multiple of 8 in [24, 248], at most {REGS_PER_SM} // threads"),
        )  # fmt: skip
        check_rules(self, checks)

    @property
    def block_n(self) -> int:
        return 64 * self.consumers

    def threads(self) -> int:
        """The consumers' warpgroups and the loader's warp rounded up to a warpgroup."""
        return 128 * (self.consumers + 1)

    def dq_chunk(self, head_dim: int) -> int:
        """Columns of one dQ product (and, with dq_tma, of one staged reduce-add): a
        consumer's dQ columns (half of them each with share_ds, at least 64; all of them in
        turns) over dq_split."""
        return self._dq_cols(head_dim) // self.dq_split

    def _dq_cols(self, head_dim: int) -> int:
        if self.share_ds and not self.dq_turns:
            return max(64, head_dim // self.consumers)
        return head_dim

    def shared_bytes(self, head_dim: int, elem_bytes: int = 2, compute_dq: bool = True) -> int:
        """Bytes the kernel allocates: the Q/dO ring, the K and V blocks, dS and with dq_tma
        the fp32 dQ staging chunks (neither without dQ: the compiler drops unused buffers),
        the mbarriers."""
        rows = 2 * self.num_buf * self.block_m + 2 * self.kv_bufs * self.block_n
        tiles = rows * head_dim * elem_bytes
        ds = self.ds_bufs * self.block_m * self.block_n * elem_bytes if compute_dq else 0
        if compute_dq and self.dq_tma:
            staged = self.consumers * self.dq_split * self.dq_bufs
            ds += staged * self.block_m * self.dq_chunk(head_dim) * 4
        stats = 2 * self.num_buf * self.block_m * 4 if self.stats_tma else 0
        if self.stats_smem:  # two [lse | delta] rows a consumer
            stats = self.consumers * 2 * 2 * self.block_m * 4
        bars = 2 * self.ds_bufs + 2 * self.kv_bufs + 2 * self.num_buf
        items = 4 * self.kv_bufs if self.dynamic else 0  # the item index of each K/V slot
        return tiles + ds + stats + items + BARRIER_BYTES * bars

    def head_dim_reason(self, head_dim: int) -> str | None:
        """Why this config cannot run head dim `head_dim` (dQ's column chunks must be whole
        64-column swizzle atoms); None if it can."""
        cols = self._dq_cols(head_dim)
        if cols % (64 * self.dq_split):
            return f"dq_split {self.dq_split} cuts {cols} dQ columns below 64-column chunks"
        return None

    def short(self) -> str:
        flags = " share" * self.share_ds + " stats" * self.stats_tma + " P" * self.persistent
        flags += " kv2" * (self.kv_bufs == 2) + " tma" * self.dq_tma + " sm" * self.stats_smem
        flags += " turns" * self.dq_turns + " ds2" * (self.ds_bufs == 2) + " dyn" * self.dynamic
        flags += " dq2" * (self.dq_bufs == 2) + " dqf" * self.dq_first
        return (f"(hopper-bwd c{self.consumers} b{self.num_buf} s{self.dq_split} "
                f"r{self.maxnreg}{flags})")  # fmt: skip


# Checked on the H200 (benchmarks/RESULTS.md "Hopper backward in Gluon"): every config with
# stats_tma faulted there ("illegal instruction"), so none is used. Session 19 B4: two consumers sharing dS with dQ by TMA reduce-add were the fastest config at
# both head dims (fwd+bwd 0.83x cuDNN by geomean against 0.65x for element atomics); where
# the installed Gluon cannot issue the reduce-add, `backward` takes the same config with
# atomics. Session 20 B4 (benchmarks/hopper_bwd.py, the anchor grid in one process): with the
# statistics staged in shared memory (stats_smem) fwd+bwd 0.970x cuDNN by geomean, worst 0.902x,
# against 0.877x / 0.729x without (both with the K/V/dS descriptors rebuilt at use; ptxas
# reports no spills for either head dim with Triton 3.6); the backward of head dim 64 at 1k
# keys without causal masking 1% slower, every other shape's 0.5-32% shorter.
CONFIGS = {
    64: HopperBwdConfig(2, 2, 1, 168, True, False, dq_tma=True, stats_smem=True),
    128: HopperBwdConfig(2, 2, 1, 168, True, False, dq_tma=True, stats_smem=True),
}

# Specs without extras (no lengths, mask, window, softcap, ALiBi or dropout: what the grid
# measured) whose (head dim, causal) is listed here take this config instead of CONFIGS'.
# Session 24 (benchmarks/RESULTS.md, B1-B3: benchmarks/hopper_bwd.py on the 18-shape grid, five
# alternating rounds each, the backward's median against CONFIGS' in the same process):
# - head dim 64 without causal masking, a persistent grid: 1.05-1.07x at 1k and 4k keys in all
#   three runs, 1.00x at 16k (the next item's K/V load while this one stores dK/dV);
# - head dim 64 causal, a dynamic persistent grid with two dS slots: 1.046x at 1k, 1.050x at
#   4k, 1.006x at 16k (B3; the static persistent grid 0.96-0.97x at 16k in all three runs);
# - head dim 128 causal, two dS slots: 1.00-1.04x on five shapes of six in B2 and B3 (4k keys
#   1.02-1.04x), 0.97-0.99x at 16k GQA. The dynamic grid there read 1.01-1.05x MHA but
#   0.87-0.97x GQA; head dim 128 without causal masking read level in every variant.
# Session 26 (B1, B2: three alternating rounds each, same method):
# - head dim 64 causal, two dQ staging buffers: 1.011-1.016x in B1, 1.004-1.017x in B2 (with
#   dq_first, which alone read 0.983-1.001x there); level without causal masking;
# - head dim 128 causal, dQ's product before dK's (dq_first): 1.009-1.036x on all six shapes
#   (4k MHA 1.036x, GQA 1.029x); level without causal masking (0.997-1.004x);
# - head dim 128, the whole dQ products in turns with two dS slots (B5; one 64x128 product and
#   reduce-add a step instead of two 64x64 ones): without causal masking 1.000-1.034x (1.020x
#   by geomean), causal 0.997-1.019x against the dq_first config above (1.008x): shipped for
#   both.
PLAIN_CONFIGS: dict[tuple[int, bool], HopperBwdConfig] = {
    (64, False): dataclasses.replace(CONFIGS[64], persistent=True),
    (64, True): dataclasses.replace(
        CONFIGS[64], persistent=True, dynamic=True, ds_bufs=2, dq_bufs=2
    ),
    (128, False): dataclasses.replace(CONFIGS[128], dq_turns=True, ds_bufs=2),
    (128, True): dataclasses.replace(CONFIGS[128], dq_turns=True, ds_bufs=2),
}


# Calls of at most SHORT_KEYS keys whose (head dim, causal) is listed in SHORT_CONFIGS (any
# GQA group) or, for MHA calls (one query head a kv head), in SHORT_MHA_CONFIGS take that
# config instead of PLAIN_CONFIGS' (SHORT_MHA_CONFIGS first).
# - Head dim 128 causal, MHA: a dynamic persistent grid (programs take the next key block from
#   a counter; causal key blocks differ in length): session 27 B8 (benchmarks/bwd_variants.py,
#   three alternating rounds, against the turns config above) 1.049x at 1k keys and 1.050x at
#   4k MHA, 0.973x at 16k, and 0.887-0.909x GQA (one work item walks every query head of its
#   group: fewer, longer items, where the dynamic order gains nothing and its counter costs);
#   session 24 B2/B3 read the same split before turns (1.01-1.05x MHA, 0.87-0.97x GQA).
# - Head dim 128 without causal masking, any group: a static persistent grid (the next item's
#   K/V load while this one stores dK/dV): same run, 1.026x at 1k MHA, 1.050x at 1k GQA,
#   1.009x / 1.012x at 4k, 0.994x / 0.969x at 16k.
SHORT_KEYS = 4096
SHORT_MHA_CONFIGS: dict[tuple[int, bool], HopperBwdConfig] = {
    (128, True): dataclasses.replace(PLAIN_CONFIGS[128, True], persistent=True, dynamic=True),
}
SHORT_CONFIGS: dict[tuple[int, bool], HopperBwdConfig] = {
    (128, False): dataclasses.replace(PLAIN_CONFIGS[128, False], persistent=True),
}


def shipped_config(spec, seq_k: int | None = None, group: int = 1) -> HopperBwdConfig:
    """The config `spec` runs when none is asked for: for a spec without extras and a call of
    at most SHORT_KEYS keys (`seq_k`; None: not known, not taken), `SHORT_MHA_CONFIGS` where it
    lists (head dim, causal) for an MHA call (`group` 1: query heads a kv head), then
    `SHORT_CONFIGS` where it lists them; then `PLAIN_CONFIGS` where it lists them; else
    `CONFIGS` of the head dim."""
    if not spec.has_extras:
        key = (spec.head_dim, spec.causal)
        if seq_k is not None and seq_k <= SHORT_KEYS:
            cfg = SHORT_MHA_CONFIGS.get(key) if group == 1 else None
            if cfg is None:
                cfg = SHORT_CONFIGS.get(key)
            if cfg is not None:
                return cfg
        cfg = PLAIN_CONFIGS.get(key)
        if cfg is not None:
            return cfg
    return CONFIGS[spec.head_dim]


# Where this kind measured faster than the split kind on the H200 (benchmarks/RESULTS.md,
# session 19 B5: both in one process on issues 13/14's grid, the split kind with the Hopper
# dK/dV kernel): (head dim, causal) -> the shortest key length measured faster. A call that
# does not choose a kind (no kind argument, no FLASHGEN_BWD_KIND, determinism not asked for)
# runs this kind there; everywhere else the split kind stays the default. Not causal: 0.5-4%
# faster at head dim 128, 2-5% at 64 (1k-16k keys; B6 read head dim 128 at 1k 1.3% slower:
# within the runs' spread); causal head dim 64 from 4k (2-6%; 4% slower at 1k). Causal head
# dim 128 was 16-34% slower until its spills were removed (session 20 B3 profile: 34 M local
# memory requests a call); session 20 B4: from 4k keys (MHA and GQA) forward+backward 7-20%
# faster (the backward alone 9-26%), at 1k 4% slower (MHA) or level (GQA): split there.
# Shorter keys were not measured (launch-bound calls: the split kind's plans cost less host
# time). Head dim 64 without causal masking at 1k keys read the split kind faster in two later
# runs (session 21 B1: 1-5%; session 22 B4, benchmarks/hopper_bwd.py in one process: backward
# 1.045 against 1.080 ms, 3%; at 4k level, 3.606 against 3.594): from 4k since (the grid then
# read that shape 0.914x cuDNN on the split kind against 0.920x on this one in B1: within the
# runs' spread). Session 27 B8 (benchmarks/bwd_grid.py --modes fast,hopper,split --rounds 4,
# forward+backward, 1k and 4k keys, with dQ's products in turns at head dim 128 since session
# 26): this kind faster on 11 shapes of 12, all three 1k MHA ones: head dim 128 causal 0.748 ms
# in every round against the split kind's 0.74-0.93 (bimodal; median 0.836), head dim 64
# without causal masking 1.346 against 1.38, causal 0.892 against 0.906. From 1k keys since.
AUTO: dict[tuple[int, bool], int] = {
    (128, False): 1024,
    (128, True): 1024,
    (64, False): 1024,
    (64, True): 1024,
}


# GQA calls (more query heads than kv heads: one work item walks every query head of its kv
# head's group, so items are longer and fewer) override `AUTO` where listed. Session 25 B1
# (benchmarks/bwd_grid.py --modes fast,hopper,split --rounds 4, forward+backward through
# `flashgen.attention`, medians of four alternating rounds): B16 H32/8 N1024 D128 causal, the
# hopper kind 1.070x cuDNN against the split kind's 1.015x (1.33-1.38 ms against 1.40-1.42 in
# every round), while MHA B16 H16 N1024 D128 causal read 0.912x against 0.924x (split there).
AUTO_GROUPED: dict[tuple[int, bool], int] = {
    (128, True): 1024,
}

# The same for calls with lengths (SeqBounds), alone or with a key-padding mask: (head dim,
# causal, mask kind "" / "bool" / "add") -> the shortest key length measured faster than the
# split kind (benchmarks/RESULTS.md; split time over hopper time, backward alone or with the
# forward). Lengths alone (sessions 21-22, H200, GQA Hq/Hkv 4, 47-79% of the pairs visible):
# head dim 128 1.12-1.20x at 1k keys and 1.06-1.20x at 4k (full and causal); head dim 64 at 4k
# 1.05-1.07x, at 1k right-padded 0.98x, left-padded causal 1.11x with readings spread
# 0.63-0.95 ms (not taken). Key-padding masks (session 49, H100, `next_s49/kinds_pad.py --grid`:
# right padding keeping 50-100% of each entry's keys, 8k tokens a call, 16 heads, the backward
# alone, medians of three alternating readings, both kinds without a zero fill of dK/dV): from
# 1k keys the hopper kind is faster in every case, boolean and additive, causal both ways, both
# head dims: 1.07-1.22x at head dim 64, 1.03-1.34x at 128 (1.17-1.34x from 2k); at 512 keys
# 0.88-1.10x (split kept). Sessions 21-22 on the H200 had read masks at head dim 64 and 1k
# keys 1.00x (boolean) / 1.09x (additive), before the later changes to both kinds.
AUTO_EXTRAS: dict[tuple[int, bool, str], int] = {
    (128, False, ""): 1024,
    (128, True, ""): 1024,
    (64, False, ""): 4096,
    (64, True, ""): 4096,
    (128, False, "add"): 1024,
    (128, False, "bool"): 1024,
    (128, True, "add"): 1024,
    (128, True, "bool"): 1024,
    (64, False, "add"): 1024,
    (64, False, "bool"): 1024,
    (64, True, "add"): 1024,
    (64, True, "bool"): 1024,
}

# The same for calls with a sliding window (alone, with lengths or with a key-padding mask):
# (head dim, causal, with a key-padding mask) -> the shortest key length measured faster than
# the split kind (session 21 B4, forward+backward at 4k keys, GQA Hq/Hkv 4, causal windows of
# 1024 and 256 keys and a two-sided one of 512: split time over hopper time 1.03-1.07x at head
# dim 128, 1.06-1.10x at 64; B6 alternated the narrow causal rows in one job, hopper faster in
# every pairing). At 1k keys (session 22 B2, one
# process): the two-sided 512 window 1.05x / 1.03x (taken from 1k), the causal 256 window
# 0.92x / 0.99x (not).
# With a key-padding mask (its key range as lengths, the mask applied as one vector of keys,
# boolean and additive alike; the key's third field True): session 23 B2 (masks.py
# window_*_boolpad rows, B4 H16/4 4k d128, a boolean [B, 1, 1, N] mask, both kinds alternating
# in one process, float64 checks passing): split time over hopper time 1.13x for a causal window
# of 1024 keys, 1.23x for a two-sided one of 512; head dim 64 and shorter keys not timed.
AUTO_WINDOW: dict[tuple[int, bool, bool], int] = {
    (128, False, False): 1024,
    (128, True, False): 4096,
    (64, False, False): 1024,
    (64, True, False): 4096,
    (128, False, True): 4096,
    (128, True, True): 4096,
}

# The same for calls with softcapping, ALiBi or dropout (with or without a window or a
# key-padding mask): (head dim, causal, modification) -> the shortest key length measured
# faster than the split kind; a call with two of them needs both listed and takes the longer
# threshold. Session 22 B1/B2 (benchmarks/RESULTS.md), forward+backward, GQA Hq/Hkv 4, both
# kinds alternating in one process, split time over hopper time at 4k keys / 1k keys:
#   head dim 128: softcap causal 1.20/1.08, two-sided 1.57/1.54; ALiBi causal 1.10/0.99,
#                 two-sided 1.15/1.11; dropout causal 1.11/1.03, two-sided 1.19/1.15;
#   head dim 64:  softcap causal 1.21/1.08, two-sided 1.21/1.15; ALiBi causal 1.10/1.02,
#                 two-sided 1.10/1.08; dropout causal 1.22/1.15, two-sided 1.22/1.18.
# Causal ALiBi at head dim 128 was level at 1k (0.99): the split kind there.
# Dropout at head dim 64 and 512 keys, not taken: session 61 (two H100 hosts,
# benchmarks/raw/h100_s61/drop_kinds.py, B4-B32 x 12 heads, p 0.1, forward+backward) read the
# hopper kind's kernels at 0.88-1.00x the split kind's GPU time (torch.profiler's kernel sums),
# but such calls are bound by the host there, and the eager call's time read 0.67-1.32x the
# split kind's on one host and 1.02-1.22x (every row slower) on the other: its gain on the GPU
# is smaller than the host's noise, and it may cost host time.
AUTO_SCORE_MODS: dict[tuple[int, bool, str], int] = {
    (128, False, "softcap"): 1024,
    (128, False, "alibi"): 1024,
    (128, False, "dropout"): 1024,
    (128, True, "softcap"): 1024,
    (128, True, "alibi"): 4096,
    (128, True, "dropout"): 1024,
    (64, False, "softcap"): 1024,
    (64, False, "alibi"): 1024,
    (64, False, "dropout"): 1024,
    (64, True, "softcap"): 1024,
    (64, True, "alibi"): 1024,
    (64, True, "dropout"): 1024,
}


def auto_possible(seq_k: int) -> bool:
    """Whether some `AUTO` or `AUTO_GROUPED` entry takes calls with `seq_k` keys (if not, the
    plain eager path need not ask: `flashgen.kernels.bwd.backward_plain`)."""
    return any(seq_k >= least for least in (*AUTO.values(), *AUTO_GROUPED.values()))


# The split kind's dK/dV kernel as this template's kernel without dQ (COMPUTE_DQ=False: no
# atomics, no dS exchange, so deterministic like the portable one): (head dim, causal) -> the
# shortest key length where it replaces the portable dK/dV kernel in a call whose config is
# chosen at run time. Measured on the H200 (benchmarks/RESULTS.md, session 19 B3): 1.09-1.23x
# the portable dK/dV kernel at head dim 128 without causal masking (1k-16k keys, GQA too);
# 0.86-0.99x causal and 0.96-1.05x at head dim 64, which keep the portable kernel.
DKDV_AUTO: dict[tuple[int, bool], int] = {(128, False): 1024}
DKDV_CONFIG = HopperBwdConfig(2, 2, 1, 168, False, False)
DKDV_ENV = "FLASHGEN_BWD_DKDV"
dkdv_env = env_reader(DKDV_ENV)

# The shared-memory swizzle of the fp32 dQ partials staged for the TMA reduce-add (dq_tma), per
# head dim. Each consumer stores its partial from the wgmma accumulator layout, a thread's two
# adjacent fp32 columns at a time (8 bytes), a half-warp covering 4 rows x 32 bytes. With the
# 128-byte swizzle (128-byte rows of 32 columns) rows r and r ^ 1 land on the same banks: the
# stores took twice their ideal shared wavefronts at head dim 128 (benchmarks/RESULTS.md,
# session 24 B1's profile: 33.5 M excess wavefronts, 9% of the kernel's shared traffic). With a
# 32-byte swizzle each staged tile is 8-column slices of 32-byte rows, so a half-warp's 4 rows
# are 128 contiguous bytes (no conflict), at the price of 8 TMA reduce-adds a chunk, not 2.
# Session 25 B2 (the backward alone, 18 shapes, five alternating rounds): 32 bytes 1.015-1.043x
# at head dim 64 on five shapes of six (0.997x the sixth), where one consumer carries the dQ
# chain; 0.962-0.990x at head dim 128 on all twelve, where both consumers reduce (16 TMA
# operations a step instead of 4). FLASHGEN_BWD_DQ_SWIZZLE (128 or 32) overrides it when a plan
# is built, for A/Bs.
DQ_SWIZZLE_ENV = "FLASHGEN_BWD_DQ_SWIZZLE"
DQ_SWIZZLE = {64: 32, 128: 128}
dq_swizzle_env = env_reader(DQ_SWIZZLE_ENV)


def dq_stage_layout(gl, block, head_dim: int):
    """The NVMMA shared layout of the fp32 dQ staging tile `block` ([1, rows, columns]) and of
    its TMA descriptor: `DQ_SWIZZLE`'s bytes for `head_dim`, or FLASHGEN_BWD_DQ_SWIZZLE's."""
    raw = dq_swizzle_env()
    raw = raw.decode() if isinstance(raw, bytes) else raw
    if raw not in (None, "", "128", "32"):
        raise ValueError(f"{DQ_SWIZZLE_ENV} must be 128 or 32, got {raw!r}")
    swizzle = int(raw) if raw else DQ_SWIZZLE.get(head_dim, 128)
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=32, rank=len(block))


def dkdv_choice(spec, q, k, v, do) -> HopperBwdConfig | None:
    """The config of this family's dK/dV kernel for a split-kind call of `spec` (no extras),
    or None where the portable dK/dV kernel runs: FLASHGEN_BWD_DKDV=portable, a shape
    `DKDV_AUTO` does not list (FLASHGEN_BWD_DKDV=hopper takes every spec this template has),
    or tensors it cannot run (`usable`)."""
    wish = dkdv_env()
    wish = wish.decode() if isinstance(wish, bytes) else wish
    if wish not in (None, "", "auto", "hopper", "portable"):
        raise ValueError(f"{DKDV_ENV} must be auto, hopper or portable, got {wish!r}")
    if wish == "portable" or spec.has_extras:
        return None
    if wish != "hopper":
        least = DKDV_AUTO.get((spec.head_dim, spec.causal))
        if least is None or k.shape[2] < least:
            return None
    if usable(spec, q, k, v, do) is not None:
        return None
    return DKDV_CONFIG


class DkdvLaunch:
    """dK and dV by this template's kernel (COMPUTE_DQ=False), called as the split kind calls
    its portable dK/dV launch: (q, k, v, do, lse, delta, dk, dv, Hq, Hkv, Sq, Sk, scale), with
    delta = rowsum(dO * O) already written and dk/dv contiguous (a `Plan` without dQ)."""

    __slots__ = ("plan",)

    def __init__(self, spec, cfg: HopperBwdConfig, q, k, v, do, device):
        self.plan = Plan(spec, cfg, q, k, v, do, None, device, compute_dq=False)

    def __call__(self, q, k, v, do, lse, delta, dk, dv, hq, hkv, sq, sk, scale) -> None:
        self.plan(do, q, k, v, None, lse, scale, delta=delta, dk=dk, dv=dv)


def auto_choice(spec, seq_k: int, group: int = 1) -> bool:
    """Whether a call that leaves the kind to flashgen runs this kind for `spec` (`AUTO`, or
    `AUTO_GROUPED` where `group`, query heads per kv head, is above 1 and it lists the spec;
    `AUTO_EXTRAS`, `AUTO_WINDOW`, `AUTO_SCORE_MODS`: the first that the spec's extras name)."""
    if spec.softcap or spec.alibi or spec.dropout:  # (every backward call asks: no list else)
        mods = [m for m in ("softcap", "alibi", "dropout") if getattr(spec, m)]
        listed = [AUTO_SCORE_MODS.get((spec.head_dim, spec.causal, m)) for m in mods]
        each = [t for t in listed if t is not None]
        least = max(each) if len(each) == len(mods) else None  # every one listed
    elif spec.window:
        least = AUTO_WINDOW.get((spec.head_dim, spec.causal, bool(spec.attn_mask)))
    elif spec.lengths:
        least = AUTO_EXTRAS.get((spec.head_dim, spec.causal, spec.attn_mask))
    else:
        key = (spec.head_dim, spec.causal)
        least = AUTO_GROUPED.get(key, AUTO.get(key)) if group > 1 else AUTO.get(key)
    return least is not None and seq_k >= least and spec_reason(spec) is None


def template_context(spec) -> dict:
    """What the template may use: ints, bools and fixed names only."""
    from .gluon_reduce import reduce_name
    from .hopper import gluon_api

    api, reason = gluon_api()
    if api is None:
        raise RuntimeError(f"cannot render the Hopper backward: {reason}")
    why = spec_reason(spec)
    if why is not None:
        raise ValueError(f"the Hopper backward has no kernel for {spec.uri()}: {why}")
    return {
        "uri": family_uri(spec),
        "head_dim": spec.head_dim,
        "causal": spec.causal,
        "lengths": spec.lengths,
        "window": spec.window,
        "softcap": spec.softcap,
        "alibi": spec.alibi,
        "dropout": spec.dropout,
        "attn_mask": spec.attn_mask,
        "dense_keys": DENSE_KEYS,
        "dtype": spec.dtype,
        "gl_dtype": _GL_DTYPE[spec.dtype],
        "tma_load": api["tma_load"],
        "cta_barrier": _cta_barrier_name(),
        "dq_reduce": reduce_name() or "",
    }


def _cta_barrier_name() -> str:
    """Gluon's barrier among a partition's threads: `thread_barrier` in Triton 3.6, `barrier`
    in 3.9."""
    from triton.experimental.gluon import language as gl

    for name in ("thread_barrier", "barrier"):
        if hasattr(gl, name):
            return name
    raise RuntimeError("Gluon has neither thread_barrier nor barrier")


def family_uri(spec) -> str:
    return "attn_bwd_hopper_" + spec.uri().removeprefix("attn_bwd_")


def spec_reason(spec) -> str | None:
    """Why `spec` has no Hopper backward kernel; None if it has one (Gluon aside)."""
    if spec.direction != "bwd":
        return "the Hopper backward is for backward specs"
    if spec.dropout and spec.softcap:
        return "dropout with softcap is in the split backward only"
    if spec.alibi and spec.lengths:
        return "ALiBi with lengths is in the split backward only (as in the forward)"
    if spec.attn_mask and not spec.lengths:
        return "mask tensors only as key-padding masks with their key range (lengths)"
    if spec.packed:
        return "packed sequences are in the split backward only"
    if spec.dtype not in _GL_DTYPE:
        return f"dtype {spec.dtype} (fp16/bf16 only)"
    if spec.head_dim not in RENDERABLE_HEAD_DIMS:
        return f"head dim {spec.head_dim} (tiles for {RENDERABLE_HEAD_DIMS} only)"
    return None


@functools.cache
def _device_is_sm90(index: int) -> bool:
    import torch

    return torch.cuda.get_device_capability(index) == (9, 0)


def usable(spec, *tensors, mask=None) -> str | None:
    """Why these tensors (and `mask`, the call's mask tensor if any) cannot run the Hopper
    backward now; None if they can. A mask only as a key-padding mask: constant along heads
    and query rows (the kernel reads one vector of keys per batch entry)."""
    from .hopper import gluon_api
    from .tma import tma_compatible

    reason = spec_reason(spec) or gluon_api()[1]
    if reason is not None:
        return reason
    if mask is not None and (mask.stride(1) != 0 or mask.stride(2) != 0):
        return "a mask tensor varying along heads or query rows (not a key-padding mask)"
    first = tensors[0]
    if not first.is_cuda or not _device_is_sm90(first.device.index or 0):
        return "not an sm_90 GPU"
    if not all(tma_compatible(t) for t in tensors):
        return "q/k/v/dO not 16-byte aligned for TMA"
    if spec.lengths:
        from .gluon_reduce import reduce_name

        if reduce_name() is None:
            return "lengths need dQ by TMA reduce-add, which this Triton's Gluon cannot issue"
    return None


def checked_config(
    spec, config: HopperBwdConfig | None, compute_dq: bool = True, seq_k=None, group: int = 1
):
    """`config` (None: `shipped_config` for `seq_k` keys and `group` query heads a kv head, with
    element atomics where this Triton's Gluon has no TMA reduce-add) for `spec`, or ValueError
    naming what it cannot do."""
    cfg = config or shipped_config(spec, seq_k, group)
    if config is None and cfg.dq_tma:
        from .gluon_reduce import reduce_name

        if reduce_name() is None:  # the shipped config, with atomics on such a Triton
            cfg = dataclasses.replace(cfg, dq_tma=False)
    if cfg.stats_tma:
        raise ValueError(
            f"{cfg.short()}: stats_tma faults on the H200 (illegal instruction, "
            "benchmarks/RESULTS.md); use stats_tma=False"
        )
    why = cfg.head_dim_reason(spec.head_dim)
    if why is not None:
        raise ValueError(f"{cfg.short()} cannot run head dim {spec.head_dim}: {why}")
    if spec.lengths and not (cfg.stats_smem and cfg.dq_tma and compute_dq):
        raise ValueError(
            f"{cfg.short()}: lengths need stats_smem, dq_tma and dQ (the template's rendering "
            "with lengths has only that path)"
        )
    if cfg.dq_tma and compute_dq:
        from .gluon_reduce import reduce_name

        if reduce_name() is None:
            raise ValueError(f"{cfg.short()}: this Triton's Gluon has no TMA reduce-add")
    return cfg


class Plan:
    """This kind's launches for one call signature (the shapes and strides of q, k, v, do and
    out, the config): delta = rowsum(dO * O) (the portable template's `attn_bwd_preprocess`;
    not built without `out`, when the caller passes delta), the Gluon kernel with its
    descriptor templates, and the dQ conversion (the one-pass template's
    `attn_bwd_dq_convert`), each a `flashgen.kernels.launch.Launch` (`device` as Launch takes
    it: None launches through the JIT every time). Called as
    plan(do, q, k, v, out, lse, scale[, delta, dk, dv, bounds, mask, extras, rows_whole])
    -> (dq or None, dk, dv); `extras`: the run-time arguments after the scale of a spec with a
    window, softcap, ALiBi or dropout, as `flashgen.kernels.plans.variant_args` gives them for
    every kernel family (the window's sizes, softcap / scale, the slopes and their batch
    stride, dropout's p and seed);
    `mask` exactly when `spec.attn_mask`: a key-padding mask, the expanded [B, Hq, Sq, Sk] view
    constant along heads and query rows (its `bounds` the mask's key range, `padding.key_hull`);
    `bounds` (SeqBounds, int32 [B, 4]) exactly when `spec.lengths`: dK and dV rows before a
    key range's start are not stored (rows past its end are stored as zeros), so dK and dV are
    zero-filled first unless `rows_whole` says every range starts at key 0 (a key-padding
    mask's, `padding.key_hull`); dQ's fp32 buffer is zeroed anyway, so its rows outside the
    query ranges convert to zeros."""

    __slots__ = (
        "pre",
        "pre_args",
        "main",
        "convert",
        "sizes",
        "compute_dq",
        "lengths",
        "masked",
        "dynamic",
    )
    keep = True  # `flashgen.kernels.plans.PlanCache` keeps it (no database record behind it)

    def __init__(self, spec, cfg: HopperBwdConfig, q, k, v, do, out, device, compute_dq=True):
        from triton.experimental.gluon import language as gl

        from ..core.spec import KernelSpec
        from .codegen import load, load_family
        from .launch import Launch

        batch, hq, sq, dim = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        gl_dtype = getattr(gl, spec.dtype)
        plain = KernelSpec(dim, spec.causal, spec.dtype, "bwd")
        row_grid = (cdiv(sq, 64), batch * hq)  # the row-wise kernels' (delta, dQ conversion)
        self.pre = None
        if out is not None:
            pre = load(plain).attn_bwd_preprocess
            self.pre = Launch(pre, row_grid, {"BLOCK_M": 64}, {}, device)
            self.pre_args = (*out.stride()[:3], *do.stride()[:3], hq, sq)

        def template(t, rows):
            layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, dim], gl_dtype)
            return list(t.shape), list(t.stride()), [1, 1, rows, dim], layout

        flat = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
        stats = ([batch * hq * sq], [1], [cfg.block_m], flat)  # read only with stats_tma
        constexprs = _constexprs(cfg, compute_dq)
        if constexprs["DQ_TMA"]:  # the fp32 dQ buffer as [B * Hq, Sq, D]: rows past Sq clipped
            block = [1, cfg.block_m, cfg.dq_chunk(dim)]
            staged = dq_stage_layout(gl, block, dim)
            dq_desc = ([batch * hq, sq, dim], [sq * dim, dim, 1], block, staged)
        else:
            dq_desc = stats  # not read
        descs = ((0, template(q, cfg.block_m)), (1, template(k, cfg.block_n)),
                 (2, template(v, cfg.block_n)), (3, template(do, cfg.block_m)),
                 (4, stats), (5, stats), (6, dq_desc))  # fmt: skip
        items = cdiv(sk, cfg.block_n) * batch * hkv
        # one program per SM at most when persistent (the shared memory of two does not fit)
        grid = (min(items, _sm_count(q.device.index or 0)) if cfg.persistent else items,)
        kernel = load_family(spec, FAMILY).attn_bwd_ws
        self.main = Launch(kernel, grid, constexprs, {"maxnreg": cfg.maxnreg}, device, descs)
        self.convert = None
        if compute_dq:
            convert = load_family(plain, "onepass").attn_bwd_dq_convert
            self.convert = Launch(convert, row_grid, {"BLOCK_M": 64}, {}, device)
        self.sizes = (batch, hq, hkv, sq, sk, dim)
        self.compute_dq = compute_dq
        self.lengths = spec.lengths
        self.masked = bool(spec.attn_mask)
        from .hopper import sched_counter

        self.dynamic = sched_counter if cfg.dynamic else None  # the counter's lookup

    def __call__(
        self, do, q, k, v, out, lse, scale, delta=None, dk=None, dv=None, bounds=None, mask=None,
        extras=(), rows_whole=False,
    ):  # fmt: skip
        import torch

        batch, hq, hkv, sq, sk, dim = self.sizes
        if delta is None:
            delta = torch.empty_like(lse)
            self.pre(out, do, delta, *self.pre_args)
        if dk is None:
            alloc = torch.zeros if self.lengths and not rows_whole else torch.empty
            dk = alloc((batch, hkv, sk, dim), dtype=k.dtype, device=k.device)
            dv = alloc((batch, hkv, sk, dim), dtype=k.dtype, device=k.device)
        if self.compute_dq:
            acc = torch.zeros((batch, hq, sq, dim), dtype=torch.float32, device=q.device)
            rows = acc.view(batch * hq, sq, dim)
        else:
            acc = rows = lse  # an fp32 pointer the kernel does not touch
        extra = (bounds,) if self.lengths else ()
        if self.masked:  # a key-padding mask: element [b, n] at b * stride 0 + n * stride 3
            extra += (mask, mask.stride(0), mask.stride(3))
        # the work-item counter of a dynamic grid (else an unread pointer)
        sched = self.dynamic(q.device) if self.dynamic else lse
        # lse and delta again as the statistics descriptors (read only with stats_tma)
        self.main(q, k, v, do, lse, delta, rows, lse, delta, dk, dv, acc, sched, *extra, batch,
                  hq, hkv, sq, sk, scale, *extras)  # fmt: skip
        if not self.compute_dq:
            return None, dk, dv
        dq = torch.empty((batch, hq, sq, dim), dtype=q.dtype, device=q.device)
        self.convert(acc, dq, sq, scale)
        return dq, dk, dv


def backward(
    do,
    q,
    k,
    v,
    out,
    lse,
    *,
    scale: float,
    spec,
    config: HopperBwdConfig | None = None,
    delta=None,
    compute_dq: bool = True,
):
    """(dq, dk, dv) of `out = attention(q, k, v)`, new contiguous tensors in q's dtype,
    through the JIT (no plan kept: for tests and benchmarks; `flashgen.kernels.bwd` keeps a
    `Plan` per call signature). compute_dq=False: dK and dV only (dq is None; no atomics, dS
    stays in registers), for a backward whose dQ is another kernel's; `delta` (rowsum(dO * O),
    fp32 like lse) when the caller has it.
    q/do/out [B, Hq, Sq, D] and k/v [B, Hkv, Sk, D] with last-dim stride 1, lse float32
    [B, Hq, Sq] contiguous (natural log)."""
    cfg = checked_config(spec, config, compute_dq, k.shape[2], q.shape[1] // k.shape[1])
    plan = Plan(spec, cfg, q, k, v, do, out, None, compute_dq)
    return plan(do, q, k, v, out, lse, float(scale), delta=delta)


def _constexprs(cfg: HopperBwdConfig, compute_dq: bool) -> dict:
    """The kernel's constexprs for `cfg`, in the kernel signature's order (the launch's and the
    ahead-of-time compile's): dQ by TMA reduce-add only where dQ is computed."""
    return {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "NUM_BUF": cfg.num_buf,
        "NUM_CONSUMERS": cfg.consumers, "DQ_SPLIT": cfg.dq_split, "SHARE_DS": cfg.share_ds,
        "STATS_TMA": cfg.stats_tma, "KV_BUFS": cfg.kv_bufs, "num_warps": 4,
        "COMPUTE_DQ": compute_dq, "DQ_TMA": cfg.dq_tma and compute_dq,
        "STATS_SMEM": cfg.stats_smem, "DQ_TURNS": cfg.dq_turns, "DS_BUFS": cfg.ds_bufs,
        "DYNAMIC": cfg.dynamic, "DQ_BUFS": cfg.dq_bufs if cfg.dq_tma and compute_dq else 1,
        "DQ_FIRST": cfg.dq_first and compute_dq,
    }  # fmt: skip


@functools.cache
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def compile_for_sm90(spec, cfg: HopperBwdConfig | None = None, compute_dq: bool = True) -> dict:
    """Compile the rendered kernel ahead of time for sm_90, no GPU needed, with the launch's
    specialisation; returns {"shared": bytes, "ptx": text} (`hopper_aot.assemble_sm90` turns the
    PTX into spills and SASS). As `flashgen.kernels.hopper_aot.compile_for_sm90`: not under
    TRITON_INTERPRET=1."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from .codegen import load_family

    cfg = cfg or shipped_config(spec)
    short = {"bfloat16": "bf16", "float16": "fp16"}[spec.dtype]

    def desc(rows):
        block = [1, 1, rows, spec.head_dim]
        layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, spec.dtype))
        return f"tensordesc<{short}{block},{layout!r}>"

    stats_layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    flat = f"tensordesc<fp32[{cfg.block_m}],{stats_layout!r}>"
    constexprs = _constexprs(cfg, compute_dq)
    if constexprs["DQ_TMA"]:
        block = [1, cfg.block_m, cfg.dq_chunk(spec.head_dim)]
        staged = dq_stage_layout(gl, block, spec.head_dim)
        desc_dq = f"tensordesc<fp32{block},{staged!r}>"
    else:
        desc_dq = flat

    signature = {
        "desc_q": desc(cfg.block_m), "desc_k": desc(cfg.block_n), "desc_v": desc(cfg.block_n),
        "desc_do": desc(cfg.block_m), "desc_lse": flat, "desc_delta": flat, "desc_dq": desc_dq, "Lse": "*fp32", "Delta": "*fp32", "DK": f"*{short}",
        "DV": f"*{short}", "DQAcc": "*fp32",
        "Sched": "*i32" if cfg.dynamic else "*fp32", **({"SeqBounds": "*i32"} if spec.lengths else {}),
        **({"Mask": "*i1" if spec.attn_mask == "bool" else f"*{short}", "stride_mb": "i32",
            "stride_mn": "i32"} if spec.attn_mask else {}),
        "BATCH": "i32", "H": "i32", "H_KV": "i32",
        "SEQ_Q": "i32", "SEQ_K": "i32", "sm_scale": "fp32",
        **({"WIN_LEFT": "i32", "WIN_RIGHT": "i32"} if spec.window else {}),
        **({"softcap_raw": "fp32"} if spec.softcap else {}),
        **({"Slopes": "*fp32", "stride_sb": "i32"} if spec.alibi else {}),
        **({"drop_p": "fp32", "drop_seed": "i64"} if spec.dropout else {}),
        **dict.fromkeys(constexprs, "constexpr"),
    }  # fmt: skip
    source = GluonASTSource(
        fn=load_family(spec, FAMILY).attn_bwd_ws,
        signature=signature,
        constexprs=constexprs,
        # the JIT's 16-byte specialisation of the pointers (Lse, Delta, DK, DV, DQAcc, Sched)
        attrs={(i,): [["tt.divisibility", 16]] for i in range(7, 13)},
    )
    kernel = triton.compile(
        source,
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": 4, "maxnreg": cfg.maxnreg},
    )
    return {"shared": kernel.metadata.shared, "ptx": kernel.asm["ptx"]}
