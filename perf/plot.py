#!/usr/bin/env python3
"""Bandwidth and latency against message size from one or more fabrix-perf
JSON files (--out_json), as one PNG: left panel bandwidth (bw results),
right panel typical latency with the p99 as a dashed line (lat results).
One curve per file and test; the label is the file name unless given as
LABEL=FILE.

usage: plot.py [-o out.png] [--title T] [LABEL=]FILE.json [...]"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="fabrix-perf JSON files, optionally LABEL=FILE")
    ap.add_argument("-o", "--out", default="fabrix-perf.png")
    ap.add_argument("--title", default="fabrix-perf")
    args = ap.parse_args()

    try:
        import matplotlib
    except ImportError:
        # Debian's python3-matplotlib lives with /usr/bin/python3; another
        # python3 first on PATH (pyenv, venv) does not see it.
        if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
                "/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        sys.exit("plot: matplotlib is missing (apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(13, 5))
    for spec in args.files:
        label, path = spec.split("=", 1) if "=" in spec and not os.path.exists(spec) else (None, spec)
        with open(path) as f:
            doc = json.load(f)
        problems = schema.validate(doc)
        if problems:
            sys.exit(f"plot: {path} does not match the fabrix-perf schema: {problems[0]}")
        label = label or os.path.splitext(os.path.basename(path))[0]
        series = {}
        for r in doc["results"]:
            series.setdefault((r["test"], r["mode"]), []).append(r)
        for (test, mode), rows in sorted(series.items()):
            rows.sort(key=lambda r: r["bytes"])
            x = [r["bytes"] for r in rows]
            if len(x) < 2:
                continue  # atomics: one size, nothing to draw a line through
            if mode == "bw":
                bw_ax.plot(x, [r["bw_avg_MBps"] for r in rows], marker="o", ms=3, label=f"{label} {test}")
            else:
                line, = lat_ax.plot(x, [r["t_typical_us"] for r in rows], marker="o", ms=3,
                                    label=f"{label} {test} (median)")
                lat_ax.plot(x, [r["t_p99_us"] for r in rows], ls="--", lw=0.8, color=line.get_color())
    for ax, ylabel in ((bw_ax, "bandwidth [MB/s, MB = 2^20 B]"), (lat_ax, "latency [us] (dashed: p99)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size [bytes]")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    bw_ax.set_title("bandwidth")
    lat_ax.set_title("latency")
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
