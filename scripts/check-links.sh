#!/usr/bin/env bash
# Checks that every relative link in README.md, CHANGELOG.md and docs/**/*.md
# resolves: the file or directory exists, and a #fragment names a heading of
# the target Markdown file (GitHub's anchor rules: lower case, punctuation
# dropped, spaces to dashes). Links with a scheme (https:, mailto:) are not
# fetched. Absolute paths as link targets fail too (they name one
# machine's files). Links inside fenced code blocks and inline code are
# ignored.
#
# usage: scripts/check-links.sh [FILE.md...]   (default: README.md, CHANGELOG.md, docs/)
# Exit status: 0 when every link resolves, 1 otherwise (each broken link is
# printed as FILE:LINE: target), 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "check-links: python3 is needed" >&2; exit 2; }
if [ $# -eq 0 ]; then
  set -- README.md CHANGELOG.md $(find docs -name '*.md' | sort)
fi
exec python3 - "$@" <<'PY'
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def anchors(path, cache={}):
    if path not in cache:
        found, seen, fenced = set(), {}, False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                text = re.sub(r"`([^`]*)`", r"\1", m.group(1))
                text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
                slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                found.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = found
    return cache[path]


def targets(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            plain = re.sub(r"`[^`]*`", "", line)
            for m in LINK.finditer(plain):
                yield no, m.group(1)
            m = REF_DEF.match(plain)
            if m:
                yield no, m.group(1)


bad = checked = 0
for md in sys.argv[1:]:
    if not os.path.isfile(md):
        print(f"check-links: no such file: {md}", file=sys.stderr)
        sys.exit(2)
    for no, target in targets(md):
        checked += 1
        if SCHEME.match(target):
            continue
        problem = None
        path, _, frag = target.partition("#")
        if path.startswith("/"):
            problem = "absolute path"
        else:
            full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(full):
                problem = "no such file"
            elif frag and full.endswith(".md") and frag not in anchors(full):
                problem = f"no heading #{frag}"
        if problem:
            bad += 1
            print(f"{md}:{no}: {target}: {problem}")

print(f"check-links: {checked} links in {len(sys.argv) - 1} files, {bad} broken")
sys.exit(1 if bad else 0)
PY
