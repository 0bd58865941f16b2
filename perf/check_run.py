#!/usr/bin/env python3
"""Meson test (suite perf): runs fabrix-perf --loopback briefly for one
provider — every test, both modes, a few sizes, -q 2 and -l batching once,
--cq-mod once, -b once, -D once, static and runtime dispatch,
provider-allocated and user memory — and checks that it exits 0 (its own
data checks passed), that its table has a row per measurement and that its
JSON matches the schema.
Timings are not judged. A provider whose hardware is absent (verbs,
cuda_ipc) makes the test skip (77).
Every run's header and JSON must also say which provider ran and why
(asked, or auto-picked with every better provider passed over named), which
dispatch (static where perf/bind_<provider>.cpp exists, unless --dispatch
any) and who allocated the memory (the provider where it allocates, unless
--alloc user or --mem cuda).
usage: check_run.py FABRIX_PERF [--brief] [--provider NAME [--provider-allocates]] [--transport T] [--device D]

--provider-allocates: NAME allocates under --alloc auto (a provider plugin
of ABI version 2 or later: the perf-plugin test's renamed UCX plugin).

Without --provider (the perf-auto test): fabrix-perf's own choice, as
tools/demo.sh runs it: every test and mode at one odd size, then write at
64 KiB.

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
HERE = os.path.dirname(os.path.abspath(__file__))
# Providers whose allocate_memory fabrix-perf uses under --alloc auto.
ALLOCATES = {"ucx"}


def has_static_binding(provider):
    """Whether fabrix-perf has a static binding for `provider`: the list meson
    passes (PERF_STATIC_BINDINGS, also in a GPU bundle, which carries no
    sources), else whether perf/bind_<provider>.cpp exists beside this file."""
    listed = os.environ.get("PERF_STATIC_BINDINGS")
    if listed is not None:
        return provider in listed.split(",")
    return os.path.exists(os.path.join(HERE, f"bind_{provider}.cpp"))


def value(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def check_choices(perf, doc, stdout, extra):
    """The header and the JSON say which provider and why, which dispatch,
    and who allocated the memory; exits with a message when they do not."""
    provider = doc["provider"]
    asked = value(extra, "--provider")
    header = [l.strip() for l in stdout.splitlines()]
    problems = []
    if asked:
        line = f"provider     : {provider} (asked: --provider {asked})"
        if doc.get("provider_choice") != "asked" or line not in stdout:
            problems.append(f"the header does not say provider {provider} was asked for")
    else:
        if doc.get("provider_choice") != "auto" or not any(
                l.startswith(f"provider     : {provider} (auto-picked") for l in header):
            problems.append(f"the header does not say provider {provider} was auto-picked")
        names = subprocess.run([perf, "--list-providers"], capture_output=True, text=True).stdout.split()
        passed = doc.get("passed_over", "")
        for better in names[:names.index(provider)] if provider in names else ["(picked one not listed)"]:
            if not passed.startswith(f"{better}:") and f"; {better}:" not in passed:
                problems.append(f"auto passed over {better} without saying why: {doc.get('passed_over')!r}")
    dispatch = value(extra, "--dispatch", "auto")
    if dispatch == "any":
        want = "runtime (fabrix::any_provider)"
    elif has_static_binding(provider):
        want = f"static (fabrix::{provider}::provider)"
    else:
        want = "runtime (fabrix::any_provider): no static binding"
    if not doc.get("dispatch", "").startswith(want) or f"dispatch     : {want}" not in stdout:
        problems.append(f"dispatch is {doc.get('dispatch')!r}, expected {want!r}...")
    allocates = provider in ALLOCATES and value(extra, "--alloc", "auto") != "user" and \
        value(extra, "--mem", "host") == "host"
    want_alloc = "provider" if allocates else "fabrix-perf"
    phrase = "allocated and registered by the provider" if allocates else "allocated by fabrix-perf, registered"
    if doc.get("allocated_by") != want_alloc or phrase not in doc.get("memory", "") or phrase not in stdout:
        problems.append(f"memory: allocated_by {doc.get('allocated_by')!r}, memory {doc.get('memory')!r}; "
                        f"expected {want_alloc!r} ({phrase})")
    keys = value(extra, "--remote-keys", "import")
    line = "remote keys  : imported once per queue pair" if keys == "import" else \
        "remote keys  : remote_buffer per operation"
    if doc.get("remote_keys") != keys or line not in stdout:
        problems.append(f"remote keys: {doc.get('remote_keys')!r}, expected {keys!r} and the header line {line!r}")
    if problems:
        sys.exit("FAIL: " + "\n  ".join(problems))


def run(perf, extra, json_path, expect_rows):
    cmd = [perf, "--loopback", "--out_json", json_path, "--timeout", "30"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    provider = value(extra, "--provider")
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
    if provider and doc["provider"] != provider:
        sys.exit(f"FAIL: JSON says provider {doc['provider']!r}, asked for {provider!r}")
    check_choices(perf, doc, p.stdout, extra)
    if len(doc["results"]) != expect_rows:
        sys.exit(f"FAIL: {len(doc['results'])} results, expected {expect_rows}")
    rows = [l for l in p.stdout.splitlines() if l.strip() and l.split()[0].isdigit()]
    if len(rows) != expect_rows:
        sys.exit(f"FAIL: {len(rows)} table rows, expected {expect_rows}")
    return doc


def main():
    perf, args = sys.argv[1], sys.argv[2:]
    brief = "--brief" in args
    if "--provider-allocates" in args:  # a plugin whose table has allocate_memory
        ALLOCATES.add(value(args, "--provider"))
    args = [a for a in args if a not in ("--brief", "--provider-allocates")]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        if brief:
            run(perf, args + ["-s", "4097", "-n", "100", "--iters-warmup", "10"], out, 12)
            big = "1M" if "cuda" in " ".join(args) else "64K"
            run(perf, args + ["write", "-s", big, "-n", "100", "--iters-warmup", "10"], out, 2)
            print("OK")
            return
        if "--provider" not in args:
            run(perf, args + ["-s", "4097", "-n", "200", "--iters-warmup", "10"], out, 12)
            run(perf, args + ["write", "-s", "64K", "-n", "300"], out, 2)
            print("OK")
            return
        # Every test and mode at one odd size (atomics are always 8 B): 12 rows.
        run(perf, args + ["-s", "4097", "-n", "200", "--iters-warmup", "10"], out, 12)
        # Batched posting over two queue pairs, and bidirectional, at 64 KiB.
        run(perf, args + ["write,read,fetch_add", "bw", "-s", "64K", "-n", "300", "-q", "2", "-l", "8", "-t", "32"],
            out, 3)
        # Completion moderation: one completion per 7 operations, across post
        # lists of 3 and a count that is no multiple of either (a flush retires
        # the unsignaled rest).
        run(perf, args + ["write,read,send,write_imm", "bw", "-s", "1K", "-n", "301", "-l", "3", "--cq-mod", "7"],
            out, 4)
        # Bidirectional, through fabrix::any_provider (virtual dispatch).
        run(perf, args + ["write,send,write_imm", "bw", "-b", "-s", "1K", "-n", "300", "--dispatch", "any"], out, 3)
        # Duration mode, where the target does not know the count in advance,
        # on memory fabrix-perf allocates and the provider only registers.
        run(perf, args + ["send,write_imm,write", "-s", "8", "-D", "0.05", "--alloc", "user"], out, 6)
    print("OK")


if __name__ == "__main__":
    main()
