#!/usr/bin/env python3
"""Meson test (suite perf): a run longer than --timeout is no dead peer.
The target of a bandwidth run and the server of a read latency run only
wait for the client's next control message; the client's heartbeats
(perf/heartbeat.hpp) keep them waiting while its loop runs. So:
  1. write bw and read lat with -D well past --timeout both succeed;
  2. a client stopped (SIGSTOP) mid-run sends no heartbeat either: the
     waiting server fails with "the peer sent nothing" (exit 1) within a
     few --timeout, instead of waiting for ever.
usage: check_heartbeat.py FABRIX_PERF --provider NAME [--transport T]"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_stall import stop_mid_run  # noqa: E402
from compare import free_port  # noqa: E402

TIMEOUT_S = 2
RUN_S = 5  # -D: two and a half times --timeout


def command(perf, provider_args, test):
    return [perf] + provider_args + ["-p", str(free_port()), "--timeout", str(TIMEOUT_S)] + test


def long_run(perf, provider_args, test):
    opts = command(perf, provider_args, test + ["-D", str(RUN_S)])
    server = subprocess.Popen(opts, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        client = subprocess.run(opts + ["127.0.0.1"], capture_output=True, text=True, timeout=RUN_S * 6)
        _, server_err = server.communicate(timeout=TIMEOUT_S * 3)
    finally:
        server.kill()
        server.wait()
    name = " ".join(test)
    if client.returncode != 0 or server.returncode != 0:
        sys.exit(f"FAIL: {name} -D {RUN_S} --timeout {TIMEOUT_S}: client exit {client.returncode}, "
                 f"server exit {server.returncode}\n{client.stdout}{client.stderr}{server_err}")
    print(f"OK: {name} for {RUN_S} s with --timeout {TIMEOUT_S}")


def stopped_client(perf, provider_args):
    rc, err, took = stop_mid_run(perf, provider_args, TIMEOUT_S, "client",
                                 ["write", "bw", "-s", "65536", "-D", "60"])
    if rc != 1 or f"the peer sent nothing for {TIMEOUT_S} s" not in err:
        sys.exit(f"FAIL: server exit {rc}, expected 1 with the silent-peer message\n{err}")
    print(f"OK: the server failed {took:.1f} s after its client stopped: {err.strip()}")


def main():
    perf, provider_args = sys.argv[1], sys.argv[2:]
    long_run(perf, provider_args, ["write", "bw", "-s", "65536"])
    long_run(perf, provider_args, ["read", "lat", "-s", "8"])
    stopped_client(perf, provider_args)


if __name__ == "__main__":
    main()
