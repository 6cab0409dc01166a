#!/usr/bin/env bash
# Checks that every workspace member is listed in the crate listings: the
# "## Crates" section of README.md and of docs/design/architecture.md must
# each name every member's directory (as `dir/`, e.g. `run/`) and its
# package name (e.g. `streamcomm-run`). The members come from
# `cargo metadata --no-deps`, so a crate added to the workspace without a
# line in the listings fails this check.
#
# usage: scripts/check-crates-listed.sh [FILE.md...]
#        (default: README.md docs/design/architecture.md)
# Exit status: 0 when every member is listed in every file, 1 otherwise (each
# missing member is printed as FILE: directory (package)), 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "check-crates-listed: python3 is needed" >&2; exit 2; }
command -v cargo >/dev/null || { echo "check-crates-listed: cargo is needed" >&2; exit 2; }
if [ $# -eq 0 ]; then
  set -- README.md docs/design/architecture.md
fi
metadata=$(cargo metadata --no-deps --format-version 1 --offline) ||
  { echo "check-crates-listed: cargo metadata failed" >&2; exit 2; }
exec python3 - "$metadata" "$@" <<'PY'
import json
import os
import re
import sys

meta = json.loads(sys.argv[1])
root = meta["workspace_root"]
by_id = {p["id"]: p for p in meta["packages"]}
members = []
for pid in meta["workspace_members"]:
    pkg = by_id[pid]
    rel = os.path.relpath(os.path.dirname(pkg["manifest_path"]), root)
    members.append((rel + "/", pkg["name"]))


def section(path):
    """The text of the "## Crates" section of `path`, or None."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Crates[ \t]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else None


def names(text, word):
    return re.search(r"(?<![\w/-])" + re.escape(word) + r"(?![\w-])", text) is not None


bad = 0
for path in sys.argv[2:]:
    if not os.path.isfile(path):
        print(f"check-crates-listed: no such file: {path}", file=sys.stderr)
        sys.exit(2)
    listing = section(path)
    if listing is None:
        print(f"{path}: no \"## Crates\" section")
        bad += 1
        continue
    for directory, name in members:
        if not (names(listing, directory) and names(listing, name)):
            print(f"{path}: {directory} ({name}) is not in the \"## Crates\" listing")
            bad += 1

print(f"check-crates-listed: {len(members)} workspace members, {len(sys.argv) - 2} files, {bad} missing")
sys.exit(1 if bad else 0)
PY
