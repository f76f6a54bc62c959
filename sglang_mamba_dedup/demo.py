"""``sglang-mamba-dedup demo``: build the real SGLang ``MambaPool`` with the plugin off and on and
print the bytes of every buffer (the GPU-less main job; on a CUDA machine it builds on the GPU)."""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
from typing import Any, Dict, List, Optional

MiB = 1 << 20


def _nbytes_physical(t) -> int:
    """Bytes of the storage behind ``t`` (a strided view counts its buffer once, not its logical size)."""
    if t is None:
        return 0
    if isinstance(t, (list, tuple)):
        return sum(_nbytes_physical(x) for x in t)
    return t.untyped_storage().nbytes()


def _nbytes_logical(t) -> int:
    if t is None:
        return 0
    if isinstance(t, (list, tuple)):
        return sum(_nbytes_logical(x) for x in t)
    return t.numel() * t.element_size()


@contextlib.contextmanager
def _switch(value: Optional[str]):
    from . import activation

    old = os.environ.get(activation.ENV)
    if value is None:
        os.environ.pop(activation.ENV, None)
    else:
        os.environ[activation.ENV] = value
    activation.register()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(activation.ENV, None)
        else:
            os.environ[activation.ENV] = old
        activation.register()


def build_pool(model: str, slots: int, draft_tokens: int, topk: int, device: str):
    from sglang.srt.mem_cache.memory_pool import MambaPool

    from .shapes import MODELS, cache_params

    params = cache_params(MODELS[model])
    kwargs: Dict[str, Any] = dict(
        size=slots,
        spec_state_size=slots,
        cache_params=params,
        mamba_layer_ids=list(params.layers),
        device=device,
        speculative_num_draft_tokens=draft_tokens,
        speculative_eagle_topk=topk,
    )
    accepted = inspect.signature(MambaPool.__init__).parameters
    return MambaPool(**{k: v for k, v in kwargs.items() if k in accepted})


def describe(pool) -> Dict[str, int]:
    c = pool.mamba_cache
    return {
        "conv_state": _nbytes_physical(c.conv),
        "ssm_state": _nbytes_physical(c.temporal),
        "intermediate_ssm": _nbytes_physical(getattr(c, "intermediate_ssm", None)),
        "intermediate_conv_window (physical)": _nbytes_physical(getattr(c, "intermediate_conv_window", None)),
        "intermediate_conv_window (logical)": _nbytes_logical(getattr(c, "intermediate_conv_window", None)),
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="sglang-mamba-dedup demo", description=__doc__)
    ap.add_argument("--model", default="qwen3.5-0.8b", choices=["qwen3.5-0.8b", "qwen3-next-80b"])
    ap.add_argument("--slots", type=int, default=4, help="mamba slots (requests) of the pool")
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = ap.parse_args(argv)

    import torch

    from . import report

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    runs = [
        ("dense (topk=2: tree verify)", None, 2),
        ("plugin off (topk=1)", "0", 1),
        ("plugin on (topk=1)", "1", 1),
    ]
    print(f"MambaPool of {args.model}, {args.slots} slots, {args.draft_tokens} draft tokens, device {device}")
    rows = []
    for label, switch, topk in runs:
        report.reset()
        with _switch(switch):
            try:
                pool = build_pool(args.model, args.slots, args.draft_tokens, topk, device)
            except Exception as exc:
                print(f"  {label}: SGLang could not build the pool here: {type(exc).__name__}: {exc}")
                continue
            sizes = describe(pool)
            layout = report.events().get("dedup_layout", {}).get("state", "-")
            rows.append((label, sizes, layout))
            del pool
    if not rows:
        return 1
    keys = list(rows[0][1])
    width = max(len(k) for k in keys) + 2
    print("".ljust(width) + "".join(f"{label:>30}" for label, _, _ in rows))
    for k in keys:
        print(k.ljust(width) + "".join(f"{s[k] / MiB:>26.2f} MiB" for _, s, _ in rows))
    print("plugin layout event".ljust(width) + "".join(f"{layout:>30}" for _, _, layout in rows))
    return 0
