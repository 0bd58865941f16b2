#!/usr/bin/env python3
"""Medians of run.sh's output: routed / direct per provider and test.
lat rows: t_typical (5th number); bw rows: BW average (4th number)."""
import collections
import statistics
import sys

vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if ":" not in line:
        continue
    label, row = line.split(":", 1)
    _, _, target, how, test = label.split()
    nums = row.split()
    vals[(target, test, how)].append(float(nums[4] if test.startswith("lat") else nums[3]))
for target, test in sorted({(t, s) for t, s, _ in vals}):
    d, r = vals[(target, test, "direct")], vals[(target, test, "routed")]
    ratios = [b / a for a, b in zip(d, r)]
    unit = "us" if test.startswith("lat") else "MB/s"
    print(f"{target} {test}: direct {statistics.median(d):.2f} {unit} [{min(d):.2f}-{max(d):.2f}], "
          f"routed {statistics.median(r):.2f} [{min(r):.2f}-{max(r):.2f}], routed/direct median "
          f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}] over {len(ratios)} rounds")
