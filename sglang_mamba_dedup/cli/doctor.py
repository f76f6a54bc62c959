"""``sglang-mamba-dedup doctor``: what is installed, what the plugin would do here, and why not.

Exit codes: 0 the plugin can engage on this install; 1 it cannot (SGLang missing or outside the supported
range, a target missing or changed, no CUDA device), or the negative-control fault variable
``SGLANG_MAMBA_DEDUP_FAULT`` is set; 2 ``SGLANG_MAMBA_DEDUP`` holds a bad value.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
from typing import Any

from packaging.specifiers import SpecifierSet

from .. import activation, env, installed, resolved, versions
from ..patches import ASKED_FOR, PATCHES, faults
from ..patches import commit as commit_patch
from ..patches import zero_copy as zero_copy_patch
from . import evidence


def _pkg(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _entry_point_found() -> bool:
    eps = importlib.metadata.entry_points(group="sglang.srt.plugins")
    return any(ep.value.startswith("sglang_mamba_dedup.") for ep in eps)


def collect() -> dict[str, Any]:
    info: dict[str, Any] = {
        "plugin": versions.plugin_version(),
        "python": platform.python_version(),
        "sglang": versions.installed_sglang_version(),
        "supported_range": str(versions.SUPPORTED),
        "torch": _pkg("torch"),
        "triton": _pkg("triton"),
        "wrapt": _pkg("wrapt"),
        "entry_point_registered": _entry_point_found(),
        "problems": [],
    }
    raw = os.environ.get(env.SWITCH)
    info["switch"] = {"raw": None if raw is None else env.shown(raw)}  # m19: never 100,000 characters back
    try:
        info["switch"]["mode"] = activation.parse_mode(raw).value
    except activation.SwitchError as exc:
        info["switch"]["mode"] = None
        info["switch"]["error"] = str(exc)
    info["zero_copy"] = _zero_copy(info["sglang"], info["switch"]["mode"])
    if info["zero_copy"]["not_served"] and not info["zero_copy"]["ignored"]:
        info["problems"].append(info["zero_copy"]["not_served"])  # asked for and not served: strict stops there

    fault = _fault()
    if fault:
        info["fault"] = fault
        info["problems"].append(fault["problem"])

    cuda: dict[str, Any] = {"available": False}
    try:
        import torch

        if torch.cuda.is_available():
            cuda = {
                "available": True,
                "device": torch.cuda.get_device_name(0),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                "cuda": torch.version.cuda,
            }
    except Exception as exc:  # torch missing or broken
        cuda = {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    info["cuda"] = cuda

    problem = versions.support_problem(info["sglang"])
    info["release_mode"] = versions.mode_for(info["sglang"])
    tested = evidence.tested(info["sglang"])
    if tested is not None:
        info["tested"] = tested
    if not problem:
        problem = versions.import_problem()
        if problem:  # every target would fail with a follow-on of this one: none is checked
            info["upstream_dedup"] = None
            info["features"] = {
                feature: {"would_apply": False, "reason": "not checked: SGLang does not import", "targets": {}}
                for feature in installed.PATCHER.features
            }
    if problem:
        info["problems"].append(problem)
    else:
        from sglang.srt.mem_cache import memory_pool

        info["upstream_dedup"] = hasattr(memory_pool, "conv_window_dedup_enabled")
        with contextlib.suppress(Exception):
            info["release_description"] = describe_release(info["sglang"])
        features: dict[str, Any] = {}
        for feature in installed.PATCHER.features:
            selected, reason, per_patch = installed.PATCHER.check(feature)
            features[feature] = {
                "would_apply": reason is None and bool(selected),
                "reason": reason if reason else (None if selected else "not needed on this release"),
                "targets": {p.name: {"target": p.target, "problem": per_patch.get(p.name)} for p in selected},
            }
            if feature in ASKED_FOR and not info["zero_copy"]["asked"]:
                why = info["zero_copy"]["not_served"] or f"{env.ZERO_COPY} unset or off"
                features[feature]["would_apply"] = False
                features[feature]["reason"] = f"not asked for ({why})" + (f": {reason}" if reason else "")
            elif reason:
                info["problems"].append(reason)
        info["features"] = features
        info["settings"] = _settings()
        kernel = commit_patch.kernel_problem()  # the import the decode path would make, tried here too
        info["commit_kernel"] = "imports" if kernel is None else f"does not import: {kernel}"
        if kernel:
            info["problems"].append(f"the plugin's commit kernel does not import: {kernel}")
    if not info["entry_point_registered"]:
        info["problems"].append("the sglang.srt.plugins entry point is not registered (is the package pip-installed?)")
    if not cuda["available"]:
        info["problems"].append(
            "no CUDA device: the dedup layout and our commit are CUDA-only, SGLang keeps its stock path here"
        )
    return info


def _settings() -> dict[str, Any]:
    """Where this release keeps each of SGLang's resolved settings the plugin reads (:mod:`..resolved`), and the ones
    it does not have (they read as absent: each reader says what that means)."""
    try:
        where = resolved.where()
    except Exception as exc:  # noqa: BLE001 - SGLang's ServerArgs would not import: the verdict says why elsewhere
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"where": where, "absent": [name for name, at in where.items() if at is None]}


def _zero_copy(version: str | None, mode: str | None) -> dict[str, Any]:
    """What becomes of the zero-copy variable here: asked for (on this release), why not served, and whether the
    activation ignores it (the plugin off, or a switch value it does not understand)."""
    out: dict[str, Any] = {"asked": zero_copy_patch.asked(version), "not_served": None, "ignored": None}
    out["radix"] = zero_copy_patch.radix_said() if out["asked"] else None
    with contextlib.suppress(Exception):  # an unsupported or missing release: the switch line says enough
        out["not_served"] = zero_copy_patch.not_served(version)
    said = zero_copy_patch.wanted() or zero_copy_patch.value_problem()
    if said and mode in (None, env.Mode.OFF.value):
        out["ignored"] = (
            f"{env.ZERO_COPY} is ignored: the plugin is off ({env.SWITCH} "
            f"{'unset/0/off' if mode else 'not understood'}); switch it on with {env.SWITCH}=1 (or {env.FLAG})"
        )
    return out


def _fault() -> dict[str, Any] | None:
    """The negative-control fault variable, when set: what it does and what the plugin makes of it."""
    name = faults.requested()
    if name is None:
        return None
    fault = faults.FAULTS.get(name)
    effect = fault.breaks if fault is not None else None
    what = f"{effect} (on: every accepted state goes wrong)" if effect else "not a known fault (on: ERROR, ignored)"
    name = env.shown(name)  # a pasted 100,000-character value is not echoed three times
    return {
        "variable": env.FAULT,
        "value": name,
        "known": effect is not None,
        "problem": f"{env.FAULT}={name} is set: the NEGATIVE CONTROL, never for serving: {what}; "
        f"strict mode refuses to start with it. Unset it",
    }


def fault_rows() -> list[dict[str, Any]]:
    """The negative controls (:data:`sglang_mamba_dedup.patches.faults.FAULTS`), one row each (``doctor --faults``)."""
    return [
        {
            "name": f.name,
            "breaks": f.breaks,
            "routes": list(f.routes),
            "releases": _release_span(f.releases),
            "target": f.patch.target,
        }
        for f in faults.FAULTS.values()
    ]


def render_faults(rows: list[dict[str, Any]]) -> str:
    out = [f"negative controls ({env.FAULT}=NAME with the plugin on; never in a real run):"]
    for r in rows:
        out.append(f"  {r['name']:<16} {r['breaks']}")
        out.append(f"  {'':<16} routes {', '.join(r['routes'])}; SGLang {r['releases']}; breaks {r['target']}")
    return "\n".join(out)


def render(info: dict[str, Any]) -> str:
    out: list[str] = []
    say = out.append
    say(f"sglang-mamba-dedup {info['plugin']} (python {info['python']})")
    say(
        f"  sglang      {info['sglang'] or 'not installed'}  (supported {info['supported_range']}; mode: {info['release_mode']})"
    )
    if info.get("tested"):
        t = info["tested"]
        say(f"  tested      CPU CI: {t['cpu_ci']}; H200: {t['h200']}" + (f"; {t['notes']}" if t["notes"] else ""))
    if "commit_kernel" in info:
        say(f"  commit kernel (Triton) {info['commit_kernel']}")
    settings = info.get("settings") or {}
    if "where" in settings:
        bags = sum(1 for at in settings["where"].values() if at and at.endswith(" bag"))
        say(
            f"  settings    {len(settings['where'])} of SGLang's resolved settings read ({bags} from its runtime-context "
            f"bags); absent on this release: {', '.join(settings['absent']) or 'none'}"
        )
    elif settings:
        say(f"  settings    cannot be located: {settings['error']}")
    if "upstream_dedup" in info:
        say(f"  upstream conv-window dedup in this release: {'yes' if info['upstream_dedup'] else 'no'}")
    if info.get("release_description"):
        say(f"  {info['release_description']}")
    say(f"  torch {info['torch']}, triton {info['triton']}, wrapt {info['wrapt']}")
    cuda = info["cuda"]
    say(
        "  CUDA        "
        + (f"{cuda['device']} (sm {cuda['capability']}, CUDA {cuda['cuda']})" if cuda["available"] else "none")
    )
    say(f"  entry point sglang.srt.plugins: {'registered' if info['entry_point_registered'] else 'MISSING'}")
    sw = info["switch"]
    if sw.get("error"):
        say(f"  switch      {sw['error']}")
    else:
        say(f"  switch      {env.SWITCH}={sw['raw'] if sw['raw'] is not None else '<unset>'} -> {sw['mode']}")
    zc = info.get("zero_copy") or {}
    if zc.get("ignored"):
        say(f"  zero-copy   {zc['ignored']}")
    elif zc.get("asked") or zc.get("not_served"):
        say(f"  zero-copy   {'asked for' if zc.get('asked') else zc['not_served']}")
        if zc.get("radix"):
            say(f"  zero-copy   {zc['radix']}")
    if info.get("fault"):
        say(f"  FAULT       {info['fault']['problem']}")
    for feature, f in (info.get("features") or {}).items():
        state = "would apply" if f["would_apply"] else (f["reason"] or "skipped")
        say(f"  feature {feature:<14} {state}")
        for t in f["targets"].values():
            say(f"      {t['target']}" + (f"  <- {t['problem']}" if t["problem"] else ""))
    if info["problems"]:
        say("verdict: the plugin cannot engage on this install:")
        for p in info["problems"]:
            say(f"  - {p}")
    else:
        say("verdict: OK, the plugin can engage here")
    return "\n".join(out)


def exit_code(info: dict[str, Any]) -> int:
    if info["switch"].get("error"):
        return 2
    return 1 if info["problems"] else 0


def describe_release(version: str | None) -> str:
    """For ``doctor``: which mode the plugin uses on an SGLang release and what it patches there."""
    problem = versions.support_problem(version)
    if problem:
        return f"SGLang {version}: not supported ({problem}); nothing is patched."
    mode = versions.mode_for(version)
    targets = [
        f"{p.target} [{p.feature}" + (f", only with {env.ZERO_COPY}=1]" if p.feature in ASKED_FOR else "]")
        for p in PATCHES
        if p.feature != "launch_flag" and p.applies_to(version)
    ]
    if mode == "backport":
        what = (
            "back-port mode: SGLang allocates a dense [L, S+1, D, dim, K-1] conv-window scratch; the plugin "
            "builds MambaPool without it and allocates the deduplicated [L, S+1, dim, D+K-2] buffer + view "
            "instead (gate permitting; topk comes from ModelRunner._init_pools), commits accepted states with "
            "its fused kernel (SGLang's scatter cannot read the view), and sizes the mamba cache for the "
            "dedup footprint."
        )
    else:
        what = (
            "take-over mode: SGLang already allocates the deduplicated window; the plugin checks that the view "
            "aliases the physical buffer and records it, commits accepted states with its fused kernel (SGLang's "
            "own code keeps the KDA, ReplaySSM and pipeline-stable-row branches), and sizes the mamba cache for "
            "the dedup footprint (upstream still reserves the dense size)."
        )
    return f"SGLang {version}: {what} Patched: " + "; ".join(targets) + "."


def _release_span(spec: str) -> str:
    inside = [r for r in versions.RELEASES if versions.in_range(r, SpecifierSet(spec))]
    return f"{inside[0]} … {inside[-1]}" if len(inside) > 1 else (inside[0] if inside else spec)


def patch_table_markdown() -> str:
    """The README's patch table, generated from :data:`sglang_mamba_dedup.patches.PATCHES` (a test keeps the
    README equal to it: ``sglang-mamba-dedup doctor --patch-table``)."""
    lines = ["| feature | target | releases | what our wrapper does |", "|---|---|---|---|"]
    for p in PATCHES:
        if p.feature not in ASKED_FOR:
            lines.append(f"| `{p.feature}` | `{p.target}` | {_release_span(p.releases)} | {p.doc} |")
    for feature in ASKED_FOR:  # one row each: their targets are in docs/zero-copy.md section 7
        mine = [p for p in PATCHES if p.feature == feature]
        targets = ", ".join(sorted({p.target.split(".")[-2] + "." + p.target.split(".")[-1] for p in mine}))
        lines.append(
            f"| `{feature}` | {targets} | {_release_span(mine[0].releases)} | only with {env.ZERO_COPY}=1: "
            "[the zero-copy commit](docs/zero-copy.md) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="sglang-mamba-dedup doctor",
        description=__doc__.replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument(
        "--release",
        metavar="VERSION",
        help="only say which mode the plugin would use on SGLang VERSION and what it would patch "
        "(nothing is imported; exit 1 when VERSION is outside the supported range)",
    )
    ap.add_argument("--patch-table", action="store_true", help="print the patch table as Markdown (the README's)")
    ap.add_argument(
        "--faults", action="store_true", help=f"list the negative controls ({env.FAULT}): what each breaks, where"
    )
    args = ap.parse_args(argv)
    if args.patch_table:
        print(patch_table_markdown())
        return 0
    if args.faults:
        rows = fault_rows()
        print(json.dumps(rows, indent=1) if args.json else render_faults(rows))
        return 0
    if args.release is not None and versions.parse(args.release) is None:
        ap.error(f"--release {args.release!r} is not a version (e.g. --release 0.5.13.post1)")
    if args.release:
        problem = versions.support_problem(args.release)
        if args.json:
            doc = {
                "release": args.release,
                "supported": problem is None,
                "problem": problem,
                "mode": versions.mode_for(args.release),
                "patches": [
                    {"name": p.name, "feature": p.feature, "target": p.target, "opt_in": p.feature in ASKED_FOR}
                    for p in PATCHES
                    if problem is None and p.feature != "launch_flag" and p.applies_to(args.release)
                ],
            }
            print(json.dumps(doc, indent=1))
        else:
            print(describe_release(args.release))
        return 0 if problem is None else 1
    info = collect()
    print(json.dumps(info, indent=1, default=str) if args.json else render(info))
    return exit_code(info)
