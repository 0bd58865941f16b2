#!/usr/bin/env python3
"""Meson test (suite perf): raw_ofi / raw_ucx run every test at two sizes on
each local transport, check every byte they move (exit 0), and print one
JSON line per measurement with fabrix-perf's result keys. Timings are not
judged. usage: check_raw.py TOOL [TOOL...]  (raw_ofi and/or raw_ucx paths)"""
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
    print("OK")


if __name__ == "__main__":
    main()
