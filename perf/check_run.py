#!/usr/bin/env python3
"""Meson test (suite perf): runs fabrix-perf --loopback briefly for one
provider — every test, both modes, a few sizes, -q 2 and -l batching once,
-b once, -D once, static and runtime dispatch, provider-allocated and user
memory — and checks that it exits 0 (its own data checks passed), that its
table has a row per measurement and that its JSON matches the schema.
Timings are not judged. A provider whose hardware is absent (verbs,
cuda_ipc) makes the test skip (77).
usage: check_run.py FABRIX_PERF [--brief] --provider NAME [--transport T] [--device D]

--brief (the soft-RoCE VM, where every operation is slow): one run of every
test and mode at one odd size, and write bw and lat at 64 KiB, 100 iterations
each. With --mem cuda (the gpu suite) the same runs, at 1 MiB for the second."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schema  # noqa: E402

HARDWARE = {"verbs", "cuda_ipc"}


def run(perf, extra, json_path, expect_rows):
    cmd = [perf, "--loopback", "--out_json", json_path, "--timeout", "30"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    provider = extra[extra.index("--provider") + 1]
    absent = ("cannot open provider", "no CUDA device")
    if p.returncode != 0 and provider in HARDWARE and any(a in p.stderr for a in absent):
        print(f"SKIP: provider {provider} has no device here")
        sys.exit(77)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
    with open(json_path) as f:
        doc = json.load(f)
    problems = schema.validate(doc)
    if problems:
        sys.exit("FAIL: JSON does not match the schema:\n  " + "\n  ".join(problems))
    if doc["provider"] != provider:
        sys.exit(f"FAIL: JSON says provider {doc['provider']!r}, asked for {provider!r}")
    if len(doc["results"]) != expect_rows:
        sys.exit(f"FAIL: {len(doc['results'])} results, expected {expect_rows}")
    rows = [l for l in p.stdout.splitlines() if l.strip() and l.split()[0].isdigit()]
    if len(rows) != expect_rows:
        sys.exit(f"FAIL: {len(rows)} table rows, expected {expect_rows}")
    return doc


def main():
    perf, args = sys.argv[1], sys.argv[2:]
    brief = "--brief" in args
    args = [a for a in args if a != "--brief"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        if brief:
            run(perf, args + ["-s", "4097", "-n", "100", "--iters-warmup", "10"], out, 12)
            big = "1M" if "cuda" in " ".join(args) else "64K"
            run(perf, args + ["write", "-s", big, "-n", "100", "--iters-warmup", "10"], out, 2)
            print("OK")
            return
        # Every test and mode at one odd size (atomics are always 8 B): 12 rows.
        run(perf, args + ["-s", "4097", "-n", "200", "--iters-warmup", "10"], out, 12)
        # Batched posting over two queue pairs, and bidirectional, at 64 KiB.
        run(perf, args + ["write,read,fetch_add", "bw", "-s", "64K", "-n", "300", "-q", "2", "-l", "8", "-t", "32"],
            out, 3)
        # Bidirectional, through fabrix::any_provider (virtual dispatch).
        run(perf, args + ["write,send,write_imm", "bw", "-b", "-s", "1K", "-n", "300", "--dispatch", "any"], out, 3)
        # Duration mode, where the target does not know the count in advance,
        # on memory fabrix-perf allocates and the provider only registers.
        run(perf, args + ["send,write_imm,write", "-s", "8", "-D", "0.05", "--alloc", "user"], out, 6)
    print("OK")


if __name__ == "__main__":
    main()
