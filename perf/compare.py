#!/usr/bin/env python3
"""fabrix-perf against the fastest raw loop of the same transport, interleaved.

For each transport, each round runs every size once on every side: a
fabrix-perf run, then right after it the baselines it is paired with (the
order of the whole round reverses every other round, so neither side is
always first). A pair is one fabrix run and one baseline run of the same
round; per size the report gives the median of the per-pair ratios, their
min-max, and the machine load while the transport ran.

fabrix-perf runs (all three, always):
  default   fabrix-perf --loopback TESTS MODES -s SIZE and nothing else, with
            no UCX_*, FI_*, FABRIX_*, PMIX_*, OMPI_* variable: the provider,
            dispatch and memory a user gets by default (its JSON header says
            which; saved under "defaults" and shown in the report)
  explicit  the same + --provider ucx|ofi --transport T
  user      explicit + --alloc user (memory fabrix-perf allocates, registered)
  auto-user ofi-shm only: --alloc user and nothing else (provider auto):
            memory the user registered, between two processes of one
            host, on whatever path auto picks (issue 16 item 7), against
            raw_ofi over shm (fi_rma_bw's loop on user memory)
  signaled  bandwidth only: explicit + --cq-mod 1, one completion per
            operation. fabrix-perf's bandwidth runs moderate completions by
            default as perftest does (one per 100 operations, ib_write_bw's
            --cq-mod); ucx_perftest's ucp_put_bw asks for none per put. This
            run shows what a completion per operation costs; no target

Baselines (perf/raw is built by meson beside fabrix-perf):
  ucx-shm, ucx-tcp (UCX_TLS=sysv,posix,cma / tcp)
    ucx_perftest  ucp_put_bw, ucp_get, ucp_put_lat, tag_lat (ucx-utils): the
                  primary UCX baseline, paired with default and explicit
    raw_ucx       fabrix-perf's own loop on ucp_* calls (perf/raw/raw_ucx),
                  ucp_mem_map ALLOCATE; with --alloc user for the user run
  ofi-shm, ofi-tcp (libfabric shm / tcp;ofi_rxm)
    raw_ofi       fabrix-perf's loop on fi_* calls, spinning on fi_cq_read,
                  fi_rma_bw / fi_rdm_pingpong defaults (inject for small
                  latency messages); Debian has no fabtests
    raw_ofi-dc    the same with FI_DELIVERY_COMPLETE, fabrix's semantics (on
                  shm often the faster for small writes); paired with explicit
  fi_pingpong is not a baseline: it sleeps while it waits (17-3,129 us per
  round trip in a loaded run), so a ratio against it flatters.
Ratios are fabrix / baseline; bandwidth (MB/s, 2^20) higher is better,
latency (typical = median half round trip, us) lower is better.

Targets (issue 16), judged on the median ratio, for the explicit and user
runs, and for the default run only where it runs that transport (its
provider is the transport's, and the transport is shm: what a default
picks between two processes of one host):
  write bw 8 B - 4 KiB   >= 0.90 x ucx_perftest (ucx) and x raw_ofi, raw_ofi-dc (ofi)
  write bw 64 KiB and up >= 0.95 x the same
  write lat 8 B          <= 1.03 x ucx_perftest ucp_put_lat (ucx)
  send lat (every size)  <= 1.05 x raw_ofi, raw_ofi-dc (ofi)
  user memory 64 KiB and 1 MiB write and read bw on ofi-shm (user and
  auto-user runs)        >= 0.90 x raw_ofi; with --busy 1 (another process
                            keeps one core busy) >= 0.80 x
A run that fails is reported with its error and leaves its pair out.

verbs (--transports verbs, not in the default list: it boots the soft-RoCE
VM of tests/vm, minutes): ib_write_bw, ib_write_lat, ib_read_bw against
fabrix-perf --provider verbs --device rxe0, 200 iterations, sizes up to
64 KiB, alternating per size and round inside one boot. Targets: write bw
and read bw at 64 KiB >= 0.95 x ib_write_bw / ib_read_bw, write lat 8 B
<= 1.05 x ib_write_lat.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# test key: (fabrix-perf test, mode, result key, unit, better)
TESTS = {
    "write:bw": ("write", "bw", "bw_avg_MBps", "MB/s", "higher"),
    "read:bw": ("read", "bw", "bw_avg_MBps", "MB/s", "higher"),
    "write:lat": ("write", "lat", "t_typical_us", "us", "lower"),
    "send:lat": ("send", "lat", "t_typical_us", "us", "lower"),
}
PERFTEST = {"write:bw": ("ucp_put_bw", "overall_bw"), "read:bw": ("ucp_get", "overall_bw"),
            "write:lat": ("ucp_put_lat", "50.0_percentile_lat"), "send:lat": ("tag_lat", "50.0_percentile_lat")}
TRANSPORTS = {
    "ucx-shm": ("ucx", "sysv,posix,cma"),
    "ucx-tcp": ("ucx", "tcp"),
    "ofi-shm": ("ofi", "shm"),
    "ofi-tcp": ("ofi", "tcp;ofi_rxm"),
}
# The fabrix-perf runs and the baselines each is paired with.
GROUPS = {
    "ucx": [("default", ["ucx_perftest", "raw_ucx"]), ("explicit", ["ucx_perftest", "raw_ucx"]),
            ("user", ["raw_ucx-user"]), ("signaled", ["ucx_perftest"])],
    "ofi": [("default", ["raw_ofi"]), ("explicit", ["raw_ofi", "raw_ofi-dc"]), ("user", ["raw_ofi"]),
            ("auto-user", ["raw_ofi"]), ("signaled", ["raw_ofi"])],
}
# Runs made on some transports only.
RUN_TRANSPORTS = {"auto-user": ("ofi-shm",)}
CLEAN_PREFIXES = ("UCX_", "FI_", "FABRIX_", "PMIX_", "OMPI_")


def run_tests(run, tests, transport):
    """The tests a fabrix run (and its pairs) measures on `transport`: the
    signaled run only bandwidth, which is all --cq-mod changes; a run of
    RUN_TRANSPORTS only there."""
    if transport not in RUN_TRANSPORTS.get(run, (transport,)):
        return []
    return [t for t in tests if run != "signaled" or TESTS[t][1] == "bw"]


def target(transport, test, size, run, baseline, default_provider=None, busy=0):
    """(op, factor) of the issue's target for this row, or None. The default
    run is judged only where it runs this transport: its provider (from its
    header) is the transport's and the transport is shared memory (what a
    provider's default picks between two processes of one host)."""
    prov = transport.split("-")[0]
    if run == "default" and (default_provider != prov or not transport.endswith("-shm")):
        return None
    if run == "signaled":  # shown for its cost; the targets are on perftest's conventions
        return None
    raw_ofi = baseline in ("raw_ofi", "raw_ofi-dc")
    # User memory on one node (item 7): its own targets, before the general ones.
    if (transport == "ofi-shm" and run in ("user", "auto-user") and baseline == "raw_ofi"
            and test in ("write:bw", "read:bw") and size in (65536, 1 << 20)):
        return (">=", 0.80 if busy else 0.90)
    if busy:  # the issue sets targets under load for user memory only
        return None
    if test == "write:bw" and (baseline == "ucx_perftest" or raw_ofi):
        if size <= 4096:
            return (">=", 0.90)
        if size >= 65536:
            return (">=", 0.95)
    if transport == "verbs":  # soft-RoCE in the VM, against perftest
        if test in ("write:bw", "read:bw") and size == 65536:
            return (">=", 0.95)
        if test == "write:lat" and size == 8:
            return ("<=", 1.05)
    if test == "write:lat" and size == 8 and prov == "ucx" and baseline == "ucx_perftest":
        return ("<=", 1.03)
    if test == "send:lat" and raw_ofi:
        return ("<=", 1.05)
    return None


def judge(row, default_provider, busy=0):
    """Sets the row's target and met from its median ratio."""
    tgt = target(row["transport"], row["test"], row["bytes"], row["fabrix"], row["baseline"], default_provider, busy)
    row["target"] = None if tgt is None else f"{tgt[0]} {tgt[1]:.2f}"
    row["met"] = None
    if tgt and row["pairs"]:
        m = row["ratio_median"]
        row["met"] = m >= tgt[1] if tgt[0] == ">=" else m <= tgt[1]


def auto_iters(mode, size):
    """fabrix-perf's iterations without -n (perf/options.cpp auto_iters)."""
    base, budget, floor = (5000, 256 << 20, 64) if mode == "bw" else (1000, 32 << 20, 16)
    return min(base, max(floor, budget // max(size, 1)))


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN_PREFIXES)}
    env.update(extra)
    return env


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def busy_cores(seconds=1.0):
    """Cores busy over `seconds` while this script runs nothing (others' load)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return round((1 - (i1 - i0) / max(1, t1 - t0)) * (os.cpu_count() or 1), 2)


class Failed(Exception):
    pass


class Sides:
    """Runs one side once for one size; returns {test key: value}."""

    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.headers = {}  # (transport, run) -> fabrix-perf's JSON header fields

    def iters(self):
        """-n for fabrix-perf and the raw loops: --iters, else their own count."""
        return ["-n", str(self.args.iters)] if self.args.iters else []

    def run(self, cmd, env, timeout=300):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"{' '.join(cmd)}: no result in {timeout} s")
        if p.returncode != 0:
            tail = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise Failed(f"{' '.join(cmd)} exited {p.returncode}: {tail}")
        return p.stdout

    def fabrix(self, transport, run, size, tests):
        prov, tr = TRANSPORTS[transport]
        out = os.path.join(self.tmp, "f.json")
        names = sorted({TESTS[t][0] for t in tests})
        modes = sorted({TESTS[t][1] for t in tests})
        cmd = [self.args.fabrix_perf, "--loopback", ",".join(names), ",".join(modes), "-s", str(size),
               "--out_json", out, "--timeout", "60"] + self.iters()
        if run not in ("default", "auto-user"):
            cmd += ["--provider", prov, "--transport", tr]
        if run in ("user", "auto-user"):
            cmd += ["--alloc", "user"]
        if run == "signaled":
            cmd += ["--cq-mod", "1"]
        if os.path.exists(out):
            os.unlink(out)
        self.run(cmd, clean_env())
        with open(out) as f:
            doc = json.load(f)
        self.headers.setdefault((transport, run), {k: doc.get(k) for k in
                                                   ("provider", "transport", "domain", "memory", "dispatch")})
        got = {}
        for r in doc["results"]:
            for t in tests:
                if (r["test"], r["mode"]) == TESTS[t][:2] and r["bytes"] == size:
                    got[t] = r[TESTS[t][2]]
        return got

    def raw(self, transport, baseline, size, tests):
        prov, tr = TRANSPORTS[transport]
        tool = os.path.join(self.args.raw_dir, "raw_ucx" if prov == "ucx" else "raw_ofi")
        cmd = [tool, "--loopback", "--tests", ",".join(tests), "-s", str(size)] + self.iters()
        env = clean_env()
        if prov == "ucx":
            env.update(UCX_TLS=tr, UCX_WARN_UNUSED_ENV_VARS="n")
            if baseline == "raw_ucx-user":
                cmd += ["--alloc", "user"]
        else:
            cmd += ["--provider", tr] + (["--delivery-complete"] if baseline == "raw_ofi-dc" else [])
        got = {}
        for line in self.run(cmd, env).splitlines():
            r = json.loads(line)
            for t in tests:
                if not r.get("header") and (r["test"], r["mode"]) == TESTS[t][:2] and r["bytes"] == size:
                    got[t] = r[TESTS[t][2]]
        return got

    def ucx_perftest(self, transport, size, tests):
        env = clean_env(UCX_TLS=TRANSPORTS[transport][1], UCX_WARN_UNUSED_ENV_VARS="n")
        got = {}
        for t in tests:
            name, key = PERFTEST[t]
            n = self.args.iters or auto_iters(TESTS[t][1], size)
            port = str(free_port())
            server = subprocess.Popen(["ucx_perftest", "-p", port], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            cmd = ["ucx_perftest", "127.0.0.1", "-p", port, "-t", name, "-s", str(size), "-n", str(n), "-w",
                   str(min(100, n // 10)), "-v"]
            try:
                for _ in range(50):  # until the server listens
                    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
                    if p.returncode == 0 or "Connection refused" not in p.stderr + p.stdout:
                        break
                    time.sleep(0.1)
            finally:
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            if p.returncode != 0:
                raise Failed(f"{' '.join(cmd)} exited {p.returncode}")
            head = [l for l in p.stdout.splitlines() if l.startswith("iterations,")]
            rows = [l.strip() for l in p.stdout.splitlines() if l.strip()[:1].isdigit()]  # the last is the total
            if not head or not rows:
                raise Failed(f"unexpected ucx_perftest output: {p.stdout[-300:]}")
            got[t] = float(dict(zip(head[-1].split(","), rows[-1].split(",")))[key])
        return got

    def baseline(self, transport, baseline, size, tests):
        if baseline == "ucx_perftest":
            return self.ucx_perftest(transport, size, tests)
        return self.raw(transport, baseline, size, tests)


class Compare:
    def __init__(self, args, tmp):
        self.args = args
        self.sides = Sides(args, tmp)
        self.rows = []
        self.transports = {}

    def transport(self, name):
        prov = TRANSPORTS[name][0]
        tests = self.args.tests
        info = {"load_before": loadavg(), "others_busy_cores_before": busy_cores()}
        print(f"\n== {name}: load average {info['load_before']}, others busy "
              f"{info['others_busy_cores_before']} of {os.cpu_count()} cores", flush=True)
        failures = []
        for size in self.args.sizes:
            # results[(run, baseline or None)][pair] = {test: value} or None
            results = {}
            for k in range(self.args.pairs):
                seq = []
                for run, bases in GROUPS[prov]:
                    if not run_tests(run, tests, name):
                        continue
                    seq.append((run, None))
                    seq += [(run, b) for b in bases]
                if k % 2:
                    seq.reverse()
                for run, base in seq:
                    try:
                        got = (self.sides.fabrix(name, run, size, run_tests(run, tests, name)) if base is None
                               else self.sides.baseline(name, base, size, run_tests(run, tests, name)))
                    except Failed as e:
                        got = None
                        failures.append(str(e))
                        print(f"   FAILED: {e}", flush=True)
                    results.setdefault((run, base), []).append(got)
            for run, bases in GROUPS[prov]:
                for base in bases:
                    for t in run_tests(run, tests, name):
                        self.row(name, t, size, run, base, results[(run, None)], results[(run, base)])
        info["load_after"] = loadavg()
        info["failures"] = failures
        info["defaults"] = self.sides.headers.get((name, "default"))
        info["explicit"] = self.sides.headers.get((name, "explicit"))
        info["user"] = self.sides.headers.get((name, "user"))
        info["auto-user"] = self.sides.headers.get((name, "auto-user"))
        self.transports[name] = info
        self.save()

    def verbs(self):
        """ib_write_bw / ib_write_lat / ib_read_bw and fabrix-perf --provider verbs
        --device rxe0, interleaved per size and round in one boot of the
        soft-RoCE VM (tests/vm/vm-run.sh); pair r is round r of both."""
        outdir = tempfile.mkdtemp(prefix="fabrix-compare-vm-", dir=os.path.dirname(self.args.fabrix_perf))
        script = os.path.join(outdir, "in-vm.sh")
        sizes = [s for s in self.args.sizes if s <= 65536] or [8]
        with open(script, "w") as f:
            f.write(f"""#!/bin/bash
# Runs inside the VM: perftest and fabrix-perf on rxe0, same sizes and counts.
set -u
source {os.path.join(ROOT, "tests", "vm", "guest-lib.sh")}
out={outdir}
g=$FABRIX_VM_GID_INDEX; d=$FABRIX_VM_RDMA_DEVICE
cat /proc/loadavg > $out/load.txt
for r in $(seq 1 {self.args.pairs}); do
 for s in {" ".join(map(str, sizes))}; do
  for t in ib_write_bw ib_write_lat ib_read_bw; do
    pair 120 $t -d $d -x $g -s $s -n 200 -- 127.0.0.1 >/dev/null 2>&1
    cp /tmp/pair.client $out/$t-$s-$r.txt
  done
  fx="timeout 300 {self.args.fabrix_perf} --loopback --provider verbs --device $d -n 200 -s $s"
  $fx write bw,lat --out_json $out/fx-write-$s-$r.json > $out/fx-write-$s-$r.txt 2>&1
  $fx read bw --out_json $out/fx-read-$s-$r.json > $out/fx-read-$s-$r.txt 2>&1
 done
done
cat /proc/loadavg >> $out/load.txt
""")
        info = {"load_before": loadavg(), "others_busy_cores_before": busy_cores(), "failures": []}
        vm = os.path.join(ROOT, "tests", "vm", "vm-run.sh")
        p = subprocess.run(["bash", vm, "--timeout", "1800", "--rw", outdir, "--", "bash", script],
                           capture_output=True, text=True)
        info["load_after"] = loadavg()
        if p.returncode != 0:
            self.transports["verbs"] = dict(info, skipped=f"vm-run.sh exited {p.returncode}")
            return

        def perftest(name, s, r, column):
            with open(f"{outdir}/{name}-{s}-{r}.txt") as f:
                rows = [l.split() for l in f if l.strip()[:1].isdigit()]
            v = float(rows[-1][column]) if rows else float("nan")
            # perftest refuses to report, or prints inf, when its clock
            # calibration fails on a loaded host: that run is left out.
            return {"v": v} if v == v and v not in (float("inf"), float("-inf")) else None

        def fabrix(name, s, r, test):
            path = f"{outdir}/fx-{name}-{s}-{r}.json"
            if not os.path.exists(path):
                info["failures"].append(f"fabrix-perf {name} {s} B round {r} failed")
                return None
            with open(path) as f:
                res = json.load(f)["results"]
            t, m, key = TESTS[test][:3]
            return {"v": next(x[key] for x in res if (x["test"], x["mode"]) == (t, m))}

        rounds = range(1, self.args.pairs + 1)
        for s in sizes:
            for test, name, col, fx in (("write:bw", "ib_write_bw", 3, "write"), ("write:lat", "ib_write_lat", 4, "write"),
                                        ("read:bw", "ib_read_bw", 3, "read")):
                fxr = [fabrix(fx, s, r, test) for r in rounds]
                raw = [perftest(name, s, r, col) for r in rounds]
                self.row("verbs", test, s, "explicit", name, [x and {test: x["v"]} for x in fxr],
                         [x and {test: x["v"]} for x in raw])
        with open(f"{outdir}/load.txt") as f:
            info["guest_load"] = [l.strip() for l in f]
        self.transports["verbs"] = info
        self.save()

    def row(self, transport, test, size, run, base, fx, raw):
        unit, better = TESTS[test][3], TESTS[test][4]
        pairs = [(f[test], r[test]) for f, r in zip(fx, raw)
                 if f is not None and r is not None and test in f and test in r and r[test] > 0]
        ratios = [a / b for a, b in pairs]
        row = {"transport": transport, "test": test, "bytes": size, "fabrix": run, "baseline": base, "unit": unit,
               "better": better, "pairs": len(pairs), "fabrix_runs": [a for a, _ in pairs],
               "baseline_runs": [b for _, b in pairs], "ratios": [round(x, 4) for x in ratios]}
        if ratios:
            row.update(fabrix_median=statistics.median(row["fabrix_runs"]),
                       baseline_median=statistics.median(row["baseline_runs"]),
                       ratio_median=round(statistics.median(ratios), 4), ratio_min=round(min(ratios), 4),
                       ratio_max=round(max(ratios), 4))
        judge(row, (self.sides.headers.get((transport, "default")) or {}).get("provider"), self.args.busy)
        self.rows.append(row)
        print(line(row), flush=True)

    def save(self):
        """Rewrites JSON and markdown after every transport (an interrupted run keeps what it measured)."""
        doc = {"schema": "fabrix-compare/2", "date": datetime.datetime.now().isoformat(timespec="seconds"),
               "command": " ".join(sys.argv), "cpus": os.cpu_count(), "pairs": self.args.pairs,
               "busy": self.args.busy,
               "sizes": self.args.sizes, "tests": self.args.tests, "transports": self.transports,
               "rows": self.rows, "targets_missed": sum(r["met"] is False for r in self.rows),
               "targets_judged": sum(r["met"] is not None for r in self.rows)}
        write(doc, self.args.out, self.args.md)


def write(doc, out, md):
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    with open(md, "w") as f:
        f.write(markdown(doc))


def rejudge(path, md):
    """Judges the rows of a saved run again with this script's targets and
    rewrites its JSON and markdown (the measurements are not touched)."""
    with open(path) as f:
        doc = json.load(f)
    for r in doc["rows"]:
        judge(r, ((doc["transports"].get(r["transport"]) or {}).get("defaults") or {}).get("provider"),
              doc.get("busy", 0))
    doc["targets_missed"] = sum(r["met"] is False for r in doc["rows"])
    doc["targets_judged"] = sum(r["met"] is not None for r in doc["rows"])
    doc["rejudged"] = " ".join(sys.argv)
    write(doc, path, md)
    print(f"targets missed: {doc['targets_missed']} of {doc['targets_judged']}; {path}, {md}")


def fmt(v):
    return "-" if v is None else (f"{v:.3g}" if v < 100 else f"{v:.0f}")


def line(r):
    if not r["pairs"]:
        return f"{r['transport']:<8} {r['test']:<9} {r['bytes']:>8} {r['fabrix']:<8} {r['baseline']:<13} no pair"
    mark = "" if r["met"] is None else (" ok" if r["met"] else " MISSED")
    return (f"{r['transport']:<8} {r['test']:<9} {r['bytes']:>8} {r['fabrix']:<8} {r['baseline']:<13} "
            f"{fmt(r['fabrix_median']):>8} {fmt(r['baseline_median']):>8} {r['unit']:<4} ratio "
            f"{r['ratio_median']:.3f} [{r['ratio_min']:.3f}-{r['ratio_max']:.3f}] n={r['pairs']} "
            f"{r['target'] or ''}{mark}")


def markdown(doc):
    out = [f"# fabrix-perf vs raw loops ({doc['date']})", "",
           f"`{doc['command']}` — {doc['pairs']} interleaved pairs per row, {doc['cpus']} CPUs. "
           "Ratio = fabrix / baseline, median of per-pair ratios [min–max]; bandwidth MB/s (higher "
           "better), latency typical µs (lower better). Targets judged on the median ratio."
           + (f" {doc['busy']} other process(es) kept a core busy each (--busy)." if doc.get("busy") else ""), "",
           "| transport | load avg before → after | others' busy cores before | default run picked |",
           "|---|---|---|---|"]
    for name, t in doc["transports"].items():
        if "skipped" in t:
            out.append(f"| {name} | skipped: {t['skipped']} | | |")
            continue
        d = t.get("defaults") or {}
        picked = (f"{d.get('provider')}, {d.get('dispatch')}, {d.get('memory')}" if d
                  else "(explicit runs only)" if name == "verbs" else "(no default run succeeded)")
        out.append(f"| {name} | {' '.join(map(str, t['load_before']))} → {' '.join(map(str, t['load_after']))} | "
                   f"{t['others_busy_cores_before']} | {picked} |")
        if (t.get("auto-user") or {}).get("domain"):
            out.append(f"| {name} (auto-user) | | | {t['auto-user'].get('provider')}: {t['auto-user']['domain']} |")
    out += ["", "| transport | test | bytes | fabrix run | baseline | fabrix | baseline | ratio | min–max | pairs | "
            "target |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if r["pairs"]:
            met = "" if r["met"] is None else (" ✓" if r["met"] else " **missed**")
            out.append(f"| {r['transport']} | {r['test']} | {r['bytes']} | {r['fabrix']} | {r['baseline']} | "
                       f"{fmt(r['fabrix_median'])} | {fmt(r['baseline_median'])} | {r['ratio_median']:.3f} | "
                       f"{r['ratio_min']:.3f}–{r['ratio_max']:.3f} | {r['pairs']} | {r['target'] or ''}{met} |")
        else:
            out.append(f"| {r['transport']} | {r['test']} | {r['bytes']} | {r['fabrix']} | {r['baseline']} | "
                       f"| | no pair | | 0 | {r['target'] or ''} |")
    out += ["", f"Targets missed: {doc['targets_missed']} of {doc['targets_judged']} judged."]
    if doc.get("rejudged"):
        out += ["", f"Targets judged again from the saved measurements: `{doc['rejudged']}`."]
    fails = [(n, f) for n, t in doc["transports"].items() for f in t.get("failures", [])]
    if fails:
        out += ["", "Failed runs (left out of their pairs):", ""] + [f"- {n}: `{f}`" for n, f in fails]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fabrix-perf", default=os.path.join(ROOT, "build", "perf", "fabrix-perf"))
    ap.add_argument("--raw-dir", default=None, help="where raw_ofi / raw_ucx are (default: beside fabrix-perf)")
    ap.add_argument("--out", default=None, help="JSON of every pair (default: compare.json beside fabrix-perf)")
    ap.add_argument("--md", default=None, help="markdown report (default: the --out path with .md)")
    ap.add_argument("--sizes", default="8", help="comma-separated message sizes (default 8: every target has a row "
                    "there: 7 min on two loaded cores; each size adds about 1.5 min per transport)")
    ap.add_argument("--tests", default="write:bw,write:lat,send:lat",
                    help="of " + ",".join(TESTS) + " (default write:bw,write:lat,send:lat)")
    ap.add_argument("--transports", default=",".join(TRANSPORTS),
                    help="of " + ",".join(TRANSPORTS) + " and verbs (perftest in the soft-RoCE VM; not by default)")
    ap.add_argument("--pairs", type=int, default=5, help="interleaved rounds per size (default 5)")
    ap.add_argument("--iters", type=int, default=0,
                    help="iterations of every run, every side (default: fabrix-perf's count per size, 5000 for "
                         "bandwidth: a few milliseconds at 8 B, where start-up noise dominates)")
    ap.add_argument("--busy", type=int, default=0,
                    help="processes that each keep one core busy (a spinning loop) for the whole run; the user "
                         "memory targets are then >= 0.80 x (default 0)")
    ap.add_argument("--rejudge", metavar="JSON", help="judge a saved run's rows again (targets, markdown); no run")
    args = ap.parse_args()
    if args.rejudge:
        rejudge(args.rejudge, args.md or os.path.splitext(args.rejudge)[0] + ".md")
        return
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.tests = [t for t in args.tests.split(",") if t]
    transports = [t for t in args.transports.split(",") if t]
    if bad := [t for t in args.tests if t not in TESTS] + [t for t in transports if t not in [*TRANSPORTS, "verbs"]]:
        sys.exit(f"compare: unknown {', '.join(bad)} (see --help)")
    if args.pairs < 1:
        sys.exit("compare: --pairs must be >= 1")
    if args.raw_dir is None:
        args.raw_dir = os.path.dirname(os.path.abspath(args.fabrix_perf))
    if args.out is None:
        args.out = os.path.join(os.path.dirname(os.path.abspath(args.fabrix_perf)), "compare.json")
    if args.md is None:
        args.md = os.path.splitext(args.out)[0] + ".md"
    if not os.access(args.fabrix_perf, os.X_OK):
        sys.exit(f"compare: {args.fabrix_perf} is not built (ninja -C build perf/fabrix-perf)")
    providers = subprocess.run([args.fabrix_perf, "--list-providers"], capture_output=True, text=True,
                               check=True).stdout.split()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        measure(args, transports, providers)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def measure(args, transports, providers):
    with tempfile.TemporaryDirectory(prefix="fabrix-compare-") as tmp:
        c = Compare(args, tmp)
        for name in transports:
            if name == "verbs":
                vm = os.path.join(ROOT, "tests", "vm", "vm-run.sh")
                if "verbs" not in providers or not os.path.exists(vm):
                    c.transports[name] = {"skipped": "no verbs provider in this build, or no tests/vm/vm-run.sh"}
                else:
                    c.verbs()
                continue
            prov = TRANSPORTS[name][0]
            raw = os.path.join(args.raw_dir, "raw_" + prov)
            why = None
            if prov not in providers:
                why = f"fabrix-perf has no {prov} provider in this build"
            elif not os.access(raw, os.X_OK):
                why = f"{raw} is not built (ninja -C build perf/raw_{prov})"
            elif prov == "ucx" and not shutil.which("ucx_perftest"):
                why = "ucx_perftest (ucx-utils) is not installed"
            if why:
                c.transports[name] = {"skipped": why}
                print(f"\n== {name}: skipped, {why}")
                continue
            c.transport(name)
        c.save()
    print(f"\ntargets missed: {sum(r['met'] is False for r in c.rows)} of "
          f"{sum(r['met'] is not None for r in c.rows)}; {args.out}, {args.md}")


if __name__ == "__main__":
    main()
