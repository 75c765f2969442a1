#!/usr/bin/env python3
"""statstorm's layering, checked: every rule of ../shared/checks/layering (verbs use adapters,
not each other; model/ does no I/O; no import cycle; no module over 500 lines;
docs/architecture.md exists) plus the order of the layers, so that an arrow pointing up is seen
(docs/architecture.md draws them):

    cli → commands → report → adapters → apps → model → results → the base (env, errors, faults)

A module imports its own layer and the layers below it, with less for three of them:
- a verb never imports another verb (only commands/demo.py, commands/apply.py and
  commands/tune.py compose verbs);
- report/ imports model/ and results/ only (a report is made from files: no adapters, no apps);
- apps/ imports results/ and the base only (what an app is; no adapter and no model).

Usage: python3 scripts/layers.py [CHECKOUT]  (default: the checkout holding this script).
Prints "clean: …" and exits 0, or names each bad arrow and problem and exits 1. Standard
library only; about a quarter of a second.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Iterator

BASE = "base"
# what each layer may import (besides itself)
ALLOWED: dict[str, frozenset[str]] = {
    "cli": frozenset({"commands", "report", "adapters", "apps", "model", "results", BASE}),
    "commands": frozenset({"report", "adapters", "apps", "model", "results", BASE}),
    "report": frozenset({"model", "results", BASE}),
    "adapters": frozenset({"apps", "model", "results", BASE}),
    "model": frozenset({"results", BASE}),
    "apps": frozenset({"results", BASE}),
    "results": frozenset({BASE}),
    BASE: frozenset(),
}
COMPOSITE_VERBS = frozenset({"statstorm.commands.demo", "statstorm.commands.apply",
                             "statstorm.commands.tune"})
MAX_LINES = 500
IO_CALLS = frozenset({"open", "read_text", "read_bytes", "write_text", "write_bytes", "replace",
                      "rename", "unlink", "mkdir", "write_atomic", "run", "Popen",
                      "check_output", "scandir", "listdir", "stat", "lstat"})
MAY_DO_IO = re.compile(r"subprocess|shutil|\bopen\s*\(|read_text|read_bytes|write_text|"
                       r"write_bytes|write_atomic|\bos\b")


def layer(module: str) -> str:
    """statstorm.adapters.tracing.bpftrace → adapters; statstorm.env → base; __main__ → cli."""
    parts = module.split(".")
    if len(parts) == 1:
        return BASE
    if parts[1] == "__main__":
        return "cli"
    return parts[1] if parts[1] in ALLOWED else BASE


def modules(src: Path) -> dict[str, Path]:
    out = {}
    for p in sorted((src / "statstorm").rglob("*.py")):
        out[".".join(p.relative_to(src).with_suffix("").parts).replace(".__init__", "")] = p
    return out


IMPORT_START = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+\w)", re.M)


def import_statements(text: str) -> Iterator[ast.stmt]:
    """The module's import statements, anywhere in it (lazy imports are arrows too), each
    parsed on its own: a full parse of every module would cost most of this check's second.
    A line that only looks like one (in a docstring) does not parse or names no module."""
    for m in IMPORT_START.finditer(text):
        lines = text[m.start():].split("\n", 40)
        for n in range(1, len(lines) + 1):
            try:
                body = ast.parse("\n".join(lines[:n]).strip()).body
            except SyntaxError:
                continue
            yield from body[:1]
            break


def imports(statements: Iterator[ast.stmt], path: Path, name: str,
            known: dict[str, Path]) -> set[str]:
    """The statstorm modules these import statements of a module name."""
    out: set[str] = set()
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for n in statements:
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in n.names}
    return {m for m in out if m in known} - {name}


def all_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement of a parsed module (what import_statements is compared with)."""
    return (n for n in ast.walk(tree) if isinstance(n, ast.stmt))


def does_io(text: str) -> bool:
    """The shared check's reading of "I/O" in a module of model/ (a module whose text names
    none of its calls is not parsed)."""
    if not MAY_DO_IO.search(text):
        return False
    for n in ast.walk(ast.parse(text)):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in n.names] + [getattr(n, "module", None) or ""]
            if any(x.split(".")[0] in ("subprocess", "shutil") for x in names):
                return True
        if isinstance(n, ast.Call):
            f = n.func
            nm = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            base = (f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    else "")
            if nm == "open" and isinstance(f, ast.Name):
                return True
            if nm in ("read_text", "read_bytes", "write_text", "write_bytes", "write_atomic"):
                return True
            if base == "os" and nm in IO_CALLS:
                return True
    return False


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles (as the shared check finds them), those within cli/ left out (its
    commands register themselves on the group lazily)."""
    seen: set[str] = set()
    found: list[list[str]] = []

    def dfs(u: str, path: list[str]) -> None:
        for v in sorted(graph[u]):
            if v in path:
                found.append(path[path.index(v):] + [v])
                continue
            if v not in seen:
                seen.add(v)
                dfs(v, path + [v])

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in sorted(graph):
        if m not in seen:
            seen.add(m)
            dfs(m, [m])
    return [c for c in found if not all(x.startswith("statstorm.cli") for x in c)]


def bad_arrows(a: str, targets: set[str]) -> list[str]:
    """What is wrong with module `a` importing `targets`: an arrow up, or verb to verb."""
    out = []
    la = layer(a)
    for b in sorted(targets):
        lb = layer(b)
        if lb != la and lb not in ALLOWED[la]:
            out.append(f"upward arrow: {a} ({la}) -> {b} ({lb})")
        elif la == lb == "commands" and b != "statstorm.commands" and a not in COMPOSITE_VERBS:
            out.append(f"verb->verb import: {a} -> {b} (only commands/demo.py, apply.py and "
                       "tune.py compose verbs; put the shared job in adapters/)")
    return out


def check(root: Path) -> tuple[list[str], str]:
    """(each problem, one per line; the clean summary)."""
    src = root / "src"
    mods = modules(src)
    texts = {m: p.read_text() for m, p in mods.items()}
    graph = {m: imports(import_statements(texts[m]), p, m, mods) for m, p in mods.items()}
    # A module the quick reader finds at fault, or in a cycle, is read again whole, so that
    # a line in a docstring that looks like an import is never taken for one.
    suspects = {a for a in graph if bad_arrows(a, graph[a])}
    suspects |= {m for c in cycles(graph) for m in c}
    for m in suspects:
        graph[m] = imports(all_statements(ast.parse(texts[m])), mods[m], m, mods)
    bad = [msg for a in sorted(graph) for msg in bad_arrows(a, graph[a])]
    arrows = sum(len(v) for v in graph.values())
    for m in sorted(mods):
        if layer(m) == "model" and does_io(texts[m]):
            bad.append(f"I/O in model: {mods[m].relative_to(root)}")
    sizes = sorted(((len(texts[m].splitlines()), m) for m in mods), reverse=True)
    for n, m in sizes:
        if n > MAX_LINES:
            bad.append(f"module over {MAX_LINES} lines: {mods[m].relative_to(root)} ({n})")
    for c in cycles(graph):
        bad.append("import cycle: " + " -> ".join(c))
    if not (root / "docs/architecture.md").exists():
        bad.append("no docs/architecture.md")
    n, largest = sizes[0]
    summary = (f"clean: {len(mods)} modules, {arrows} imports, every arrow down "
               "(cli → commands → report → adapters → apps → model → results → base), "
               f"0 verb->verb imports, model pure, no cycle, largest "
               f"{mods[largest].relative_to(root)} ({n} lines)")
    return bad, summary


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    bad, summary = check(root)
    if bad:
        print("\n".join(bad))
        print(f"{len(bad)} problem(s)")
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
