"""The package's shape: no import circles between megalab's modules (issue: theory <-> comm <->
memory and config <-> presets once imported each other). Every import counts, inside functions too:
a circle that only a lazy import keeps from failing is still two modules that cannot be read
apart."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "lib" / "megalab"


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in PKG.rglob("*.py")}
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1]
                        + ([base] if base else [])
                    )
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                # megalab.theory.memory -> megalab.theory (a name in it)
                while t and t not in modules:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                # a package's own __init__ is no circle
                if t and t != name and not name.startswith(t + "."):
                    graph[name].add(t)
    return graph


def _circle(graph) -> list[str] | None:
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        stack.pop()
        return None

    return next((c for m in sorted(graph) if m not in state and (c := visit(m))), None)


def test_the_graph_sees_the_package():
    graph = _graph()
    assert "megalab.theory.footprint" in graph and "megalab.runs.config" in graph
    assert "megalab.runs.config" in graph["megalab.runs.presets"]


def test_no_import_circles():
    circle = _circle(_graph())
    assert circle is None, "import circle: " + " -> ".join(circle)
