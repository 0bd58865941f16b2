#!/usr/bin/env python3
"""Meson test (suite perf): raw_ofi / raw_ucx run every test at two sizes on
each local transport, check every byte they move (exit 0), and print one
JSON line per measurement with fabrix-perf's result keys. Timings are not
judged. Then one bandwidth run of the first TOOL longer than twice its
--timeout must succeed: the client's heartbeats on the setup socket keep the
target waiting, and the loop's own stall watch counts completions, not the
run's length. usage: check_raw.py TOOL [TOOL...]  (raw_ofi and/or raw_ucx)"""
import json
import os
import subprocess
import sys

TESTS = ["write:bw", "read:bw", "write:lat", "send:lat"]
SIZES = [8, 4097]
KEYS = {"bw": "bw_avg_MBps", "lat": "t_typical_us"}


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}")
    lines = [json.loads(l) for l in p.stdout.splitlines()]
    if not lines or not lines[0].get("header"):
        sys.exit(f"FAIL: {' '.join(cmd)}: no header line")
    rows = lines[1:]
    want = [(t.split(":")[0], t.split(":")[1], s) for t in TESTS for s in SIZES]
    got = [(r["test"], r["mode"], r["bytes"]) for r in rows]
    if got != want:
        sys.exit(f"FAIL: {' '.join(cmd)}: rows {got}, expected {want}")
    for r in rows:
        if r.get("verified") is not True or not r[KEYS[r["mode"]]] > 0:
            sys.exit(f"FAIL: {' '.join(cmd)}: bad row {r}")
    print(f"ok: {' '.join(cmd)} ({len(rows)} rows)")


def long_loop(tool, env):
    timeout_s = 1
    if os.path.basename(tool) == "raw_ofi":
        transport = ["--provider", "tcp;ofi_rxm"]
    else:
        transport, env = [], dict(env, UCX_TLS="tcp", UCX_WARN_UNUSED_ENV_VARS="n")
    iters = 20000
    for attempt in range(4):  # more iterations until the shorter loop lasts 2 * timeout_s
        cmd = [tool, "--loopback"] + transport + ["--tests", "write:bw,read:bw", "-s", "65536", "-n", str(iters),
                                                  "--timeout", str(timeout_s)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        if p.returncode != 0:
            sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stderr}")
        rows = [json.loads(l) for l in p.stdout.splitlines()][1:]
        if len(rows) != 2 or not all(r.get("verified") is True for r in rows):
            sys.exit(f"FAIL: {' '.join(cmd)}: rows {rows}")
        shortest = min(r["seconds"] for r in rows)
        if shortest >= 2 * timeout_s:
            print(f"ok: write and read bw loops of {shortest:.1f} s and more with --timeout {timeout_s}")
            return
        if attempt < 3:
            iters = int(iters * 3 * timeout_s / max(shortest, 0.1))
    sys.exit(f"FAIL: no loop lasted {2 * timeout_s} s (the last run: {iters} iterations)")


def main():
    base = ["--loopback", "--tests", ",".join(TESTS), "-s", ",".join(map(str, SIZES)), "-n", "200",
            "--timeout", "20"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "FI_"))}
    for tool in sys.argv[1:]:
        if os.path.basename(tool) == "raw_ofi":
            for prov in ("shm", "tcp;ofi_rxm"):
                run([tool, "--provider", prov] + base, env)
            run([tool, "--provider", "shm", "--delivery-complete", "-l", "4"] + base, env)
        else:
            for tls, alloc in (("sysv,posix,cma", "provider"), ("sysv,posix,cma", "user"), ("tcp", "provider")):
                run([tool, "--alloc", alloc] + base, dict(env, UCX_TLS=tls, UCX_WARN_UNUSED_ENV_VARS="n"))
    long_loop(sys.argv[1], env)
    print("OK")


if __name__ == "__main__":
    main()
