#!/usr/bin/env python3
"""Writes the first ```cpp block of README.md to a file, so the README's
sample is compiled and run by the tests: extract.py README.md out.cpp"""
import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"```cpp\n(.*?)```", text, re.S)
if not blocks:
    sys.exit("README.md has no ```cpp block")
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("// Extracted from README.md by tests/readme/extract.py; do not edit.\n")
    out.write("#include <vector>\n" + blocks[0])
