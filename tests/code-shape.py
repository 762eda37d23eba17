#!/usr/bin/env python3
"""The code's shape, measured (issue 27): product functions longer than a limit, and import
cycles between files and between folders of each crate, from the `crate::` paths the code names.

    tests/code-shape.py            # report
    tests/code-shape.py --max 80   # the function-length limit (default 80 lines)

Product code is src/, runner/src, api/src, gitauth/src and plugin/src without their `#[cfg(test)]` modules.
A function's length runs from its `fn` line to its closing brace. Prints figures; exits 0 (a
report: the gate is tests/layout.rs, which `cargo test` runs)."""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = {"operator": "src", "runner": "runner/src", "api": "api/src", "gitauth": "gitauth/src", "plugin": "plugin/src"}
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def rust_files(base):
    for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
        for f in sorted(files):
            # Files named *_tests.rs are test modules (`#[cfg(test)] mod x_tests;`).
            if f.endswith(".rs") and not f.endswith("_tests.rs"):
                yield os.path.join(dirpath, f)


def product_lines(path):
    """The file's lines up to its `#[cfg(test)]` module."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].startswith("mod tests"):
            return lines[:i]
    return lines


def functions(lines):
    """(name, first line, length) of each function, by brace depth from its `fn` line."""
    out = []
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            code = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j].split("//")[0])
            depth += code.count("{") - code.count("}")
            started = started or "{" in code
            if ";" in code and not started:
                break  # a declaration without a body
            if started and depth <= 0:
                out.append((m.group(6), i + 1, j - i + 1))
                break
            j += 1
        i += 1
    return out


def module_of(crate_dir, path):
    rel = os.path.relpath(path, os.path.join(ROOT, crate_dir))[:-3]
    parts = rel.split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts)


def cycles(edges):
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main():
    limit = 80
    if "--max" in sys.argv:
        limit = int(sys.argv[sys.argv.index("--max") + 1])
    long_fns, total = [], 0
    for crate, base in CRATES.items():
        modules = {}
        for path in rust_files(base):
            lines = product_lines(path)
            for name, line, length in functions(lines):
                total += 1
                if length > limit:
                    long_fns.append((length, f"{os.path.relpath(path, ROOT)}:{line}", name))
            # What the code names, not its comments (doc links are not dependencies).
            code = [line.split("//")[0] for line in lines]
            modules[module_of(base, path)] = "\n".join(code)
        file_edges, folder_edges = defaultdict(set), defaultdict(set)
        names = sorted(modules, key=len, reverse=True)
        for module, text in modules.items():
            for ref in set(re.findall(r"crate::([\w:]+)", text)):
                target = next((n for n in names if n and (ref == n or ref.startswith(n + "::"))), None)
                if target is None or target == module:
                    continue
                file_edges[module].add(target)
                a, b = module.split("::")[0], target.split("::")[0]
                if a != b:
                    folder_edges[a].add(b)
        for kind, edges in (("file", file_edges), ("folder", folder_edges)):
            for comp in cycles(edges):
                print(f"{crate}: {kind} cycle: {' <-> '.join(comp)}")
    long_fns.sort(reverse=True)
    print(f"{len(long_fns)} of {total} product functions are over {limit} lines:")
    for length, where, name in long_fns:
        print(f"  {length:4d}  {name}  ({where})")


if __name__ == "__main__":
    main()
