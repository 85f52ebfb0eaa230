"""numerics/ is the ground floor: it imports torch and triton (and the optional deep_gemm kernel), the standard
library, itself and the dependency-free `precision_engine.errors`; never the policy, transformers or anything
above it. And its modules import each other without cycles, lazy imports inside functions included."""

import ast
import sys
from pathlib import Path

import pytest

import precision_engine.numerics as numerics

NUMERICS = Path(numerics.__file__).parent
ALLOWED_THIRD_PARTY = {"torch", "triton", "deep_gemm"}
ALLOWED_OURS = ("precision_engine.numerics", "precision_engine.errors")


def imports(path: Path) -> list[str]:
    """Every module `path` imports, at any depth of the file (function-level lazy imports too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the numerics package
                base = "precision_engine.numerics" + (f".{base}" if base else "")
            # `from pkg import mod` may name a submodule: record both, the check below takes the longest
            found += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return found


def allowed(name: str) -> bool:
    root = name.split(".")[0]
    if root == "precision_engine":
        return name.startswith(ALLOWED_OURS) or name == "precision_engine"
    return root in sys.stdlib_module_names or root in ALLOWED_THIRD_PARTY or root == "__future__"


SOURCES = sorted(NUMERICS.glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_numerics_imports_only_torch_triton_and_itself(path):
    bad = sorted({name for name in imports(path) if not allowed(name)})
    assert not bad, f"{path.name} imports {bad}: numerics must not depend on policy/, transformers or above"


def test_numerics_modules_import_each_other_without_cycles():
    modules = {p.stem for p in SOURCES}
    graph = {
        stem: {n.split(".")[2] for n in imports(NUMERICS / f"{stem}.py")
               if n.startswith("precision_engine.numerics.") and n.split(".")[2] in modules} - {stem}
        for stem in modules
    }
    graph["__init__"] = set()  # the package's lazy name table loads submodules on attribute access only
    state: dict[str, str] = {}

    def visit(node, path):
        if state.get(node) == "done":
            return
        assert state.get(node) != "active", f"import cycle: {' -> '.join(path + [node])}"
        state[node] = "active"
        for nxt in sorted(graph[node]):
            visit(nxt, path + [node])
        state[node] = "done"

    for stem in sorted(graph):
        visit(stem, [])


def test_the_check_sees_a_forbidden_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from precision_engine.policy.model import Policy\n    import transformers\n")
    assert [n for n in imports(probe) if not allowed(n)] == [
        "precision_engine.policy.model", "precision_engine.policy.model.Policy", "transformers"]
