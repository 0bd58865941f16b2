#!/usr/bin/env python3
"""Checks that include/fabrix/detail/env.hpp's env_vars names every FABRIX_*
variable the library reads, and nothing else.

A variable counts as read when its name stands as a string literal
("FABRIX_...") in the library's sources: include/, providers/*/include/,
coll/include/, cuda/include/ and src/. Exits 1 naming what is missing or stale, and when
the table is not sorted or repeats a name.

  tools/check_env_table.py [SOURCE_ROOT]
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
table_file = root / "include/fabrix/detail/env.hpp"
table = re.findall(r'\{"(FABRIX_[A-Z0-9_]+)",', table_file.read_text())

dirs = [root / "include", root / "coll/include", root / "cuda/include", root / "src", *sorted((root / "providers").glob("*/include"))]
read = {}
for d in dirs:
    for f in sorted(d.rglob("*")):
        if f.suffix not in (".hpp", ".cpp", ".h", ".cu", ".cuh") or f == table_file:
            continue
        for name in re.findall(r'"(FABRIX_[A-Z0-9_]+)"', f.read_text(errors="replace")):
            read.setdefault(name, str(f.relative_to(root)))

problems = []
for name in sorted(set(read) - set(table)):
    problems.append(f"{name} is read in {read[name]} but env_vars does not list it")
for name in sorted(set(table) - set(read)):
    problems.append(f"{name} is listed in env_vars but nothing reads it")
if table != sorted(table):
    problems.append("env_vars is not sorted by name")
if len(table) != len(set(table)):
    problems.append("env_vars names a variable twice")
for p in problems:
    print("check_env_table:", p)
print(f"check_env_table: {len(table)} variables listed, {len(read)} read, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
