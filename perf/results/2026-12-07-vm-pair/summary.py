#!/usr/bin/env python3
"""Per-round ratios of each fabrix-perf line to perftest's line of the same
test and round, and of the two fabrix-perf builds of an A/B, as medians,
quartiles and ranges: summary.py ROUNDS-FILE"""
import collections, statistics, sys

rounds = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.split()
    rounds[int(p[0])][(p[1], p[3])] = float(p[5])


def show(name, xs):
    xs = sorted(xs)
    n = len(xs)
    print(f"{name}: median {statistics.median(xs):.3f}, quartiles {xs[n // 4]:.3f}-{xs[(3 * n) // 4]:.3f}, "
          f"range {xs[0]:.3f}-{xs[-1]:.3f}, n={n}")


tools = sorted({k for r in rounds.values() for k in r})
for test, raw in (("bw", "ib_write_bw"), ("lat", "ib_write_lat")):
    for tool, t in tools:
        if t != test or tool == raw:
            continue
        show(f"{test} {tool} / {raw}", [r[(tool, t)] / r[(raw, t)] for r in rounds.values()
                                        if (tool, t) in r and (raw, t) in r])
    for tool, t in tools:
        if t == test:
            show(f"{test} {tool} (absolute)", [r[(tool, t)] for r in rounds.values() if (tool, t) in r])
if any(("nap", "bw") in r for r in rounds.values()):
    show("bw nap / old", [r[("nap", "bw")] / r[("old", "bw")] for r in rounds.values()
                          if ("nap", "bw") in r and ("old", "bw") in r])
