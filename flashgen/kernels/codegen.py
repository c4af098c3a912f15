"""Render a kernel template for a `KernelSpec`, write it to a content-hashed file, import it.

Triton's `@jit` reads the source of the functions it compiles, so generated kernels must live in
a real `.py` file (it refuses exec'd strings outside the interpreter). The file name carries a hash
of the rendered source, and writes go through a temporary file plus `os.replace`, so concurrent
processes rendering the same spec either see no file or a complete one, never a torn one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from types import ModuleType

from ..core.paths import interpret_mode, kernel_dir, templates_dir, write_atomic
from ..core.spec import DENSE_KEYS, KernelSpec

TEMPLATE_FOR_DIRECTION = {"fwd": "attn_fwd.py.jinja", "bwd": "attn_bwd.py.jinja"}
# Split-KV decode (flashgen.kernels.decode): forward specs only, its own template.
DECODE_TEMPLATE = "attn_decode.py.jinja"
# The one-pass backward (flashgen.kernels.bwd, kind "onepass"): bwd specs without window/softcap.
ONEPASS_TEMPLATE = "attn_bwd_onepass.py.jinja"
_TL_DTYPE = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32"}


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template_context(spec: KernelSpec) -> dict:
    """Everything a template may use. Only ints, bools and fixed enums: never user strings.
    The names, and the names templates use inside kernels, are listed in templates/README.md."""
    return {
        "uri": spec.uri(),
        "head_dim": spec.head_dim,
        "block_d": spec.block_d,
        "causal": spec.causal,
        "window": spec.window,
        "softcap": spec.softcap,
        "lengths": spec.lengths,
        "packed": spec.packed,
        "attn_mask": spec.attn_mask,
        "dropout": spec.dropout,
        "alibi": spec.alibi,
        "dtype": spec.dtype,
        "tl_dtype": _TL_DTYPE[spec.dtype],
        "is_fp32": spec.dtype == "float32",
        # The interpreter cannot run bf16 dot products: templates upcast there.
        "interpret": interpret_mode(),
        "dense_keys": DENSE_KEYS,
    }


def family_uri(spec: KernelSpec, family: str = "portable") -> str:
    """The name of `spec`'s kernel in a family: the decode family's forward kernels are
    `attn_decode_...` (e.g. attn_decode_d128_causal_bf16), every other family uses `spec.uri()`."""
    if family == "decode":
        return "attn_decode_" + spec.uri().removeprefix(f"attn_{spec.direction}_")
    if family == "onepass":
        return "attn_bwd_onepass_" + spec.uri().removeprefix("attn_bwd_")
    if family == "hopper_bwd":
        return "attn_bwd_hopper_" + spec.uri().removeprefix("attn_bwd_")
    return spec.uri()


def render(spec: KernelSpec, family: str = "portable") -> str:
    """The generated source for `spec` (what `flashgen kernel` prints): the portable Triton
    family, the Hopper Gluon family (`flashgen.kernels.hopper`, forward; `hopper_bwd`,
    backward: `flashgen.kernels.hopper_bwd`), the split-KV
    decode family (`flashgen.kernels.decode`, forward without window, softcap, lengths or
    dropout; ALiBi not beside an additive mask) or the
    one-pass backward (`flashgen.kernels.bwd`, kind "onepass"; backward without window or
    softcap)."""
    if family == "decode":
        if (
            spec.direction != "fwd" or spec.window or spec.softcap or spec.lengths
            or spec.dropout or spec.packed or (spec.alibi and spec.attn_mask == "add")
        ):  # fmt: skip
            raise ValueError(f"the decode family has no kernel for {spec.uri()}")
        context = {**template_context(spec), "uri": family_uri(spec, family)}
        return _environment().get_template(DECODE_TEMPLATE).render(**context)
    if family == "onepass":
        if spec.direction != "bwd" or spec.window or spec.softcap or spec.alibi:
            raise ValueError(f"the one-pass backward has no kernel for {spec.uri()}")
        context = {**template_context(spec), "uri": family_uri(spec, family)}
        return _environment().get_template(ONEPASS_TEMPLATE).render(**context)
    if family == "hopper":
        from . import hopper

        template = _environment().get_template(hopper.TEMPLATE)
        return template.render(**hopper.template_context(spec))
    if family == "hopper_bwd":
        from . import hopper_bwd

        template = _environment().get_template(hopper_bwd.TEMPLATE)
        return template.render(**hopper_bwd.template_context(spec))
    if family != "portable":
        raise ValueError(f"unknown kernel family {family!r}")
    template = _environment().get_template(TEMPLATE_FOR_DIRECTION[spec.direction])
    return template.render(**template_context(spec))


def kernel_path(spec: KernelSpec, source: str, family: str = "portable"):
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return kernel_dir() / f"{family_uri(spec, family)}_{digest}.py"


@functools.cache
def _load(spec: KernelSpec, interpret: bool, family: str = "portable") -> ModuleType:
    source = render(spec, family)
    path = kernel_path(spec, source, family)
    if not path.exists() or path.read_text() != source:
        write_atomic(path, source)
    module_name = f"flashgen_generated.{path.stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)
    return module


def load(spec: KernelSpec) -> ModuleType:
    """The imported kernel module for `spec` (rendered and written on first use)."""
    return _load(spec, interpret_mode())


def load_family(spec: KernelSpec, family: str) -> ModuleType:
    """`load` for a named kernel family ("portable", "hopper", "decode", "onepass" or
    "hopper_bwd")."""
    return _load(spec, interpret_mode(), family)
