"""SGLang's resolved launch settings, read one way: for zero-copy's gate, the planner and ``doctor``.

Each row of :data:`SETTINGS` says where one setting lives once SGLang has resolved the launch:

* the runtime-context bag that holds it (0.5.17+ publish what resolution decided there, by namespace:
  ``exec.mamba`` is ``runtime_context.get_exec().mamba``; ``parallel`` is ``get_parallel()``, which answers the
  parallel namespace's leaves itself). 0.5.23's ``ServerArgs`` keeps the operator's values
  (``mamba_radix_cache_strategy='auto'``), and only the bag has the decision (``extra_buffer``);
* else the ``ServerArgs`` attribute, under 0.5.23's name or an older release's (``mamba_scheduler_strategy``):
  releases before the bags resolve ``ServerArgs`` in place. Where a row says ``method``, an older release answers
  with a ``ServerArgs`` method of that name (``enable_mamba_extra_buffer()``): SGLang's own derivation, called.

A setting the installed release does not have reads as :data:`ABSENT`, never as a default made up here: each caller
says what absence means to it (:func:`value_or`), and :func:`where` says once, for ``doctor``, which settings this
release lacks. No SGLang import at module load; the serving core's module (the planner imports it, never back).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final


class _Absent:
    """The value of a setting the installed SGLang release does not have (one object, :data:`ABSENT`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:  # absence is not "off": the caller must say what it means
        raise TypeError("a setting this SGLang release does not have has no truth value (test `is ABSENT` first)")

    def __reduce__(self) -> str:
        return "ABSENT"


#: A setting the installed release does not have (neither a bag's leaf nor a ``ServerArgs`` attribute).
ABSENT: Final = _Absent()

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Setting:
    """Where one resolved setting lives. ``name``: SGLang 0.5.23's field name (the key of :func:`read`'s answer);
    ``bag``: the runtime-context namespace that holds it; ``older``: the ``ServerArgs`` field's earlier names, newest
    first; ``method``: older releases answer with a ``ServerArgs`` method of this name."""

    name: str
    bag: str
    older: tuple[str, ...] = ()
    method: bool = False

    @property
    def fields(self) -> tuple[str, ...]:
        """The ``ServerArgs`` attributes that may hold it, 0.5.23's name first."""
        return (self.name, *self.older)


def _rows(bag: str, *names: str) -> tuple[Setting, ...]:
    return tuple(Setting(n, bag) for n in names)


#: Every setting the plugin reads, one row each (the zero-copy gate's, the planner's, the radix gate's).
SETTINGS: tuple[Setting, ...] = (
    *_rows(
        "spec",
        "speculative_algorithm",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "speculative_num_steps",
        "speculative_adaptive",
        "enable_multi_layer_eagle",
    ),
    # the radix cache, its backend, and the caches that sit on its tree (HiCache and its storage, the cache linker,
    # LMCache, FlexKV)
    *_rows(
        "memory",
        "disable_radix_cache",
        "radix_cache_backend",
        "enable_hierarchical_cache",
        "hicache_storage_backend",
        "enable_unified_cache_external_linker",
        "enable_lmcache",
        "enable_flexkv",
    ),
    # the mamba radix-cache strategy (0.5.14 renamed --mamba-scheduler-strategy), its extra buffer and lazy variant
    Setting("mamba_radix_cache_strategy", "exec.mamba", older=("mamba_scheduler_strategy",)),
    Setting("enable_mamba_extra_buffer", "exec.mamba", method=True),
    Setting("enable_mamba_extra_buffer_lazy", "exec.mamba", method=True),
    Setting("mamba_track_interval", "exec.mamba"),
    Setting("enable_linear_replayssm", "exec.mamba"),
    Setting("enable_linear_replayssm_spec", "exec.mamba", older=("enable_gdn_replayssm_spec",)),
    Setting("enable_int8_mamba_checkpoint", "exec.mamba"),
    Setting("enable_two_batch_overlap", "exec.overlap"),
    *_rows(
        "schedule",
        "disable_overlap_schedule",
        "enable_mixed_chunk",
        "max_running_requests",
        "max_mamba_cache_size",
        "max_total_tokens",
        "mem_fraction_static",
        "mamba_full_memory_ratio",
        "page_size",
    ),
    Setting("disaggregation_mode", "disagg"),
    *_rows("parallel", "tp_size", "pp_size", "enable_dp_attention", "dcp_size"),
    Setting("kv_cache_dtype", "model"),
    Setting("device", "device"),
)
ROWS: Final = {s.name: s for s in SETTINGS}


def _runtime_context() -> Any:
    try:
        from sglang.srt import runtime_context
    except ImportError:  # before 0.5.14
        return None
    return runtime_context


def _published(rc: Any) -> Any:
    """The ``ServerArgs`` published to the runtime context, or None."""
    getter = getattr(rc, "get_server_args", None)
    try:
        return getter() if getter is not None else None
    except Exception:  # noqa: BLE001 - not published in this process ("Global server args is not set yet!")
        return None


def _bag(rc: Any, path: str) -> Any:
    """The runtime-context bag at ``path`` (``exec.mamba``), or None where this release or process has none."""
    head, *rest = path.split(".")
    getter = getattr(rc, "get_parallel" if head == "parallel" else f"get_{head}", None)
    if getter is None:
        return None
    try:
        bag = getter()
        for part in rest:
            bag = getattr(bag, part)
    except Exception:  # noqa: BLE001 - not published ("... not published"), or a sub-bag this release lacks
        return None
    return bag


def _has_bags(rc: Any) -> bool:
    """This release publishes resolved settings in bags (0.5.17+)."""
    return rc is not None and getattr(rc, "get_exec", None) is not None


def _from_bag(bag: Any, name: str) -> Any:
    try:
        return getattr(bag, name, _MISSING)
    except Exception:  # noqa: BLE001 - get_parallel() on a leaf it asks a process group for (none outside a server)
        return _MISSING


def _from_server_args(server_args: Any, row: Setting) -> Any:
    for field in row.fields:
        value = getattr(server_args, field, _MISSING)
        if value is _MISSING:
            continue
        if callable(value):  # a method: SGLang's own answer where the row says so, never read as a value
            if not row.method:
                continue
            value = value()
        return value
    return _MISSING


def read(server_args: Any = None, names: Iterable[str] | None = None) -> dict[str, Any]:
    """``{name: value}`` for ``names`` (every row of :data:`SETTINGS` when None), :data:`ABSENT` where the release
    does not have the setting. ``server_args``: the launch's (the planner's), published to the runtime context first
    where the release has one; None: the one published in this process (a server's). An unknown name is a
    ValueError; bags published for another launch than ``server_args`` are a LookupError."""
    rows = SETTINGS if names is None else tuple(_row(n) for n in names)
    rc = _runtime_context()
    published = _published(rc) if rc is not None else None
    if server_args is not None and _has_bags(rc) and published is not server_args:
        raise LookupError("SGLang's runtime context holds another launch's settings (publish this one first)")
    sa = server_args if server_args is not None else published
    bags: dict[str, Any] = {}
    found: dict[str, Any] = {}
    for row in rows:
        value = _MISSING
        if rc is not None:
            if row.bag not in bags:
                bags[row.bag] = _bag(rc, row.bag)
            if bags[row.bag] is not None:
                value = _from_bag(bags[row.bag], row.name)
        if value is _MISSING and sa is not None:
            value = _from_server_args(sa, row)
        found[row.name] = ABSENT if value is _MISSING else value
    return found


def _row(name: str) -> Setting:
    row = ROWS.get(name)
    if row is None:
        raise ValueError(f"{name!r} is not a setting sglang_mamba_dedup.resolved reads (SETTINGS)")
    return row


def value_or(settings: Mapping[str, Any], name: str, default: Any) -> Any:
    """``settings[name]``, or ``default`` where the release does not have it: the caller says what absence means."""
    value = settings.get(name, ABSENT)
    return default if value is ABSENT else value


def where(names: Iterable[str] | None = None) -> dict[str, str | None]:
    """Where the installed release keeps each setting, from its own declarations (nothing is resolved): the bag
    (``"exec.mamba bag"``, SGLang's namespace declaration, 0.5.17+), ``"ServerArgs.<field>"``,
    ``"ServerArgs.<method>()"``, or None: absent (it reads as :data:`ABSENT`)."""
    from sglang.srt.server_args import ServerArgs

    declared = declared_namespaces(ServerArgs) if _has_bags(_runtime_context()) else {}
    fields = {f.name for f in dataclasses.fields(ServerArgs)} if dataclasses.is_dataclass(ServerArgs) else set()
    out: dict[str, str | None] = {}
    for row in SETTINGS if names is None else tuple(_row(n) for n in names):
        out[row.name] = None
        if row.name in declared:
            out[row.name] = f"{declared[row.name]} bag"
            continue
        for field in row.fields:
            attr = getattr(ServerArgs, field, _MISSING)
            if field in fields or (attr is not _MISSING and not callable(attr)):
                out[row.name] = f"ServerArgs.{field}"
                break
            if attr is not _MISSING and row.method:
                out[row.name] = f"ServerArgs.{field}()"
                break
    return out


def declared_namespaces(server_args_type: Any) -> dict[str, str]:
    """``{name: namespace}`` as the release declares its runtime-context bags (0.5.17+: each field's namespace
    marker; 0.5.23 also declares derived leaves such as ``enable_mamba_extra_buffer``); {} before the bags."""
    try:
        from sglang.srt.arg_groups.arg_utils import namespace_of
    except ImportError:
        return {}
    out = dict(namespace_of(server_args_type))
    for source in getattr(server_args_type, "_NAMESPACES", None) or ():
        path = getattr(source, "_NS_PATH", None)
        if path:
            out.update({k: path for k in vars(source) if not k.startswith("_") and k not in out})
    return out
