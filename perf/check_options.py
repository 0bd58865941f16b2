#!/usr/bin/env python3
"""Meson test (suite perf): bad options give a clear message and exit 2,
--help exits 0, and two sides started with different options refuse each
other with a message naming the difference (exit 2). --dispatch static
with each compiled-in provider runs statically (the header says so) or
refuses clearly, never falling back to any_provider; --alloc provider with a
provider that does not allocate refuses with the reason (exit 2); bandwidth
runs moderate completions as perftest does unless told otherwise.
usage: check_options.py FABRIX_PERF"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import free_port  # noqa: E402


def expect(cmd, code, needle, stream="stderr"):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    text = p.stderr if stream == "stderr" else p.stdout
    if p.returncode != code or needle not in text:
        sys.exit(f"FAIL: {cmd} -> exit {p.returncode}, expected {code} with {needle!r}\n{p.stdout}{p.stderr}")


def dispatch_static(perf, provider):
    """--dispatch static --provider NAME: a static run, or a clear refusal."""
    cmd = [perf, "--loopback", "--provider", provider, "--dispatch", "static", "write", "bw", "-s", "64", "-n", "20",
           "--timeout", "20"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.exists(os.path.join(here, f"bind_{provider}.cpp")):
        if p.returncode == 0 and f"dispatch     : static (fabrix::{provider}::provider)" in p.stdout:
            return
        if p.returncode == 1 and "cannot open provider" in p.stderr:
            return  # no device for it here (verbs, cuda_ipc); the refusal names it
        sys.exit(f"FAIL: {cmd} -> exit {p.returncode}, expected a static run\n{p.stdout}{p.stderr}")
    if p.returncode != 2 or "has no static binding" not in p.stderr or "any_provider" in p.stdout:
        sys.exit(f"FAIL: {cmd} -> exit {p.returncode}, expected a refusal naming the missing binding\n"
                 f"{p.stdout}{p.stderr}")


def main():
    perf = sys.argv[1]
    expect([perf, "--dispatch", "dynamic"], 2, "bad dispatch")
    expect([perf, "--remote-keys", "lookup"], 2, "bad remote keys")
    providers = subprocess.run([perf, "--list-providers"], capture_output=True, text=True).stdout.split()
    for provider in providers:
        dispatch_static(perf, provider)
    if "ofi" in providers:
        expect([perf, "--loopback", "--provider", "ofi", "--alloc", "provider", "write", "bw", "-s", "64", "-n", "20",
                "--timeout", "20"], 2, "'ofi' does not allocate memory")
        expect([perf, "--loopback", "--provider", "ofi", "--dispatch", "any", "--alloc", "provider", "write", "bw",
                "-s", "64", "-n", "20", "--timeout", "20"], 2, "does not allocate memory")
    expect([perf, "--help"], 0, "usage: fabrix-perf", "stdout")
    expect([perf, "-s"], 2, "-s needs a value")
    expect([perf, "-s", "12Q"], 2, "bad size")
    expect([perf, "--bogus"], 2, "unknown option '--bogus'")
    expect([perf, "-q", "0"], 2, "bad queue pair count")
    expect([perf, "-t", "4", "-l", "8"], 2, "must not exceed -t")
    expect([perf, "-n", "5", "-D", "1"], 2, "exclude each other")
    expect([perf, "--cq-mod", "0"], 2, "bad completion moderation")
    expect([perf, "--unsignaled", "--cq-mod", "4"], 2, "--unsignaled and --cq-mod exclude each other")
    # Completion moderation: perftest's default (one in 100, at most -t),
    # every operation with --cq-mod 1; the header says which.
    quick = [perf, "--loopback", "write", "bw", "-s", "64", "-n", "300", "--timeout", "20"]
    expect(quick, 0, "bw: one completion per 100 operations (--cq-mod)", "stdout")
    expect(quick + ["-t", "16"], 0, "bw: one completion per 16 operations (--cq-mod)", "stdout")
    expect(quick + ["--cq-mod", "1"], 0, "bw: one completion per operation (--cq-mod 1)", "stdout")
    expect(quick + ["--unsignaled", "-l", "4"], 0, "bw: one completion per post list (--unsignaled)", "stdout")
    expect([perf, "--provider", "nope"], 2, "unknown provider")
    expect([perf, "--mem", "gpu"], 2, "bad memory kind")
    expect([perf, "--mem", "cuda:0", "--loopback"], 2, "--mem cuda")
    expect([perf, "--loopback", "somehost"], 2, "give no HOST")
    expect([perf, "hosta", "hostb"], 2, "unexpected argument")
    # Server and client with different sizes refuse each other.
    port = str(free_port())
    server = subprocess.Popen([perf, "write", "bw", "-s", "64", "-n", "10", "-p", port, "--timeout", "20"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = subprocess.run([perf, "write", "bw", "-s", "128", "-n", "10", "-p", port, "--timeout", "20",
                             "127.0.0.1"], capture_output=True, text=True, timeout=60)
    sout, serr = server.communicate(timeout=60)
    for who, code, err in (("client", client.returncode, client.stderr), ("server", server.returncode, serr)):
        if code != 2 or "options differ" not in err or "size" not in err:
            sys.exit(f"FAIL: {who} exited {code} without naming the difference:\n{err}")
    print("OK")


if __name__ == "__main__":
    main()
