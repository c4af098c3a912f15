"""`TileConfig`: the launch parameters the tuner searches, as plain validated integers.

These values come back from the database and are rendered into launches, so they are checked
here on construction: only positive powers of two for the blocks, warps in {1,2,4,8,16},
stages 1..8. Nothing else (no strings, no code) can travel inside a config.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

ALLOWED_WARPS = (1, 2, 4, 8, 16)
MAX_BLOCK = 256
MIN_BLOCK = 16
MAX_STAGES = 8


class FieldError(ValueError):
    """A value that fails validation; `field` names it, so a file format can say which one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_kinds(obj, bools=()) -> None:
    """FieldError naming the first dataclass field of `obj` that is not an int, or not a bool
    when it is named in `bools` (a bool is not an int here): the first check of every launch
    config type, so that one read back from a file or the database carries nothing else."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        want_bool = f.name in bools
        if want_bool != isinstance(value, bool) or not isinstance(value, int):
            kind = "a bool" if want_bool else "an int"
            raise FieldError(f.name, f"{type(obj).__name__}.{f.name} must be {kind}, got {value!r}")


def check_rules(obj, rules, show: bool = True) -> None:
    """FieldError for the first (name, ok, rule) of `rules` whose `ok` is false: "<Type>.<name>
    must be <rule>", followed by ": got <obj>" when `show` (the whole config, for rules that
    tie several fields together)."""
    for name, ok, rule in rules:
        if not ok:
            tail = f": got {obj}" if show else ""
            raise FieldError(name, f"{type(obj).__name__}.{name} must be {rule}{tail}")


def check_blocks(obj, names) -> None:
    """FieldError naming the first of `names` whose value on `obj` is not a power of two in
    [MIN_BLOCK, MAX_BLOCK]: the tile sizes every kernel's `tl.arange` and `tl.dot` take."""
    for name in names:
        value = getattr(obj, name)
        if not (is_pow2(value) and MIN_BLOCK <= value <= MAX_BLOCK):
            raise FieldError(
                name,
                f"{type(obj).__name__}.{name} must be a power of two in [{MIN_BLOCK}, "
                f"{MAX_BLOCK}], got {value}",
            )


def is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True, order=True)
class TileConfig:
    """block_m = Br (query rows per program), block_n = Bc (key rows per inner step)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        check_kinds(self)
        check_blocks(self, ("block_m", "block_n"))
        check_rules(self, (
            ("num_warps", self.num_warps in ALLOWED_WARPS,
             f"one of {ALLOWED_WARPS}, got {self.num_warps}"),
            ("num_stages", 1 <= self.num_stages <= MAX_STAGES,
             f"in [1, {MAX_STAGES}], got {self.num_stages}"),
        ), show=False)  # fmt: skip

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def short(self) -> str:
        return f"({self.block_m},{self.block_n},w{self.num_warps},s{self.num_stages})"
