#!/usr/bin/env python3
"""Which top-level modules of `src/` use which (test code left out), and
the pairs that use each other.

    python3 .ci/rooms.py [--edges] [--from ROOM] [--to ROOM]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from fn_lengths import blank_out, test_spans  # noqa: E402


def room_of(path):
    rel = os.path.relpath(path, "src")
    head = rel.split(os.sep)[0]
    return head[:-3] if head.endswith(".rs") else head


def uses(code):
    """The top-level modules named by `crate::` paths, `use crate::{a, b}`
    groups included."""
    found = set()
    for m in re.finditer(r"\bcrate::(\{)?", code):
        if m.group(1):
            depth, j = 1, m.end()
            while depth and j < len(code):
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            group = code[m.end():j - 1]
            # Top-level items of the group: split at depth 0.
            depth, part, parts = 0, "", []
            for ch in group:
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                if ch == "," and depth == 0:
                    parts.append(part)
                    part = ""
                else:
                    part += ch
            parts.append(part)
            for p in parts:
                name = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", p)
                if name:
                    found.add(name.group(1))
        else:
            name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", code[m.end():])
            if name:
                found.add(name.group(0))
    return found


def main(argv):
    edges = {}
    rooms = set()
    for root, _, names in os.walk("src"):
        for f in names:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            if f in ("tests.rs",) or os.sep + "tests" + os.sep in path:
                continue
            room = room_of(path)
            rooms.add(room)
            code = blank_out(open(path, encoding="utf-8").read())
            for a, b in sorted(test_spans(code), reverse=True):
                code = code[:a] + code[b + 1:]
            for to in uses(code):
                if to != room:
                    edges.setdefault((room, to), set()).add(path)
    edges = {k: v for k, v in edges.items() if k[1] in rooms}
    want_from = argv[argv.index("--from") + 1] if "--from" in argv else None
    want_to = argv[argv.index("--to") + 1] if "--to" in argv else None
    if "--edges" in argv or want_from or want_to:
        for (a, b), files in sorted(edges.items()):
            if (want_from and a != want_from) or (want_to and b != want_to):
                continue
            print(f"{a} -> {b}: {', '.join(sorted(files))}")
    cycles = sorted((a, b) for (a, b) in edges if a < b and (b, a) in edges)
    for a, b in cycles:
        print(f"cycle {a} <-> {b}")
        print(f"  {a} -> {b}: {', '.join(sorted(edges[(a, b)]))}")
        print(f"  {b} -> {a}: {', '.join(sorted(edges[(b, a)]))}")
    print(f"{len(cycles)} pairs of rooms use each other")


if __name__ == "__main__":
    main(sys.argv[1:])
