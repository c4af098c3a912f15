"""`HopperConfig`: the launch parameters of the Hopper (Gluon, warp-specialised) forward family.

A value type like `TileConfig`, for the other family: its knobs reach the template as constexprs
and the launch (grid, maxnreg), so every field is validated here on construction (ints and
bools in fixed ranges, nothing else). The byte and thread counts are what the kernel allocates
(templates/attn_fwd_hopper.py.jinja); `flashgen.hardware.hopper_tiles` decides what fits a GPU.

Knobs written, measured on the H200 and removed (benchmarks/RESULTS.md, sessions 29-32; the code
stands in the commits named there): `lazy_rescale` (O rescaled only when a row's max grew by more
than 2**8: 0.95-0.97x, the consumer-wide decision costs two named barriers a tile), `fma_exp` (some
exponentials by FMAs instead of MUFU: 0.81-0.97x, softcap included), `mma_sum` (row sums as P @
ones on the tensor cores: 0.84-0.98x, and the lse off by up to 5.7e-4) and `stream_k` (every
program of a persistent grid an equal run of all items' key tiles, the items cut between two
programs merged afterwards: 0.78-0.998x at head dim 128, 0.91-0.95x at 64, session 32 B1). The first
three show that the consumer's softmax is on its own critical path: what adds instructions or
registers there loses, even when it unloads a pipe. Stream-K lost most where items are shortest
(1k keys, 8 tiles an item: 0.78-0.86x); it was not profiled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .config import check_kinds, check_rules

CONSUMERS = (1, 2, 3)
# Rows of one consumer: a warpgroup owns 64 (wgmma's M per warpgroup); one consumer of 8 warps
# (two warpgroups in one partition) owns 128.
CONSUMER_WARPS = (4, 8)
BLOCK_N = (64, 128)
NUM_BUF = (2, 3, 4)
# Registers a thread: setmaxnreg moves them in steps of 8, and a thread holds at most 255.
MIN_REGS, MAX_REGS = 24, 248
REGS_PER_SM = 65_536
# Chunks a split item's key tiles may take (the merge reads them as one power-of-two block).
MAX_SPLIT = 16
BARRIER_BYTES = 8
ITEM_BYTES = 4


@dataclass(frozen=True, order=True)
class HopperConfig:
    """block_m rows per work item, split over `consumers` partitions of num_warps warps each
    (num_warps 8 only with one consumer); block_n keys per tile; num_buf K/V ring slots;
    maxnreg the per-thread register cap the launch declares (threads() * maxnreg must fit the
    SM's 65,536 registers; the loader's warpgroup then gives its registers to the consumers
    through setmaxnreg); pingpong orders the two consumers' GEMMs; persistent launches one
    program per resident slot (each walks several work items, longest first when causal)
    instead of one per item; dynamic (persistent only) lets each program take the next untaken
    item from a global counter instead of every grid-th one (items of unequal length, causal,
    then end together). late_wait stores each tile's row sums to shared memory before waiting
    for the previous tile's PV product, which keeps that wait after the softmax: without it
    ptxas (CUDA 12.8, Triton 3.6) schedules the wait at the softmax's first instruction and a
    consumer's softmax no longer overlaps its own PV (static SASS, every shipped config).
    tail_split (persistent, non-causal renderings without masks or softcap only:
    `hopper.splittable`) splits the items of a last, partial round of the grid into up to that
    many chunks of their key tiles, merged afterwards, so that round does not leave SMs idle
    (at 2,048 items over 132 SMs the last round is half full: ~3% of the kernel by item count);
    1 is off."""

    block_m: int
    block_n: int
    num_buf: int
    consumers: int
    num_warps: int
    maxnreg: int
    pingpong: bool
    persistent: bool = False
    dynamic: bool = False
    late_wait: bool = False
    tail_split: int = 1

    def __post_init__(self) -> None:
        check_kinds(self, bools=("pingpong", "persistent", "dynamic", "late_wait"))
        checks = (
            ("consumers", self.consumers in CONSUMERS, f"one of {CONSUMERS}"),
            ("num_warps", self.num_warps in CONSUMER_WARPS and
             (self.num_warps == 4 or self.consumers == 1), "4, or 8 with one consumer"),
            ("block_m", self.block_m == self.consumers * 16 * self.num_warps,
             "consumers * 16 * num_warps (each warp owns 16 rows of a wgmma tile)"),
            ("block_n", self.block_n in BLOCK_N, f"one of {BLOCK_N}"),
            ("num_buf", self.num_buf in NUM_BUF, f"one of {NUM_BUF}"),
            ("maxnreg", MIN_REGS <= self.maxnreg <= MAX_REGS and self.maxnreg % 8 == 0,
             f"a multiple of 8 in [{MIN_REGS}, {MAX_REGS}]"),
            ("maxnreg", self.threads() * self.maxnreg <= REGS_PER_SM,
             f"at most {REGS_PER_SM} // {self.threads()} threads"),
            ("pingpong", not self.pingpong or self.consumers == 2, "only with two consumers"),
            ("dynamic", not self.dynamic or self.persistent, "only with a persistent grid"),
            ("tail_split", 1 <= self.tail_split <= MAX_SPLIT, f"in [1, {MAX_SPLIT}]"),
            ("tail_split", self.tail_split == 1 or self.persistent, "only with a persistent grid"),
        )  # fmt: skip
        check_rules(self, checks)

    @property
    def rows_per_consumer(self) -> int:
        return self.block_m // self.consumers

    def shared_bytes(
        self, head_dim: int, elem_bytes: int = 2, alibi: bool = False, alibi_mma: bool = False,
        mask_elem: int = 0, mask_bufs: int = 1,
    ) -> int:  # fmt: skip
        """Shared memory of the kernel's allocations: each consumer's two Q tiles (the next
        item's Q loads while the current one is in use) and O staging tile, the K and V
        rings, the mbarriers, each Q buffer's work-item index (dynamic grids; a static one
        leaves it unused and the compiler drops it), with late_wait each consumer's row sums.
        With ALiBi (`alibi`) no O tiles (O is staged in the item's own Q buffer) but a tile's
        key indices as floats, and where the tensor cores add its per-key term (`alibi_mma`,
        `flashgen.kernels.hopper.alibi_mma`) as B's 16 extra rows of QK^T too (the template's
        `kx`). With a mask tensor read by TMA (MASK_TMA; `mask_elem`: its element's bytes) no
        O tiles either, but each consumer's `mask_bufs` [M_C, BLOCK_N] mask tiles and their two
        mbarriers each.
        On sm_90 the compiler adds alignment padding only (tests/kernels/test_hopper.py
        compiles configs and compares)."""
        staged = alibi or mask_elem > 0
        rows = 2 * self.block_m if staged else 3 * self.block_m
        tiles = (rows + 2 * self.num_buf * self.block_n) * head_dim * elem_bytes
        barriers = BARRIER_BYTES * (4 * self.consumers + 4 * self.num_buf + 2)
        pins = 4 * self.block_m if self.late_wait else 0
        keys = 4 * self.block_n if alibi else 0
        if alibi and alibi_mma:
            keys += 16 * elem_bytes * self.block_n
        masks = 0
        if mask_elem:
            tile = mask_elem * self.block_m * self.block_n  # (M_C rows a consumer)
            masks = mask_bufs * (tile + BARRIER_BYTES * 2 * self.consumers)
        return tiles + barriers + ITEM_BYTES * 2 * self.consumers + pins + keys + masks

    def threads(self) -> int:
        """Threads of one program: the consumers' warps and the loader's warp, the loader
        rounded up to a warpgroup (setmaxnreg works per warpgroup)."""
        return 32 * (self.consumers * self.num_warps + 4)

    def short(self) -> str:
        flags = "".join(
            name for name, on in (("pp", self.pingpong), ("P", self.persistent),
                                  ("D", self.dynamic), ("L", self.late_wait)) if on
        )  # fmt: skip
        if self.tail_split > 1:
            flags += f"s{self.tail_split}"
        return (f"(hopper {self.block_m}x{self.block_n} c{self.consumers}w{self.num_warps} "
                f"b{self.num_buf} r{self.maxnreg}{' ' + flags if flags else ''})")  # fmt: skip

    def with_persistent(self, persistent: bool = True) -> HopperConfig:
        return replace(
            self,
            persistent=persistent,
            dynamic=self.dynamic and persistent,
            tail_split=self.tail_split if persistent else 1,
        )


def max_regs(consumers: int, num_warps: int) -> int:
    """The largest launch register cap for this many threads (a multiple of 8)."""
    threads = 32 * (consumers * num_warps + 4)
    return min(MAX_REGS, REGS_PER_SM // threads // 8 * 8)
