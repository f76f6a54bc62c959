"""The plan as text: the settings it sized, SGLang's estimate stock and with the plugin side by side, and what
would lift a cap (``sglang-mamba-dedup plan`` without ``--json``)."""

from __future__ import annotations

from typing import Any

from ..sizing import GIB

#: Why a plan names no fraction: the budget was given, not derived from one.
NOT_SEARCHED = "--mem-fraction-static not searched: --rest-gb fixes the budget"


def _resolved_line(doc: dict[str, Any]) -> str | None:
    launch = doc.get("launch")
    if not launch:
        return None
    r = launch["resolved"]
    track = "no extra buffer"
    if r["mamba_extra_buffer"]:
        track = (
            "extra_buffer, lazy (1 track slot)" if r.get("mamba_extra_buffer_lazy") else "extra_buffer (track slots)"
        )
    if r.get("skip_decode_lock") and r["radix_cache"]:
        track += ", decode lock skipped (SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1: one slot fewer per request)"
    device = r.get("device") or "cuda"
    where = "a CUDA GPU" if str(device).startswith("cuda") else f"--device {device}"
    return (
        f"resolved as launch_server does on {where}: radix cache {'on' if r['radix_cache'] else 'off'}, "
        f"overlap scheduling {'on' if r['overlap_schedule'] else 'off'}, mamba strategy {r['mamba_strategy']} -> "
        f"{track}, ReplaySSM {'on' if r['replayssm'] else 'off'}, {r['speculative_algorithm']} "
        f"topk {r['speculative_eagle_topk']} D={r['speculative_num_draft_tokens']}, "
        f"mamba memory ratio {r['mamba_full_memory_ratio']}"
    )


def _lower_requests(est: dict[str, Any]) -> str:
    """What to lower when the pool leaves nothing for the KV cache: a PD decode server's pre-allocated requests
    (m-P5: they, not the running ones, can be what the scratch is for), else the running requests."""
    pre = (est.get("plugin") or {}).get("pd_decode_pre_alloc")
    if pre:
        return (
            f"lower --disaggregation-decode-extra-slots (the pool keeps scratch for {pre} pre-allocated requests) "
            "or --max-running-requests"
        )
    return "lower --max-running-requests"


def _header(doc: dict[str, Any]) -> list[str]:
    """The model and the settings sized, the resolution, the weights, the budget, the notes and the KV pricing."""
    st = doc["settings"]
    lines = [
        f"SGLang {doc['sglang']}: {doc['model']} ({doc['mixer']}), TP {st['tp_size']}, "
        f"D={st['speculative_num_draft_tokens']} draft tokens, max running {st['max_running_requests']}"
        + (
            f" ({max(1, st['max_running_requests'] // st['attn_dp_size'])} per attention-DP rank: the numbers below "
            "are one rank's)"
            if st.get("attn_dp_size", 1) > 1
            else ""
        )
        + ", "
        f"radix {'on' if st['radix_cache'] else 'off'}, ReplaySSM {'on' if st['enable_linear_replayssm_spec'] else 'off'}, "
        f"SSM {st['ssm_dtype']}"
        + (f", PD {st['disaggregation_mode']}" if st["disaggregation_mode"] != "null" else "")
        + _zero_copy_words(st),
    ]
    resolved = _resolved_line(doc)
    if resolved:
        lines.append(resolved)
    if st.get("zero_copy_problem"):
        lines.append(f"zero-copy: {st['zero_copy_problem']}")
    lines.append(f"weights {st['weights_gb']:.3f} GB: {doc['weights']['how']}")
    lines.append(
        f"budget {doc['budget_gb']:.3f} GB ({doc['budget_how']}: {st['gpu_memory_gb']:g} GB free x "
        f"{st['mem_fraction_static']} - {st['weights_gb']:.3f} GB)"
    )
    if doc["note"]:
        lines.append(f"note: {doc['note']}")
    kv = doc.get("kv")
    if kv:
        cell = f"{kv['cell_bytes']} B per token" if kv["cell_bytes"] else "bytes per token not priced"
        lines.append(
            f"KV cache {kv['dtype']} ({kv['element_bytes']} B an element), {cell}: {kv['how']}; page {kv['page_size']}"
            + (f", at most {kv['max_total_tokens']} tokens (--max-total-tokens)" if kv["max_total_tokens"] else "")
        )
        if kv["not_priced"]:
            lines.append("not priced (SGLang reads it when it sizes the KV pool): " + "; ".join(kv["not_priced"]))
    return lines


def _zero_copy_words(st: dict[str, Any]) -> str:
    """m5, m8: the zero-copy commit as asked, and whether a server of these settings would refuse it."""
    if not st.get("zero_copy"):
        return ""
    if st.get("zero_copy_refused"):
        return ", zero-copy commit asked for (a server refuses it here; its accepted table is still reserved)"
    if st.get("zero_copy_radix"):
        return f", zero-copy commit with the radix cache on ({st['zero_copy_radix']}; its accepted table reserved)"
    return ", zero-copy commit (its accepted table reserved)"


def _table(doc: dict[str, Any]) -> list[str]:
    """SGLang's estimate, stock and with the plugin side by side."""
    s, p = doc["stock"], doc["plugin"]
    numbers = [format(est[k], f) for est in (s, p) for k, f in (("mamba_slots", "d"), ("kv_cache_gb", ".3f"))]
    width = max(14, 2 + max(map(len, numbers)))  # m-P8: huge numbers keep a space between the columns
    lines = ["", f"{'':34}{'stock':>{width}}{'plugin':>{width}}"]

    def row(label: str, a, b, fmt: str) -> None:
        lines.append(f"{label:34}{format(a, fmt):>{width}}{format(b, fmt):>{width}}")

    row("mamba slots", s["mamba_slots"], p["mamba_slots"], "d")
    row("slots per running request", s["slots_per_request"], p["slots_per_request"], "d")
    row("running requests that fit", s["running_requests"], p["running_requests"], "d")
    row("mamba pool reserved (GB)", s["reserved_gb"], p["reserved_gb"], ".3f")
    row("left for the KV cache (GB)", s["kv_cache_gb"], p["kv_cache_gb"], ".3f")
    if s.get("kv_tokens") is not None or p.get("kv_tokens") is not None:
        lines.append(
            f"{'KV cache tokens':34}"
            + "".join(format("-" if t is None else t, f">{width}") for t in (s["kv_tokens"], p["kv_tokens"]))
        )
    lines.append("per request (MiB):")
    for key in s["per_request_mib"]:
        row(f"  {key.replace('_', ' ')}", s["per_request_mib"][key], p["per_request_mib"][key], ".2f")
    return lines


def _not_starting(doc: dict[str, Any], label: str, est: dict[str, Any]) -> str:
    """Why a column's server would not start, in SGLang's words, and what starts it."""
    st = doc["settings"]
    need, start = est.get("fraction_needed"), est.get("fraction_starts")
    fixed = st.get("max_mamba_cache_size")
    if start and need and start >= need:
        how = f"--mem-fraction-static {need} starts it with all {st['max_running_requests']} requests"
    elif start:  # B5: a fraction that starts it, though the pool may not admit every request there
        how = f"--mem-fraction-static {start} starts it" + (
            f" ({need} admits all {st['max_running_requests']} requests)"
            if need
            else f" (the mamba pool's {fixed} slots fixed by --max-mamba-cache-size cap the running requests)"
            if fixed
            else ""
        )
    elif est.get("fraction_searched", True):
        how = "no --mem-fraction-static below 1 starts it"
    else:
        how = f"a larger budget ({NOT_SEARCHED})"
    # a fixed --max-mamba-cache-size: fewer running requests do not shrink the pool
    alt = "or lower --max-mamba-cache-size" if fixed else f"or {_lower_requests(est)}"
    refusal = est.get("refusal") or "Loaded weights leave no GPU memory for the KV cache"
    if refusal.startswith("Not enough memory"):  # BD1: a KV share, but not one whole page of tokens
        why = f"the KV cache's {est['kv_cache_gb'] * 1024:.2f} MB hold no whole page of {doc['kv']['page_size']} tokens"
    else:
        why = f"the mamba pool takes {est['reserved_gb']:.3f} GB of {doc['budget_gb']:.3f}"
    return f"{label}: the server would not start (SGLang: {refusal!r}): {why}; {how}, {alt}"


def _mamba_cap(doc: dict[str, Any], label: str, est: dict[str, Any]) -> str:
    """A column whose mamba pool caps the running requests, and what would lift the cap."""
    st = doc["settings"]
    need, fixed, ratio = est.get("fraction_needed"), st.get("max_mamba_cache_size"), est["slots_per_request"]
    if need:
        lift = f"--mem-fraction-static {need} admits all {st['max_running_requests']}"
    elif fixed:
        lift = (
            f"--max-mamba-cache-size {st['max_running_requests'] * ratio} admits all {st['max_running_requests']} "
            f"({ratio} slots per request; the flag fixes the slots at {fixed}, whatever the fraction)"
        )
    elif not est.get("fraction_searched", True):
        lift = f"a larger budget may admit them all ({NOT_SEARCHED})"
    elif est.get("capped_by_kv_cache"):
        lift = "the KV cache caps them too (below)"
    elif st["disaggregation_mode"] == "prefill":
        lift = (
            "no --mem-fraction-static below 1 admits them all; lower --max-running-requests (a PD prefill pool "
            "holds no speculative scratch: fewer draft tokens would not help)"
        )
    else:
        lift = "no --mem-fraction-static below 1 admits them all; lower --speculative-num-draft-tokens" + (
            " or add --enable-linear-replayssm-spec"
            if doc["mixer"] == "gdn" and not st["enable_linear_replayssm_spec"]
            else ""
        )
    return (
        f"{label}: the mamba pool caps running requests at {est['running_requests']} of "
        f"{st['max_running_requests']}; {lift}"
    )


def _kv_cap(doc: dict[str, Any], label: str, est: dict[str, Any]) -> str:
    """m7: SGLang admits at most half the KV cache's tokens as running requests (before the mamba pool's cap)."""
    st, kv = doc["settings"], doc.get("kv") or {}
    lift = (
        "raise --max-total-tokens"
        if kv.get("max_total_tokens") is not None and kv["max_total_tokens"] <= est["kv_tokens"]
        else f"--mem-fraction-static {est['fraction_needed']} admits all"
        if est.get("fraction_needed")
        else "a larger KV cache admits more"
    )
    return (
        f"{label}: the KV cache's {est['kv_tokens']} tokens cap running requests at {est['kv_tokens'] // 2} of "
        f"{st['max_running_requests']} (SGLang admits at most half its tokens); {lift}"
    )


def _verdicts(doc: dict[str, Any]) -> list[str]:
    """Per column: would the server start, what caps its running requests, and the fraction that admits all."""
    lines = []
    columns = (("stock", doc["stock"]), ("plugin", doc["plugin"]))
    for label, est in columns:
        if est.get("starts") is False:
            lines.append(_not_starting(doc, label, est))
            continue
        if est["capped_by_mamba_pool"]:
            lines.append(_mamba_cap(doc, label, est))
        if est.get("capped_by_kv_cache"):
            lines.append(_kv_cap(doc, label, est))
    st = doc["settings"]
    for label, est in columns:
        capped = est["capped_by_mamba_pool"] or est.get("capped_by_kv_cache")
        if est.get("starts") is not False and not capped and est.get("fraction_needed"):
            lines.append(
                f"{label}: all {st['max_running_requests']} requests fit; the smallest --mem-fraction-static that "
                f"admits them is {est['fraction_needed']}"
            )
    return lines


def _precision(doc: dict[str, Any]) -> list[str]:
    """How far a plan from the flags alone can be from the server, and the plugin's estimator line."""
    s, p = doc["stock"], doc["plugin"]
    lines = []
    if doc.get("slots_per_100mb"):
        lines.append(
            f"precision: 100 MB of budget is {doc['slots_per_100mb']} mamba slots; SGLang measures the start-up's "
            "footprint on the GPU (weights, model buffers, CUDA modules, allocator rounding)"
        )
    margins = [(label, est["load_margin"]) for label, est in (("stock", s), ("plugin", p)) if est.get("load_margin")]
    if margins:
        gb = margins[0][1]["gb"]
        lines.append(
            "from the flags alone: the plan counts the start-up beyond weights and pools as measured on an H200 "
            f"(CUDA modules, allocator rounding: 0.07-0.13 GB); another GPU stack can take up to about {gb:g} GB "
            "more, which this plan cannot see; with that much less: "
            + "; ".join(
                f"{label} {m['mamba_slots']} mamba slots, {m['running_requests']} running requests"
                if m.get("starts", True)
                else f"{label} would not start (no memory left for the KV cache)"
                for label, m in margins
            )
            + "; with the free memory read half a hundredth higher: "
            + "; ".join(
                f"{label} {m['high']['mamba_slots']} mamba slots, {m['high']['running_requests']} running requests"
                for label, m in margins
                if m.get("high")
            )
            + ". Expect the server in that range; the budget it logs ('mamba cache estimator budget', the plugin's "
            "line) given as --rest-gb gives its numbers exactly"
        )
    pre = (p.get("plugin") or {}).get("pd_decode_pre_alloc")
    if pre is not None:
        lines.append(
            f"PD decode: the pool keeps scratch for {pre} pre-allocated requests beyond the running ones; SGLang's "
            f"estimate leaves it unreserved, the plugin reserves it ({p['plugin']['top_up_bytes'] / GIB:.3f} GB)"
        )
    if p.get("plugin"):
        lines.append(f"plugin estimator: {p['plugin']}")
    return lines


def render(doc: dict[str, Any]) -> str:
    return "\n".join(_header(doc) + _table(doc) + _verdicts(doc) + _precision(doc))
