"""Compare two `render_all.py` folders as Python syntax trees, after renaming identifiers of
the "before" side through a map: proves a template change renamed things and moved layout or
comments only. `python3 benchmarks/render_compare.py BEFORE AFTER [MAP.json]`; the map is
{family: {old: new}} with family one of fwd, bwd, hopper, decode (picked from the file name);
a key "family@prefix" renames inside the functions whose name starts with prefix first, and
"family!drop" lists module-level constants the "after" side removed.
Docstrings and comments are ignored; every other difference is printed and exits 1."""

import ast
import json
import os
import sys
from pathlib import Path


def family(name: str) -> str:
    if "-hopper-" in name:
        return "hopper"
    if "-decode-" in name:
        return "decode"
    return "bwd" if name.startswith("attn_bwd") else "fwd"


def identifiers(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(node) if isinstance(a, ast.arg)
    }


def collisions(tree, renames: dict) -> set:
    """New names that already occur in a scope where an old name is renamed: there the map
    would merge two variables and hide a real change."""
    found = set()
    for node in tree.body:
        ids = identifiers(node)
        if ids & set(renames):
            found |= ids & set(renames.values())
    return found


class Rename(ast.NodeTransformer):
    def __init__(self, names: dict):
        self.names = names

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.names.get(node.arg, node.arg)
        return node


def strip_docstrings(tree):
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


def main() -> int:
    before, after = sys.argv[1], sys.argv[2]
    names = {}
    if len(sys.argv) > 3:
        names = json.loads(Path(sys.argv[3]).read_text())
    left = sorted(os.listdir(before))
    if left != sorted(os.listdir(after)):
        print("the folders hold different files")
        return 1
    bad = 0
    for name in left:
        old = strip_docstrings(ast.parse(Path(before, name).read_text()))
        fam = family(name)
        drop = set(names.get(fam + "!drop", []))
        old.body = [
            n
            for n in old.body
            if not (
                isinstance(n, ast.Assign) and any(getattr(t, "id", None) in drop for t in n.targets)
            )
        ]
        clash = collisions(old, names.get(fam, {}))
        for node in old.body:
            for key, renames in names.items():
                prefix = key.split("@", 1)[1] if key.startswith(fam + "@") else None
                if prefix and isinstance(node, ast.FunctionDef) and node.name.startswith(prefix):
                    clash |= collisions(ast.Module([node], []), renames)
                    Rename(renames).visit(node)
        if clash:
            bad += 1
            print("renamed onto an existing name:", name, sorted(clash))
            continue
        old = Rename(names.get(fam, {})).visit(old)
        new = strip_docstrings(ast.parse(Path(after, name).read_text()))
        if ast.dump(old) != ast.dump(new):
            bad += 1
            print("differs:", name)
    print(f"{len(left)} files, {bad} differ beyond the renames")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
