"""Post-import hooks keyed on module names, the switches of the stand-ins, and their log.

A hook registered with :func:`when_imported` runs right after its module is executed (at once when the
module is already imported); a hook that raises is logged and counted, never breaks the import.
"""

import importlib.abc
import os
import sys

#: ``SGLANG_STANDINS_SKIP=name1,name2``: stand-ins left out (names in the package's docstring).
SKIP = set(filter(None, os.environ.get("SGLANG_STANDINS_SKIP", "").split(",")))
#: Every module a hook was registered for, in order (``check`` lists them so).
TARGETS = []
#: module name -> hooks run; "<name>!" -> hooks that raised.
FIRED = {}
_HOOKS = {}


def skipped(name):
    return name in SKIP


def log(msg):
    if os.environ.get("SGLANG_STANDINS_QUIET") != "1":
        sys.stderr.write(f"[standins] pid={os.getpid()} {msg}\n")


def _run_hook(fn, module, name):
    try:
        fn(module)
        FIRED[name] = FIRED.get(name, 0) + 1
    except Exception as e:  # never break the import itself
        FIRED[name + "!"] = FIRED.get(name + "!", 0) + 1
        log(f"hook for {name} failed: {e!r}")


def when_imported(name):
    """Decorator: run the function on module ``name`` once it is imported."""

    def deco(fn):
        if name not in TARGETS:
            TARGETS.append(name)
        mod = sys.modules.get(name)
        if mod is not None:
            _run_hook(fn, mod, name)
        else:
            _HOOKS.setdefault(name, []).append(fn)
        return fn

    return deco


class _HookLoader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        for fn in _HOOKS.pop(self._name, []):
            _run_hook(fn, module, self._name)

    def __getattr__(self, item):  # get_source, is_package, ...
        return getattr(self._inner, item)


class _HookFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HookLoader(spec.loader, fullname)
                return spec
        return None


def install_finder():
    """First on ``sys.meta_path``: the modules with pending hooks load through :class:`_HookLoader`."""
    sys.meta_path.insert(0, _HookFinder())
