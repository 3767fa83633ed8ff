"""The shape of the engine's core, measured from its source: what the core rebuild set out to change.

    python ci/core_shape.py [--json] [--tests]

Figures (each a count over lsm/, compaction/ and tools/ unless it says otherwise):

* backend_tests: lines outside the storage package that test which backend is in use (a URL test, a
  ``.local`` attribute of a storage, a scheme prefix, ``_objects``);
* capability_queries: lines that ask what the storage can do instead (``appends``, ``shared``,
  ``uploads``), listed apart: the seam's way of letting the engine adapt without knowing the backend;
* hand_built_paths: store paths assembled by hand (``os.path.join`` with "sst", "wal" or "manifest")
  outside the module that names every object the store writes;
* private_crossings: (private name, file) pairs in lsm/ where a file uses ``._name`` or imports ``_name``
  that another lsm/ file defines and it does not;
* db_mixins: base classes of ``lsm.DB`` other than ``object``;
* largest_module: lines of the largest module of the packages, and its path;
* runtime_cycle: files in the largest import cycle of lsm/ formed by module-level imports (the ones
  that run at import time);
* multi_backend_tests (with --tests): test functions of tests/lsm and tests/compaction collected with
  two or more backend parameters, against all of them.

Nothing here imports the engine: it reads the files (and, for --tests, asks pytest to collect).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lsm", "compaction", "tools", "formats", "storage")
# where deciding on a backend is the point: the storage package (and its old home, formats/)
STORAGE_FILES = re.compile(r"^(storage/|lsm/storage/|formats/(storage|objstore|objclient|objcache|simstore)\.py)")
NAMING_FILE = "storage/paths.py"
# a test of which backend it is: a URL test, a scheme, the `local` attribute of a storage, `_objects`
BACKEND_TEST = re.compile(
    r"is_url\(|\bURL_MARK\b|[\"']://[\"']|(?<!compaction)\.local\b|\b_objects\b|startswith\([\"'](s3|memory|sim)"
)
# a question about what the storage can do (append and lock, be seen by other processes, upload)
CAPABILITY = re.compile(r"\.(appends|shared|uploads)\b")
HAND_PATH = re.compile(r"os\.path\.join\([^)\n]*[\"'](sst|wal|manifest)[\"']")
BACKENDS = ("local", "memory", "s3")


def py_files(*packages: str) -> list[Path]:
    out = []
    for p in packages:
        out += sorted((ROOT / p).rglob("*.py"))
    return out


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _lines_matching(pattern: re.Pattern[str], skip: Callable[[str], bool]) -> list[str]:
    """`file:line` of every code line (comments cut) in the counted packages that `pattern` finds,
    leaving out the files `skip` names."""
    hits = []
    for f in py_files("lsm", "compaction", "tools"):
        r = rel(f)
        if skip(r):
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if pattern.search(line.split("#", 1)[0]):
                hits.append(f"{r}:{i}")
    return hits


def backend_tests() -> list[str]:
    return _lines_matching(BACKEND_TEST, lambda r: bool(STORAGE_FILES.match(r)) or r.startswith("tools/cli"))


def capability_queries() -> list[str]:
    return _lines_matching(CAPABILITY, lambda r: bool(STORAGE_FILES.match(r)))


def hand_built_paths() -> list[str]:
    return _lines_matching(HAND_PATH, lambda r: r == NAMING_FILE or bool(STORAGE_FILES.match(r)))


def _defined_private(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("_"):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id.startswith("_"):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id.startswith("_"):
            names.add(node.target.id)
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def private_crossings() -> list[str]:
    trees = {rel(f): ast.parse(f.read_text()) for f in py_files("lsm")}
    defined = {r: _defined_private(t) for r, t in trees.items()}
    owners: dict[str, set[str]] = defaultdict(set)
    for r, names in defined.items():
        for n in names:
            owners[n].add(r)
    pairs = set()
    for r, tree in trees.items():
        for node in ast.walk(tree):
            used = None
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr.startswith("_"):
                used = node.attr
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        pairs.add((a.name, r)) if owners.get(a.name, set()) - {r} else None
                continue
            if used and not (used.startswith("__") and used.endswith("__")) and used not in defined[r]:
                if owners.get(used, set()) - {r}:
                    pairs.add((used, r))
    return sorted(f"{r}: {n}" for n, r in pairs)


def db_mixins() -> list[str]:
    for f in py_files("lsm"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == "DB":
                return [ast.unparse(b) for b in node.bases if ast.unparse(b) != "object"]
    return []


def largest_module() -> tuple[int, str]:
    sizes = [(len(f.read_text().splitlines()), rel(f)) for f in py_files(*PACKAGES)]
    return max(sizes)


def _module_name(r: str) -> str:
    m = r[:-3].replace("/", ".")
    return m[: -len(".__init__")] if m.endswith(".__init__") else m


def runtime_cycle() -> list[str]:
    """The largest strongly connected component of lsm/'s module-level import graph."""
    files = {_module_name(rel(f)): f for f in py_files("lsm")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for m, f in files.items():
        tree = ast.parse(f.read_text())
        for node in tree.body:  # module level only: imports inside functions run later
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    pkg = m.rsplit(".", node.level)[0] if not f.name == "__init__.py" else m
                    base = f"{pkg}.{node.module}" if node.module else pkg
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for t in targets:
                if t in graph and t != m:
                    graph[m].add(t)
    # Tarjan
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    best: list[str] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        nonlocal best
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > len(best):
                best = sorted(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return best if len(best) > 1 else []


def multi_backend_tests() -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p", "no:randomly", "tests/lsm", "tests/compaction"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    ).stdout
    by_function: dict[str, set[str]] = defaultdict(set)
    for line in out.splitlines():
        if "::" not in line:
            continue
        func, _, params = line.partition("[")
        by_function[func].update(b for b in BACKENDS if re.search(rf"(^|[-\[]){b}([-\]]|$)", "[" + params))
    multi = sum(1 for b in by_function.values() if len(b) >= 2)
    return multi, len(by_function)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tests", action="store_true", help="also collect the tests (slower)")
    ap.add_argument("--list", action="store_true", help="print every place counted")
    a = ap.parse_args()
    os.chdir(ROOT)
    found = {
        "backend_tests": backend_tests(),
        "capability_queries": capability_queries(),
        "hand_built_paths": hand_built_paths(),
        "private_crossings": private_crossings(),
        "db_mixins": db_mixins(),
        "runtime_cycle": runtime_cycle(),
    }
    size, path = largest_module()
    figures = {k: len(v) for k, v in found.items()} | {"largest_module": size, "largest_module_path": path}
    if a.tests:
        multi, total = multi_backend_tests()
        figures["multi_backend_tests"] = f"{multi}/{total}"
    if a.json:
        print(json.dumps(figures | ({"places": found} if a.list else {}), indent=2))
        return
    for k, v in figures.items():
        print(f"{k:22} {v}")
    if a.list:
        for k, places in found.items():
            print(f"\n{k}:")
            for p in places:
                print(f"  {p}")


if __name__ == "__main__":
    main()
