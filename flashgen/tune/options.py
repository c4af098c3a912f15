"""The `flashgen tune` flags: their parser, their checks, their defaults (GPU or CPU-only
machine) and the (spec, bucket) tasks they name. Nothing here imports torch: a typo costs a
one-line error before anything heavy loads."""

from __future__ import annotations

import argparse

from ..core.flags import SWITCH, add_flags

GPU_DEFAULTS = {
    "head_dim": "64,128",
    "dtype": "bfloat16",
    "causal": "both",
    "seq_len": "1024,4096",
    "direction": "fwd,bwd",
    "trials": 40,
    "patience": 15,
}
CPU_DEFAULTS = {
    "head_dim": "64,128",
    "dtype": "bfloat16",
    "causal": "both",
    "seq_len": "1024,4096",
    "direction": "fwd,bwd",
    "trials": 12,
    "patience": 6,
}


def _csv_items(text: str, flag: str) -> list[str]:
    """The comma-separated items of a flag; an empty list or an empty item is refused."""
    items = [part.strip() for part in str(text).split(",")]
    if not any(items):
        raise ValueError(f"{flag} needs at least one value, got {text!r}")
    if not all(items):
        raise ValueError(f"{flag} has an empty item in {text!r} (write e.g. 64,128)")
    return items


def _csv_ints(text: str, flag: str, low: int = 1, high: int | None = None) -> list[int]:
    values = []
    for item in _csv_items(text, flag):
        try:
            values.append(int(item))
        except ValueError:
            raise ValueError(f"{flag} takes comma-separated integers, got {item!r}") from None
    for value in values:
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f">= {low}"
            raise ValueError(f"{flag} takes integers {span}, got {value}")
    return values


def _csv_names(text: str, flag: str, allowed: tuple[str, ...]) -> list[str]:
    names = _csv_items(text, flag)
    for name in names:
        if name not in allowed:
            raise ValueError(f"{flag}: {name!r} is not one of {', '.join(allowed)}")
    return list(dict.fromkeys(names))


# The longest sequence length a record can be stored for (`flashgen.db.records.MAX_BUCKET`).
MAX_SEQ_LEN = 1 << 30
SEED_LIMIT = 2**32 - 1  # Optuna's samplers seed numpy with it


def check_options(args: argparse.Namespace) -> None:
    """Every flag the user gave, checked before torch loads and before anything is printed:
    a typo costs a one-line error, never a run that tunes nothing (ValueError names the flag)."""
    from ..core.spec import DIRECTIONS, DTYPES, MAX_HEAD_DIM, MIN_HEAD_DIM

    if args.head_dim is not None:
        _csv_ints(args.head_dim, "--head-dim", MIN_HEAD_DIM, MAX_HEAD_DIM)
    if args.dtype is not None:
        _csv_names(args.dtype, "--dtype", DTYPES)
    if args.direction is not None:
        _csv_names(args.direction, "--direction", DIRECTIONS)
    seq_q = _csv_ints(str(args.seq_len or GPU_DEFAULTS["seq_len"]), "--seq-len", 1, MAX_SEQ_LEN)
    if args.seq_k is not None:
        seq_k = _csv_ints(args.seq_k, "--seq-k", 1, MAX_SEQ_LEN)
        if len(seq_k) not in (1, len(seq_q)):
            raise ValueError(
                f"--seq-k takes one length or one per --seq-len ({len(seq_q)}), got {len(seq_k)}"
            )
    if args.trials is not None and args.trials < 1:
        raise ValueError(f"--trials must be >= 1, got {args.trials}")
    if args.patience is not None and args.patience < 0:
        raise ValueError(f"--patience must be >= 0 (0: never stop early), got {args.patience}")
    if not 0 <= args.seed <= SEED_LIMIT:
        raise ValueError(f"--seed must be between 0 and {SEED_LIMIT}, got {args.seed}")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.gpus is not None:
        from .gpus import parse_gpus

        parse_gpus(args.gpus)
        if args.workers > 1:
            raise ValueError("--gpus starts one worker per GPU; it does not take --workers")
    if args.compile_workers is not None and args.compile_workers < 0:
        raise ValueError(f"--compile-workers must be >= 0, got {args.compile_workers}")
    if args.pending:
        given = [
            flag
            for flag, value in (
                ("--head-dim", args.head_dim),
                ("--dtype", args.dtype),
                ("--causal", args.causal),
                ("--seq-len", args.seq_len),
                ("--seq-k", args.seq_k),
                ("--direction", args.direction),
                ("--window", args.window or None),
                ("--softcap", args.softcap or None),
                ("--lengths", args.lengths or None),
                ("--dropout", getattr(args, "dropout", False) or None),
                ("--alibi", getattr(args, "alibi", False) or None),
                ("--attn-mask", getattr(args, "attn_mask", None) or None),
            )  # fmt: skip
            if value is not None
        ]
        if given:
            raise ValueError(
                f"--pending tunes the shapes the database lists; it does not take {', '.join(given)}"
            )


# The flags by --help group: (flag, argparse options, help) rows (`flashgen.core.flags`).
_WHAT = (
    ("--head-dim", {"metavar": "D[,D]"},
     f"head dims (default {GPU_DEFAULTS['head_dim']} / {CPU_DEFAULTS['head_dim']})"),
    ("--dtype", {"metavar": "T[,T]"},
     f"float16, bfloat16, float32 (default {GPU_DEFAULTS['dtype']} / {CPU_DEFAULTS['dtype']})"),
    ("--causal", {"choices": ("both", "true", "false"), "default": None}, "masking (default both)"),
    ("--seq-len", {"metavar": "N[,N]"},
     f"query lengths; each is tuned at its power-of-two bucket (default {GPU_DEFAULTS['seq_len']})"),
    ("--seq-k", {"metavar": "N[,N]"},
     "key lengths: one for all, or one per --seq-len (default: equal to the query length)"),
    ("--direction", {"metavar": "fwd,bwd"}, "fwd, bwd or both (default fwd,bwd)"),
    ("--window", SWITCH, "tune the sliding-window kernels (flashgen.attention(window=); timed "
     "with a band covering every key, so the config serves every window size)"),
    ("--softcap", SWITCH, "tune the logit-softcapping kernels (flashgen.attention(softcap=))"),
    ("--lengths", SWITCH, "tune the kernels with per-sequence lengths "
     "(key_lengths=/query_lengths=; timed with every row valid)"),
    ("--dropout", SWITCH, "tune the attention-dropout kernels (flashgen.attention(dropout_p=); "
     "timed drawing the mask with p = 0, so the config serves every p)"),
    ("--alibi", SWITCH, "tune the ALiBi kernels (flashgen.attention(alibi_slopes=); timed with "
     "zero slopes, so the config serves every slope)"),
    ("--attn-mask", {"choices": ("bool", "add"), "default": None},
     "tune the kernels reading a mask tensor (flashgen.attention(attn_mask=), key-padding "
     "masks; bool or add: boolean or additive; timed with a key-padding mask that hides "
     "nothing, so the config serves every mask). These six flags combine into one kernel kind"),
    ("--pending", SWITCH, "tune exactly the shapes compiled models met without a tuned record "
     "(`flashgen db pending`), then clear them"),
)  # fmt: skip
_HOW = (
    ("--trials", {"type": int, "default": None},
     f"evaluated candidates per spec and bucket (default {GPU_DEFAULTS['trials']} / "
     f"{CPU_DEFAULTS['trials']}); pruned configs are free"),
    ("--patience", {"type": int, "default": None},
     "stop a study when its best has not improved for this many candidates "
     f"(default {GPU_DEFAULTS['patience']} / {CPU_DEFAULTS['patience']}; 0: never)"),
    ("--seed", {"type": int, "default": 0}, "sampler seed (default 0)"),
    ("--no-sdpa", SWITCH, "do not time PyTorch's SDPA backends against the tuned kernel (GPU "
     "only; records then name no winner and the run time uses its defaults)"),
)  # fmt: skip
_WHERE = (
    ("--db", {"metavar": "URL"},
     "tuning database (default FLASHGEN_DB_URL, else the SQLite file in the cache dir)"),
    ("--gpus", {"metavar": "all|I,J"},
     "one worker process per GPU of this host (all, or indices such as 0,1), each "
     "pinned to its GPU and timing there only, all on the same studies and database"),
    ("--workers", {"type": int, "default": 1},
     "tuner processes cooperating on the same studies, not pinned to one GPU each (default 1)"),
    ("--compile-workers", {"type": int, "default": None},
     "processes compiling upcoming candidates while the GPU times the current one "
     "(default: half the CPU cores, at most 8; none in interpreter mode)"),
    ("--quiet", SWITCH, "no progress bar"),
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_flags(parser.add_argument_group("what to tune (defaults: GPU / CPU-only machine)"), _WHAT)
    add_flags(parser.add_argument_group("how hard"), _HOW)
    add_flags(parser.add_argument_group("where"), _WHERE)


def resolve_options(args: argparse.Namespace, gpu: bool) -> dict:
    defaults = GPU_DEFAULTS if gpu else CPU_DEFAULTS
    out = {}
    for key in ("head_dim", "dtype", "seq_len", "direction", "trials", "patience"):
        value = getattr(args, key)
        out[key] = defaults[key] if value is None else value
    out["causal"] = args.causal or defaults["causal"]
    for key in ("window", "softcap", "lengths", "dropout", "alibi"):
        out[key] = bool(getattr(args, key, False))
    out["attn_mask"] = getattr(args, "attn_mask", None) or ""
    return out


def build_tasks(opts: dict, seq_k: str | None):
    """The (spec, bucket) tasks the options name, in a stable order."""
    from ..core.spec import DIRECTIONS, DTYPES, KernelSpec, shape_bucket
    from .tasks import Task

    head_dims = list(dict.fromkeys(_csv_ints(str(opts["head_dim"]), "--head-dim")))
    dtypes = _csv_names(str(opts["dtype"]), "--dtype", DTYPES)
    directions = _csv_names(str(opts["direction"]), "--direction", DIRECTIONS)
    causals = {"both": [False, True], "true": [True], "false": [False]}[opts["causal"]]
    seq_q = _csv_ints(str(opts["seq_len"]), "--seq-len", 1, MAX_SEQ_LEN)
    seq_k_list = _csv_ints(seq_k, "--seq-k", 1, MAX_SEQ_LEN) if seq_k else seq_q
    if len(seq_k_list) == 1:
        seq_k_list = seq_k_list * len(seq_q)
    if len(seq_k_list) != len(seq_q):
        raise ValueError("--seq-k takes one length or one per --seq-len")
    buckets = list(
        dict.fromkeys(shape_bucket(q, k) for q, k in zip(seq_q, seq_k_list, strict=True))
    )
    tasks: list[Task] = []
    for direction in directions:
        for dtype in dtypes:
            for head_dim in head_dims:
                for causal in causals:
                    spec = KernelSpec(
                        head_dim, causal, dtype, direction, opts.get("window", False),
                        opts.get("softcap", False), opts.get("lengths", False),
                        dropout=opts.get("dropout", False), alibi=opts.get("alibi", False),
                        attn_mask=opts.get("attn_mask", ""),
                    )  # fmt: skip
                    tasks.extend(Task(spec, bucket) for bucket in buckets)
    return tasks
