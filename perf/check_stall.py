#!/usr/bin/env python3
"""Meson test (suite perf): a bandwidth run whose peer stops answering
fails within --timeout with a message that says so (exit 1); it never
spins forever. The server is stopped (SIGSTOP) mid-run over a transport
whose writes need the target's progress, so that nothing completes after.
usage: check_stall.py FABRIX_PERF --provider NAME --transport T"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import free_port  # noqa: E402

TIMEOUT_S = 5


def stop_mid_run(perf, provider_args, timeout_s, stop, test):
    """Runs `test` between a server and a client on loopback, stops side
    `stop` ('server' or 'client') with SIGSTOP once the loop runs, and
    waits up to 6 x timeout_s for the other side to end. Returns its exit
    status, its stderr and the seconds it took after the stop; exits with
    FAIL where a side ended first or the other side never did."""
    opts = [perf] + provider_args + ["-p", str(free_port()), "--timeout", str(timeout_s)] + test
    server = subprocess.Popen(opts, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        time.sleep(0.5)
        client = subprocess.Popen(opts + ["127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(3)  # set-up done, the loop running
        if client.poll() is not None or server.poll() is not None:
            sys.exit(f"FAIL: a side ended before the {stop} stopped (client {client.returncode}, "
                     f"server {server.returncode})\n{client.stderr.read()}{server.stderr.read()}")
        stopped, waiting = (server, client) if stop == "server" else (client, server)
        os.kill(stopped.pid, signal.SIGSTOP)
        start = time.monotonic()
        try:
            _, err = waiting.communicate(timeout=timeout_s * 6)
        except subprocess.TimeoutExpired:
            sys.exit(f"FAIL: the other side still ran {timeout_s * 6} s after the {stop} stopped "
                     f"(--timeout {timeout_s})")
        return waiting.returncode, err, time.monotonic() - start
    finally:
        for p in (client, server):
            if p is not None:
                p.kill()
                p.wait()


def main():
    perf, provider_args = sys.argv[1], sys.argv[2:]
    # Far more than the run can finish before the server stops (2,000,000 x 64 KiB).
    rc, err, took = stop_mid_run(perf, provider_args, TIMEOUT_S, "server",
                                 ["write", "bw", "-s", "65536", "-n", "2000000"])
    if rc != 1 or f"no operation completed for {TIMEOUT_S} s in the bandwidth loop" not in err:
        sys.exit(f"FAIL: exit {rc}, expected 1 with the stall message\n{err}")
    print(f"OK: failed {took:.1f} s after its peer stopped: {err.strip()}")


if __name__ == "__main__":
    main()
