#!/usr/bin/env python3
"""Writes data/gotypes.json: the Go structs behind every object the sandbox
serves, as the kube-apiserver's JSON encoder sees them.

For each struct type reachable from a served kind (and its List, and the
meta/v1, autoscaling/v1, apidiscovery/v2 and version types the server also
writes), the fields in declaration order with their JSON name, a short type
and the tag's omitempty/omitzero. From this the sandbox knows, without a
table of its own:

- which fields a real server always writes (no omitempty), so what a new
  object's status holds (`0`, `""`, `false`, `null`, `{}`), and
- the order of the fields at every depth (Go writes a struct's fields in
  declaration order; maps, sorted).

Usage (each argument a git directory, read at HEAD, e.g. the mirrors that
`fetch github:kubernetes/api` and friends bring):

    gotypes.py API APIMACHINERY APIEXTENSIONS KUBE_AGGREGATOR METRICS > gotypes.json
    gotypes.py --check API ... METRICS   # exit 1 if gotypes.json differs

Type codes in the output: `s` string, `i` integer, `f` float, `b` bool,
`n` a pointer, slice or map of scalars (zero: null), `@T` a struct,
`*@T` a pointer to one, `[]@T` a slice of them, `{}@T` a map to them,
`=LIT` a type with its own MarshalJSON whose zero value is written as LIT.
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gotypes.json")

# import path prefix -> (repo index, dir in repo, package id)
def package_of(import_path):
    m = re.fullmatch(r"k8s\.io/api/([a-z0-9]+)/(v[0-9a-z]+)", import_path)
    if m:
        return (0, f"{m[1]}/{m[2]}", f"{m[1]}/{m[2]}")
    fixed = {
        "k8s.io/apimachinery/pkg/apis/meta/v1": (1, "pkg/apis/meta/v1", "meta/v1"),
        "k8s.io/apimachinery/pkg/version": (1, "pkg/version", "version"),
        "k8s.io/apimachinery/pkg/runtime": (1, "pkg/runtime", "runtime"),
        "k8s.io/apimachinery/pkg/api/resource": (1, "pkg/api/resource", "resource"),
        "k8s.io/apimachinery/pkg/util/intstr": (1, "pkg/util/intstr", "intstr"),
        "k8s.io/apimachinery/pkg/types": (1, "pkg/types", "types"),
        "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1": (
            2, "pkg/apis/apiextensions/v1", "apiextensions/v1"),
        "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1": (
            3, "pkg/apis/apiregistration/v1", "apiregistration/v1"),
        "k8s.io/metrics/pkg/apis/metrics/v1beta1": (
            4, "pkg/apis/metrics/v1beta1", "metrics/v1beta1"),
    }
    return fixed.get(import_path)

# The zero value that a type with its own MarshalJSON writes (read from
# each method: Time and MicroTime write null when zero, Quantity "0",
# IntOrString its IntVal, Duration its String(), RawExtension, FieldsV1 and
# apiextensions' JSON their empty Raw as null, JSONSchemaPropsOrBool false).
CUSTOM_ZERO = {
    "meta/v1.Time": None, "meta/v1.MicroTime": None, "meta/v1.Duration": "0s",
    "meta/v1.FieldsV1": None, "meta/v1.GroupVersion": "",
    "resource.Quantity": "0", "intstr.IntOrString": 0,
    "runtime.RawExtension": None, "runtime.Unknown": None,
    "apiextensions/v1.JSON": None, "apiextensions/v1.JSONSchemaPropsOrBool": False,
    "apiextensions/v1.JSONSchemaPropsOrArray": None,
    "apiextensions/v1.JSONSchemaPropsOrStringArray": None,
}
# What a custom-marshalled value is written as when it is not zero, for the
# order of its contents: the struct it stands for.
CUSTOM_AS = {
    "apiextensions/v1.JSONSchemaPropsOrBool": "apiextensions/v1.JSONSchemaProps",
    "apiextensions/v1.JSONSchemaPropsOrArray": "apiextensions/v1.JSONSchemaProps",
    "apiextensions/v1.JSONSchemaPropsOrStringArray": "apiextensions/v1.JSONSchemaProps",
}

SCALARS = {
    "string": "s", "bool": "b", "float32": "f", "float64": "f", "byte": "i",
    "int": "i", "int8": "i", "int16": "i", "int32": "i", "int64": "i",
    "uint": "i", "uint8": "i", "uint16": "i", "uint32": "i", "uint64": "i",
}


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", repo, *args], check=True,
                          capture_output=True, text=True).stdout


class Package:
    def __init__(self, repos, idx, path, pid):
        self.pid = pid
        repo = repos[idx]
        names = git(repo, "ls-tree", "--name-only", "HEAD", path + "/").split()
        self.structs = {}   # name -> [(field name or None, type expr, tag)]
        self.named = {}     # name -> type expr (non-struct)
        self.custom = set()
        self.imports = {}
        for name in names:
            base = os.path.basename(name)
            if not base.endswith(".go") or base.endswith("_test.go") or base.startswith(
                    ("zz_generated", "generated.")):
                continue
            self.parse(git(repo, "show", f"HEAD:{name}"))

    def parse(self, src):
        src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
        lines = [re.sub(r"//.*$", "", l) if "`" not in l else l for l in src.split("\n")]
        lines = [l for l in lines if not l.strip().startswith("//")]
        text = "\n".join(lines)
        for block in re.findall(r"^import \((.*?)^\)", text, flags=re.S | re.M):
            for alias, path in re.findall(r"^\s*([A-Za-z0-9_]*)\s*\"([^\"]+)\"", block, flags=re.M):
                self.imports[alias or path.rsplit("/", 1)[-1]] = path
        for alias, path in re.findall(r"^import\s+([A-Za-z0-9_]*)\s*\"([^\"]+)\"", text, flags=re.M):
            self.imports[alias or path.rsplit("/", 1)[-1]] = path
        for recv in re.findall(r"^func \(\w+ \*?(\w+)\) MarshalJSON\(", text, flags=re.M):
            self.custom.add(recv)
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, flags=re.S | re.M):
            self.structs[m[1]] = [l.strip() for l in m[2].split("\n") if l.strip()]
        for name in re.findall(r"^type (\w+) struct ?\{\}", text, flags=re.M):
            self.structs[name] = []
        for m in re.finditer(r"^type (\w+) =? ?([^\s{]+)\s*$", text, flags=re.M):
            self.named[m[1]] = m[2]


def fields_of(pid, struct, lines):
    """(name or None when embedded, type, tag) of each field of a struct."""
    for line in lines:
        fm = re.fullmatch(r"(?:(\w+(?:,\s*\w+)*)\s+)?([^\s`]+)\s*(?:`(.*)`)?", line)
        if not fm:
            raise SystemExit(f"{pid}.{struct}: cannot read field {line!r}")
        for fname in fm[1].split(",") if fm[1] else [None]:
            yield (fname and fname.strip(), fm[2], fm[3] or "")


class Universe:
    def __init__(self, repos):
        self.repos = repos
        self.packages = {}
        self.types = {}  # id -> list of [name, code, opt]

    def package(self, import_path):
        spec = package_of(import_path)
        if spec is None:
            raise SystemExit(f"no source for import {import_path}")
        pid = spec[2]
        if pid not in self.packages:
            self.packages[pid] = Package(self.repos, *spec)
            self.packages[pid].import_path = import_path
        return self.packages[pid]

    def resolve(self, pkg, expr):
        """(package, bare type name) of a named type expression."""
        if "." in expr:
            alias, name = expr.split(".", 1)
            return self.package(pkg.imports[alias]), name
        return pkg, expr

    def code(self, pkg, expr):
        """The type code of `expr` in `pkg` (see the module doc)."""
        if expr.startswith("*"):
            inner = self.code(pkg, expr[1:])
            return "*@" + inner.split("@", 1)[1] if "@" in inner else "n"
        if expr.startswith("[]"):
            if expr == "[]byte":
                return "n"
            inner = self.code(pkg, expr[2:])
            return "[]@" + inner.split("@", 1)[1] if "@" in inner else "n"
        if expr.startswith("map["):
            depth, i = 0, 3
            for i in range(3, len(expr)):
                depth += expr[i] == "["
                depth -= expr[i] == "]"
                if depth == 0:
                    break
            inner = self.code(pkg, expr[i + 1:])
            return "{}@" + inner.split("@", 1)[1] if "@" in inner else "n"
        if expr in SCALARS:
            return SCALARS[expr]
        if expr in ("interface{}", "any"):
            return "n"
        p, name = self.resolve(pkg, expr)
        tid = f"{p.pid}.{name}"
        if tid in CUSTOM_ZERO or name in p.custom:
            if tid not in CUSTOM_ZERO:
                raise SystemExit(f"{tid} has its own MarshalJSON: say what its zero value writes")
            zero = "=" + json.dumps(CUSTOM_ZERO[tid])
            if tid in CUSTOM_AS:
                self.struct(p, CUSTOM_AS[tid].split(".", 1)[1])
                return zero + "@" + CUSTOM_AS[tid]
            return zero
        if name in p.structs:
            self.struct(p, name)
            return "@" + tid
        if name in p.named:
            return self.code(p, p.named[name])
        if p.pid == "types" and name in ("UID", "NodeName", "NamespacedName"):
            return "s"
        raise SystemExit(f"unknown type {expr} in {pkg.pid}")

    def struct(self, pkg, name):
        tid = f"{pkg.pid}.{name}"
        if tid in self.types:
            return tid
        self.types[tid] = None  # cycles (JSONSchemaProps) end here
        out = []
        for fname, texpr, tag in fields_of(pkg.pid, name, pkg.structs[name]):
            jm = re.search(r'json:"([^"]*)"', tag)
            jname, *opts = (jm[1] if jm else "").split(",")
            if jname == "-":
                continue
            if fname is None and (jname == "" or "inline" in opts):
                # An embedded struct: its fields are written in its place.
                p, inner = self.resolve(pkg, texpr.lstrip("*"))
                out.extend(self.types[self.struct(p, inner)])
                continue
            if fname is not None and not fname[0].isupper():
                continue  # unexported: never written
            opt = "omitzero" if "omitzero" in opts else ("omitempty" if "omitempty" in opts else "")
            out.append([jname or fname, self.code(pkg, texpr), opt])
        self.types[tid] = out
        return tid


def kinds_served():
    table = json.load(open(os.path.join(HERE, "builtin.json")))
    for gv in table["groupVersions"]:
        group = gv["group"]
        label = group.split(".")[0] if group else "core"
        yield label, gv["version"], [r["kind"] for r in gv["resources"]]


def generate(repos):
    u = Universe(repos)
    roots = []
    for label, version, kinds in kinds_served():
        base = {"apiextensions": "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/",
                "apiregistration": "k8s.io/kube-aggregator/pkg/apis/apiregistration/",
                "metrics": "k8s.io/metrics/pkg/apis/metrics/"}.get(label, f"k8s.io/api/{label}/")
        pkg = u.package(base + version)
        for kind in kinds:
            for name in (kind, kind + "List"):
                if name in pkg.structs:
                    roots.append(u.struct(pkg, name))
    # Not kinds of a resource, but written by every server: errors, tables,
    # partial metadata, discovery, scale, eviction, token requests, version.
    meta = u.package("k8s.io/apimachinery/pkg/apis/meta/v1")
    for name in ("Status", "Table", "PartialObjectMetadata", "PartialObjectMetadataList",
                 "APIVersions", "APIGroupList", "APIGroup", "APIResourceList", "WatchEvent"):
        roots.append(u.struct(meta, name))
    for path, names in (("k8s.io/api/autoscaling/v1", ["Scale"]),
                        ("k8s.io/api/apidiscovery/v2", ["APIGroupDiscoveryList"]),
                        ("k8s.io/api/authentication/v1", ["TokenRequest"]),
                        ("k8s.io/api/policy/v1", ["Eviction"]),
                        ("k8s.io/apimachinery/pkg/version", ["Info"])):
        pkg = u.package(path)
        roots.extend(u.struct(pkg, n) for n in names)
    sources = {}
    for pkg in u.packages.values():
        repo = repos[package_of(pkg.import_path)[0]]
        name = os.path.basename(os.path.dirname(os.path.abspath(repo))).replace("+", "/")
        sources[name] = git(repo, "rev-parse", "HEAD").strip()
    return {
        "source": "Generated by data/gotypes.py from the Go types (types*.go, json tags) of "
        + ", ".join(f"{k} @{v}" for k, v in sorted(sources.items())),
        "roots": sorted(set(roots)),
        "types": dict(sorted(u.types.items())),
    }


def dump(doc):
    # One type a line: small diffs when Kubernetes adds a field.
    lines = ["{", f' "source": {json.dumps(doc["source"])},',
             f' "roots": {json.dumps(doc["roots"], separators=(",", ":"))},', ' "types": {']
    items = list(doc["types"].items())
    for i, (tid, fields) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        lines.append(f'  {json.dumps(tid)}: {json.dumps(fields, separators=(",", ":"))}{comma}')
    lines += [" }", "}", ""]
    return "\n".join(lines)


def main(argv):
    check = argv[:1] == ["--check"]
    repos = argv[1:] if check else argv
    if len(repos) != 5:
        raise SystemExit(__doc__)
    text = dump(generate(repos))
    if check:
        same = open(OUT).read() == text
        print("gotypes.json is up to date" if same else "gotypes.json differs from the sources")
        return 0 if same else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
