"""Train a small GPT compiled with `backend="flashgen"` under DDP or FSDP2, and check its losses.

    torchrun --nproc-per-node 2 examples/distributed_train.py --mode ddp,fsdp --check
    python examples/distributed_train.py --mode single --batch 8     # one process, one GPU

Each step draws one global batch of random tokens from a generator seeded by the step number,
and each rank trains on its own equal slice of it. So a run on N ranks with `--batch B` (rows per
rank) sees exactly the data of one process with `--batch N*B`, and since DDP and FSDP2 average
the gradients over the ranks, their losses must match that single-process run up to the order
of the floating-point reductions. `--check` makes rank 0 also train that single-process
reference (its own unwrapped, compiled copy of the model, on the whole global batch) and fail
(exit 1) when any step's loss differs by more than `--tol` (relative).

The model is nanoGPT's (examples/nanogpt.py, head not tied to the embedding), whose attention is
written by hand (a tril mask, masked_fill, softmax): the flashgen backend proves the mask causal
and swaps the subgraph for flashgen's kernels, forward and backward; the rest of the graph goes to `--fallback` (Inductor by default). Without a GPU the
kernels run in Triton's CPU interpreter and ranks talk over gloo (slow: use tiny sizes).

Rank 0 prints one JSON line per mode: the losses, tokens per second per rank over the steps after
`--warmup`, the number of graphs the backend compiled, and (with --check) the reference's losses and the largest relative difference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded by path (the tests)
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from nanogpt import GPT  # noqa: E402  (examples/nanogpt.py: the model train_nanogpt.py trains)

MODES = ("single", "ddp", "fsdp")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--mode", default="ddp", help="comma-separated: single, ddp, fsdp (default ddp)")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per mode (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="steps not timed (compiles; default 5)")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step (default 8)")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence (default 1024)")
    p.add_argument("--dim", type=int, default=1024, help="model width (default 1024)")
    p.add_argument("--heads", type=int, default=8, help="attention heads (default 8: head dim 128)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    p.add_argument("--vocab", type=int, default=8192, help="vocabulary size (default 8192)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default=None,
        help="autocast dtype (default bfloat16 on a GPU, float32 on the CPU)",
    )  # fmt: skip
    p.add_argument(
        "--fallback", default="inductor",
        help="what compiles the rest of each graph: inductor, aot_eager, eager (default inductor)",
    )  # fmt: skip
    p.add_argument(
        "--impl", default="flashgen",
        help="attention implementation forced for every call (default flashgen: its own "
        "kernels; 'auto' lets tuning records and defaults choose)",
    )  # fmt: skip
    p.add_argument("--check", action="store_true", help="rank 0 also trains the one-process "
                   "reference on the whole global batch and compares the losses")  # fmt: skip
    p.add_argument("--tol", type=float, default=None,
                   help="largest relative loss difference --check accepts "
                   "(default 1e-4 in float32, 2e-2 in bfloat16)")  # fmt: skip
    p.add_argument("--out", default=None, help="also append rank 0's JSON lines to this file")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        p.error(f"--mode takes {', '.join(MODES)}; got {args.mode!r}")
    args.modes = modes
    for name in ("steps", "batch", "seq", "dim", "heads", "layers", "vocab"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.dim % args.heads:
        p.error(f"--dim ({args.dim}) must be a multiple of --heads ({args.heads})")
    if not 0 <= args.warmup < args.steps:
        p.error("--warmup must be >= 0 and below --steps")
    return args


def global_batch(step: int, rows: int, args) -> torch.Tensor:
    """The step's whole batch (the same on every rank and in the reference): rows x (seq + 1)."""
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, args.vocab, (rows, args.seq + 1), generator=gen)


def build(args, device: torch.device) -> GPT:
    torch.manual_seed(0)  # the same weights on every rank and in the reference
    model = GPT(args.vocab, args.dim, args.heads, args.layers, args.seq, tie_weights=False)
    return model.to(device)


def wrap(model: GPT, mode: str, device: torch.device) -> nn.Module:
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in model.h:
            fully_shard(block)
        fully_shard(model)
    return model


def train(args, mode: str, device, rank: int, world: int, dtype) -> tuple[list[float], float, int]:
    """`args.steps` AdamW steps of `mode` on this rank's slice; returns the losses (averaged over
    the ranks), the tokens per second on this rank after the warm-up steps, and how many graphs
    the backend compiled (more than one when DDP's buckets split the model)."""
    import flashgen

    rest = _fallback(args.fallback)
    replaced = []

    def counting(gm, example_inputs):  # the attention pass has run on gm: count its swaps
        replaced.append(sum(1 for n in gm.graph.nodes if "flashgen" in str(n.target)))
        return rest(gm, example_inputs)

    impl = None if args.impl == "auto" else args.impl
    backend = flashgen.backend(fallback=counting, impl=impl)
    torch._dynamo.reset()
    # Under DDP, Dynamo's DDP optimizer splits the graph at DDP's gradient buckets (25 MB), so a
    # model wider than one bucket reaches the backend as several pieces, each compiled with fake
    # inputs; the attention pass still proves the causal mask from the real module buffer (see
    # flashgen/compile/patterns/mask_values.py). The splitting stays on: it lets the all-reduce of
    # one bucket overlap the compiled backward of the next.
    model = wrap(build(args, device), mode, device)
    compiled = torch.compile(model, backend=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses: list[float] = []
    start = 0.0
    for step in range(args.steps):
        if step == args.warmup:
            _sync(device, world)
            start = time.perf_counter()
        rows = global_batch(step, args.batch * world, args)[
            rank * args.batch : (rank + 1) * args.batch
        ]
        rows = rows.to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            logits = compiled(rows[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), rows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        if world > 1:
            import torch.distributed as dist

            dist.all_reduce(mean)  # SUM (gloo has no AVG); equal slices, so SUM / world
            mean /= world
        losses.append(float(mean))
    _sync(device, world)
    timed = args.steps - args.warmup
    tokens_per_s = timed * args.batch * args.seq / (time.perf_counter() - start)
    if sum(replaced) < args.layers:  # one attention site a layer, in whichever piece it fell
        raise RuntimeError(
            f"{mode}: the flashgen backend replaced {sum(replaced)} of the model's "
            f"{args.layers} attention sites (in {len(replaced)} compiled graphs)"
        )
    return losses, tokens_per_s, len(replaced)


def _fallback(name: str):
    if name == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx
    from torch._dynamo import lookup_backend

    return lookup_backend(name)


def _sync(device, world: int) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1 and "single" in args.modes:
        print("--mode single runs in one process (plain python, not torchrun)", file=sys.stderr)
        return 2
    if world == 1 and set(args.modes) - {"single"}:
        print(
            "ddp and fsdp need several processes: torchrun --nproc-per-node N ...", file=sys.stderr
        )
        return 2
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))
    tol = args.tol if args.tol is not None else (1e-4 if dtype == torch.float32 else 2e-2)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if cuda else "gloo")
    failed = False
    try:
        ref = None
        if args.check and rank == 0:  # once for every mode; the other ranks wait in train()
            ref_args = argparse.Namespace(**{**vars(args), "batch": args.batch * world})
            ref, _, _ = train(ref_args, "single", device, 0, 1, dtype)
        for mode in args.modes:
            losses, tps, graphs = train(args, mode, device, rank, world, dtype)
            line = {"mode": mode, "world": world, "device": _device_name(device),
                    "dtype": str(dtype).removeprefix("torch."), "batch_per_rank": args.batch,
                    "seq": args.seq, "tokens_per_s_per_rank": round(tps, 1), "graphs": graphs,
                    "losses": losses}  # fmt: skip
            if ref is not None:
                diff = max(
                    abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref, strict=True)
                )
                line.update(reference=ref, max_rel_diff=diff, tol=tol, match=diff <= tol)
                failed |= diff > tol
            if rank == 0:
                text = json.dumps(line)
                print(text, flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(text + "\n")
            if world > 1:
                _sync(device, world)
    finally:
        if world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
    return 1 if failed else 0


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


if __name__ == "__main__":
    sys.exit(main())
