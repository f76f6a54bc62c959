"""The plugin's modules import each other without a cycle, function-local imports included.

An AST walk of every module of the package (``patches/`` read as ``sglang_mamba_dedup.patches``, the way it
is installed), with every ``import`` statement wherever it stands; an edge goes to a module of ours (for
``from X import Y``: to ``X.Y`` when that is a module, else to ``X``). A package's ``__init__`` imported on
the way to a submodule is not counted as an edge (Python imports the parent first, but the parent does not
depend on the child for it). Also no ``sys.modules`` lookup of our own modules (an import in disguise).
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = "sglang_mamba_dedup"


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for base, dotted in ((ROOT / PKG, PKG), (ROOT / "patches", f"{PKG}.patches")):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([dotted, *parts])] = path
    return found


def _is_package(name: str, mods: dict[str, pathlib.Path]) -> bool:
    return mods[name].name == "__init__.py"


def _edges(name: str, path: pathlib.Path, mods: dict[str, pathlib.Path]) -> set[str]:
    package = name if _is_package(name, mods) else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in mods and t != name)
    return out


def _graph():
    mods = _modules()
    return mods, {name: _edges(name, path, mods) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_the_modules_and_the_edges():
    mods, graph = _graph()
    assert f"{PKG}.patches.commit" in mods and f"{PKG}.kernels.state_commit" in mods
    # the entry point's chain, as SGLang loads it: activation -> installed -> the patch table -> a wrapper
    assert f"{PKG}.installed" in graph[f"{PKG}.activation"]
    assert f"{PKG}.patches" in graph[f"{PKG}.installed"]
    assert f"{PKG}.patches.commit" in graph[f"{PKG}.patches"]
    # a function-local import is an edge too (apply() imports the activation when called)
    assert f"{PKG}.activation" in graph[PKG]


def test_a_cycle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    _, graph = _graph()
    assert _cycles(graph) == [], "import cycles among our modules"


def test_no_sys_modules_lookup_of_our_own_modules():
    bad = []
    for path in _modules().values():
        text = path.read_text()
        for needle in ("sys.modules[", "sys.modules.get("):
            start = 0
            while (i := text.find(needle, start)) >= 0:
                arg = text[i + len(needle) : i + len(needle) + 60]
                if arg.lstrip("\"'").startswith(PKG):
                    bad.append(f"{path.relative_to(ROOT)}: {text[i : i + 60]}")
                start = i + 1
    assert not bad, bad


# -- one owner per feature (issue 46): the commit is followed by imports, each piece of state has one writer -------


def test_the_commit_is_followed_from_the_wrapper_to_the_kernel_by_imports_alone():
    """patches/commit.py (function-local: the plugin loads without Triton) and zero-copy's bookkeeping import the
    kernel modules they call by name, as edges of the static import graph, never back through the commit patch."""
    _, graph = _graph()
    kernels = f"{PKG}.kernels"
    assert {f"{kernels}.state_commit", f"{kernels}.descriptor"} <= graph[f"{PKG}.patches.commit"]
    assert {f"{kernels}.state_commit", f"{kernels}.descriptor", f"{kernels}.seed_index"} <= graph[
        f"{PKG}.patches.zero_copy.bookkeeping"
    ]
    assert f"{PKG}.patches.commit" not in graph[f"{PKG}.patches.zero_copy.bookkeeping"]
    assert "STATE.kernel" not in _modules()[f"{PKG}.patches.commit"].read_text()


def _calls_of(dotted: str) -> list[str]:
    """Every call of ``dotted`` (e.g. ``report.count_launch``) in the package: 'module:enclosing function'."""
    out = []
    for name, path in _modules().items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and ast.unparse(node.func) == dotted:
                        out.append(f"{name}:{fn.name}")
    return sorted(set(out))


def test_kernels_load_is_only_the_availability_check():
    """No serving call goes through the module value ``kernels.load()`` returns (a reader could not follow it): its
    one caller asks only whether the kernel imports."""
    assert _calls_of("kernels.load") == [f"{PKG}.patches.commit:kernel_problem"]
    text = _modules()[f"{PKG}.patches.commit"].read_text()
    assert "        kernels.load()\n" in text, "kernel_problem() uses load() as a statement, not its value"


def test_a_decode_step_counts_once_in_the_commit_wrapper():
    """The commit's counters and its launch path are counted by one call under one lock, in the wrapper; a launch
    outside a commit (zero-copy's stage-in, once per extend) is the only other launch counted."""
    assert _calls_of("report.count_commit") == [f"{PKG}.patches.commit:update_mamba_state_after_mtp_verify"]
    assert _calls_of("report.count_launch") == [f"{PKG}.patches.zero_copy.bookkeeping:stage_in"]


def test_faults_patch_nothing_by_hand():
    """The negative controls are rows the patcher applies: ``patches/faults.py`` assigns no attribute and calls no
    ``setattr`` (the hand-written monkeypatching it once was)."""
    tree = ast.parse(_modules()[f"{PKG}.patches.faults"].read_text())
    bad = []
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        bad += [ast.unparse(t) for t in targets if isinstance(t, ast.Attribute)]
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr":
            bad.append(ast.unparse(node))
    assert bad == []


def test_the_kernel_is_loaded_by_the_kernels_package_once():
    """load() hands out the one kernel module and does not import torch or Triton before it is asked."""
    import subprocess
    import sys

    code = (
        "import sys; from sglang_mamba_dedup import kernels; "
        "assert 'triton' not in sys.modules and 'sglang_mamba_dedup.kernels.state_commit' not in sys.modules; "
        "m = kernels.load(); assert m is kernels.load() is sys.modules['sglang_mamba_dedup.kernels.state_commit']; "
        "assert callable(m.launch) and callable(m.get_plan) and kernels.fused_commit is m.fused_commit"
    )
    env = {"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def _writes(attr: str) -> list[str]:
    """Every ``STATE.<attr>`` assignment, item assignment or augmented assignment in the package: 'module:line'."""
    out = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for t in targets:
                base = t.value if isinstance(t, ast.Subscript) else t
                if isinstance(base, ast.Attribute) and base.attr == attr and ast.unparse(base.value) == "STATE":
                    out.append(f"{name}:{node.lineno}")
    return out


def test_every_counter_is_written_by_the_report_and_the_estimate_by_the_ledger():
    assert {w.split(":")[0] for w in _writes("events")} == {f"{PKG}.report"}
    assert {w.split(":")[0] for w in _writes("launches")} == {f"{PKG}.report"}
    assert {w.split(":")[0] for w in _writes("estimate")} == {f"{PKG}.ledger"}
    # the walk does see such writes (it would find one outside the owner)
    assert len(_writes("events")) >= 3 and _writes("no_such_field") == []


def test_zero_copy_state_has_one_home_per_pool():
    """No process-wide copy of zero-copy's decision or table, no module-held kernel: the PoolState holds them."""
    import dataclasses

    from sglang_mamba_dedup import state

    fields = {f.name for f in dataclasses.fields(state.ProcessState)}
    assert not fields & {"zero_copy", "kernel", "kernel_error", "accepted"}, fields
    pool_fields = {f.name for f in dataclasses.fields(state.PoolState)}
    assert {"zero_copy", "zero_copy_decided", "zero_copy_reason", "accepted"} <= pool_fields


def test_no_module_file_name_is_used_twice():
    names: dict[str, list[str]] = {}
    for name, path in _modules().items():
        if path.name not in ("__init__.py", "__main__.py"):
            names.setdefault(path.name, []).append(name)
    assert not {k: v for k, v in names.items() if len(v) > 1}


def test_one_reader_of_sglangs_resolved_settings():
    """Design review D10: the zero-copy gate, the planner and ``doctor`` read SGLang's resolved settings through the
    serving core's :mod:`resolved`, which imports nothing of ours (so never the planner)."""
    _, graph = _graph()
    reader = f"{PKG}.resolved"
    for user in ("patches.zero_copy.eligibility", "planner.launch_config", "cli.doctor"):
        assert reader in graph[f"{PKG}.{user}"], user
    assert graph[reader] == set()
