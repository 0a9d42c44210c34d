#!/usr/bin/env python3
"""Rewrite every quoted code block of docs/*.md (and README.md) from the region it names, after the
sources changed (a formatter pass, an edited example). The docs_snippets test is the check; this
is the fix. Markers as in tests/docs/check_snippets.cpp: <!-- snippet: PATH#NAME --> before a
```cpp or ```cmake block, regions between "// [snippet NAME]" and "// [end NAME]" ("#" in CMake).

usage: tools/docs/sync_snippets.py [ROOT]
"""
import re
import sys
from pathlib import Path

MARKER = re.compile(r"^<!--\s*snippet:\s*([^#\s]+)(?:#(\S+))?\s*-->$")
REGION = re.compile(r"^\s*(?://|#)\s*\[(snippet|end)\s+([^\]]+)\]\s*$")


def region(path, name):
    lines = path.read_text().splitlines()
    if not name:
        return lines
    start = next(i for i, l in enumerate(lines) if (m := REGION.match(l)) and m[1] == "snippet" and m[2] == name)
    end = next(i for i, l in enumerate(lines) if i > start and (m := REGION.match(l)) and m[1] == "end" and m[2] == name)
    body = [l for l in lines[start + 1:end] if not REGION.match(l)]
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    indent = min((len(l) - len(l.lstrip()) for l in body if l.strip()), default=0)
    return [l[indent:].rstrip() for l in body]


def sync(md, root):
    lines = md.read_text().splitlines()
    out, i, changed = [], 0, 0
    while i < len(lines):
        out.append(lines[i])
        m = MARKER.match(lines[i].strip())
        if m and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            out.append(lines[i + 1])
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            new = region(root / m[1], m[2])
            changed += new != lines[i + 2:j]
            out.extend(new)
            i = j
            continue
        i += 1
    md.write_text("\n".join(out) + "\n")
    return changed


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    for md in sorted(list((root / "docs").glob("*.md")) + [root / "README.md"]):
        n = sync(md, root)
        if n:
            print(f"{md.relative_to(root)}: {n} block(s) rewritten")
