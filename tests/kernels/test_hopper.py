"""The Hopper forward family (flashgen.kernels.hopper, templates/attn_fwd_hopper.py.jinja).

Gluon kernels do not run in Triton's CPU interpreter, so on the CPU this renders the template
and compiles it ahead of time for sm_90 (layout/type errors, shared memory against the model)
where the installed Triton has the Gluon API; numerics are checked on an sm_90 GPU (`gpu`)
against float64, including the backward fed by this forward's out and LSE.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from gluon_aot import (
    AOT_REASON,
    API,
    API_REASON,
    ON_SM90,
    check_kernel_cli,
    compile_in_child,
    needs_gluon,
    on_sm90,
)

from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper, plans
from flashgen.kernels.codegen import load_family, render
from flashgen.kernels.reference import (
    attention_ref,
    hidden_ref,
    max_abs_err,
    sdpa_same_dtype,
    tolerance,
)

HEAD_DIMS = hopper.RENDERABLE_HEAD_DIMS


# ---- rendering and selection (CPU) ------------------------------------------------------


@needs_gluon
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
def test_render(head_dim, dtype, causal):
    spec = KernelSpec(head_dim, causal, dtype, "fwd")
    source = render(spec, "hopper")
    assert f"# Kernel: {spec.uri()}\n" in source and "Hopper warp-specialised" in source
    assert f"HEAD_DIM = gl.constexpr({head_dim})" in source
    assert f"dtype: gl.constexpr = gl.{dtype}" in source
    assert f"tma.{API['tma_load']}(" in source and f"tma.{API['tma_store']}(" in source
    # Causal: the diagonal mask and the longest-first order exist only in the causal rendering.
    assert ("offs_n[None, :] <= offs_m[:, None]" in source) == causal
    assert ("pid_m = num_m - 1 - r // heads_here" in source) == causal
    compile(source, spec.uri(), "exec")  # valid Python
    assert hasattr(load_family(spec, "hopper"), "attn_fwd_ws")


@needs_gluon
@pytest.mark.parametrize(
    "spec, fragment",
    [
        (KernelSpec(96, False, "bfloat16", "fwd"), "head dim 96"),
        (KernelSpec(128, False, "float32", "fwd"), "dtype float32"),
        (KernelSpec(128, False, "float16", "bwd"), "forward only"),
    ],
)
def test_specs_without_a_hopper_kernel(spec, fragment):
    assert fragment in hopper.spec_reason(spec, forced=True)
    with pytest.raises((ValueError, KeyError)):
        render(spec, "hopper")


def test_auto_choice_is_where_it_measured_faster():
    """Both renderable head dims, causal or not, take the family unforced from 1k query rows
    (faster than portable, RESULTS.md); only the installed Triton's Gluon can stand in the way."""
    assert hopper.AUTO_HEAD_DIMS == hopper.RENDERABLE_HEAD_DIMS
    for d in hopper.RENDERABLE_HEAD_DIMS:
        for causal in (False, True):
            assert hopper.spec_reason(KernelSpec(d, causal, "bfloat16", "fwd")) == API_REASON
            assert hopper.AUTO_MIN_SEQ_Q[d, causal] <= 1024


def test_not_chosen_for_cpu_tensors_or_when_forced_portable(monkeypatch):
    spec = KernelSpec(128, False, "bfloat16", "fwd")
    q = torch.zeros(1, 1, 8, 128, dtype=torch.bfloat16)
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    assert not hopper.choose(spec, q, q, q, 8)  # CPU tensors never take a GPU-only kernel
    if ON_SM90:
        monkeypatch.setenv(hopper.FAMILY_ENV, "portable")
        qc = q.cuda()
        assert not hopper.choose(spec, qc, qc, qc, 8)


def test_unknown_family_name_is_refused():
    with pytest.raises(ValueError, match="unknown kernel family"):
        render(KernelSpec(128, False, "bfloat16", "fwd"), "blackwell")


def test_kernel_cli_prints_the_hopper_source(capsys):
    refused = ["--head-dim", "96", "--family", "hopper"]
    printed = ["--head-dim", "128", "--dtype", "bfloat16", "--causal", "--family", "hopper"]
    check_kernel_cli(capsys, refused, "no Hopper kernel", printed, "attn_fwd_ws")


# ---- ahead-of-time compilation for sm_90 (CPU) -------------------------------------------


# Configs compiled ahead of time: the shipped ones (both causal modes) and one of each other
# consumer layout the fit model admits (hd128 64-key tiles with 3 slots; hd64 three consumers,
# one 8-warp consumer, one 4-warp consumer), so the byte model and the register model are
# checked across the space.
AOT_CONFIGS = [
    (64, "shipped"), (128, "shipped"),
    (128, (128, 64, 3, 2, 4, 168, False)),
    (64, (192, 64, 3, 3, 4, 128, False)),
    (64, (128, 128, 2, 1, 8, 168, False)),
    (64, (64, 128, 2, 1, 4, 128, False)),
    (128, (128, 128, 2, 2, 4, 168, False, True, True)),  # dynamic persistent grid
    (128, (128, 128, 2, 2, 4, 168, False, False, False, True)),  # PV's wait pinned late
    (64, (128, 128, 3, 2, 4, 168, False, True, False, True)),  # ... persistent, head dim 64
]  # fmt: skip

_AOT_SCRIPT = """
import json, sys
from flashgen.kernels import hopper, hopper_aot
from flashgen.core.spec import KernelSpec
from flashgen.core.hopper_config import HopperConfig
out = {}
for head_dim, cfg in json.loads(sys.argv[1]):
    cfg = hopper.CONFIGS[head_dim] if cfg == "shipped" else HopperConfig(*cfg)
    for causal in ((False, True) if cfg == hopper.CONFIGS[head_dim] else (cfg.dynamic,)):
        spec = KernelSpec(head_dim, causal, "bfloat16", "fwd")
        res = hopper_aot.compile_for_sm90(spec, cfg)
        asm = hopper_aot.assemble_sm90(res["ptx"]) or {}
        out[f"{spec.uri()} {cfg.short()}"] = dict(
            res, model=cfg.shared_bytes(head_dim), spills=asm.get("spills"),
            overlap=hopper_aot.pv_overlap(asm["sass"]) if asm else None)
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def aot_results():
    """The AOT configs compiled for sm_90 (in a child process: `gluon_aot.compile_in_child`)."""
    return compile_in_child(_AOT_SCRIPT, AOT_CONFIGS)


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_compiles_for_sm90_and_fits_the_models(aot_results):
    from flashgen.hardware.sram import KNOWN_GPUS

    assert len(aot_results) == 2 * 2 + 7
    for name, result in aot_results.items():
        ptx = result["ptx"]
        # Warp specialisation really happened: registers move from the loader to the consumers.
        assert re.search(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+40;", ptx), name
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, name
        # Consumers release buffers with a zero-byte arrive.expect_tx (the template's _release),
        # never Gluon's plain arrive, which costs a partition-wide bar.sync before it.
        assert re.search(r"mbarrier\.arrive\.expect_tx\.shared(::cta)?\.b64 _, \[%r\d+\], 0;", ptx)
        assert "mbarrier.arrive.shared" not in ptx, name
        # Only a dynamic grid takes items from the global counter.
        assert ("atom.global" in ptx) == (" PD)" in name), name
        real, model = result["shared"], result["model"]
        # The compiler adds only alignment padding to the explicit allocations.
        assert model <= real < model + 1024, (name, real, model)
        assert real <= KNOWN_GPUS["nvidia-h200"].smem_optin_bytes
        # Every config here passes the register model, and ptxas (where Triton ships it) agrees:
        # no spills, but for a dynamic grid's consumers, which keep 16 bytes of loop-carried
        # values in local memory (stored and loaded once per work item, not per tile; seen with
        # the ptxas of Triton 3.6 and 3.9 alike), and head dim 128 with PV's wait pinned late
        # (the softmax's scores, P and O live at once: Triton 3.9's ptxas spills 24 bytes, 3.6's
        # none).
        late = name.endswith("L)")
        if result["spills"] is not None:
            allowed = 16 if " PD)" in name else 32 if late and "d128" in name else 0
            assert result["spills"] <= allowed, name
        # late_wait: the consumer loop's softmax (64 exponentials a thread a 64 x 128 tile) all
        # before the wait for the previous PV (ptxas otherwise waits at the softmax's start)
        if late and result["overlap"] is not None:
            assert max(result["overlap"]) >= 64, (name, result["overlap"])


def test_aot_configs_pass_the_fit_model():
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.hardware.hopper_tiles import fit_reason
    from flashgen.hardware.sram import KNOWN_GPUS

    for head_dim, cfg in AOT_CONFIGS:
        cfg = hopper.CONFIGS[head_dim] if cfg == "shipped" else HopperConfig(*cfg)
        assert fit_reason(cfg, head_dim, KNOWN_GPUS["nvidia-h200"]) is None, cfg


def _split_spec(**kw):
    return KernelSpec(128, False, "bfloat16", "fwd", **kw)


def test_tail_splits_take_the_fewest_tiles():
    """A last round of 4 items (4,096 over 132 programs: B1 H32 16k at head dim 128) split
    into s chunks of 128 key tiles takes cdiv(4 s, 132) rounds of cdiv(128, s) tiles: 16 at
    s = 8. One of 68 items (H16) would take 76 at s = 7: more than half of 128, not split.
    Nothing splits without a partial round, a persistent grid or the knob, nor a rendering
    whose items differ (causal, masks, ALiBi, dropout) or whose split kernel has not run on
    the GPU (softcap)."""
    from flashgen.core.hopper_config import HopperConfig

    cfg = HopperConfig(128, 128, 2, 2, 4, 168, False, True, tail_split=8)
    assert hopper.tail_splits(_split_spec(), cfg, 4096, 132, 16384) == 8
    # 125 tiles (a ragged last one): chunks of 16 or more, so 7 at most
    assert hopper.tail_splits(_split_spec(), cfg, 4096, 132, 16000) == 7
    assert hopper.tail_splits(_split_spec(), dataclasses.replace(cfg, tail_split=5), 4096,
                              132, 16384) == 5  # fmt: skip
    assert hopper.tail_splits(_split_spec(), cfg, 2048, 132, 16384) == 1  # 76 of 128 tiles
    # chunks of at least MIN_CHUNK_TILES (16): 32 tiles split in two at most, 8 not at all
    assert hopper.MIN_CHUNK_TILES == 16
    assert hopper.tail_splits(_split_spec(), cfg, 4096, 132, 4096) == 2  # 4 items left
    assert hopper.tail_splits(_split_spec(), cfg, 2048, 132, 4096) == 1  # 2 rounds of 16
    assert hopper.tail_splits(_split_spec(), cfg, 4096, 132, 1024) == 1
    assert hopper.tail_splits(_split_spec(), cfg, 2 * 132, 132, 16384) == 1
    assert hopper.tail_splits(_split_spec(), cfg, 100, 100, 16384) == 1
    assert hopper.tail_splits(_split_spec(), dataclasses.replace(cfg, tail_split=1), 2048,
                              132, 16384) == 1  # fmt: skip
    assert hopper.tail_splits(_split_spec(), cfg, 2048, 132, 128) == 1  # one tile
    # a last round of 124 of 128 tiles: 2 chunks take 2 rounds of 64 tiles, no saving
    assert hopper.tail_splits(_split_spec(), cfg, 256, 132, 16384) == 1
    for spec in (KernelSpec(128, True, "bfloat16", "fwd"), _split_spec(window=True),
                 _split_spec(attn_mask="bool"), _split_spec(alibi=True),
                 _split_spec(dropout=True), _split_spec(lengths=True),
                 _split_spec(softcap=True)):  # fmt: skip
        assert not hopper.splittable(spec)
        assert hopper.tail_splits(spec, cfg, 4096, 132, 16384) == 1


def test_tail_plan_rows_and_merge_buffers(monkeypatch):
    """The split items are the last ones, in (batch, head, query block) order: their rows are
    the flat rows from the first split item's first row to the end of out."""
    from flashgen.core.hopper_config import HopperConfig

    monkeypatch.setattr(hopper, "_sm_count", lambda index: 132)
    monkeypatch.setattr(hopper, "MIN_CHUNK_TILES", 1)  # chunks of any length (9 tiles here)
    monkeypatch.setattr(hopper, "TailSplit", lambda spec, s, row0, rows, dev: (s, row0, rows))
    cfg = HopperConfig(128, 128, 2, 2, 4, 168, False, True, tail_split=8)
    q = torch.empty(2, 9, 1100, 128, dtype=torch.bfloat16)  # 9 query blocks: 162 items
    k = torch.empty(2, 9, 1100, 128, dtype=torch.bfloat16)
    s, row0, rows = hopper.tail_plan(_split_spec(), cfg, q, k, None)
    # 30 items split (162 - 132); item 132 = (batch, head) 14, query block 6
    assert s == 4 and row0 == 14 * 1100 + 6 * 128 and rows == 18 * 1100 - row0
    assert hopper.tail_plan(KernelSpec(128, True, "bfloat16", "fwd"), cfg, q, k, None) is None


_AOT_SPLIT = """
import json, sys
from flashgen.kernels import hopper_aot
from flashgen.core.spec import KernelSpec
from flashgen.core.hopper_config import HopperConfig
out = {}
for head_dim, fields, splits in json.loads(sys.argv[1]):
    cfg = HopperConfig(*fields)
    res = hopper_aot.compile_for_sm90(KernelSpec(head_dim, False, "bfloat16", "fwd"), cfg,
                                      splits=splits)
    asm = hopper_aot.assemble_sm90(res["ptx"]) or {}
    out[f"d{head_dim} {cfg.short()} {splits}"] = dict(
        shared=res["shared"], model=cfg.shared_bytes(head_dim), spills=asm.get("spills"),
        parts="st.global.v2." in res["ptx"])  # the chunk's O rows, two floats a store
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_split_kernels_compile_for_sm90():
    """The split rendering compiles for sm_90 with TAIL_SPLIT > 1 (the chunks' float32 stores
    in its PTX, paired: only the lse's single stores without them) and 1, in the same shared
    memory, and ptxas spills no more with the
    split than without (the 16k head-dim-128 record's config, late_wait included, and head
    dim 64's)."""
    rec = (128, 128, 2, 2, 4, 168, False, True, False, True, 8)
    cases = [(128, rec, 1), (128, rec, 7), (64, (128, 128, 3, 2, 4, 168, False, True, False,
                                                 False, 4), 4)]  # fmt: skip
    results = compile_in_child(_AOT_SPLIT, cases)
    assert len(results) == 3
    for name, r in results.items():
        assert r["model"] <= r["shared"] < r["model"] + 1024, name
        assert r["parts"] == (not name.endswith(" 1")), name
    spills = [r["spills"] for r in results.values()]
    if spills[0] is not None:
        assert spills[1] <= max(spills[0], 32) and spills[2] <= 16, spills


@needs_gluon
def test_split_rendering_only_where_items_are_alike():
    split = render(_split_spec(), "hopper")
    assert "def _unit(" in split and "PartLse" in split
    for spec in (KernelSpec(128, True, "bfloat16", "fwd"), _split_spec(window=True)):
        text = render(spec, "hopper")
        assert "def _unit(" not in text and "this rendering has no split items" in text


# ---- numerics on the GPU -----------------------------------------------------------------


def _qkv(b, hq, hkv, sq, sk, d, dtype, *, seed=0, layout="bhsd"):
    gen = torch.Generator().manual_seed(seed)

    def rand(h, s):
        if layout == "bshd":  # [B, S, H, D] storage viewed as [B, H, S, D]: strided heads
            return torch.randn(b, s, h, d, generator=gen).to(dtype).cuda().transpose(1, 2)
        return torch.randn(b, h, s, d, generator=gen).to(dtype).cuda()

    return rand(hq, sq), rand(hkv, sk), rand(hkv, sk)


GPU_CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, dtype, causal, layout)
    (2, 4, 4, 1000, 1000, 128, torch.bfloat16, False, "bhsd"),
    (2, 4, 4, 1000, 1000, 128, torch.bfloat16, True, "bhsd"),
    (1, 8, 2, 777, 777, 128, torch.float16, True, "bhsd"),  # GQA 4, odd length
    (1, 4, 4, 129, 300, 128, torch.bfloat16, False, "bhsd"),  # more keys than queries
    (1, 4, 4, 300, 129, 128, torch.bfloat16, True, "bhsd"),  # causal, fewer keys
    (2, 4, 4, 513, 513, 128, torch.bfloat16, True, "bshd"),  # strided heads
    (1, 2, 2, 1, 1, 128, torch.float16, True, "bhsd"),
    (2, 4, 2, 1000, 1000, 64, torch.bfloat16, True, "bhsd"),  # d64
    (1, 4, 4, 257, 1031, 64, torch.float16, False, "bhsd"),
]


@on_sm90
@pytest.mark.parametrize(
    "case", GPU_CASES, ids=lambda c: "-".join(map(str, c)).replace("torch.", "")
)
def test_hopper_forward_matches_float64(case, monkeypatch):
    from flashgen.kernels.fwd import forward

    b, hq, hkv, sq, sk, d, dtype, causal, layout = case
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    q, k, v = _qkv(b, hq, hkv, sq, sk, d, dtype, layout=layout)
    spec = KernelSpec(d, causal, str(dtype).removeprefix("torch."), "fwd")
    assert hopper.choose(spec, q, k, v, sq)  # this test must not silently run the portable one
    out, lse = forward(q, k, v, causal=causal, scale=None)
    ref_out, ref_lse = attention_ref(q, k, v, causal=causal)
    sdpa_err = max_abs_err(sdpa_same_dtype(q, k, v, causal=causal), ref_out)
    _, atol = tolerance(dtype, sdpa_err)
    # dense in q's dimension order (flashgen.kernels.layout)
    assert (out.transpose(1, 2) if layout == "bshd" else out).is_contiguous()
    assert torch.isfinite(out).all()
    err = max_abs_err(out, ref_out)
    assert err <= atol, f"out err {err:.3e} > {atol:.3e} (sdpa {sdpa_err:.3e})"
    lse_err = (lse.double() - ref_lse).abs().max().item()
    assert lse_err <= 1e-4 + 1e-5 * ref_lse.abs().max().item(), lse_err


# Launch layouts beyond the shipped ones, persistent grids with several work items per
# program (4 x 16 heads x 8 query blocks = 512 items > 132 SMs), GQA, odd lengths.
LAYOUT_CASES = [
    # (head_dim, HopperConfig fields, causal, (B, Hq, Hkv, Sq, Sk))
    (128, (128, 128, 2, 2, 4, 168, False, True), True, (4, 16, 4, 1000, 1000)),
    (128, (128, 128, 2, 2, 4, 168, False, True), False, (3, 16, 16, 777, 801)),
    (128, (128, 128, 2, 2, 4, 168, True, True), True, (4, 16, 16, 1000, 1000)),
    (128, (128, 64, 3, 2, 4, 168, False, True), True, (2, 8, 8, 1500, 1500)),
    (64, (192, 64, 3, 3, 4, 128, False, False), True, (2, 8, 2, 1000, 1000)),
    (64, (192, 64, 3, 3, 4, 128, False, True), False, (4, 16, 16, 1000, 1000)),
    (64, (64, 128, 3, 1, 4, 128, False, True), True, (4, 16, 4, 1000, 1000)),
    (64, (128, 128, 2, 1, 8, 168, False, False), True, (1, 4, 4, 300, 129)),
    # PV's wait pinned after the softmax (late_wait), plain and persistent grids, ping-pong
    (128, (128, 128, 2, 2, 4, 168, False, False, False, True), False, (3, 16, 16, 777, 801)),
    (128, (128, 128, 2, 2, 4, 168, True, True, True, True), True, (4, 16, 4, 1000, 1000)),
    (64, (128, 128, 3, 2, 4, 168, False, True, False, True), True, (2, 8, 2, 1000, 1000)),
]


def _layout_case_id(case) -> str:
    return f"d{case[0]}-{case[1]}-{case[2]}-{case[3]}"


class _LayoutCase:
    """A LAYOUT_CASES / DYNAMIC_CASES row made ready to launch: its HopperConfig and spec, bf16
    inputs, the float64 reference (out, lse) and the output tolerance (from SDPA's own bf16
    error on the same inputs)."""

    def __init__(self, case, seed: int, layout: str = "bhsd"):
        from flashgen.core.hopper_config import HopperConfig

        d, fields, causal, (b, hq, hkv, sq, sk) = case
        self.cfg, self.d, self.lse_shape = HopperConfig(*fields), d, (b, hq, sq)
        self.q, self.k, self.v = _qkv(b, hq, hkv, sq, sk, d, torch.bfloat16, seed=seed,
                                      layout=layout)  # fmt: skip
        self.ref_out, self.ref_lse = attention_ref(self.q, self.k, self.v, causal=causal)
        _, self.atol = tolerance(
            torch.bfloat16,
            max_abs_err(sdpa_same_dtype(self.q, self.k, self.v, causal=causal), self.ref_out),
        )
        self.spec = KernelSpec(d, causal, "bfloat16", "fwd")

    def launch(self, fill: float | None = None):
        """(out, lse) of one `hopper.forward` into fresh buffers (out laid out like q):
        uninitialised, or all `fill`."""
        if fill is None:
            out = torch.empty_like(self.q)
            lse = torch.empty(self.lse_shape, device=self.q.device, dtype=torch.float32)
        else:
            out = torch.full_like(self.q, fill)
            lse = torch.full(self.lse_shape, fill, device=self.q.device, dtype=torch.float32)
        hopper.forward(
            self.q, self.k, self.v, out, lse, scale=self.d**-0.5, spec=self.spec, config=self.cfg
        )
        return out, lse

    def check(self, out, lse):
        assert max_abs_err(out, self.ref_out) <= self.atol
        lse_bound = 1e-4 + 1e-5 * self.ref_lse.abs().max().item()
        assert (lse.double() - self.ref_lse).abs().max().item() <= lse_bound


@on_sm90
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=_layout_case_id)
def test_layouts_and_persistent_grid_match_float64(case):
    c = _LayoutCase(case, seed=2)
    c.check(*c.launch())


# Dynamic persistent grids: programs take items from a global counter, so which program runs
# an item differs from run to run; every item must still be computed once, and the counter
# must be back at 0 after each launch (the next launch starts from it).
DYNAMIC_CASES = [
    # (head_dim, HopperConfig fields, causal, (B, Hq, Hkv, Sq, Sk))
    (128, (128, 128, 2, 2, 4, 168, False, True, True), True, (4, 16, 4, 1000, 1000)),
    (128, (128, 128, 2, 2, 4, 168, True, True, True), True, (4, 16, 16, 1000, 1000)),
    (128, (128, 128, 2, 2, 4, 168, False, True, True), False, (3, 16, 16, 777, 801)),
    (64, (128, 128, 3, 2, 4, 168, False, True, True), True, (4, 16, 4, 1000, 1000)),
    (64, (192, 64, 3, 3, 4, 128, False, True, True), True, (2, 8, 2, 300, 129)),
]


def _check_launches(c: _LayoutCase, times: int) -> None:
    """`times` launches of case `c` into NaN-filled buffers (a row never written stays NaN),
    each matching float64, the work-item counter back at 0 after each (the next launch starts
    from it)."""
    counter = hopper.sched_counter(c.q.device)
    for _ in range(times):
        out, lse = c.launch(fill=float("nan"))
        assert counter.item() == 0
        c.check(out, lse)


# A persistent grid's last, partial round split over the key tiles (tail_split): shapes whose
# items leave such a round on 132 SMs, odd lengths (the last chunk holds the masked keys),
# GQA, ping-pong and a dynamic grid, three consumers at head dim 64. The tests lift the
# policy's floor on chunk length (MIN_CHUNK_TILES) so that short inputs split, down to chunks
# of one tile.
SPLIT_CASES = [
    # (head_dim, HopperConfig fields, causal, (B, Hq, Hkv, Sq, Sk)): chunks on 132 SMs
    (128, (128, 128, 2, 2, 4, 168, False, True, False, True, 8), False, (2, 9, 9, 1100, 1100)),
    (128, (128, 128, 2, 2, 4, 168, True, True, True, False, 8), False, (3, 8, 2, 700, 1500)),
    (128, (128, 128, 2, 2, 4, 168, False, True, False, False, 16), False, (1, 20, 4, 2000, 1100)),
    (64, (128, 128, 3, 2, 4, 168, False, True, False, True, 4), False, (1, 20, 20, 900, 2000)),
    (64, (192, 64, 3, 3, 4, 128, False, True, False, False, 3), False, (2, 12, 12, 1100, 700)),
]


@on_sm90
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("case", SPLIT_CASES, ids=_layout_case_id)
def test_split_last_round_matches_float64(case, layout, monkeypatch):
    """bshd: q and out laid out as [B, S, H, D] (a model's transposed view and the output
    `flashgen.kernels.layout` gives it): the merge writes the split rows at out's strides."""
    monkeypatch.setattr(hopper, "MIN_CHUNK_TILES", 1)
    c = _LayoutCase(case, seed=4, layout=layout)
    if hopper._sm_count(c.q.device.index or 0) != 132:
        pytest.skip("the cases are sized for 132 SMs (the H100 SXM's and the H200's)")
    split = hopper.tail_plan(c.spec, c.cfg, c.q, c.k, None)
    assert split is not None and split.splits > 1, "the case must split its last round"
    _check_launches(c, 2)


@on_sm90
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_split_last_round_through_the_forward_plan(layout, monkeypatch):
    """flashgen.kernels.fwd's plan launches the split kernel and its merge, directly after the
    first call; for a [B, S, H, D] view (bshd) into an output laid out the same way."""
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.kernels import fwd, plans

    cfg = HopperConfig(128, 128, 2, 2, 4, 168, False, True, False, True, 8)
    monkeypatch.setattr(hopper, "config_for", lambda *a, **kw: cfg)
    monkeypatch.setattr(hopper, "MIN_CHUNK_TILES", 1)
    made = []
    real = hopper.tail_plan
    monkeypatch.setattr(hopper, "tail_plan", lambda *a: made.append(real(*a)) or made[-1])
    plans.clear_all()
    c = _LayoutCase((128, dataclasses.astuple(cfg), False, (2, 9, 9, 1100, 1100)), seed=5,
                    layout=layout)  # fmt: skip
    for _ in range(2):
        out, lse = fwd.forward(c.q, c.k, c.v, causal=False, scale=None)
        assert (out.transpose(1, 2) if layout == "bshd" else out).is_contiguous()
        c.check(out, lse)
    plans.clear_all()
    if hopper._sm_count(c.q.device.index or 0) == 132:  # (the split is sized for 132 SMs)
        assert len(made) == 1 and made[0].splits == 4


@on_sm90
@pytest.mark.parametrize("case", DYNAMIC_CASES, ids=_layout_case_id)
def test_dynamic_grid_matches_float64_launch_after_launch(case):
    _check_launches(_LayoutCase(case, seed=3), 3)


@on_sm90
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_consumes_the_hopper_forward(causal, monkeypatch):
    """Autograd through the public op with the Hopper forward: the portable backward reads its
    out and LSE, and the gradients match float64 within SDPA's own bf16 error."""
    from flashgen.ops import attention

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    q, k, v = _qkv(1, 4, 2, 300, 300, 128, torch.bfloat16, seed=1)
    do = torch.randn_like(q)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    attention(*leaves, causal=causal).backward(do)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*ref, causal=causal)[0].backward(do.double())
    eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*eager, causal=causal).backward(do)
    for name, got, want, same in zip("qkv", leaves, ref, eager, strict=True):
        err = max_abs_err(got.grad, want.grad)
        bound = 3.0 * max_abs_err(same.grad, want.grad) + 8e-3 * max(
            1.0, want.grad.abs().max().item()
        )
        assert err <= bound, f"d{name}: {err:.3e} > {bound:.3e}"


@on_sm90
def test_auto_choice_on_sm90(monkeypatch):
    """Without FLASHGEN_FWD_FAMILY, head dims 64 and 128 take the Hopper kernel from 1k query
    rows, causal or not, and head dim 128 non-causal at any length; shorter causal or head
    dim 64 calls (not measured), misaligned tensors and FLASHGEN_FWD_TMA=0 keep the portable one."""
    monkeypatch.delenv(hopper.FAMILY_ENV, raising=False)
    d128 = KernelSpec(128, False, "bfloat16", "fwd")
    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16, device="cuda")
    assert hopper.choose(d128, q, q, q, 256)
    assert not hopper.choose(KernelSpec(128, True, "bfloat16", "fwd"), q, q, q, 256)
    assert hopper.choose(KernelSpec(128, True, "bfloat16", "fwd"), q, q, q, 1024)
    q64 = torch.zeros(1, 2, 256, 64, dtype=torch.bfloat16, device="cuda")
    for causal in (False, True):
        assert not hopper.choose(KernelSpec(64, causal, "bfloat16", "fwd"), q64, q64, q64, 256)
        assert hopper.choose(KernelSpec(64, causal, "bfloat16", "fwd"), q64, q64, q64, 1024)
    odd = torch.zeros(1 * 2 * 256 * 128 + 1, dtype=torch.bfloat16, device="cuda")[1:]
    odd = odd.view(1, 2, 256, 128)
    assert not hopper.choose(d128, odd, odd, odd, 256)
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "0")
    assert not hopper.choose(d128, q, q, q, 256)


# ---- masks in the Hopper family: windows, softcap, per-sequence lengths --------------------


MASK_SPECS = [
    KernelSpec(128, True, "bfloat16", "fwd", window=True),
    KernelSpec(128, False, "float16", "fwd", window=True),
    KernelSpec(128, True, "bfloat16", "fwd", softcap=True),
    KernelSpec(128, False, "bfloat16", "fwd", lengths=True),
    KernelSpec(128, True, "bfloat16", "fwd", window=True, softcap=True, lengths=True),
    KernelSpec(128, False, "bfloat16", "fwd", attn_mask="bool"),
    KernelSpec(128, True, "float16", "fwd", attn_mask="add"),
    KernelSpec(128, True, "bfloat16", "fwd", alibi=True),
    KernelSpec(64, False, "float16", "fwd", softcap=True, alibi=True),
    # lengths with a mask tensor (issue 16: a key-padding mask's key range as lengths)
    KernelSpec(128, True, "bfloat16", "fwd", lengths=True, attn_mask="bool"),
    KernelSpec(64, False, "float16", "fwd", lengths=True, attn_mask="add"),
    # lengths alone, causal: the next item's first QK^T issued during the epilogue (prefetch)
    KernelSpec(128, True, "bfloat16", "fwd", lengths=True),
    KernelSpec(64, True, "float16", "fwd", lengths=True),
    # dropout (forced only): alone, with a window, with a key-padding mask's key range
    KernelSpec(64, False, "bfloat16", "fwd", dropout=True),
    KernelSpec(128, True, "float16", "fwd", window=True, dropout=True),
    KernelSpec(128, False, "bfloat16", "fwd", lengths=True, attn_mask="add", dropout=True),
]


@needs_gluon
@pytest.mark.parametrize("spec", MASK_SPECS, ids=lambda s: s.uri())
def test_render_masks(spec):
    """Each mask is a separate block of the template: the window's band, the softcap's tanh,
    the lengths' offsets appear exactly in the renderings that have them, and a banded kernel
    (window or lengths) guards rows that have seen no key yet."""
    source = render(spec, "hopper")
    assert ("WIN_LEFT, WIN_RIGHT," in source) == spec.window
    assert ("def _tanh(x):" in source) == spec.softcap
    assert ("SeqBounds," in source) == spec.lengths
    assert ("m_use = gl.where(m_new ==" in source) == bool(
        spec.window or spec.lengths or spec.attn_mask
    )
    # a mask tensor: one vector of keys a tile (MASK_PER_KEY) or the gathered tile, both from
    # clamped positions (no load mask), absolute with lengths (q_start + i, k_start + j)
    assert ("MASK_PER_KEY: gl.constexpr" in source) == bool(spec.attn_mask)
    assert ("tm = gl.load(mask_base + cols)" in source) == bool(spec.attn_mask)
    assert ("mask_base + (mask_rows[:, None] + cols[None, :])" in source) == bool(spec.attn_mask)
    both = spec.lengths and bool(spec.attn_mask)
    assert ("cols = gl.minimum(k_start + offs_n, mask_last_n)" in source) == both
    assert ("mask_rows = gl.minimum(q_start + offs_m, SEQ_Q - 1)" in source) == both
    assert ("empty = empty | (m_i < HIDDEN_MAX)" in source) == (spec.attn_mask == "add")
    assert ("k_start + lo * BLOCK_N" in source) == spec.lengths
    # the next item's first QK^T during this one's epilogue: not where a window or a mask
    # tensor starts each consumer's tiles at its own band (lengths alone keep it)
    prefetch = not (spec.window or spec.attn_mask or spec.dropout)
    assert ("has_next = _get_item(item_bufs.index(qb_next), WARPS)" in source) == prefetch
    assert ("# Tile 0's QK^T (a window or mask tensor: no prefetch" in source) != prefetch
    # ALiBi: the per-key term from the key-index table, the per-row part taken off the lse at
    # the end
    assert ("qk = qk + slope_raw * key_idx.load(col_layout)[None, :]" in source) == spec.alibi
    assert ("m_i = m_i - (slope_raw * qk_scale) * gl.arange(0, M_C" in source) == spec.alibi
    assert ("Slopes, stride_sb," in source) == spec.alibi
    # dropout: the portable draw per score after the denominator, the epilogue's 1 / (1 - p)
    assert ("p = kept(p, draw_of(drop_keys[:, None], keys[None, :]), drop_thr)" in source) == (
        spec.dropout
    )
    assert ("drop_scale" in source) == spec.dropout
    assert ('@gluon.jit(do_not_specialize=["drop_seed"])' in source) == spec.dropout
    compile(source, spec.uri(), "exec")
    assert hasattr(load_family(spec, "hopper"), "attn_fwd_ws")


def test_masks_take_the_hopper_family_dropout_only_when_forced():
    for spec in MASK_SPECS:
        assert hopper.spec_reason(spec, forced=True) == API_REASON
        unchecked = spec.alibi and (spec.window or spec.softcap)  # not run on a GPU yet
        if hopper.mask_kinds(spec) <= hopper.AUTO_MASKS.keys() and not unchecked:
            assert hopper.spec_reason(spec) == API_REASON
        else:
            assert "only when forced" in hopper.spec_reason(spec)
    dropped = KernelSpec(128, False, "bfloat16", "fwd", dropout=True)
    assert hopper.spec_reason(dropped, forced=True) == API_REASON
    assert "dropout in the Hopper family: taken only when forced" in hopper.spec_reason(dropped)


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_takes_the_hopper_family_unforced_at_head_dim_128_only(causal):
    """AUTO_MASKS' head dims: ALiBi measured slower in this family than in the portable one at
    head dim 64, so a head dim 64 ALiBi call runs the portable family unless forced."""
    wide = KernelSpec(128, causal, "bfloat16", "fwd", alibi=True)
    narrow = KernelSpec(64, causal, "bfloat16", "fwd", alibi=True)
    assert hopper.spec_reason(wide) == API_REASON
    reason = hopper.spec_reason(narrow)
    assert "alibi at head dim 64" in reason and "only when forced" in reason
    assert hopper.spec_reason(narrow, forced=True) == API_REASON
    plain = KernelSpec(64, causal, "bfloat16", "fwd")
    assert hopper.spec_reason(plain) == API_REASON  # head dim 64 itself still taken


@pytest.mark.parametrize("kind", ["bool", "add"])
def test_key_padding_masks_are_chosen_unforced_full_mask_tensors_only_forced(kind):
    """Issue 16: a mask tensor constant along the query rows (per_key: a key-padding mask,
    MASK_PER_KEY), boolean or additive, takes the Hopper family unforced
    (`AUTO_PER_KEY_MASKS`), alone, with lengths (its key range) or with a window/softcap; a mask that varies
    along the query rows only when forced; what the family has no kernel for never (ALiBi with
    lengths); dropout only when forced."""
    assert "attn_mask" not in hopper.AUTO_MASKS
    assert kind in hopper.AUTO_PER_KEY_MASKS
    for extra in ({}, {"lengths": True}, {"lengths": True, "window": True}, {"softcap": True},
                  {"alibi": True}):  # fmt: skip
        for causal in (False, True):
            spec = KernelSpec(128, causal, "bfloat16", "fwd", attn_mask=kind, **extra)
            assert hopper.spec_reason(spec, per_key=True) == API_REASON, spec.uri()
            assert hopper.spec_reason(spec, forced=True) == API_REASON, spec.uri()
            reason = hopper.spec_reason(spec)
            assert "attn_mask varying along query rows" in reason and "only when forced" in reason
    refused = {
        "ALiBi with lengths": KernelSpec(128, False, "bfloat16", "fwd", attn_mask=kind,
                                         lengths=True, alibi=True),
        "head dim 96": KernelSpec(96, False, "bfloat16", "fwd", attn_mask=kind, lengths=True),
        "float32": KernelSpec(128, False, "float32", "fwd", attn_mask=kind, lengths=True),
    }  # fmt: skip
    for fragment, spec in refused.items():
        assert fragment in hopper.spec_reason(spec, forced=True, per_key=True), spec.uri()
    dropped = KernelSpec(128, False, "bfloat16", "fwd", attn_mask=kind, lengths=True, dropout=True)
    assert "dropout" in hopper.spec_reason(dropped, per_key=True)
    assert hopper.spec_reason(dropped, per_key=True, forced=True) == API_REASON
    # ALiBi with a window keeps its own rule, whatever the mask
    spec = KernelSpec(128, False, "bfloat16", "fwd", attn_mask=kind, alibi=True, window=True)
    assert "only when forced" in hopper.spec_reason(spec, per_key=True)


def test_key_hull_is_asked_of_the_hopper_choice(monkeypatch):
    """`hopper.takes_key_hull` (what `primitives._bounds` asks on a TMA GPU): the spec the
    forward would compile with the hull as lengths and the mask's kind, per_key; a mask that is
    not constant along heads and query rows (no `key_hull`) never asks."""
    asked = []
    answer = [True]
    monkeypatch.setattr(
        hopper, "choose", lambda spec, q, k, v, sq, per_key=False: asked.append(
            (spec, sq, per_key)) or answer[0],
    )  # fmt: skip
    q = torch.zeros(2, 4, 300, 128, dtype=torch.bfloat16)
    k = torch.zeros(2, 2, 280, 128, dtype=torch.bfloat16)
    keys = torch.ones(2, 1, 1, 280, dtype=torch.bool)
    mask = keys.expand(2, 4, 300, 280)
    assert hopper.takes_key_hull(q, k, k, mask, causal=True, window=True)
    want = KernelSpec(128, True, "bfloat16", "fwd", window=True, lengths=True, attn_mask="bool")
    assert asked == [(want, 300, True)]
    bias = torch.zeros(2, 1, 1, 280).expand(2, 4, 300, 280)
    assert hopper.takes_key_hull(q, k, k, bias, causal=False, softcap=True, dropout=True)
    want = KernelSpec(128, False, "bfloat16", "fwd", softcap=True, lengths=True, attn_mask="add",
                      dropout=True)  # fmt: skip
    assert asked[-1] == (want, 300, True)
    answer[0] = False
    assert not hopper.takes_key_hull(q, k, k, mask, causal=False)
    asked.clear()
    per_head = torch.ones(2, 4, 1, 280, dtype=torch.bool).expand(2, 4, 300, 280)
    full = torch.ones(2, 1, 300, 280, dtype=torch.bool).expand(2, 4, 300, 280)
    assert not hopper.takes_key_hull(q, k, k, per_head, causal=False)
    assert not hopper.takes_key_hull(q, k, k, full, causal=False)
    assert asked == []


def test_key_hull_is_not_taken_on_cpu_tensors():
    """Without a GPU the Hopper family takes nothing (and `_bounds` takes the hull anyway)."""
    q = torch.zeros(1, 2, 2048, 128, dtype=torch.bfloat16)
    mask = torch.ones(1, 1, 1, 2048, dtype=torch.bool).expand(1, 2, 2048, 2048)
    assert not hopper.takes_key_hull(q, q, q, mask, causal=False)


def test_banded_kernels_run_without_pingpong():
    from flashgen.core.hopper_config import HopperConfig

    cfg = HopperConfig(128, 128, 2, 2, 4, 168, True, True)
    assert hopper.for_spec(cfg, MASK_SPECS[0]) == HopperConfig(128, 128, 2, 2, 4, 168, False, True)
    assert hopper.for_spec(cfg, MASK_SPECS[2]) == cfg  # softcap alone keeps the tile ranges
    assert not hopper.for_spec(cfg, MASK_SPECS[5]).pingpong  # a mask tensor: banded too
    assert not hopper.for_spec(cfg, MASK_SPECS[13]).pingpong  # dropout: no prefetch


@pytest.mark.parametrize(
    "dtype, softcap, mma",
    [("bfloat16", False, True), ("float16", False, False), ("bfloat16", True, False)],
)
def test_alibi_per_key_term_on_the_tensor_cores_where_it_is_exact(dtype, softcap, mma):
    """ALiBi's per-key term is one more k = 16 product of QK^T (the slope in A, the key indices
    in `kx`) in bfloat16 without a softcap; float16 (the slope in A could overflow at 65504)
    and softcapped renderings (the term is added to the capped scores) keep the FMA. Every
    ALiBi rendering stages O in the item's Q buffer (no O buffers) and releases that buffer
    only once the store has read it."""
    spec = KernelSpec(128, True, dtype, "fwd", alibi=True, softcap=softcap)
    assert hopper.alibi_mma(spec) is mma
    src = render(spec, "hopper")
    assert ("warpgroup_mma(ax, kx_t, qk_tok" in src) is mma
    assert ("kx = gl.allocate_shared_memory" in src) is mma
    assert "o_bufs = q_bufs" in src and "o_smem = q_bufs.index(qb)" in src
    assert "tma.store_wait(0)\n            _release(q_empty.index(2 * cid + ((it + 1) & 1)))" in src
    plain = render(KernelSpec(128, True, dtype, "fwd"), "hopper")
    assert "o_bufs = q_bufs" not in plain and "kx_t" not in plain


def test_softcap_and_alibi_run_without_late_wait(monkeypatch):
    # the records' late_wait (measured on specs without extras) is dropped for the extras it
    # slowed, kept for the others and for explicit configs
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.hardware import hopper_tiles

    late = HopperConfig(128, 128, 2, 2, 4, 168, False, True, False, True)
    monkeypatch.setattr(hopper_tiles, "tuned_config", lambda *a: late)
    plain = KernelSpec(128, False, "bfloat16", "fwd")
    assert hopper.config_for(plain, 4096) == late
    for extra in hopper.LATE_WAIT_OFF:
        spec = KernelSpec(128, True, "bfloat16", "fwd", **{extra: True})
        assert hopper.config_for(spec, 4096) == dataclasses.replace(late, late_wait=False)
    windowed = KernelSpec(128, True, "bfloat16", "fwd", window=True)
    assert hopper.config_for(windowed, 4096).late_wait


def test_softcap_and_alibi_run_without_pingpong(monkeypatch):
    # the records' ping-pong is dropped for softcap and ALiBi (PINGPONG_OFF; windows, lengths,
    # mask tensors and dropout have none anyway: `for_spec`), kept for the plain kernel
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.hardware import hopper_tiles

    turns = HopperConfig(128, 128, 2, 2, 4, 168, True, True, True, True)
    monkeypatch.setattr(hopper_tiles, "tuned_config", lambda *a: turns)
    assert hopper.PINGPONG_OFF == ("softcap", "alibi")
    for extra in hopper.PINGPONG_OFF:
        spec = KernelSpec(128, False, "bfloat16", "fwd", **{extra: True})
        assert hopper.config_for(spec, 4096) == dataclasses.replace(
            turns, pingpong=False, late_wait=False
        )
    assert hopper.config_for(KernelSpec(128, False, "bfloat16", "fwd"), 4096) == turns


def test_mask_arguments_follow_the_spec():
    spec = MASK_SPECS[4]
    seq_bounds = torch.zeros(2, 4, dtype=torch.int32)
    args = hopper.mask_args(spec, 0.5, (7, 0), 30.0, seq_bounds)
    assert args[:3] == (7, 0, 60.0) and args[3] is seq_bounds  # the cap on raw scores: cap/scale
    # lengths with a key-padding mask: SeqBounds, then the mask and its four strides
    mask = torch.ones(2, 1, 1, 50, dtype=torch.bool).expand(2, 4, 40, 50)
    args = hopper.mask_args(MASK_SPECS[9], 0.5, None, None, seq_bounds, mask)
    assert args[0] is seq_bounds and args[1] is mask and args[2:] == (50, 0, 0, 1)
    with pytest.raises(ValueError, match="attn_mask missing"):
        hopper.mask_args(MASK_SPECS[9], 0.5, None, None, seq_bounds)
    with pytest.raises(ValueError, match="softcap missing"):
        hopper.mask_args(spec, 0.5, (7, 0), None, seq_bounds)
    with pytest.raises(ValueError, match="window not expected"):
        hopper.mask_args(MASK_SPECS[2], 0.5, (7, 0), 30.0, None)


@needs_gluon
@pytest.mark.parametrize("per_key", [False, True], ids=["tile", "per_key"])
@pytest.mark.parametrize("spec", [KernelSpec(128, True, "bfloat16", "fwd"), *MASK_SPECS],
                         ids=lambda s: s.uri())  # fmt: skip
def test_plan_matches_the_kernel_signature(spec, per_key, monkeypatch):
    """What a plan fixes must line up with the rendered kernel, or its first launch finds no
    direct launcher (`launch._first` checks that the constexprs are the parameters after the
    positional arguments) or launches with the wrong descriptors: one template per q, k, v,
    out from each tensor's own strides, the rows each reads, and Gluon's default layout."""
    from triton.experimental.gluon import language as gl

    from flashgen.core.hopper_config import HopperConfig

    monkeypatch.setattr(hopper, "sched_counter", lambda device: torch.zeros(1, dtype=torch.int32))
    monkeypatch.setattr(hopper, "_sm_count", lambda index: 132)  # the H200's
    d = spec.head_dim
    q = torch.zeros(2, 4, 300, d, dtype=torch.bfloat16)
    kv = torch.zeros(2, 300, 2, d, dtype=torch.bfloat16)
    k = kv.transpose(1, 2)  # strides unlike q's and v's
    v = torch.zeros(2, 2, 300, d, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    cfg = HopperConfig(128, 64, 2, 2, 4, 168, False, True)
    run = hopper.plan(spec, cfg, q, k, v, out, None, per_key=per_key)
    window = (7, 0) if spec.window else None
    softcap = 30.0 if spec.softcap else None
    bounds = torch.zeros(2, 4, dtype=torch.int32) if spec.lengths else None
    mask = torch.zeros(2, 4, 300, 300, dtype=torch.bool) if spec.attn_mask else None
    alibi = torch.zeros(4).expand(2, 4) if spec.alibi else None
    drop = (0.1, 1234) if spec.dropout else None
    lse = torch.empty(2, 4, 300)
    args = hopper.call_args(
        spec, q, k, v, out, lse, 0.1, window, softcap, bounds, mask, alibi, drop
    )  # fmt: skip
    names = run.kernel.arg_names
    assert list(names[len(args) :]) == list(run.constexprs)
    assert run.constexprs["num_warps"] == cfg.num_warps and run.options == {"maxnreg": 168}
    # MASK_PER_KEY: a constexpr of the renderings with a mask tensor only; FIXED_MAX of the
    # softcapped ones without ALiBi or a bias (off unless the plan is asked for it)
    assert run.constexprs.get("MASK_PER_KEY") == (per_key if spec.attn_mask else None)
    assert run.constexprs.get("FIXED_MAX") == (False if plans.renders_fixed_max(spec) else None)
    assert run.constexprs.get("MASK_RANGES") == (False if spec.attn_mask else None)
    assert run.descs.positions == (0, 1, 2, 3)
    rows = {0: 64, 1: 64, 2: 64, 3: 64}  # block_m / consumers for q and out, block_n for k, v
    for pos, t in enumerate((q, k, v, out)):
        shape, strides, block, layout = run.descs.templates[pos]
        assert (shape, strides) == (list(t.shape), list(t.stride()))
        assert block == [1, 1, rows[pos], d]
        assert layout == gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)
    assert run.grid == (3 * 2 * 4,)  # cdiv(300, 128) query blocks per (batch, head): < 132
    tail = hopper.mask_args(spec, 0.1, window, softcap, bounds, mask, alibi, drop)
    # a mask tensor's ranges (here placeholders: the mask itself and zero strides) come last
    ranged = 3 if spec.attn_mask else 0
    assert len(args) == 14 + len(tail) + ranged
    if ranged:
        assert args[-3] is mask and args[-2:] == (0, 0)
        args = args[:-3]
    if drop is not None:  # dropout's p and seed come last
        assert args[-2:] == drop
    elif alibi is not None:  # else the slopes and their batch stride (0: shared)
        assert args[-2] is alibi and args[-1] == 0


@needs_gluon
def test_unchecked_gluon_descriptor_equals_the_checked_one():
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from flashgen.kernels import tma

    t = torch.zeros(2, 3, 64, 128, dtype=torch.float16)
    block = [1, 1, 64, 128]
    layout = gl.NVMMASharedLayout.get_default_for(block, gl.float16)
    fields = (t, list(t.shape), list(t.stride()), block, layout)
    made = tma.gluon_descriptor_factory()(*fields)
    assert type(made) is TensorDescriptor and vars(made) == vars(TensorDescriptor(*fields))


_AOT_MASKS = """
import json, sys
from flashgen.kernels import hopper_aot
from flashgen.core.spec import KernelSpec
out = {}
from flashgen.kernels.hopper import NARROW_CONFIGS
for name in sys.argv[1:]:
    uri, _, how = name.partition(":")
    spec = KernelSpec.from_uri(uri)
    cfg = NARROW_CONFIGS[spec.head_dim] if how == "narrow" else None
    res = hopper_aot.compile_for_sm90(spec, cfg, per_key=how == "per_key", ranges=how == "ranges",
                                      fixed=how == "fixed")
    out[name] = dict(shared=res["shared"], wgmma="wgmma.mma_async" in res["ptx"],
                     tanh="tanh.approx.f32" in res["ptx"], maxes=res["ptx"].count("max.f32"))
json.dump(out, sys.stdout)
"""


def _compile_for_sm90(uris) -> dict:
    """`_AOT_MASKS` over `uris` ("<uri>[:narrow|:per_key|:tile|:ranges|:fixed]") in a process without the
    interpreter; asserts each compiled to wgmma with the shared memory its config's model
    gives (masks add registers, not buffers) and returns the results."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", _AOT_MASKS, *uris], env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    for uri in uris:
        spec = KernelSpec.from_uri(uri.partition(":")[0])
        d = spec.head_dim
        configs = hopper.NARROW_CONFIGS if uri.endswith(":narrow") else hopper.CONFIGS
        model = configs[d].shared_bytes(d, alibi=spec.alibi, alibi_mma=hopper.alibi_mma(spec))
        assert results[uri]["wgmma"], uri
        assert model <= results[uri]["shared"] < model + 1024, (uri, results[uri])
    return results


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_masked_kernels_compile_for_sm90():
    """The masked renderings compile for sm_90 with the shipped config and allocate the same
    shared memory as the unmasked kernel (the masks add registers, not buffers; ALiBi adds its
    key indices, `HopperConfig.shared_bytes(alibi=True)`). Mask tensors
    both ways (MASK_PER_KEY: one vector of keys a tile; a gathered tile), alone and with
    lengths (a key-padding mask's key range), bool and additive, head dims 64 and 128."""

    uris = [s.uri() for s in (MASK_SPECS[1], MASK_SPECS[2], MASK_SPECS[4], MASK_SPECS[6],
                              MASK_SPECS[7])]  # fmt: skip
    uris += [f"{s.uri()}:per_key" for s in (MASK_SPECS[5], MASK_SPECS[6], MASK_SPECS[9],
                                            MASK_SPECS[10])]  # fmt: skip
    uris += [
        f"{MASK_SPECS[9].uri()}:tile",
        KernelSpec(128, False, "float16", "fwd", lengths=True, attn_mask="add").uri(),
        MASK_SPECS[11].uri(),  # lengths alone, causal, head dims 128 and 64 (prefetch)
        MASK_SPECS[12].uri(),
        f"{MASK_SPECS[0].uri()}:narrow",  # a narrow window's 64-key tiles (NARROW_CONFIGS)
        MASK_SPECS[13].uri(),  # dropout: alone, with a window, with a key-padding mask
        MASK_SPECS[14].uri(),
        f"{MASK_SPECS[15].uri()}:per_key",
        # a boolean mask tensor walked by its key ranges (MASK_RANGES), causal both ways
        f"{KernelSpec(128, False, 'bfloat16', 'fwd', attn_mask='bool').uri()}:ranges",
        f"{KernelSpec(64, True, 'bfloat16', 'fwd', attn_mask='bool').uri()}:ranges",
        # softcap without the running max (FIXED_MAX), alone and with a window and lengths
        f"{MASK_SPECS[2].uri()}:fixed",
        f"{MASK_SPECS[4].uri()}:fixed",
    ]
    results = _compile_for_sm90(uris)
    for uri in uris:
        assert results[uri]["tanh"] == ("cap" in uri), uri
        # the row maximum (max.f32 a score) is gone with FIXED_MAX, there without it
        if uri.endswith(":fixed"):
            assert results[uri]["maxes"] == 0, (uri, results[uri])
        elif "cap" in uri:
            assert results[uri]["maxes"] >= 128, (uri, results[uri])


# (B, Hq, Hkv, Sq, Sk, dtype, causal, window, softcap, (padding, key lengths, query lengths))
MASK_CASES = [
    (2, 4, 2, 1000, 1000, torch.bfloat16, True, (255, 0), None, None),
    (1, 4, 4, 777, 901, torch.float16, False, (100, 37), None, None),
    (1, 4, 4, 600, 300, torch.float16, False, (64, 64), None, None),  # rows that see no key
    (2, 4, 2, 1000, 1000, torch.bfloat16, True, None, 30.0, None),
    (3, 4, 2, 517, 700, torch.bfloat16, False, None, None, ("right", [700, 333, 0], None)),
    (3, 4, 2, 600, 600, torch.bfloat16, True, None, None, ("left", [600, 257, 1], [600, 257, 1])),
    (2, 4, 4, 800, 800, torch.bfloat16, True, (200, 0), 20.0, ("left", [800, 411], [800, 411])),
    # caps past plans.FIXED_MAX_LOG2 keep the running max; small ones drop it, rows that see
    # no key included
    (2, 4, 2, 1000, 1000, torch.bfloat16, False, None, 60.0, None),
    (1, 4, 4, 600, 300, torch.float16, False, (64, 64), 2.5, None),
]


def _mask_id(case):
    b, hq, hkv, sq, sk, dtype, causal, window, cap, pad = case
    parts = [f"b{b}", f"{sq}x{sk}", "causal" if causal else "full"]
    parts += [f"win{window[0]}-{window[1]}"] if window else []
    parts += [f"cap{cap:g}"] if cap else []
    parts += [f"pad{pad[0]}"] if pad else []
    return "-".join(parts + [str(dtype).removeprefix("torch.")])


def _masked_case(case, seed=3):
    from flashgen.kernels.padding import bounds, dense_mask

    b, hq, hkv, sq, sk, dtype, causal, window, cap, pad = case
    q, k, v = _qkv(b, hq, hkv, sq, sk, 128, dtype, seed=seed)
    seq_bounds = None
    if pad is not None:
        seq_bounds = bounds(b, sq, sk, pad[1], pad[2], pad[0], "cuda")
        mask = dense_mask(seq_bounds, sq, sk, causal=causal, window=window)
    else:
        mask = ~hidden_ref(sq, sk, causal=causal, window=window).cuda()[None, None]
    return q, k, v, seq_bounds, mask


def _masked_ref(q, k, v, mask, cap):
    """float64 attention and its natural-log LSE under a boolean mask; a row that sees no key
    gives zeros and lse = +inf."""
    qd, kd, vd = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kd, vd = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = (qd @ kd.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ vd, lse.masked_fill(~mask.any(-1).expand_as(lse), float("inf"))


def _assert_matches_masked_ref(out, lse, ref, ref_lse, empty, tol):
    """A masked forward's out and lse against the float64 reference: finite, zeros and lse
    +inf on the rows that see no key (`empty`), out within tol of the largest entry, the lse
    within 1e-3 relative on the other rows."""
    assert torch.isfinite(out).all()
    assert (out[empty] == 0).all() and (lse[empty] == float("inf")).all()
    err = max_abs_err(out, ref)
    assert err <= tol * max(1.0, ref.abs().max().item()), err
    lse_err = (lse[~empty].double() - ref_lse[~empty]).abs().max().item()
    assert lse_err <= 1e-3 * max(1.0, ref_lse[~empty].abs().max().item()), lse_err


@on_sm90
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("case", MASK_CASES, ids=_mask_id)
def test_hopper_masks_match_float64(case, persistent, monkeypatch):
    from flashgen.kernels.fwd import forward

    b, hq, hkv, sq, sk, dtype, causal, window, cap, pad = case
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    if persistent:  # several work items per program: the ring and barriers run on across items
        cfg = hopper.CONFIGS[128].with_persistent(True)
        monkeypatch.setattr(hopper, "config_for", lambda spec, sq, narrow=False: cfg)
    from flashgen.kernels import fwd

    fwd._plans.clear()
    q, k, v, seq_bounds, mask = _masked_case(case)
    spec = KernelSpec(128, causal, str(dtype).removeprefix("torch."), "fwd", window=bool(window),
                      softcap=cap is not None, lengths=pad is not None)  # fmt: skip
    assert hopper.choose(spec, q, k, v, sq)  # must not silently run the portable family
    out, lse = forward(q, k, v, causal=causal, scale=None, window=window, softcap=cap,
                       bounds=seq_bounds)  # fmt: skip
    ref, ref_lse = _masked_ref(q, k, v, mask, cap)
    empty = ~mask.any(-1).expand(b, hq, sq)
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    _assert_matches_masked_ref(out, lse, ref, ref_lse, empty, tol)


def test_fixed_max_follows_the_cap_and_the_rendering():
    """FIXED_MAX (no running max) only where the scores stay within +-cap (no ALiBi, no
    additive mask) and cap * log2(e) <= FIXED_MAX_LOG2 of the dtype (bfloat16: Gemma-2's 50 in,
    56 out; float16: 9.7); the constexpr exists exactly in the renderings that can take it."""
    import math

    limit = plans.FIXED_MAX_LOG2["bfloat16"] / math.log2(math.e)
    assert 55.4 < limit < 55.5
    assert plans.small_cap(50.0, "bfloat16") and plans.small_cap(limit, "bfloat16")
    assert not plans.small_cap(limit * 1.0001, "bfloat16")
    assert not plans.small_cap(None, "bfloat16") and not plans.small_cap(30.0, "float64")
    # float16 holds P as normal numbers only up to 2**14: caps up to 9.7
    assert plans.small_cap(9.7, "float16") and not plans.small_cap(9.8, "float16")
    assert not plans.small_cap(50.0, "float16")
    capped = KernelSpec(128, True, "bfloat16", "fwd", softcap=True)
    takes = [capped, MASK_SPECS[4], KernelSpec(64, False, "float16", "fwd", softcap=True,
                                                attn_mask="bool", dropout=True)]  # fmt: skip
    refuses = [MASK_SPECS[8],  # ALiBi
               KernelSpec(128, False, "bfloat16", "fwd", softcap=True, attn_mask="add"),
               KernelSpec(128, False, "bfloat16", "fwd", window=True)]  # fmt: skip
    cfg = hopper.CONFIGS[128]
    for spec in takes:
        assert plans.renders_fixed_max(spec)
        small = 9.0 if spec.dtype == "float16" else 50.0
        assert plans.fixed_max(spec, small) and not plans.fixed_max(spec, 60.0)
        assert hopper.constexprs_of(spec, cfg, fixed=True)["FIXED_MAX"] is True
        assert hopper.constexprs_of(spec, cfg)["FIXED_MAX"] is False
    for spec in refuses:
        assert not plans.renders_fixed_max(spec) and not plans.fixed_max(spec, 30.0)
        assert "FIXED_MAX" not in hopper.constexprs_of(spec, cfg)
        with pytest.raises(ValueError, match="FIXED_MAX needs a softcap"):
            hopper.constexprs_of(spec, cfg, fixed=True)
    source = render(capped, "hopper")
    assert "FIXED_MAX: gl.constexpr," in source and "p = gl.exp2(qk * qk_scale)" in source
    assert "FIXED_MAX: gl.constexpr" not in render(refuses[1], "hopper")


@on_sm90
@pytest.mark.parametrize(
    ("dtype", "caps"),
    [(torch.bfloat16, (50.0, 20.0, 60.0)), (torch.float16, (9.0, 50.0))],
    ids=["bf16", "fp16"],
)
def test_hopper_fixed_max_holds_at_the_caps_ends(dtype, caps, monkeypatch):
    """Without the running max, exp2 of the capped scores spans 2**+-(cap * log2 e): rows whose
    every score sits at -cap (probabilities 2**-72 at Gemma-2's 50 in bfloat16) or at +cap
    (2**72) must still give their values' mean; float16 (P up to 65504) drops it only up to a
    cap of 9.7, and a cap past the dtype's limit takes the running max (a plan of its own: the
    plan key holds `plans.small_cap`)."""
    from flashgen.kernels import fwd
    from flashgen.kernels.fwd import forward

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    fwd._plans.clear()
    gen = torch.Generator(device="cuda").manual_seed(5)
    b, h, n, d = 2, 4, 700, 128
    k = torch.randn(b, h, n, d, device="cuda", generator=gen)
    k = (k + 4.0).to(dtype)  # every key leans the same way: q.k has one sign
    v = torch.randn(b, h, n, d, device="cuda", generator=gen).to(dtype)
    q = torch.randn(b, h, n, d, device="cuda", generator=gen).to(dtype)
    q[:, :, :200] = -8.0  # scores about -4,000: tanh saturates at -1 for every key
    q[:, :, 200:400] = 8.0  # +4,000: at +1
    name = str(dtype).removeprefix("torch.")
    for cap in caps:
        out, lse = forward(q, k, v, causal=False, scale=None, softcap=cap)
        mask = torch.ones(1, 1, n, n, dtype=torch.bool, device="cuda")
        ref, ref_lse = _masked_ref(q, k, v, mask, cap)
        empty = torch.zeros(b, h, n, dtype=torch.bool, device="cuda")
        tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
        _assert_matches_masked_ref(out, lse, ref, ref_lse, empty, tol)
    fixed = sorted(p.run.constexprs["FIXED_MAX"] for p in fwd._plans.values() if p.hopper)
    want = sorted({plans.small_cap(cap, name) for cap in caps})
    assert fixed == want == [False, True], fixed  # one plan per cap class


# Lengths alone keep the next item's first QK^T in the epilogue: every grid kind, a config
# whose consumers walk different tiles of an item (BLOCK_N 64 < BLOCK_M 128: the causal skip),
# head dims 64 and 128, both padding sides, a sequence with no rows at all.
from flashgen.core.hopper_config import HopperConfig  # noqa: E402

LENGTHS_CONFIGS = {
    "grid": HopperConfig(128, 128, 2, 2, 4, 168, False),
    "static": HopperConfig(128, 128, 2, 2, 4, 168, False, True),
    "dynamic": HopperConfig(128, 128, 2, 2, 4, 168, False, True, True),
    "skips": HopperConfig(128, 64, 3, 2, 4, 168, False, True, True),
}


@on_sm90
@pytest.mark.parametrize("grid", sorted(LENGTHS_CONFIGS))
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_hopper_lengths_prefetch_matches_float64(head_dim, causal, side, grid, monkeypatch):
    from flashgen.kernels import fwd
    from flashgen.kernels.padding import bounds, dense_mask

    b, hq, hkv, n = 4, 4, 2, 1100
    lens = [n, 333, 0, 1029]
    cfg = LENGTHS_CONFIGS[grid]
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    monkeypatch.setattr(hopper, "config_for", lambda spec, sq, narrow=False: cfg)
    fwd._plans.clear()
    q, k, v = _qkv(b, hq, hkv, n, n, head_dim, torch.bfloat16, seed=5)
    seq_bounds = bounds(b, n, n, lens, lens if causal else None, side, "cuda")
    mask = dense_mask(seq_bounds, n, n, causal=causal, window=None)
    spec = KernelSpec(head_dim, causal, "bfloat16", "fwd", lengths=True)
    assert hopper.choose(spec, q, k, v, n)
    for _ in range(2):  # the second call reuses the plan (and the dynamic grid's counter)
        out, lse = fwd.forward(q, k, v, causal=causal, scale=None, bounds=seq_bounds)
        ref, ref_lse = _masked_ref(q, k, v, mask, None)
        empty = ~mask.any(-1).expand(b, hq, n)
        _assert_matches_masked_ref(out, lse, ref, ref_lse, empty, 2e-2)


@on_sm90
@pytest.mark.parametrize("windowed", [False, True], ids=["lengths", "lengths+window"])
@pytest.mark.parametrize("grid", ["dynamic", "skips"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_hopper_drops_items_past_query_rows(head_dim, causal, side, grid, windowed, monkeypatch):
    """A dynamic grid's producer drops the work items past an entry's query rows (the launcher
    filled out and lse): more items than programs (64 (batch, head)s x 9 query blocks), so
    programs take several, and entries with no rows or a handful, where every item of the
    entry but at most the first is dropped; rows past the lengths stay zeros / +inf. With a
    window too (no prefetch: the consumers wait for each item's announcement)."""
    from flashgen.kernels import fwd
    from flashgen.kernels.padding import bounds, dense_mask

    b, hq, hkv, n = 8, 8, 4, 1100
    lens = [n, 1, 0, 129, 5, 640, 0, 1000]
    cfg = LENGTHS_CONFIGS[grid]
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    monkeypatch.setattr(hopper, "config_for", lambda spec, sq, narrow=False: cfg)
    fwd._plans.clear()
    q, k, v = _qkv(b, hq, hkv, n, n, head_dim, torch.bfloat16, seed=6)
    window = ((200, 0) if causal else (100, 50)) if windowed else None
    seq_bounds = bounds(b, n, n, lens, lens, side, "cuda")
    mask = dense_mask(seq_bounds, n, n, causal=causal, window=window)
    spec = KernelSpec(head_dim, causal, "bfloat16", "fwd", window=windowed, lengths=True)
    assert hopper.choose(spec, q, k, v, n)
    ref, ref_lse = _masked_ref(q, k, v, mask, None)
    empty = ~mask.any(-1).expand(b, hq, n)
    for _ in range(2):  # the second call reuses the plan and the dynamic grid's counter
        out, lse = fwd.forward(q, k, v, causal=causal, scale=None, window=window, bounds=seq_bounds)
        _assert_matches_masked_ref(out, lse, ref, ref_lse, empty, 2e-2)


@on_sm90
def test_backward_consumes_the_masked_hopper_forward(monkeypatch):
    """Autograd through the public op, a left-padded decoder batch with a causal window: the
    portable backward reads the Hopper forward's out and LSE (+inf on empty rows)."""
    from flashgen.ops import attention

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    # the left-padded causal batch with a window and a cap (20: FIXED_MAX, the running max off)
    (case,) = [c for c in MASK_CASES if c[7] and c[8] and c[9] and c[9][0] == "left"]
    q, k, v, seq_bounds, mask = _masked_case(case, seed=5)
    lens = torch.tensor(case[-1][1], device="cuda")
    do = torch.randn_like(q)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    kw = dict(causal=True, window=(200, 0), softcap=20.0, key_lengths=lens, query_lengths=lens,
              padding="left")  # fmt: skip
    attention(*leaves, **kw).backward(do)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    _masked_ref(*ref, mask, 20.0)[0].backward(do.double())
    for name, got, want in zip("qkv", leaves, ref, strict=True):
        err = max_abs_err(got.grad, want.grad)
        assert err <= 3e-2 * max(1.0, want.grad.abs().max().item()), f"d{name}: {err:.3e}"


@on_sm90
@pytest.mark.parametrize("kind", ["bool_padding", "bias_causal"])
def test_hopper_mask_tensors_match_float64(kind, monkeypatch):
    """attn_mask in the Hopper forward (forced): a [B, 1, 1, Sk] boolean key-padding mask with
    an entry that hides every key, and a [1, Hq, Sq, Sk] additive bias with causal."""
    from flashgen.kernels import fwd
    from flashgen.kernels.validate import expand_mask

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    fwd._plans.clear()
    b, hq, hkv, n = 3, 4, 2, 777
    q, k, v = _qkv(b, hq, hkv, n, n, 128, torch.bfloat16, seed=4)
    causal = kind == "bias_causal"
    j = torch.arange(n, device="cuda")
    if kind == "bool_padding":
        mask = (j[None, :] < torch.tensor([[n], [300], [0]], device="cuda"))[:, None, None, :]
        visible, bias = mask, None
    else:
        mask = torch.randn(1, hq, n, n, device="cuda").to(torch.bfloat16)
        visible, bias = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()[None, None], mask
    spec = KernelSpec(128, causal, "bfloat16", "fwd", attn_mask="bool" if bias is None else "add")
    assert hopper.choose(spec, q, k, v, n)
    out, lse = fwd.forward(q, k, v, causal=causal, scale=None, mask=expand_mask(mask, q, k))
    qd, kd, vd = (t.double() for t in (q, k, v))
    kd, vd = kd.repeat_interleave(2, 1), vd.repeat_interleave(2, 1)
    s = (qd @ kd.transpose(-1, -2)) / 128**0.5
    if bias is not None:
        s = s + bias.double()
    s = s.masked_fill(~visible, float("-inf"))
    ref = torch.softmax(s, -1).nan_to_num(0.0) @ vd
    assert torch.isfinite(out).all()
    err = max_abs_err(out, ref)
    assert err <= 2e-2 * max(1.0, ref.abs().max().item()), err
    seen = visible.expand(b, hq, n, n).any(-1)
    assert (out[~seen] == 0).all() and (lse[~seen] == float("inf")).all()
    ref_lse = torch.logsumexp(s, -1)
    assert (lse[seen].double() - ref_lse[seen]).abs().max().item() <= 1e-2


def _structured_mask(kind: str, b: int, hq: int, n: int, device) -> torch.Tensor:
    """Boolean [B, 1 or Hq, n, n] masks of the shapes models build: HF's causal-and-padding
    batch (one entry sees no key at all), a block-diagonal document mask, a prefix-LM mask,
    and a random one (holes inside every row's range)."""
    gen = torch.Generator(device="cpu").manual_seed(7)
    i = torch.arange(n)
    if kind == "hf_causal_pad":
        keep = i[None, :] < torch.tensor([[n], [n // 3], [0]])[:b]
        m = (i[:, None] >= i[None, :])[None, None] & keep[:, None, None, :]
    elif kind == "documents":
        doc = (i >= n // 3).int() + (i >= n // 2 + 17).int()
        m = (doc[:, None] == doc[None, :])[None, None].expand(b, 1, n, n)
    elif kind == "prefix_lm":
        m = ((i[:, None] >= i[None, :]) | (i[None, :] < 200))[None, None].expand(b, 1, n, n)
    else:
        m = torch.rand(b, hq, n, n, generator=gen) > 0.4
    return m.to(device)


@on_sm90
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kind", ["hf_causal_pad", "documents", "prefix_lm", "random"])
def test_hopper_mask_ranges_match_float64(kind, causal, head_dim, persistent, monkeypatch):
    """A boolean mask tensor walked by its key ranges (MASK_RANGES, flashgen.kernels.
    mask_ranges): key tiles outside what a block of rows sees are skipped and tiles all its rows
    see run without the mask; the output and lse must still be the mask's, rows that see no
    key zeros and +inf."""
    from flashgen.kernels import fwd, mask_ranges
    from flashgen.kernels.validate import expand_mask

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    monkeypatch.setenv(mask_ranges.ENV, "1")
    if persistent:
        cfg = hopper.CONFIGS[head_dim].with_persistent(True)
        monkeypatch.setattr(hopper, "config_for", lambda spec, sq, narrow=False: cfg)
    fwd._plans.clear()
    b, hq, hkv, n = 3, 4, 2, 777
    q, k, v = _qkv(b, hq, hkv, n, n, head_dim, torch.bfloat16, seed=5)
    mask = _structured_mask(kind, b, hq, n, "cuda")
    out, lse = fwd.forward(q, k, v, causal=causal, scale=None, mask=expand_mask(mask, q, k))
    assert any(p.ranges for p in fwd._plans.values())  # the ranges were walked
    fwd._plans.clear()
    visible = mask & (torch.ones(n, n, dtype=torch.bool, device="cuda").tril() if causal else True)
    ref, ref_lse = _masked_ref(q, k, v, visible, None)
    _assert_matches_masked_ref(out, lse, ref, ref_lse, ~visible.expand(b, hq, n, n).any(-1), 2e-2)


@on_sm90
@pytest.mark.parametrize("kind", ["hf_causal_pad", "documents"])
def test_hopper_mask_ranges_within_a_window_match_float64(kind, monkeypatch):
    """A window with a boolean mask tensor: the tiles walked are the window's band cut by the
    mask's ranges (both bound them; the whole tiles are whole for both)."""
    from flashgen.kernels import fwd, mask_ranges
    from flashgen.kernels.validate import expand_mask

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    monkeypatch.setenv(mask_ranges.ENV, "1")
    fwd._plans.clear()
    b, hq, hkv, n, left = 3, 4, 2, 777, 300
    q, k, v = _qkv(b, hq, hkv, n, n, 128, torch.bfloat16, seed=6)
    mask = _structured_mask(kind, b, hq, n, "cuda")
    out, lse = fwd.forward(q, k, v, causal=True, scale=None, window=(left, 0),
                           mask=expand_mask(mask, q, k))  # fmt: skip
    assert any(p.ranges for p in fwd._plans.values())
    fwd._plans.clear()
    i = torch.arange(n, device="cuda")
    band = (i[None, :] <= i[:, None]) & (i[None, :] >= i[:, None] - left)
    visible = mask & band
    ref, ref_lse = _masked_ref(q, k, v, visible, None)
    _assert_matches_masked_ref(out, lse, ref, ref_lse, ~visible.expand(b, hq, n, n).any(-1), 2e-2)


@pytest.mark.parametrize("spec", [KernelSpec(128, True, "bfloat16", "fwd"), *MASK_SPECS],
                         ids=lambda s: s.uri())  # fmt: skip
def test_forward_plan_passes_what_call_args_checks(spec, monkeypatch):
    """flashgen.kernels.fwd's Hopper plan builds its arguments itself (sizes kept in the plan,
    no per-call spec check); they must be exactly `call_args`'s, which
    test_plan_matches_the_kernel_signature ties to the kernel. The launch is recorded, not run."""
    from flashgen.kernels import fwd, plans

    seen = []
    counter = object()
    per_keys = []
    fixed_seen = []
    monkeypatch.setattr(hopper, "choose", lambda *a: True)
    monkeypatch.setattr(hopper, "sched_counter", lambda device: counter)

    def plan(*a, per_key=False, ranges=False, split=None, fixed=False, mask_tma=(None, None)):
        assert mask_tma == (None, None)  # (no MASK_TMA rendering here: FLASHGEN_MASK_TMA unset)
        per_keys.append(per_key)
        fixed_seen.append(fixed)
        assert not ranges  # a key-padding mask here: no ranges
        assert split is None  # (the shipped configs split nothing)
        return lambda *args: seen.append(args)

    monkeypatch.setattr(hopper, "plan", plan)
    plans.clear_all()
    d = spec.head_dim
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 300, d, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(2, 2, 280, d, generator=gen).to(torch.bfloat16) for _ in range(2))
    kw = {}
    if spec.window:
        kw["window"] = (7, 5000)  # the right size past both lengths: clamped (or 0 if causal)
    if spec.softcap:
        kw["softcap"] = 30.0
    if spec.lengths:
        kw["bounds"] = torch.tensor([[0, 300, 0, 280], [0, 250, 10, 200]], dtype=torch.int32)
    if spec.attn_mask:  # a key-padding mask (query-row stride 0): MASK_PER_KEY
        dtype = torch.bool if spec.attn_mask == "bool" else torch.float32
        kw["mask"] = torch.ones(2, 1, 1, 280, dtype=dtype).expand(2, 4, 300, 280)
    if spec.alibi:
        kw["alibi"] = torch.rand(4).expand(2, 4)
    if spec.dropout:
        kw["dropout"] = (0.1, 1234)
    out, lse = fwd.forward(q, k, v, causal=spec.causal, scale=0.1, **kw)
    plans.clear_all()
    (got,) = seen
    assert per_keys == [bool(spec.attn_mask)]
    # FIXED_MAX with a cap of 30 wherever the rendering and the dtype take it
    assert fixed_seen == [plans.fixed_max(spec, 30.0)]
    window = plans.clamp_window(kw.get("window"), spec.causal, 300, 280)
    want = hopper.call_args(spec, q, k, v, out, lse, 0.1, window, kw.get("softcap"),
                            kw.get("bounds"), kw.get("mask"), kw.get("alibi"),
                            kw.get("dropout"))  # fmt: skip
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a is b or a == b, (a, b)


# ---- key-padding masks in the Hopper family (issue 16; GPU) -------------------------------


def _key_padding(kind, b, n, seed=6):
    """A [B, 1, 1, n] key-padding mask: entry 0 sees every key, 1 the first 700 (right
    padding; additive: finite random biases there, HF's finfo.min on the padding), 2 keys
    from 400 on (left padding, the hull is every key), 3 none (zeros, lse +inf); additive only,
    entry 4 has every key at finfo.min (PyTorch's average of the values, lse +inf)."""
    j = torch.arange(n, device="cuda")
    keep = torch.stack([j >= 0, j < 700, j >= 400, j < 0, j >= 0][:b])[:, None, None, :]
    if kind == "bool":
        return keep
    gen = torch.Generator(device="cuda").manual_seed(seed)
    bias = torch.rand(b, 1, 1, n, device="cuda", generator=gen) * 4 - 2  # finite, in [-2, 2)
    bias = bias.masked_fill(~keep, float("-inf"))
    hf_min = torch.finfo(torch.float32).min
    bias[1, ..., 700:] = hf_min
    if b > 4:
        bias[4] = hf_min
    return bias


def _key_padding_ref(q, k, v, mask, causal):
    """float64 attention of a bool or additive mask; rows whose keys are all hidden (-inf,
    False) or all under a huge finite bias are `gone` (lse +inf), the former with zeros."""
    qd, kd, vd = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kd, vd = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = (qd @ kd.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if mask.dtype == torch.bool:
        s = s.masked_fill(~mask, float("-inf"))
    else:  # -inf refilled, not added: a row of -inf would send NaN gradients through the add
        s = (s + mask.double()).masked_fill(mask == float("-inf"), float("-inf"))
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1),
                          float("-inf"))  # fmt: skip
    out = torch.softmax(s, -1).nan_to_num(0.0) @ vd
    gone = s.amax(-1) < -1e30  # every key hidden, or under finfo.min
    return out, torch.logsumexp(s, -1), gone


@on_sm90
@pytest.mark.parametrize("hull", [True, False], ids=["hull", "no_hull"])
@pytest.mark.parametrize("kind", ["bool", "add"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
def test_hopper_key_padding_masks_match_float64(head_dim, causal, kind, hull, monkeypatch):
    """A [B, 1, 1, Sk] key-padding mask, boolean or additive, takes the Hopper family unforced
    (MASK_PER_KEY), with its key range as lengths (`hull`: what `primitives._bounds` passes on
    the H200) or without; right and left padding, an entry without keys (zeros, lse +inf);
    additive: random finite biases, HF's finfo.min padding (hidden by the hull) and an entry
    all at finfo.min (PyTorch's average of the values, lse +inf; kept whole by the hull)."""
    from flashgen.core.spec import DENSE_KEYS
    from flashgen.kernels import fwd
    from flashgen.kernels.padding import key_hull
    from flashgen.kernels.validate import expand_mask
    from flashgen.runtime import primitives

    monkeypatch.delenv(hopper.FAMILY_ENV, raising=False)  # unforced (AUTO_PER_KEY_MASKS)
    fwd._plans.clear()
    b, hq, hkv, n = (4 if kind == "bool" else 5), 4, 2, 1100  # 1100: ragged last tiles
    q, k, v = _qkv(b, hq, hkv, n, n, head_dim, torch.bfloat16, seed=7)
    mask = expand_mask(_key_padding(kind, b, n), q, k)
    bounds = key_hull(mask) if hull else None
    spec = KernelSpec(head_dim, causal, "bfloat16", "fwd", lengths=hull, attn_mask=kind)
    assert hopper.choose(spec, q, k, v, n, per_key=True)  # not the portable family
    if hull:
        # right padding ends at 700; key_hull's ranges start at 0, so the left-padded entry
        # is read inside its range; boolean: the others are flagged whole (DENSE_KEYS added);
        # additive: random biases (none whole), the all-finfo.min entry keeps every key
        want = [n, 700, n, 0] + ([] if kind == "bool" else [n])
        assert (bounds[:, 3] % DENSE_KEYS).tolist() == want
        whole = [True, True, False, True] if kind == "bool" else [False, False, False, True, False]
        assert (bounds[:, 3] >= DENSE_KEYS).tolist() == whole
        assert hopper.takes_key_hull(q, k, v, mask, causal=causal)
        assert primitives._bounds(None, mask, lambda: True).equal(bounds)
    out, lse = fwd.forward(q, k, v, causal=causal, scale=None, mask=mask, bounds=bounds)
    ref, ref_lse, gone = _key_padding_ref(q, k, v, mask, causal)
    assert torch.isfinite(out).all()
    err = max_abs_err(out, ref)
    per_entry = [max_abs_err(out[i], ref[i]) for i in range(b)]
    if b > 4:  # every key at finfo.min: the average of the values it sees, as PyTorch's softmax
        vals = v.double().repeat_interleave(hq // hkv, 1)[4]
        if causal:  # row i sees keys 0..i
            seen = torch.arange(1, n + 1, device=vals.device, dtype=vals.dtype)[:, None]
            avg = vals.cumsum(-2) / seen
        else:
            avg = vals.mean(-2, keepdim=True).expand_as(vals)
        assert max_abs_err(out[4], avg) <= 2e-2
    assert err <= 2e-2 * max(1.0, ref.abs().max().item()), per_entry
    assert (lse[gone] == float("inf")).all()
    assert (out[3] == 0).all()  # the entry without keys
    if causal:  # left padding: rows before the first visible key see none
        assert (out[2, :, :400] == 0).all()
    lse_err = (lse[~gone].double() - ref_lse[~gone]).abs().max().item()
    assert lse_err <= 1e-3 * max(1.0, ref_lse[~gone].abs().max().item()), lse_err


@on_sm90
@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_hopper_lengths_index_a_mask_tensor_at_absolute_positions(left, monkeypatch):
    """Lengths with a full [B, 1, Sq, Sk] boolean mask (forced; not what the ops pass, which is
    a key-padding mask's hull with starts 0): the mask is read at (q_start + i, k_start + j),
    query blocks past len_q and an entry with no keys walk one fully masked tile."""
    from flashgen.kernels import fwd
    from flashgen.kernels.padding import bounds, dense_mask
    from flashgen.kernels.validate import expand_mask

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    fwd._plans.clear()
    b, hq, hkv, sq, sk = 3, 4, 2, 600, 700
    q, k, v = _qkv(b, hq, hkv, sq, sk, 128, torch.float16, seed=8)
    seq_bounds = bounds(b, sq, sk, [700, 333, 0], [600, 257, 100], "left" if left else "right",
                        "cuda")  # fmt: skip
    gen = torch.Generator(device="cuda").manual_seed(9)
    keep = torch.rand(b, 1, sq, sk, device="cuda", generator=gen) < 0.7
    mask = expand_mask(keep, q, k)
    out, lse = fwd.forward(q, k, v, causal=True, scale=None, mask=mask, bounds=seq_bounds)
    visible = keep & dense_mask(seq_bounds, sq, sk, causal=True)
    ref, ref_lse = _masked_ref(q, k, v, visible, None)
    empty = ~visible.any(-1).expand(b, hq, sq)
    _assert_matches_masked_ref(out, lse, ref, ref_lse, empty, 4e-3)


@on_sm90
@pytest.mark.parametrize("kind", ["bool", "add"])
def test_backward_consumes_the_key_padding_hopper_forward(kind, monkeypatch):
    """Autograd through the public op with a key-padding mask, boolean or additive (HF's
    finfo.min on the padding): on the H200 the forward runs in the Hopper family unforced with
    the hull as lengths, the portable backward takes the hull too and reads that forward's out
    and lse (+inf where no key is seen); gradients equal float64."""
    from flashgen.kernels import fwd
    from flashgen.ops import attention
    from flashgen.runtime import primitives, routes

    monkeypatch.delenv(hopper.FAMILY_ENV, raising=False)  # unforced (AUTO_PER_KEY_MASKS)
    fwd._plans.clear()
    monkeypatch.setattr(primitives, "_hulls", {})  # (answers kept per call signature)
    monkeypatch.setattr(routes, "_routes", {})
    asked = []
    real = hopper.takes_key_hull
    monkeypatch.setattr(hopper, "takes_key_hull",
                        lambda *a, **kw: asked.append(real(*a, **kw)) or asked[-1])  # fmt: skip
    b, hq, hkv, n = 4, 4, 2, 1100
    q, k, v = _qkv(b, hq, hkv, n, n, 128, torch.bfloat16, seed=10)
    mask = _key_padding(kind, b, n)
    do = torch.randn_like(q)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=True, attn_mask=mask)
    out.backward(do)
    # the forward took the hull in the Hopper family
    assert asked == [True], asked
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want, _, _ = _key_padding_ref(*ref, mask, True)
    want.backward(do.double())
    assert max_abs_err(out, want) <= 2e-2 * max(1.0, want.abs().max().item())
    for name, got, exp in zip("qkv", leaves, ref, strict=True):
        err = max_abs_err(got.grad, exp.grad)
        assert err <= 3e-2 * max(1.0, exp.grad.abs().max().item()), f"d{name}: {err:.3e}"


# ---- dropout in the Hopper family (issue 16, forced only; GPU) ----------------------------

# (B, Hq, Hkv, Sq, Sk, D, dtype, causal, window, p, persistent)
DROPOUT_CASES = [
    (2, 12, 12, 384, 384, 64, torch.bfloat16, False, None, 0.1, False),  # BERT-like
    (2, 8, 2, 1000, 1000, 128, torch.float16, True, None, 0.3, True),
    (1, 4, 4, 777, 901, 64, torch.bfloat16, False, (100, 37), 0.5, False),
    (2, 4, 2, 700, 700, 128, torch.bfloat16, True, (200, 0), 0.2, True),
]


@on_sm90
@pytest.mark.parametrize("case", DROPOUT_CASES, ids=lambda c: f"d{c[5]}-p{c[9]}-{c[7]}-{c[8]}")
def test_hopper_dropout_matches_float64(case, monkeypatch):
    """The Hopper forward with dropout, forced (FLASHGEN_FWD_FAMILY=hopper): the portable
    family's keep flags (`dropout.keep_mask`), the denominator over every probability, the kept
    ones scaled by 1 / (1 - p), the undropped lse; GQA, causal, windows, both head dims, the
    persistent grid."""
    from flashgen.kernels import dropout, fwd

    b, hq, hkv, sq, sk, d, dtype, causal, window, p, persistent = case
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    if persistent:
        cfg = hopper.CONFIGS[d].with_persistent(True)
        monkeypatch.setattr(hopper, "config_for", lambda spec, sq, narrow=False: cfg)
    fwd._plans.clear()
    q, k, v = _qkv(b, hq, hkv, sq, sk, d, dtype, seed=9)
    spec = KernelSpec(d, causal, str(dtype).removeprefix("torch."), "fwd", window=bool(window),
                      dropout=True)  # fmt: skip
    assert hopper.choose(spec, q, k, v, sq)  # must not silently run the portable family
    out, lse = fwd.forward(q, k, v, causal=causal, scale=None, window=window, dropout=(p, 777))
    visible = ~hidden_ref(sq, sk, causal=causal, window=window).cuda()
    qd, kd, vd = (t.double() for t in (q, k, v))
    kd, vd = kd.repeat_interleave(hq // hkv, 1), vd.repeat_interleave(hq // hkv, 1)
    s = ((qd @ kd.transpose(-1, -2)) / d**0.5).masked_fill(~visible, float("-inf"))
    keep = dropout.keep_mask(777, p, b, hq, sq, sk, "cuda")
    ref = (torch.softmax(s, -1) * keep / (1 - p)) @ vd
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert torch.isfinite(out).all()
    assert max_abs_err(out, ref) <= tol * max(1.0, ref.abs().max().item())
    lse_err = (lse.double() - torch.logsumexp(s, -1)).abs().max().item()
    assert lse_err <= 1e-3 * max(1.0, torch.logsumexp(s, -1).abs().max().item()), lse_err
    fwd._plans.clear()
