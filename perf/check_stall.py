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


def main():
    perf, provider_args = sys.argv[1], sys.argv[2:]
    port = str(free_port())
    # Far more than the run can finish before the server stops (2,000,000 x 64 KiB).
    opts = [perf] + provider_args + ["-p", port, "--timeout", str(TIMEOUT_S), "write", "bw", "-s", "65536",
                                     "-n", "2000000"]
    server = subprocess.Popen(opts, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        client = subprocess.Popen(opts + ["127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)  # set-up done, the bandwidth loop running
        if client.poll() is not None:
            sys.exit(f"FAIL: the client ended before the server stopped (exit {client.returncode})\n"
                     f"{client.stdout.read()}{client.stderr.read()}")
        os.kill(server.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            out, err = client.communicate(timeout=TIMEOUT_S * 6)
        except subprocess.TimeoutExpired:
            client.kill()
            sys.exit(f"FAIL: the client still ran {TIMEOUT_S * 6} s after its peer stopped (--timeout {TIMEOUT_S})")
        took = time.monotonic() - stopped
        if client.returncode != 1 or f"no operation completed for {TIMEOUT_S} s in the bandwidth loop" not in err:
            sys.exit(f"FAIL: exit {client.returncode}, expected 1 with the stall message\n{out}{err}")
        print(f"OK: failed {took:.1f} s after its peer stopped: {err.strip()}")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
