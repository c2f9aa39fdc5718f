#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a circle.

Every `.rs` file under `crates/*/src` and `e2e/src` is a module; a path written in it
(`crate::a::b`, `super::x`, `self::y`, also inside `use` braces) is an edge to the longest module
that path names. Prints each cycle (a strongly connected component of more than one module) and
exits 1 when there is one. Cycles between crates are impossible (Cargo refuses them).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def module_path(src: pathlib.Path, file: pathlib.Path) -> tuple:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def expand(path: str) -> list:
    """`a::{b, c::d}` -> [a::b, a::c::d] (nested braces included)."""
    m = re.match(r"^(.*?)\{(.*)\}$", path, flags=re.S)
    if not m:
        return [path]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for item in items:
        item = re.sub(r"\s+", "", item)
        if item:
            out.extend(expand(prefix + item))
    return out


def edges_of(text: str, here: tuple, is_dir_module: bool) -> set:
    text = strip_comments(text)
    # Unit tests sit at the end of a file, in a child module whose `super` is the file itself.
    text = text.split("#[cfg(test)]")[0]
    paths = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", text):
        paths.extend(expand(re.sub(r"\s+", "", m.group(1))))
    for m in re.finditer(r"(?<![:\w])((?:crate|super|self)(?:::\w+)+)", text):
        paths.append(m.group(1))
    targets = set()
    if is_dir_module:
        # A module file names its own child modules without a prefix (`reconcile::run(..)`).
        for m in re.finditer(r"(?<![:\w])(\w+)::", text):
            targets.add((tuple(here), (m.group(1),)))
    for p in paths:
        segs = p.split("::")
        if segs[0] == "crate":
            cur, rest = [], segs[1:]
        elif segs[0] == "self":
            cur, rest = list(here), segs[1:]
        else:
            cur = list(here)
            rest = segs
            while rest and rest[0] == "super":
                cur = cur[:-1]
                rest = rest[1:]
        targets.add((tuple(cur), tuple(rest)))
    return targets


def reexports(text: str, here: tuple) -> dict:
    """`pub use x::Name;` in module `here`: Name -> the module path it comes from."""
    text = strip_comments(text).split("#[cfg(test)]")[0]
    out = {}
    for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", text):
        for path in expand(re.sub(r"\s+", "", m.group(1))):
            segs = path.split("::")
            name = segs[-1]
            if " as " in name or "as" in segs[-1][:0]:
                pass
            if segs[0] == "crate":
                cur, rest = (), segs[1:-1]
            elif segs[0] == "super":
                cur, rest = tuple(here), segs[:-1]
                while rest and rest[0] == "super":
                    cur, rest = cur[:-1], rest[1:]
            elif segs[0] == "self":
                cur, rest = tuple(here), segs[1:-1]
            else:
                cur, rest = tuple(here), segs[:-1]
            out.setdefault(name, []).append((cur, tuple(rest)))
    return out


def defines(file: pathlib.Path, name: str) -> bool:
    pattern = rf"\b(?:struct|enum|type|fn|const|static|trait|mod|union)\s+{re.escape(name)}\b"
    # kube's `#[derive(CustomResource)]` makes the type named by `kind = "..."`.
    derived = rf'\bkind\s*=\s*"{re.escape(name)}"'
    text = file.read_text()
    return re.search(pattern, text) is not None or re.search(derived, text) is not None


def main() -> int:
    failed = False
    crates = sorted(ROOT.glob("crates/*/src")) + [ROOT / "e2e" / "src"]
    for src in crates:
        if not src.is_dir():
            continue
        files = sorted(src.rglob("*.rs"))
        modules = {}
        for f in files:
            modules[module_path(src, f)] = f
        graph = {m: set() for m in modules}
        exported = {m: reexports(f.read_text(), m) for m, f in modules.items()}

        def resolve(cur, rest, depth=0):
            target = tuple(cur)
            rest = list(rest)
            while rest and target + (rest[0],) in modules:
                target = target + (rest.pop(0),)
            # A name a module only re-exports belongs to the module it comes from.
            if not rest or depth >= 8:
                return target
            table = exported.get(target, {})
            if rest[0] in table:
                c, r = table[rest[0]][0]
                return resolve(c, list(r) + rest, depth + 1)
            # `pub use x::*`: the name belongs to the glob's module that defines it.
            for c, r in table.get("*", []):
                source = resolve(c, list(r), depth + 1)
                if source in modules and defines(modules[source], rest[0]):
                    return resolve(c, list(r) + rest, depth + 1)
            return target

        for mod, f in modules.items():
            for cur, rest in edges_of(f.read_text(), mod, f.name in ("mod.rs", "lib.rs", "main.rs")):
                target = resolve(cur, rest)
                if target != mod and target in modules:
                    graph[mod].add(target)
        for scc in sccs(graph):
            if len(scc) > 1:
                failed = True
                names = ", ".join("::".join(m) or "<root>" for m in sorted(scc))
                print(f"{src.parent.name}: modules import each other in a circle: {names}")
                for m in sorted(scc):
                    inside = sorted(graph[m] & set(scc))
                    print(f"    {'::'.join(m) or '<root>'} -> {', '.join('::'.join(x) or '<root>' for x in inside)}")
    if not failed:
        print("no import cycle between modules")
    return 1 if failed else 0


def sccs(graph: dict) -> list:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
