"""The patch machinery: a declarative table of wrapt wrappers, applied all-or-nothing per feature (every target
resolved and signature-checked *before* any is wrapped); ``revert()`` puts back the exact originals where the
attribute still holds *our* proxy. wrapt 1.x and 2.x both work: we build ``wrapt.FunctionWrapper`` ourselves and set
the attribute, so neither ``wrap_function_wrapper`` keywords nor ``wrapt.unwrap`` (absent in wrapt 2) are needed.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import wrapt
from packaging.specifiers import SpecifierSet

from . import versions

logger = logging.getLogger("sglang_mamba_dedup")

#: Attribute set on the wrapper function inside each of our proxies; this is what :func:`is_ours` reads.
WRAPPER_MARK = "__sglang_mamba_dedup_patch__"


@dataclass(frozen=True)
class Patch:
    """One wrapping point. ``wrapper`` has wrapt's signature ``(wrapped, instance, args, kwargs)``."""

    name: str
    feature: str
    module: str
    attr: str
    releases: str
    wrapper: Callable[..., Any]
    #: Parameter names the target must accept (checked before wrapping; a changed signature skips the feature).
    params: tuple[str, ...] = ()
    #: SGLang callables the wrapper itself calls, each checked before anything is wrapped.
    calls: tuple[Callee, ...] = ()
    doc: str = ""

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attr}"

    def applies_to(self, version: str | None) -> bool:
        return versions.in_range(versions.effective(version), SpecifierSet(self.releases))


@dataclass(frozen=True)
class Callee:
    """A private SGLang method or function that a wrapper calls: ``args`` positional arguments (``self`` not
    counted); ``optional``: the wrapper skips the call where the attribute does not exist."""

    module: str
    attr: str
    args: int
    optional: bool = False

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attr}"

    def problem(self) -> str | None:
        """None when the installed release accepts our call, else why not."""
        try:
            parent: Any = importlib.import_module(self.module)
        except Exception as exc:
            return f"cannot import {self.module}: {type(exc).__name__}: {exc}"
        *path, last = self.attr.split(".")
        for part in path:
            parent = getattr(parent, part, None)
            if parent is None:
                return f"{self.module} has no attribute {part}"
        raw = inspect.getattr_static(parent, last, None)
        if raw is None:
            return None if self.optional else f"{self.target} does not exist"
        func = _underlying_function(raw)
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError) as exc:
            return f"cannot read the signature of {self.target}: {exc}"
        bound_self = inspect.isclass(parent) and not isinstance(raw, staticmethod)
        placeholders = [None] * (self.args + (1 if bound_self else 0))
        try:
            sig.bind(*placeholders)
        except TypeError as exc:
            return f"{self.target}{sig} does not accept the {self.args}-argument call the plugin makes ({exc})"
        return None


class TargetError(Exception):
    """A target cannot be resolved or does not look like what the patch expects."""


def self_first(
    wrapped: Any,
    instance: Any,
    args: Sequence[Any],
    looks_like: Callable[[Any], bool] = lambda obj: True,
    what: str | None = None,
) -> tuple[Any, Any, tuple[Any, ...], bool]:
    """A method wrapper's view of its call, however it was reached: the one place that handles the class attribute
    called with ``self`` first (another plugin's wrapper around ours; wrapt then passes no instance).

    Returns ``(call, instance, args, unbound)``: ``call(*args, **kwargs)`` runs the original on ``instance``;
    ``unbound`` says the instance came from the first argument (which ``looks_like`` the target's owner). ``what``
    (the method as a user knows it): said once per process at WARNING when that happens."""
    if instance is not None or not args or not looks_like(args[0]):
        return wrapped, instance, tuple(args), False
    import functools

    if what is not None:
        from .state import warn_once

        warn_once(
            f"{what} unbound",
            f"sglang-mamba-dedup: {what} was called through the class attribute with self first (another wrapper "
            "around ours?); the plugin reads self from that argument and serves the call",
        )
    return functools.partial(wrapped, args[0]), args[0], tuple(args[1:]), True


def resolve(module_name: str, attr: str) -> tuple[Any, str, Any]:
    """Import ``module_name`` and walk ``attr``: ``(parent, last_name, raw_original)``. A class attribute is taken
    from the class ``__dict__`` (a ``staticmethod`` stays a descriptor) and must be defined on that class, not
    inherited, so that we wrap it where it is defined and subclasses keep seeing one wrapper."""
    try:
        parent: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError and anything the module raises at import
        raise TargetError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    parts = attr.split(".")
    for part in parts[:-1]:
        if not hasattr(parent, part):
            raise TargetError(f"{module_name} has no attribute {'.'.join(parts[: parts.index(part) + 1])}")
        parent = getattr(parent, part)
    last = parts[-1]
    if inspect.isclass(parent):
        if last not in vars(parent):
            raise TargetError(f"{module_name}.{attr} is not defined on {parent.__name__} itself")
        return parent, last, vars(parent)[last]
    if not hasattr(parent, last):
        raise TargetError(f"{module_name} has no attribute {attr}")
    return parent, last, getattr(parent, last)


def _underlying_function(raw: Any) -> Any:
    obj = raw
    while True:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, wrapt.ObjectProxy) and hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        else:
            return obj


def check_params(raw: Any, params: Sequence[str], target: str) -> None:
    if not params:
        return
    func = _underlying_function(raw)
    if not callable(func):
        raise TargetError(f"{target} is not callable")
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise TargetError(f"cannot read the signature of {target}: {exc}") from exc
    missing = [p for p in params if p not in sig.parameters]
    if missing:
        kinds = {p.kind for p in sig.parameters.values()}
        if {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} <= kinds:
            where = (
                f"{target} has the signature {sig} (defined in {getattr(func, '__module__', '?')}): probably "
                "another plugin's wrapper without functools.wraps, which hides SGLang's parameters"
            )
            raise TargetError(f"{where}; cannot check for parameter(s) {', '.join(missing)}")
        raise TargetError(f"{target} changed signature: no parameter(s) {', '.join(missing)} (has {sig})")


def is_ours(obj: Any, name: str | None = None) -> bool:
    """Whether ``obj`` is a proxy installed by this package (for patch ``name`` if given)."""
    if not isinstance(obj, wrapt.FunctionWrapper):
        return False
    # Read the mark from the proxy's own wrapper function: attribute reads on a proxy fall through to
    # the wrapped object, so a foreign proxy stacked on ours would otherwise look like ours.
    mark = getattr(getattr(obj, "_self_wrapper", None), WRAPPER_MARK, None)
    return isinstance(mark, str) and (name is None or mark == name)


@dataclass
class _Installed:
    patch: Patch
    parent: Any
    attr: str
    original: Any
    proxy: Any


class Patcher:
    """Applies and reverts a table of patches; one instance per process (see :mod:`.installed`)."""

    def __init__(
        self, table: Iterable[Patch], version_getter: Callable[[], str | None] = versions.installed_sglang_version
    ):
        self.table: list[Patch] = list(table)
        names = [p.name for p in self.table]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate patch names in the table: {sorted(dupes)}")
        self._version_getter = version_getter
        self._installed: dict[str, _Installed] = {}
        self._status: dict[str, dict[str, Any]] = {}
        self._calls: dict[str, int] = {}
        self._lock = threading.RLock()

    @property
    def features(self) -> list[str]:
        return list(dict.fromkeys(p.feature for p in self.table))

    def patches_for(self, feature: str, version: str | None) -> list[Patch]:
        return [p for p in self.table if p.feature == feature and p.applies_to(version)]

    def status(self) -> dict[str, dict[str, Any]]:
        """Per patch: ``{"feature", "target", "state", "reason", "calls"}``."""
        with self._lock:
            return {
                p.name: dict(self._status[p.name], calls=self._calls.get(p.name, 0))
                for p in self.table
                if p.name in self._status
            }

    def _set(self, p: Patch, state: str, reason: str | None = None) -> None:
        self._status[p.name] = {"feature": p.feature, "target": p.target, "state": state, "reason": reason}

    def applied(self, feature: str | None = None) -> list[str]:
        return [n for n, inst in self._installed.items() if feature is None or inst.patch.feature == feature]

    def calls(self, name: str) -> int:
        return self._calls.get(name, 0)

    def check(
        self, feature: str, version: str | None = None, any_release: bool = False
    ) -> tuple[list[Patch], str | None, dict[str, str]]:
        """Dry run: ``(selected patches, feature-level reason or None, per-patch reasons)``; wraps nothing."""
        version = self._version_getter() if version is None else version
        if any_release:
            selected = [p for p in self.table if p.feature == feature]
        else:
            problem = versions.support_problem(version)
            if problem:
                return [], problem, {}
            selected = self.patches_for(feature, version)
        if not selected:
            return [], None, {}  # nothing to do on this release (e.g. a back-port-only feature)
        reasons: dict[str, str] = {}
        for p in selected:
            if p.name in self._installed:
                continue
            try:
                _, _, raw = resolve(p.module, p.attr)
                if is_ours(raw):
                    raise TargetError(f"{p.target} is already wrapped by another copy of this plugin")
                check_params(raw, p.params, p.target)
                for callee in p.calls:
                    trouble = callee.problem()
                    if trouble:
                        raise TargetError(f"{p.target} would call {trouble}")
            except TargetError as exc:
                reasons[p.name] = str(exc)
        if reasons:
            first = next(iter(reasons.values()))
            return selected, f"feature {feature!r} skipped, nothing wrapped: {first}", reasons
        return selected, None, {}

    def apply(
        self, features: Iterable[str] | None = None, version: str | None = None, any_release: bool = False
    ) -> dict[str, str | None]:
        """Apply ``features`` (default: all). Returns ``{feature: None if applied else reason}``."""
        if isinstance(features, str):
            raise TypeError(f"features must be a list of feature names, not the string {features!r}")
        with self._lock:
            version = self._version_getter() if version is None else version
            wanted = list(features) if features is not None else self.features
            unknown = [f for f in wanted if f not in self.features]
            if unknown:
                raise KeyError(f"unknown feature(s) {unknown}; known: {self.features}")
            return {feature: self._apply_feature(feature, version, any_release) for feature in wanted}

    def _apply_feature(self, feature: str, version: str | None, any_release: bool = False) -> str | None:
        selected, reason, per_patch = self.check(feature, version, any_release)
        if reason is None:
            done: list[str] = []
            try:
                for p in selected:
                    if p.name not in self._installed:  # idempotent: already ours
                        self._install(p)
                        done.append(p.name)
            except Exception as exc:  # roll the feature back: never half-patched
                for name in reversed(done):
                    self._uninstall(name)
                reason = f"feature {feature!r} skipped, nothing wrapped: installing failed: {type(exc).__name__}: {exc}"
                for p in selected:
                    self._set(p, "skipped", reason)
                return reason
        for p in self.table:
            if p.feature != feature or (reason is not None and p.name in self._installed):
                continue
            if p not in selected and (selected or reason is None):  # another release's patch of this feature
                self._set(p, "not-applicable", f"only for SGLang {p.releases}")
            elif reason is not None:
                self._set(p, "skipped", per_patch.get(p.name, reason))
        return reason

    def _install(self, p: Patch) -> None:
        parent, attr, original = resolve(p.module, p.attr)
        check_params(original, p.params, p.target)
        patcher = self

        def guarded(wrapped, instance, args, kwargs):
            patcher._calls[p.name] = patcher._calls.get(p.name, 0) + 1
            return p.wrapper(wrapped, instance, args, kwargs)

        setattr(guarded, WRAPPER_MARK, p.name)
        proxy = wrapt.FunctionWrapper(original, guarded)
        setattr(parent, attr, proxy)
        self._installed[p.name] = _Installed(p, parent, attr, original, proxy)
        self._set(p, "applied")

    def _uninstall(self, name: str) -> str | None:
        inst = self._installed[name]
        current = (
            vars(inst.parent).get(inst.attr) if inspect.isclass(inst.parent) else getattr(inst.parent, inst.attr, None)
        )
        if current is not inst.proxy:
            return f"{inst.patch.target} was re-wrapped by someone else after us; left in place"
        setattr(inst.parent, inst.attr, inst.original)
        del self._installed[name]
        return None

    def revert(self, features: Iterable[str] | None = None) -> dict[str, str | None]:
        """Undo what ``apply`` did (all features by default). Safe to call twice."""
        with self._lock:
            wanted = set(features) if features is not None else None
            result: dict[str, str | None] = {}
            for name in list(self._installed)[::-1]:
                inst = self._installed[name]
                if wanted is not None and inst.patch.feature not in wanted:
                    continue
                problem = self._uninstall(name)
                result[name] = problem
                if problem is None:
                    self._set(inst.patch, "reverted")
                else:
                    self._status[name]["reason"] = problem
                    logger.warning("sglang-mamba-dedup: %s", problem)
            return result
