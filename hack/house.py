#!/usr/bin/env python3
"""The shape of src/ (docs/design.md, "Layers"), checked: no import cycle between files, no file
name used twice, no source file over 400 lines before its tests, design.md's layers
table naming exactly the files of src/, and every file and item design.md cites existing (a
`module::name` defined in that module's file, a file of ours at its path). It prints the production lines (src/ before its tests) as
a figure, not a limit: a cap made the code compressed rather than simple.

A file's imports are the `crate::a::b` and `super::` paths in its code before its tests (the
first `#[cfg(test)]` line); a path names the deepest file it reaches. Run by hack/lint.sh; exit 1
on a finding.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 400
SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def module_of(path):
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def body(path):
    """The file's lines before its tests."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            return lines[:i]
    return lines


def resolve(path_parts, modules):
    """The deepest module in `modules` that the path reaches, or None."""
    for n in range(len(path_parts), 0, -1):
        if tuple(path_parts[:n]) in modules:
            return tuple(path_parts[:n])
    return None


USE_TREE = re.compile(r"\b(crate|super)((?:::\w+)+)(::\{[^;]*?\})?", re.S)


def imports(mod, text, modules):
    found = set()
    for m in USE_TREE.finditer(text):
        head, tail, group = m.group(1), m.group(2), m.group(3)
        base = [] if head == "crate" else list(mod[:-1])
        parts = base + [p for p in tail.split("::") if p]
        heads = [parts]
        if group:
            for item in re.split(r",", group.strip(":{}")):
                item = item.strip().split("::")[0].split(" as ")[0].strip()
                if item and item != "self":
                    heads.append(parts + [item])
        for p in heads:
            target = resolve(p, modules)
            if target is not None and target != mod and target != ():
                found.add(target)
    return found


def cycles(graph):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


DESIGN = SRC.parent / "docs" / "design.md"


def layers_table_mismatch(files):
    """The files of src/ that design.md's layers table does not name, and the names it gives
    that are not files of src/: the table's rows, from "## Layers" to the next heading."""
    text = DESIGN.read_text()
    start = text.index("\n## Layers\n")
    end = text.find("\n## ", start + 1)
    rows = [l for l in text[start:end].splitlines() if l.startswith("|")]
    named = set(re.findall(r"`([\w/]+\.rs)`", "\n".join(rows)))
    actual = {str(p.relative_to(SRC)) for p in files}
    return sorted(actual - named), sorted(named - actual)


ROOT = SRC.parent
# An item's definition: `fn name`, `struct name`, `const NAME: …`, an enum variant `Name,` or
# `Name {`/`Name(` at the start of a line, a `mod name`, a `pub use … name`.
DEFINES = r"(?m)(\b(fn|struct|enum|trait|type|const|static|mod|macro_rules!)\s+{0}\b|^\s*{0}\s*[,({{]|\buse\b[^;]*\b{0}\b)"
CITED_PATH = re.compile(r"`((?:crate::)?[A-Za-z_]\w*(?:::\w+)+)(?:\(\))?`")
CITED_FILE = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:rs|sh|py|yaml|md|txt|toml|json))`")


def defines(path, name):
    return path.is_file() and re.search(DEFINES.format(re.escape(name)), path.read_text()) is not None


def test_files(first):
    """The files a test path's first segment may name: a test module (`tests/**/first.rs`), or
    a test binary's (`tests/first/*.rs`)."""
    tests = ROOT / "tests"
    return sorted(tests.rglob(f"{first}.rs")) + sorted((tests / first).glob("*.rs"))


def stale_citations(modules):
    """design.md's citations of code that does not exist: a file (`src/x.rs`, `hack/x.sh`, a
    layers-table `plan/x.rs`), or a path `module::name` (the module a file of src/, a test
    binary's module for a test; the name defined in that file). A path into another crate
    (`kube::…`, `runtime::…`) names no module of ours and is not checked."""
    text = DESIGN.read_text()
    out = []
    for f in sorted(set(CITED_FILE.findall(text))):
        # Ours only: another project's file (Harvester's `package/upgrade/…`) is cited as theirs.
        ours = [base for base in (ROOT, SRC, ROOT / "docs") if (base / f.split("/")[0]).is_dir()]
        if ours and not any((base / f).exists() for base in ours):
            out.append(f"the file `{f}`")
    by_last = {}
    for mod, p in modules.items():
        if mod:
            by_last.setdefault(mod[-1], []).append(p)
    for cited in sorted(set(CITED_PATH.findall(text))):
        parts = cited.removeprefix("crate::").split("::")
        # The deepest module of ours the path names: from the crate's root, or by a module's own
        # name as the docs shorten it (`fleet_status::conflicts`).
        n = next((n for n in range(len(parts) - 1, 0, -1) if tuple(parts[:n]) in modules), 0)
        if parts[0] == "main":
            files, rest = [SRC / "main.rs"], parts[1:]
        elif n:
            files, rest = [modules[tuple(parts[:n])]], parts[n:]
        elif parts[0] in by_last:
            files, rest = by_last[parts[0]], parts[1:]
        elif test_files(parts[0]):
            files, rest = test_files(parts[0]), parts[1:]
        else:
            # A type's item (`Handling::of`, `Cluster::converge`): defined in the type's file or
            # in a file with an `impl` of it (`impl Cluster`, `impl Loop<'_>`).
            typed = rf"\b(struct|enum|trait)\s+{parts[0]}\b|\bimpl\b[^{{;]*\b{parts[0]}\b"
            files = [p for p in modules.values() if re.search(typed, p.read_text())]
            rest = parts[1:]
            if not files:
                continue
        rest = [r for r in rest if r != "tests"]
        if not files or not all(any(defines(p, name) for p in files) for name in rest):
            out.append(f"`{cited}`")
    return out



def main():
    files = sorted(p for p in SRC.rglob("*.rs") if p.name != "tests.rs" and p.name != "testing.rs")
    modules = {module_of(p): p for p in files}
    problems = []
    names = {}
    for p in sorted(SRC.rglob("*.rs")):
        if p.name in ("mod.rs", "tests.rs"):
            continue
        names.setdefault(p.name, []).append(str(p.relative_to(SRC.parent)))
    for name, where in sorted(names.items()):
        if len(where) > 1:
            problems.append(f"file name {name} used twice: {', '.join(where)}")
    graph = {}
    production = sum(len(body(p)) for p in files)  # lib.rs and main.rs share the module ()
    for mod, p in modules.items():
        lines = body(p)
        if len(lines) > MAX_FILE_LINES:
            problems.append(f"{p.relative_to(SRC.parent)}: {len(lines)} lines before its tests (at most {MAX_FILE_LINES})")
        if mod == ():
            continue
        text = "\n".join(l for l in lines if not l.lstrip().startswith("//"))
        graph[mod] = imports(mod, text, modules)
    for comp in cycles(graph):
        problems.append("import cycle between " + ", ".join("::".join(m) for m in comp))
    tracked = sorted(SRC.rglob("*.rs"))
    unnamed, stale = layers_table_mismatch(tracked)
    if unnamed:
        problems.append(f"docs/design.md's layers table does not name {', '.join(unnamed)}")
    if stale:
        problems.append(f"docs/design.md's layers table names {', '.join(stale)}, not in src/")
    for cited in stale_citations(modules):
        problems.append(f"docs/design.md cites {cited}, which does not exist")
    for line in problems:
        print(f"house: {line}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"house: ok ({len(modules)} files, no cycle, no twin name, none over {MAX_FILE_LINES} lines, each in design.md's layers table, every file and item design.md cites there; {production} production lines)")


if __name__ == "__main__":
    main()
