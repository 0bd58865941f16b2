#!/usr/bin/env python3
"""Summarises perf/bootstrap/run.sh's runs: per engine and job size, the
median over repetitions of the slowest rank's times and of the busiest
rank's bytes, the built-in store's time as a ratio of PMIx's, as a Markdown
table and a PNG (time and bytes against ranks, log-log).

usage: report.py RUNS.jsonl OUT_DIR"""
import json
import os
import statistics
import sys


def main():
    runs, out = sys.argv[1], sys.argv[2]
    points = {}
    for line in open(runs):
        r = json.loads(line)
        points.setdefault((r["engine"], r["run"]["ranks"]), []).append(r["run"])
    med = {}
    for key, rs in points.items():
        med[key] = {f: statistics.median(x[f] for x in rs)
                    for f in ("bootstrap_ms", "connect_ms", "exchange_ms", "total_ms", "busiest_bytes")}
        med[key]["reps"] = len(rs)
    engines = sorted({e for e, _ in med}, key=lambda e: ["pmix", "tcp", "tcp-star"].index(e))
    sizes = sorted({n for _, n in med})
    lines = ["| engine | ranks | startup ms (slowest rank) | bootstrap | connect_all | exchange "
             "| busiest rank's bytes | bytes / (ranks-1) | time / PMIx's |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in engines:
        for n in sizes:
            m = med.get((e, n))
            if m is None:
                continue
            p = med.get(("pmix", n))
            ratio = f"{m['total_ms'] / p['total_ms']:.2f}" if p else "-"
            per = m["busiest_bytes"] / max(n - 1, 1)
            lines.append(f"| {e} | {n} | {m['total_ms']:.0f} | {m['bootstrap_ms']:.0f} | {m['connect_ms']:.0f} "
                         f"| {m['exchange_ms']:.0f} | {m['busiest_bytes']:.0f} | {per:.0f} | {ratio} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "bootstrap_scale.md"), "w") as f:
        f.write("Medians of %d runs per point (perf/bootstrap/run.sh).\n\n" % max(m["reps"] for m in med.values()))
        f.write(table)
    print(table)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found (apt-get install python3-matplotlib): no plot")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for e in engines:
        ns = [n for n in sizes if (e, n) in med]
        a.plot(ns, [med[(e, n)]["total_ms"] for n in ns], marker="o", label=e)
        b.plot(ns, [med[(e, n)]["busiest_bytes"] for n in ns], marker="o", label=e)
    for ax, title, unit in ((a, "startup: bootstrap + connect_all + exchange", "ms, slowest rank (median)"),
                            (b, "bytes sent by the busiest rank (PMIx: to its local server)", "bytes (median)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (one machine, 2 cores, mpirun)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bootstrap_scale.png"), dpi=110)


if __name__ == "__main__":
    main()
