#!/usr/bin/env bash
# Checks the configuration reference (docs/guide/configuration.md) against
# the doc comments of `Config` (core/src/config/mod.rs), the one place that
# reads STREAMCOMM_* variables for a communicator, and against the list of
# known variables (core/src/config/vars.rs) that unknown ones are warned
# against:
#   - every field of `Config` is documented as `STREAMCOMM_NAME`: ... in its
#     doc comment, and that variable has exactly one row in the reference's
#     "Communicator settings" table;
#   - that table has no row for a variable that is not a field;
#   - no variable has a row in more than one table of the reference;
#   - the list's CONFIG names are that table's rows, its LAUNCH names the
#     "Launcher and bootstrap" table's, and its ELSEWHERE names the rows of
#     the other tables (so a variable documented but not listed would be
#     warned about, and one listed but not documented is caught).
#
# usage: scripts/check-config-doc.sh
# Exit status: 0 when they agree, 1 otherwise (each difference printed).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - core/src/config/mod.rs docs/guide/configuration.md core/src/config/vars.rs <<'PY'
import re
import sys

src_path, doc_path, vars_path = sys.argv[1], sys.argv[2], sys.argv[3]
src = open(src_path, encoding="utf-8").read()
doc = open(doc_path, encoding="utf-8").read()
problems = []

# Fields of `pub struct Config { ... }` and the variable each one's doc names first.
body = re.search(r"pub struct Config \{(.*?)\n\}", src, re.S).group(1)
fields, doc_lines = {}, []
for line in body.splitlines():
    line = line.strip()
    if line.startswith("///"):
        doc_lines.append(line[3:].strip())
    elif line.startswith(("pub ", "pub(crate) ")):
        # A crate-private field is a setting too: its variable is read
        # into it, and only the type behind it is internal.
        name = re.match(r"pub(?:\(crate\))? (\w+)", line).group(1)
        m = re.match(r"`(STREAMCOMM_[A-Z0-9_]+)`:", " ".join(doc_lines))
        if m:
            fields[m.group(1)] = name
        else:
            problems.append(f"{src_path}: field `{name}`: its doc comment does not start with `STREAMCOMM_...`:")
        doc_lines = []

# Row keys of every table in the reference, by section.
rows, section = {}, None
for no, line in enumerate(doc.splitlines(), 1):
    if line.startswith("## "):
        section = line[3:].strip()
    m = re.match(r"^\|\s*`(STREAMCOMM_[A-Z0-9_]+)`\s*\|", line)
    if m:
        rows.setdefault(m.group(1), []).append((no, section))

for var, where in sorted(rows.items()):
    if len(where) > 1:
        lines = ", ".join(str(no) for no, _ in where)
        problems.append(f"{doc_path}: {var} has {len(where)} rows (lines {lines}); one is the rule")

config_rows = {v for v, where in rows.items() if any(s and "Config" in s for _, s in where)}
for var, field in sorted(fields.items()):
    if var not in config_rows:
        problems.append(f"{doc_path}: no row for {var} (Config::{field}) in the Communicator settings table")
for var in sorted(config_rows - set(fields)):
    problems.append(f"{doc_path}: {var} is in the Communicator settings table but is no field of Config")

# The known-variable list: `const NAME: Var = var("STREAMCOMM_...", ...)`
# items, grouped by the `CONFIG` and `LAUNCH` arrays, and the `ELSEWHERE`
# array of plain names (test code after `#[cfg(test)]` is ignored).
vsrc = open(vars_path, encoding="utf-8").read().split("#[cfg(test)]")[0]
consts = dict(re.findall(r'const (\w+): Var = var\(\s*"(STREAMCOMM_[A-Z0-9_]+)"', vsrc))

def array(name):
    m = re.search(r"const " + name + r": &\[[^\]]*\] = &\[(.*?)\];", vsrc, re.S)
    if not m:
        problems.append(f"{vars_path}: no `{name}` list")
        return set()
    body = re.sub(r"//[^\n]*", "", m.group(1))
    names = set(re.findall(r'"(STREAMCOMM_[A-Z0-9_]+)"', body))
    for ident in re.findall(r"\b([A-Z][A-Z0-9_]*)\b", re.sub(r'"[^"]*"', "", body)):
        if ident not in consts:
            problems.append(f"{vars_path}: {name} names `{ident}`, which is no `Var` const")
        else:
            names.add(consts[ident])
    return names

listed = {"CONFIG": array("CONFIG"), "LAUNCH": array("LAUNCH"), "ELSEWHERE": array("ELSEWHERE")}
by_section = {
    "CONFIG": lambda s: s and "Config" in s,
    "LAUNCH": lambda s: s and s.startswith("Launcher"),
    "ELSEWHERE": lambda s: not (s and ("Config" in s or s.startswith("Launcher"))),
}
for group, names in listed.items():
    documented = {v for v, where in rows.items() if any(by_section[group](s) for _, s in where)}
    for var in sorted(names - documented):
        problems.append(f"{vars_path}: {var} is in {group} but has no row in its table of {doc_path}")
    for var in sorted(documented - names):
        problems.append(f"{vars_path}: {var} has a row in {doc_path} but is not in {group}")
for var in sorted(set(consts.values()) - listed["CONFIG"] - listed["LAUNCH"]):
    problems.append(f"{vars_path}: {var} has a `Var` but is in neither CONFIG nor LAUNCH")

for p in problems:
    print(p)
print(f"check-config-doc: {len(fields)} Config fields, {len(rows)} documented variables, "
      f"{sum(len(n) for n in listed.values())} known, {len(problems)} problems")
sys.exit(1 if problems else 0)
PY
