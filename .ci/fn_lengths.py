#!/usr/bin/env python3
"""Lists the functions of `src/` longer than a limit (120 lines by default).

A function's length runs from the line of its `fn` to its closing brace.
Test code (`#[cfg(test)]` modules and `#[test]` functions) is left out, and
so are `src/sandbox` unless `--sandbox` is given and the data tables the
house style lets stay whole (`default_rbac`, `rules`, `schema`).

    python3 .ci/fn_lengths.py [--limit N] [--sandbox] [--all] [paths...]
"""
import os
import re
import sys

TABLES = {"default_rbac", "rules", "schema"}


def blank_out(text):
    """`text` with comments, strings and char literals replaced by spaces
    (newlines kept), so braces and keywords can be matched."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif re.match(r'(b?r#*")', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'(b?r)(#*)"', text[i:])
            end = '"' + m.group(2)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def test_spans(code):
    """Character spans of test code: items after `#[cfg(test)]` or `#[test]`."""
    spans = []
    for m in re.finditer(r"#\[(cfg\(test\)|test|tokio::test[^\]]*)\]", code):
        open_at = code.find("{", m.end())
        semi = code.find(";", m.end())
        if open_at < 0 or (0 <= semi < open_at and not code[m.end():semi].strip().startswith("fn")):
            continue
        spans.append((m.start(), matching(code, open_at)))
    return spans


def functions(path):
    text = open(path, encoding="utf-8").read()
    code = blank_out(text)
    tests = test_spans(code)
    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", code):
        if any(a <= m.start() <= b for a, b in tests):
            continue
        # The body: the first `{` at depth 0 of brackets after the signature
        # (a `;` first is a declaration without one).
        depth, j = 0, m.end()
        while j < len(code):
            ch = code[j]
            if ch in "([<" and not (ch == "<" and code[j - 1] == "-"):
                depth += 1 if ch != "<" else 0
            if ch in ")]":
                depth -= 1
            if depth == 0 and ch in "{;":
                break
            j += 1
        if j >= len(code) or code[j] == ";":
            continue
        end = matching(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        yield m.group(1), first, last - first + 1


def main(argv):
    limit, sandbox, show_all, paths = 120, False, False, []
    it = iter(argv)
    for a in it:
        if a == "--limit":
            limit = int(next(it))
        elif a == "--sandbox":
            sandbox = True
        elif a == "--all":
            show_all = True
        else:
            paths.append(a)
    paths = paths or ["src"]
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
            continue
        for root, _, names in os.walk(p):
            if not sandbox and (root + "/").startswith("src/sandbox/"):
                continue
            files += [os.path.join(root, f) for f in names if f.endswith(".rs")]
    total, long = 0, []
    for f in sorted(files):
        for name, line, length in functions(f):
            total += 1
            if length > limit and name not in TABLES:
                long.append((length, f, line, name))
    for length, f, line, name in sorted(long, reverse=True):
        print(f"{length:5} {f}:{line} {name}")
    print(f"{len(long)} of {total} functions over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
