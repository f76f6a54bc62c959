"""Which SGLang releases we support, and where they change: the one place these facts live. Every release range
(the patch table, the gate, the tests, ``doctor``) is built from the named boundaries below; ``pyproject.toml``'s
``sglang`` extra mirrors :data:`SUPPORTED` (a test checks it). Versions come from package metadata.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from . import env
from .state import STATE

#: Every SGLang release we test (CI runs the release tests on each; ``cli/evidence.py`` says what ran on each).
RELEASES: tuple[str, ...] = (
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)

# Named boundaries (each is the first release with the change).
FIRST = "0.5.12"
#: upstream allocates the deduplicated window itself (``conv_window_dedup_enabled``); below it we back-port.
UPSTREAM_DEDUP_FROM = "0.5.14"
#: ``model_runner_kv_cache_mixin`` is gone; pools built in ``mem_cache.kv_cache_configurator``; scatter
#: kernels in ``sglang.kernels.ops.mamba``.
NEW_LAYOUT_FROM = "0.5.16"
#: speculative decoding with the radix cache for hybrid GDN models: refused below this release (mamba
#: scheduler strategy no_buffer; server_args ``_handle_mamba_radix_cache``), so the e2e turns the radix off.
SPEC_RADIX_FROM = "0.5.14"
#: ``UnifiedMambaPool`` (``--enable-unified-memory``) exists; it never runs ``MambaPool.__init__``.
UNIFIED_POOL_FROM = "0.5.15"
#: the ``server_state`` entry in each scheduler's internal state: 0.5.12 and 0.5.12.post1 import ``sgl_kernel``
#: with their scheduler module on every platform but NPU/XPU/MPS (``memory_pool_host.py``), so no CPU test reaches
#: their ``Scheduler.get_internal_state``: not shipped there.
SERVER_STATE_FROM = "0.5.13"
#: the zero-copy commit (docs/zero-copy.md): built and proven against this one release's private code.
ZERO_COPY_RELEASE = "0.5.23"
#: the first release we have not tested.
UNTESTED_FROM = "0.5.24"

SUPPORTED = SpecifierSet(f">={FIRST},<{UNTESTED_FROM}")
BACKPORT = SpecifierSet(f">={FIRST},<{UPSTREAM_DEDUP_FROM}")
UPSTREAM_DEDUP = SpecifierSet(f">={UPSTREAM_DEDUP_FROM},<{UNTESTED_FROM}")
OLD_LAYOUT = SpecifierSet(f">={FIRST},<{NEW_LAYOUT_FROM}")
NEW_LAYOUT = SpecifierSet(f">={NEW_LAYOUT_FROM},<{UNTESTED_FROM}")
UNIFIED_POOL = SpecifierSet(f">={UNIFIED_POOL_FROM},<{UNTESTED_FROM}")
ZERO_COPY = SpecifierSet(f"=={ZERO_COPY_RELEASE}")
SERVER_STATE = SpecifierSet(f">={SERVER_STATE_FROM},<{UNTESTED_FROM}")


def plugin_version() -> str:
    """This plugin's version, from its package metadata (``pyproject.toml`` is the one source)."""
    try:
        return importlib.metadata.version("sglang-mamba-dedup")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path without an install
        return "0+unknown"


def installed_sglang_version() -> str | None:
    """The installed SGLang version string, or None when SGLang is not installed."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def sglang_version() -> str | None:
    """:func:`installed_sglang_version`, read once per process (the serving path asks on every pool)."""
    if STATE.sglang_version is None:
        STATE.sglang_version = (installed_sglang_version(),)
    return STATE.sglang_version[0]


def parse(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def in_range(version: str | None, spec: SpecifierSet = SUPPORTED) -> bool:
    v = parse(version) if version else None
    return v is not None and spec.contains(v, prereleases=True)


def is_untested_newer(version: str | None) -> bool:
    """A release newer than every one we test: 0.5.24, 0.6.0, and also 0.5.23.post1, 0.5.24rc1, 0.5.24.dev0
    (PEP 440 orders pre-releases of 0.5.24 below it, so ``<0.5.24`` alone would call them 'older')."""
    v = parse(version) if version else None
    return v is not None and v > Version(RELEASES[-1])


def effective(version: str | None) -> str | None:
    """The release whose patches we select: ``version`` itself, or the newest tested release for an untested
    newer one when ``SGLANG_MAMBA_DEDUP_ALLOW_UNTESTED`` is set (every target is still resolved and checked)."""
    if is_untested_newer(version) and env.enabled(env.ALLOW_UNTESTED):
        return RELEASES[-1]
    return version


def mode_for(version: str | None) -> str:
    """How the plugin works on a release: 'backport', 'takeover' or 'unsupported'."""
    if is_untested_newer(version) and not env.enabled(env.ALLOW_UNTESTED):
        return "unsupported"
    version = effective(version)
    if not in_range(version):
        return "unsupported"
    return "takeover" if in_range(version, UPSTREAM_DEDUP) else "backport"


@dataclasses.dataclass(frozen=True)
class Release:
    """What the plugin does on one SGLang release, decided here and asked everywhere else (:func:`release`)."""

    version: str | None
    #: 'backport' (no upstream dedup: ours), 'takeover' (upstream's layout, our commit) or 'unsupported'
    mode: str

    @property
    def backport(self) -> bool:
        return self.mode == "backport"

    @property
    def patched_as(self) -> str | None:
        """The release whose targets are patched (:func:`effective`)."""
        return effective(self.version)

    @property
    def new_layout(self) -> bool:
        """Pools are built in ``kv_cache_configurator`` (:data:`NEW_LAYOUT_FROM`)."""
        return in_range(self.patched_as, NEW_LAYOUT)

    @property
    def zero_copy(self) -> bool:
        """The zero-copy commit is built for this very release (never for an untested one mapped to it)."""
        return in_range(self.version, ZERO_COPY)


def release(version: str | None = None) -> Release:
    """The facts of ``version`` (default: the installed SGLang, read now; the serving path passes
    :func:`sglang_version`, read once per process)."""
    v = installed_sglang_version() if version is None else version
    return Release(v, mode_for(v))


def support_problem(version: str | None) -> str | None:
    """None when ``version`` is supported (or untested but allowed), else a sentence saying why not."""
    if version is None:
        return "SGLang is not installed"
    if parse(version) is None:
        return f"SGLang reports an unparsable version {version!r}"
    if is_untested_newer(version):
        if env.enabled(env.ALLOW_UNTESTED):
            return None
        return (
            f"SGLang {version} is outside the supported range {SUPPORTED} (newer than every release this "
            f"plugin is tested with; set {env.ALLOW_UNTESTED}=1 to try it anyway)"
        )
    if not in_range(version):
        return f"SGLang {version} is outside the supported range {SUPPORTED} (older than {FIRST})"
    return None


def import_problem() -> str | None:
    """None when SGLang's memory pool imports, else a sentence naming the error (a broken Triton or torch, say).

    The commands ask this first: after a failed import SGLang's package is half-imported, and every later import
    of it fails with a follow-on error that hides the cause."""
    try:
        from sglang.srt.mem_cache import memory_pool  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - whatever stops the import is the answer
        return f"SGLang {installed_sglang_version()} does not import: {type(exc).__name__}: {exc}"
    return None


def untested_note(version: str | None) -> str | None:
    if is_untested_newer(version) and env.enabled(env.ALLOW_UNTESTED):
        return f"UNTESTED: SGLang {version} is outside {SUPPORTED}, patched as {RELEASES[-1]} ({env.ALLOW_UNTESTED}=1)"
    return None
