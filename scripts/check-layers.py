#!/usr/bin/env python3
"""Checks that the top-level modules of core/src depend on each other
without cycles, and prints the layer order found.

A reference from module A to module B is any path into B written in a file
of A: `use crate::B...`, `crate::B::...` in code, `super::` climbing to
the crate root then naming B, or a name the crate root re-exports from B
(`crate::Communicator` is `comm`). Comments are ignored, and so is test
code (files named `tests.rs` or `*_tests.rs`, and `#[cfg(test)]` inline
modules) unless `--with-tests` is given: tests may reach upwards.
`lib.rs` and `bin/` are the roots, not layers.

Control can also flow up without a path: a lower module calls code that an
upper one handed it at run time (a callback kept in a static or a
thread-local, a trait that a lower module defines and an upper one
implements). Such channels are allowed only when the one table of them,
under "Upward channels" in docs/design/architecture.md, has a row for it:
a callback kept in a static that no row names, a trait of one module that
a higher module implements without a row, a row whose item is gone, or a
row that names a module that does not implement it, fails the check.

Inside the folders that FOLDERS names, the same holds one level down: the
folder's modules (its files and subfolders) reference each other without
cycles, its `mod.rs` being the root that composes them (a reference to
what the root defines, such as `Communicator`, is not an edge).

usage: scripts/check-layers.py [--with-tests] [--verbose]
Exit status: 0 without cycles or unnamed upward channels, 1 with (each
cycle is printed with one reference per edge, as FILE:LINE), 2 on a usage
error.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "src")
# The internal crate below core (plans, barrier plans, their simulators):
# the compiler keeps core's modules above it; its traits that core
# implements carry control up all the same, so they need rows too.
ALGO = ("streamcomm_algo",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "algo", "src"))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
CRATE_PATH = re.compile(r"\bcrate::(" + IDENT + r"|\{)")
SUPER_PATH = re.compile(r"\b((?:super::)+)(" + IDENT + r"|\{)")
INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*\{")
# The design page whose "Upward channels" table lists every channel.
DESIGN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "design",
                      "architecture.md")
# Folders of core/src whose own modules must not form a cycle either.
FOLDERS = ["comm"]
TRAIT_DEF = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?trait\s+(" + IDENT + r")", re.M)
TRAIT_IMPL = re.compile(r"\bimpl\b(?:\s*<[^>]*>)?\s+(?:" + IDENT + r"::)*(" + IDENT + r")(?:<[^>]*>)?\s+for\b")
CALLBACK_STATIC = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?static\s+(" + IDENT + r")\s*:\s*([^=]*)", re.M)
CALLABLE = re.compile(r"\bdyn\s+Fn|\bFn(?:Mut|Once)?\s*\(|\bfn\s*\(|\b\w*Hook\b")
CFG_TEST = re.compile(r"^\s*#\[cfg\((?:all\()?test\b")


def strip_comments(text):
    """Blanks out comments and string literals, keeping line numbers."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"' and not text.startswith("'\"'", i - 1):
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_path(rel):
    """core/src-relative file path -> its module path (list of names)."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def group_names(text, start):
    """The first names of each path in the `{...}` group at `start`."""
    depth, i, names, token = 0, start, [], ""
    expect = True
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            expect = depth == 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1 and c == ",":
            expect = True
        elif depth == 1 and expect and (c.isalnum() or c == "_"):
            token += c
            i += 1
            continue
        if token:
            names.append(token)
            token = ""
            expect = False
        i += 1
    if token:
        names.append(token)
    return names


def root_reexports(lib_text):
    """Names the crate root re-exports, mapped to the module they come from."""
    names = {}
    for m in re.finditer(r"pub use (" + IDENT + r")::([^;]*);", lib_text):
        module, rest = m.group(1), m.group(2)
        for name in re.findall(IDENT, rest.split("::")[-1] if "{" not in rest else rest[rest.index("{"):]):
            names[name] = module
    return names


def top_modules(lib_text):
    return set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", lib_text, re.M))


def references(rel, text, tops, reexports, with_tests):
    """Yields (target top-level module, line number) for each reference."""
    base = module_path(rel)
    lines = text.split("\n")
    # Inline modules open at a brace depth; track them to count `super`.
    stack, depth, pending_test, skip_until = [], 0, False, None
    for number, line in enumerate(lines, 1):
        if skip_until is None:
            if CFG_TEST.match(line):
                pending_test = True
            else:
                m = INLINE_MOD.match(line)
                if m:
                    if pending_test and not with_tests:
                        skip_until = depth
                    else:
                        stack.append((depth, m.group(1)))
                    pending_test = False
                elif line.strip() and not line.strip().startswith("#"):
                    pending_test = False
        if skip_until is None:
            inline = [name for _, name in stack]
            module = base + inline
            for m in CRATE_PATH.finditer(line):
                for name in names_at(line, m, 1, lines, number):
                    target = resolve(name, tops, reexports)
                    if target:
                        yield target, number
            for m in SUPER_PATH.finditer(line):
                up = m.group(1).count("super::")
                if up != len(module):
                    continue  # stays inside this top-level module
                for name in names_at(line, m, 2, lines, number):
                    target = resolve(name, tops, reexports)
                    if target:
                        yield target, number
        for c in line:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                while stack and stack[-1][0] >= depth:
                    stack.pop()
                if skip_until is not None and depth <= skip_until:
                    skip_until = None


def names_at(line, m, group, lines, number):
    if m.group(group) != "{":
        return [m.group(group)]
    rest = "\n".join([line[m.start(group):]] + lines[number:number + 40])
    return group_names(rest, 0)


def resolve(name, tops, reexports):
    if name in tops:
        return name
    return reexports.get(name)


def tarjan(nodes, edges):
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            sccs.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sccs


def folder_cycles(folder, with_tests):
    """Cycles among the modules of core/src/FOLDER, each with one
    reference per edge (FILE:LINE)."""
    base = os.path.join(ROOT, folder)
    mods = set()
    for entry in os.listdir(base):
        name = entry[:-3] if entry.endswith(".rs") else entry
        if entry == "mod.rs" or name == "tests" or name.endswith("_tests"):
            continue
        if entry.endswith(".rs") or os.path.isdir(os.path.join(base, entry)):
            mods.add(name)
    edges, where = {}, {}
    own = re.compile(r"\bcrate::" + folder + r"::(" + IDENT + r"|\{)")
    for dirpath, _, files in os.walk(base):
        for file in sorted(files):
            if not file.endswith(".rs"):
                continue
            if not with_tests and (file == "tests.rs" or file.endswith("_tests.rs")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, file), base)
            parts = rel.split(os.sep)
            top = parts[0][:-3] if parts[0].endswith(".rs") else parts[0]
            if top == "mod":
                continue  # the root
            # `super::` count that climbs from this file to the folder.
            depth = len(parts) - (1 if file == "mod.rs" else 0)
            with open(os.path.join(dirpath, file)) as f:
                text = strip_comments(f.read())
            if not with_tests:
                cut = re.search(r"^\s*#\[cfg\(test\)\]\s*\n\s*mod\s+tests\b", text, re.M)
                if cut:
                    text = text[:cut.start()]
            lines = text.split("\n")
            for number, line in enumerate(lines, 1):
                found = [m for m in own.finditer(line)]
                targets = []
                for m in found:
                    targets += names_at(line, m, 1, lines, number)
                for m in SUPER_PATH.finditer(line):
                    if m.group(1).count("super::") == depth:
                        targets += names_at(line, m, 2, lines, number)
                for t in targets:
                    if t in mods and t != top:
                        edges.setdefault(top, set()).add(t)
                        where.setdefault((top, t), f"core/src/{folder}/{rel}:{number}")
    out = []
    for scc in tarjan(mods, edges):
        if len(scc) > 1:
            refs = [f"{a} -> {b}  ({where[(a, b)]})" for a in scc
                    for b in sorted(edges.get(a, ())) if b in scc]
            out.append((scc, refs))
    return out


def upward_table():
    """The rows of the design page's table: (item, defining module, the
    modules that hand code down, why), from cells like
    `| `engine::Source`, a trait | transport, comm → engine | why |`."""
    with open(DESIGN) as f:
        text = f.read()
    start = text.find("### Upward channels")
    if start < 0:
        return None
    rows = []
    for line in text[start:].split("\n")[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        path = cells[0].split("`")[1]
        frm, _, to = cells[1].partition("→")
        rows.append((path.split("::")[-1], path.split("::")[0],
                     [m.strip() for m in frm.split(",")], to.strip(), cells[2]))
    return rows


def without_tests(text):
    """`text` with its `#[cfg(test)]` inline modules blanked."""
    out, lines, skip, depth, pending = [], text.split("\n"), None, 0, False
    for line in lines:
        if skip is None and CFG_TEST.match(line):
            pending = True
        elif skip is None and pending and INLINE_MOD.match(line):
            skip, pending = depth, False
        elif line.strip():
            pending = False
        out.append("" if skip is not None else line)
        depth += line.count("{") - line.count("}")
        if skip is not None and depth <= skip:
            skip = None
    return "\n".join(out)


def upward_problems(edges):
    """Channels the table misses, rows whose item is gone or whose
    modules do not hand code down."""
    rows = upward_table()
    if rows is None:
        return ["docs/design/architecture.md has no \"### Upward channels\" table"]
    problems, by_name = [], {r[0]: r for r in rows}
    statics, traits, impls = {}, {}, []
    for dirpath, _, files in os.walk(ROOT):
        for file in sorted(files):
            if not file.endswith(".rs") or file == "tests.rs" or file.endswith("_tests.rs"):
                continue
            path = os.path.join(dirpath, file)
            rel = os.path.relpath(path, ROOT)
            top = module_path(rel)[0] if module_path(rel) else "lib"
            with open(path) as f:
                text = without_tests(strip_comments(f.read()))
            for m in CALLBACK_STATIC.finditer(text):
                name, ty = m.group(1), m.group(2)
                statics[name] = top
                if CALLABLE.search(ty) and name not in by_name:
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"core/src/{rel}:{line}: static {name} keeps a callback; "
                                    "add a row to the design page's upward channels, or pass it "
                                    "as an argument")
            for m in TRAIT_DEF.finditer(text):
                traits[m.group(1)] = top
            for m in TRAIT_IMPL.finditer(text):
                impls.append((m.group(1), top, f"core/src/{rel}:{text.count(chr(10), 0, m.start()) + 1}"))

    def above(upper, lower):
        seen, todo = set(), [upper]
        while todo:
            v = todo.pop()
            for w in edges.get(v, ()):
                if w == lower:
                    return True
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return False

    algo_name, algo_root = ALGO
    for dirpath, _, files in os.walk(algo_root):
        for file in sorted(files):
            if file.endswith(".rs") and file != "tests.rs" and not file.endswith("_tests.rs"):
                with open(os.path.join(dirpath, file)) as f:
                    text = without_tests(strip_comments(f.read()))
                for m in TRAIT_DEF.finditer(text):
                    traits.setdefault(m.group(1), algo_name)

    implemented = {}
    for name, top, where in impls:
        home = traits.get(name)
        if home is None or home == top or (home != algo_name and not above(top, home)):
            continue
        implemented.setdefault(name, set()).add(top)
        if name not in by_name:
            problems.append(f"{where}: {top} implements {home}'s trait {name}, which carries "
                            "control up: add a row to the design page's upward channels")
    for name, home, frm, to, _ in rows:
        found = traits.get(name) or statics.get(name)
        if found is None:
            problems.append(f"the upward channels name {name}, which core/src and algo/src "
                            "no longer define")
        elif found != home or to != home:
            problems.append(f"the upward channels put {name} in {home} (→ {to}); it is in {found}")
        if name in traits and set(frm) != implemented.get(name, set()):
            problems.append(f"the upward channels say {', '.join(frm)} implement {name}; "
                            f"the code: {', '.join(sorted(implemented.get(name, ()))) or 'none'}")
    return problems


def main(argv):
    with_tests = "--with-tests" in argv
    verbose = "--verbose" in argv
    unknown = [a for a in argv if a not in ("--with-tests", "--verbose")]
    if unknown:
        print(__doc__.strip().split("\n\n")[-2], file=sys.stderr)
        return 2
    with open(os.path.join(ROOT, "lib.rs")) as f:
        lib_text_raw = f.read()
    lib_text = strip_comments(lib_text_raw)
    tops = top_modules(lib_text)
    reexports = {k: v for k, v in root_reexports(lib_text).items() if v in tops}
    edges, where = {}, {}
    for dirpath, _, files in os.walk(ROOT):
        for file in sorted(files):
            if not file.endswith(".rs"):
                continue
            path = os.path.join(dirpath, file)
            rel = os.path.relpath(path, ROOT)
            top = module_path(rel)[0] if module_path(rel) else "lib"
            if top not in tops:
                continue  # lib.rs, bin/
            if not with_tests and (file == "tests.rs" or file.endswith("_tests.rs")):
                continue
            with open(path) as f:
                text = strip_comments(f.read())
            for target, line in references(rel, text, tops, reexports, with_tests):
                if target == top:
                    continue
                edges.setdefault(top, set()).add(target)
                where.setdefault((top, target), f"core/src/{rel}:{line}")
    sccs = tarjan(tops, edges)
    cycles = [s for s in sccs if len(s) > 1]
    if verbose:
        for (a, b), loc in sorted(where.items()):
            print(f"{a} -> {b}  ({loc})")
    if cycles:
        print(f"check-layers: {len(cycles)} cycle(s) between the top-level modules of core/src:")
        for scc in cycles:
            print("  modules on a cycle: " + ", ".join(scc))
            pairs = [(a, b) for a in scc for b in scc if a < b and b in edges.get(a, ()) and a in edges.get(b, ())]
            for a, b in pairs:
                print(f"    {a} <-> {b}")
            for a in scc:
                for b in sorted(edges.get(a, ())):
                    if b in scc:
                        print(f"    {a} -> {b}  ({where[(a, b)]})")
    # Layers, bottom first: a module sits one above the highest it uses
    # (a cycle's modules share a layer).
    component = {v: i for i, s in enumerate(sccs) for v in s}
    level = {}
    for i, scc in enumerate(sccs):  # Tarjan emits dependencies first
        deps = {component[w] for v in scc for w in edges.get(v, ()) if component[w] != i}
        level[i] = 1 + max((level[d] for d in deps), default=-1)
    layers = {}
    for i, scc in enumerate(sccs):
        layers.setdefault(level[i], []).append("+".join(scc) if len(scc) > 1 else scc[0])
    print("layers, bottom first:")
    for lv in sorted(layers):
        print(f"  {lv}: " + ", ".join(sorted(layers[lv])))
    print("upward channels (the design page's table):")
    for name, home, frm, to, why in upward_table() or []:
        print(f"  {name} ({', '.join(frm)} -> {to}): {why}")
    problems = upward_problems(edges)
    for folder in FOLDERS:
        for scc, refs in folder_cycles(folder, with_tests):
            problems.append(f"a cycle among the modules of core/src/{folder}: " + ", ".join(scc)
                            + "".join("\n    " + r for r in refs))
    for p in problems:
        print("check-layers: " + p)
    if cycles or problems:
        return 1
    print("check-layers: no cycles (nor inside " + ", ".join(FOLDERS) + "), no unnamed upward channels")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
