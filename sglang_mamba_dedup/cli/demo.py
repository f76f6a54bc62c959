"""``sglang-mamba-dedup demo``: build the real SGLang ``MambaPool`` with the plugin off and on and
print the bytes of every buffer (the GPU-less main job; on a CUDA machine it builds on the GPU)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from .. import env, sizing, state
from ..offline.sglang_pool import CudaToDeviceTorch
from ..offline.shapes import MODELS
from ._args import environ, positive_int, switched


def _storage_bytes(t) -> int:
    """Bytes of the storage behind ``t`` (a strided view counts its buffer once, not its logical size)."""
    if t is None:
        return 0
    if isinstance(t, (list, tuple)):
        return sum(_storage_bytes(x) for x in t)
    return t.untyped_storage().nbytes()


@contextlib.contextmanager
def _cpu_stand_in(device: str):
    """On a CPU-only machine: SGLang's hard-coded "cuda" -> CPU, and the plugin's CUDA gate overridden."""
    if device != "cpu":
        yield False
        return
    from sglang.srt.mem_cache import memory_pool

    saved_torch = memory_pool.torch
    memory_pool.torch = CudaToDeviceTorch(device)
    try:
        with environ(env.ALLOW_CPU, "1"):
            yield True
    finally:
        memory_pool.torch = saved_torch


def describe(pool) -> dict[str, int]:
    c = pool.mamba_cache
    return {
        "conv_state": _storage_bytes(c.conv),
        "ssm_state": _storage_bytes(c.temporal),
        "intermediate_ssm": _storage_bytes(getattr(c, "intermediate_ssm", None)),
        "intermediate_conv_window (physical)": _storage_bytes(getattr(c, "intermediate_conv_window", None)),
        "intermediate_conv_window (logical)": sizing.nbytes(getattr(c, "intermediate_conv_window", None)),
    }


EPILOG = """examples:
  sglang-mamba-dedup demo
  sglang-mamba-dedup demo --model qwen3-next-80b --slots 64
  SGLANG_MAMBA_DEDUP=strict sglang-mamba-dedup demo     # the "on" column runs in strict mode

exit codes: 0 table printed; 1 SGLang could not build a pool here; 2 usage error or bad SGLANG_MAMBA_DEDUP"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="sglang-mamba-dedup demo",
        description=__doc__.replace("``", ""),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="qwen3.5-0.8b", choices=list(MODELS))
    ap.add_argument("--slots", type=positive_int, default=4, help="mamba slots (requests) of the pool (>= 1)")
    ap.add_argument("--draft-tokens", type=positive_int, default=4, help="draft tokens per verify (>= 1)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = ap.parse_args(argv)

    import torch

    from .. import activation, gate, report, versions
    from ..offline.sglang_pool import build_pool, cache_params

    try:
        user_mode = activation.parse_mode(os.environ.get(env.SWITCH))
    except activation.SwitchError as exc:
        print(f"sglang-mamba-dedup demo: {exc}", file=sys.stderr)
        return 2
    on_value = "strict" if user_mode is activation.Mode.STRICT else "1"
    release = versions.installed_sglang_version()
    problem = versions.support_problem(release) or versions.import_problem()
    if problem:
        print(f"sglang-mamba-dedup demo: {problem}", file=sys.stderr)
        return 1
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    runs = [
        ("dense (topk=2: tree verify)", "0", 2),
        ("plugin off (topk=1)", "0", 1),
        (f"plugin on (topk=1{', strict' if on_value == 'strict' else ''})", on_value, 1),
    ]
    mode = versions.mode_for(release)
    print(
        f"SGLang {release} ({mode} mode): MambaPool of {args.model}, {args.slots} slots, "
        f"{args.draft_tokens} draft tokens, device {device}"
    )
    rows = []
    with _cpu_stand_in(device) as stand_in:
        if stand_in:
            print(
                "  (CPU machine: SGLang's hard-coded \"cuda\" scratch is redirected to the CPU and the plugin's "
                "CUDA-only gate is overridden for this demonstration; a real CPU server keeps SGLang's stock path)"
            )
        for label, switch, topk in runs:
            report.clear_events()
            with switched(switch):
                try:
                    pool = build_pool(
                        cache_params(MODELS[args.model]),
                        size=args.slots,
                        draft_tokens=args.draft_tokens,
                        topk=topk,
                        device=device,
                    )
                except Exception as exc:
                    print(f"  {label}: SGLang could not build the pool here: {type(exc).__name__}: {exc}")
                    continue
                sizes = describe(pool)
                layout = report.events().get("dedup_layout", {}).get("state", "-")
                ps = state.pool_state_of(pool)
                commit = "plugin's fused kernel" if ps is not None and ps.commit_ok else "SGLang's"
                rows.append((label, sizes, layout, commit))
                del pool
    if not rows:
        return 1
    keys = list(rows[0][1])
    width = max(len(k) for k in keys) + 2
    print("".ljust(width) + "".join(f"{r[0]:>34}" for r in rows))
    for k in keys:
        print(k.ljust(width) + "".join(f"{r[1][k] / sizing.MIB:>30.2f} MiB" for r in rows))
    print("conv-window layout".ljust(width) + "".join(f"{r[2]:>34}" for r in rows))
    print("post-verify commit".ljust(width) + "".join(f"{r[3]:>34}" for r in rows))

    # What the plugin changes in SGLang's mamba-cache sizing (upstream reserves the dense size, FACTS §1).
    params = cache_params(MODELS[args.model])
    d = args.draft_tokens
    d_eff = gate.effective_draft_tokens(params, d)
    per_req = sizing.conv_bytes(params) + sizing.ssm_bytes(params)  # one request's state, what SGLang multiplies by D
    print(
        f"mamba-cache estimator: SGLang reserves {per_req * d / sizing.MIB:.2f} MiB of verify scratch per request "
        f"(D={d} dense windows); with the plugin {per_req * d_eff / sizing.MIB:.2f} MiB (D counted as {d_eff:.3f}), "
        f"so the same memory holds {d / d_eff:.3f}x as many requests' scratch"
    )
    return 0
