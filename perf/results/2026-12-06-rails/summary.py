#!/usr/bin/env python3
"""Medians of run.sh's results and, per round, striped (two rails) over one rail."""
import statistics
import sys
from collections import defaultdict

bw = defaultdict(dict)  # (label, size) -> {round: MB/s}
for line in open(sys.argv[1] if len(sys.argv) > 1 else "results.txt"):
    f = line.split()
    if len(f) == 5 and f[0] == "round":
        bw[(f[2], int(f[3]))][int(f[1])] = float(f[4])


def q(xs):
    xs = sorted(xs)
    return f"{statistics.median(xs):.1f} [{xs[0]:.1f}-{xs[-1]:.1f}]"


print("| size | direct ofi, rail 0 | routed, rail 0 | routed, 2 rails | 2 rails / routed rail 0 | 2 rails / direct |")
print("|---|---|---|---|---|---|")
for size in sorted({s for _, s in bw}):
    d, one, two = (bw[(k, size)] for k in ("direct-rail0", "routed-rail0", "routed-2rails"))
    rounds = sorted(set(d) & set(one) & set(two))
    r1 = [two[r] / one[r] for r in rounds]
    rd = [two[r] / d[r] for r in rounds]
    print(f"| {size >> 20} MiB | {q(d.values())} | {q(one.values())} | {q(two.values())} | "
          f"{statistics.median(r1):.2f} [{min(r1):.2f}-{max(r1):.2f}] | "
          f"{statistics.median(rd):.2f} [{min(rd):.2f}-{max(rd):.2f}] |")
print(f"\nMB/s (2^20 bytes per second) as fabrix-perf reports bw_avg; median [min-max] over {len(rounds)} rounds;"
      " ratios per round, then their median [min-max].")
