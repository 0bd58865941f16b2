#!/usr/bin/env python3
"""fabrix-perf against the raw tool of the same transport, in one run.

For each transport, every size is measured by fabrix-perf and by the raw
tool alternately (same sizes, iterations and warmup), --repeat times each;
the median of the repeats is compared. Ratios are fabrix / raw for
bandwidth and message rate (higher is better for fabrix) and fabrix / raw
for latency (lower is better). Targets:
  latency   ratio <= 1.05 at 8 B
  bandwidth ratio >= 0.95 from 64 KiB up
  msg rate  ratio >= 1.00 at 8 B with fabrix-perf -l batching

Slots:
  ucx    ucx_perftest ucp_put_bw / ucp_put_lat / ucp_get (two processes over
         localhost), UCX_TLS=sysv,posix,cma ("shm") and tcp.
  ofi    fi_pingpong (libfabric-bin's only tool here) vs fabrix-perf send lat,
         when fabrix-perf has the ofi provider.
  verbs  ib_write_bw / ib_write_lat / ib_read_bw vs fabrix-perf inside the
         soft-RoCE VM (tests/vm/vm-run.sh), when fabrix-perf has verbs.
A slot whose provider or tool is missing is reported as skipped, with why.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def bw_iters(size, scale=1):
    return max(200, min(100000 // scale, (1 << 30) // scale // size))


def lat_iters(size, scale=1):
    return max(100, min(20000 // scale, (64 << 20) // scale // size))


class Compare:
    def __init__(self, args):
        self.args = args
        self.perf = args.fabrix_perf
        self.rows = []
        self.slots = {}
        self.tmp = tempfile.mkdtemp(prefix="fabrix-compare-")

    # --- fabrix-perf -----------------------------------------------------
    def fabrix(self, extra, env=None):
        out = os.path.join(self.tmp, "f.json")
        cmd = [self.perf, "--loopback", "--out_json", out, "--timeout", "60"] + extra
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
        with open(out) as f:
            return json.load(f)["results"][0]

    # --- ucx_perftest ----------------------------------------------------
    def ucx_perftest(self, test, size, iters, warmup, env):
        port = str(free_port())
        server = subprocess.Popen(["ucx_perftest", "-p", port], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            cmd = ["ucx_perftest", "127.0.0.1", "-p", port, "-t", test, "-s", str(size), "-n", str(iters),
                   "-w", str(warmup), "-v"]
            for attempt in range(50):
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
                if p.returncode == 0 or "Connection refused" not in p.stderr + p.stdout:
                    break
                import time
                time.sleep(0.1)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
        finally:
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        lines = [l.strip() for l in p.stdout.splitlines() if re.match(r"^\s*\d", l)]
        head = [l for l in p.stdout.splitlines() if l.startswith("iterations,")]
        if not lines or not head:
            raise RuntimeError(f"unexpected ucx_perftest output:\n{p.stdout}")
        return dict(zip(head[-1].split(","), (float(x) for x in lines[-1].split(","))))

    def pair(self, fx_fn, raw_fn):
        """Runs fabrix and raw alternately --repeat times; returns both lists."""
        fx, raw = [], []
        for _ in range(self.args.repeat):
            fx.append(fx_fn())
            raw.append(raw_fn())
        return fx, raw

    def add(self, transport, what, size, fabrix, raw, unit, better, target):
        """fabrix / raw: lists of repeats (or single numbers). The target is
        judged on the ratio of the medians; the ratio of the best runs (max
        for rates, min for times) is shown beside it, as the machine is noisy."""
        fabrix = fabrix if isinstance(fabrix, list) else [fabrix]
        raw = raw if isinstance(raw, list) else [raw]
        best = min if better == "lower" else max
        fmed, rmed = statistics.median(fabrix), statistics.median(raw)
        ratio = fmed / rmed if rmed > 0 else float("nan")
        rbest = best(fabrix) / best(raw) if best(raw) > 0 else float("nan")
        met = None
        if target is not None:
            met = ratio <= target if better == "lower" else ratio >= target
        row = {"transport": transport, "test": what, "bytes": size, "fabrix": round(fmed, 4),
               "raw": round(rmed, 4), "fabrix_runs": fabrix, "raw_runs": raw, "unit": unit,
               "ratio": round(ratio, 4), "ratio_best": round(rbest, 4), "better": better,
               "target": target, "met": met}
        self.rows.append(row)
        self.save()
        mark = "" if met is None else (" ok" if met else " MISSED")
        tgt = "" if target is None else ("<=" if better == "lower" else ">=") + f"{target:.2f}"
        print(f"{transport:<6} {what:<25} {size:>8} {fmed:>11.3f} {rmed:>11.3f} {unit:<5} {ratio:>6.3f} "
              f"{rbest:>6.3f}  {tgt:<7}{mark}", flush=True)

    def save(self):
        """Rewrites the JSON after every row, so an interrupted run keeps what it measured."""
        missed = [r for r in self.rows if r["met"] is False]
        with open(self.args.out, "w") as f:
            json.dump({"schema": "fabrix-compare/1", "slots": self.slots, "rows": self.rows,
                       "targets_missed": len(missed)}, f, indent=1)

    # --- slots -----------------------------------------------------------
    def ucx(self):
        sizes = self.args.sizes
        for label, tls in (("shm", "sysv,posix,cma"), ("tcp", "tcp")):
            if self.args.transports and label not in self.args.transports:
                continue
            env = dict(os.environ, UCX_TLS=tls, UCX_WARN_UNUSED_ENV_VARS="n")
            base = ["--provider", "ucx", "--transport", tls]
            k = 1 if label == "shm" else 10  # tcp is ~100x slower: fewer iterations
            for size in sizes:
                n, w = bw_iters(size, k), max(10, bw_iters(size, k) // 10)
                fx, raw = self.pair(
                    lambda: self.fabrix(base + ["write", "bw", "-s", str(size), "-n", str(n), "--iters-warmup", str(w)],
                                        env)["bw_avg_MBps"],
                    lambda: self.ucx_perftest("ucp_put_bw", size, n, w, env)["overall_bw"])
                self.add(label, "write bw / ucp_put_bw", size, fx, raw, "MB/s", "higher",
                         0.95 if size >= 65536 else None)
            for size in sizes:
                n, w = lat_iters(size, k), max(10, lat_iters(size, k) // 10)
                fx, raw = self.pair(
                    lambda: self.fabrix(base + ["write", "lat", "-s", str(size), "-n", str(n), "--iters-warmup", str(w)],
                                        env)["t_typical_us"],
                    lambda: self.ucx_perftest("ucp_put_lat", size, n, w, env)["50.0_percentile_lat"])
                self.add(label, "write lat / ucp_put_lat", size, fx, raw, "us", "lower", 1.05 if size == 8 else None)
            for size in sizes:
                n, w = bw_iters(size, k), max(10, bw_iters(size, k) // 10)
                fx, raw = self.pair(
                    lambda: self.fabrix(base + ["read", "bw", "-s", str(size), "-n", str(n), "--iters-warmup", str(w)],
                                        env)["bw_avg_MBps"],
                    lambda: self.ucx_perftest("ucp_get", size, n, w, env)["overall_bw"])
                self.add(label, "read bw / ucp_get", size, fx, raw, "MB/s", "higher", 0.95 if size >= 65536 else None)
            # Message rate at 8 B: fabrix-perf with post lists vs ucp_put_bw.
            n = 200000 if label == "shm" else 50000
            fx, raw = self.pair(
                lambda: self.fabrix(base + ["write", "bw", "-s", "8", "-n", str(n), "-l", "32", "-t", "256",
                                            "--iters-warmup", "1000"], env)["msg_rate_Mpps"],
                lambda: self.ucx_perftest("ucp_put_bw", 8, n, 1000, env)["overall_mr"] / 1e6)
            self.add(label, "write -l 32 / ucp_put_bw", 8, fx, raw, "Mpps", "higher", 1.0)

    def ofi(self, providers):
        if "ofi" not in providers:
            self.slots["ofi"] = "skipped: fabrix-perf has no ofi provider in this build"
            return
        if not shutil.which("fi_pingpong"):
            self.slots["ofi"] = "skipped: fi_pingpong (libfabric-bin) is not installed"
            return
        for label, prov in (("tcp", "tcp;ofi_rxm"), ("shm", "shm")):
            for size in [s for s in self.args.sizes if s <= 65536]:
                n = lat_iters(size)
                fx, raw = self.pair(
                    lambda: self.fabrix(["--provider", "ofi", "--transport", prov, "send", "lat", "-s", str(size),
                                         "-n", str(n)])["t_typical_us"],
                    lambda: self.fi_pingpong(prov, size, n))
                self.add("ofi-" + label, "send lat / fi_pingpong", size, fx, raw, "us", "lower",
                         1.05 if size == 8 else None)
        self.slots["ofi"] = "ran (fi_pingpong usec/xfer vs fabrix-perf send lat t_typical)"

    def fi_pingpong(self, prov, size, iters):
        port = str(free_port())
        common = ["fi_pingpong", "-p", prov.split(";")[0], "-e", "rdm", "-S", str(size), "-I", str(iters)]
        server = subprocess.Popen(common + ["-B", port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        import time
        time.sleep(0.3)
        p = subprocess.run(common + ["-P", port, "127.0.0.1"], capture_output=True, text=True, timeout=300)
        server.communicate(timeout=60)
        for line in p.stdout.splitlines():
            f = line.split()
            # bytes  #sent  #ack  total  time  MB/sec  usec/xfer  Mxfers/sec
            # counts print with k/m suffixes ("20k", "=20k"), time with "s"
            if len(f) >= 8 and f[0].rstrip("kKmMgG").isdigit() and f[1].rstrip("kKmMgG").isdigit():
                return float(f[6])
        raise RuntimeError(f"unexpected fi_pingpong output:\n{p.stdout}{p.stderr}")

    def verbs(self, providers):
        vm = os.path.join(ROOT, "tests", "vm", "vm-run.sh")
        if "verbs" not in providers:
            self.slots["verbs"] = "skipped: fabrix-perf has no verbs provider in this build"
            return
        if not os.path.exists(vm):
            self.slots["verbs"] = "skipped: tests/vm/vm-run.sh (the soft-RoCE VM) is not in this tree"
            return
        outdir = tempfile.mkdtemp(prefix="fabrix-compare-vm-", dir=os.path.dirname(self.perf))
        script = os.path.join(outdir, "in-vm.sh")
        sizes = " ".join(str(s) for s in (8, 4096, 65536))
        with open(script, "w") as f:
            f.write(f"""#!/bin/bash
# Runs inside the VM: perftest and fabrix-perf on rxe0, same sizes and counts.
# perftest pairs through tests/vm/guest-lib.sh's `pair`: the client starts
# once the server listens, both time-limited (a fixed sleep lost the race
# under load and left a server waiting forever).
set -u
source {os.path.join(ROOT, "tests", "vm", "guest-lib.sh")}
out={outdir}
g=$FABRIX_VM_GID_INDEX; d=$FABRIX_VM_RDMA_DEVICE
uptime > $out/load.txt
for r in $(seq 1 {self.args.repeat}); do
 for s in {sizes}; do
  for t in ib_write_bw ib_write_lat ib_read_bw; do
    pair 120 $t -d $d -x $g -s $s -n 200 -- 127.0.0.1 >/dev/null 2>&1
    cp /tmp/pair.client $out/$t-$s-$r.txt
  done
  fx="timeout 300 {self.perf} --loopback --provider verbs --device $d -n 200 -s $s"
  $fx write bw --out_json $out/fx-write-bw-$s-$r.json > $out/fx-write-bw-$s-$r.txt 2>&1
  $fx write lat --out_json $out/fx-write-lat-$s-$r.json > $out/fx-write-lat-$s-$r.txt 2>&1
  $fx read bw --out_json $out/fx-read-bw-$s-$r.json > $out/fx-read-bw-$s-$r.txt 2>&1
 done
done
uptime >> $out/load.txt
""")
        if self.args.verbs_dir:  # the outputs of an earlier VM run, parsed again
            outdir = self.args.verbs_dir
        else:
            p = subprocess.run(["bash", vm, "--timeout", "900", "--rw", outdir, "--", "bash", script],
                               capture_output=True, text=True)
            if p.returncode != 0:
                self.slots["verbs"] = f"failed: vm-run.sh exited {p.returncode}"
                sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
                return
        dropped = []

        def perftest(name, s, column):
            """The measurement of each repeat (a failed run is an error, never a number)."""
            out = []
            for r in range(1, self.args.repeat + 1):
                path = f"{outdir}/{name}-{s}-{r}.txt"
                with open(path) as f:
                    rows = [l.split() for l in f if re.match(r"^\s*\d", l)]
                if not rows:
                    text = open(path).read()
                    # perftest refuses to report when its clock calibration is
                    # too noisy (a loaded host): that run is dropped, and said so.
                    if "Can't produce a report" in text:
                        dropped.append(f"{name} {s} B run {r}")
                        continue
                    raise RuntimeError(f"{name} {s} B run {r} printed no result:\n" + text[-2000:])
                v = float(rows[-1][column])
                if v != v or v in (float("inf"), float("-inf")):  # the same calibration failure, printed as inf
                    dropped.append(f"{name} {s} B run {r} (inf)")
                    continue
                out.append(v)
            if not out:
                raise RuntimeError(f"{name} {s} B: no run produced a report")
            return out

        def fx(name, s, key):
            out = []
            for r in range(1, self.args.repeat + 1):
                path = f"{outdir}/fx-{name}-{s}-{r}.json"
                if not os.path.exists(path):
                    log = open(f"{outdir}/fx-{name}-{s}-{r}.txt").read()[-2000:]
                    raise RuntimeError(f"fabrix-perf {name} {s} B run {r} failed:\n{log}")
                with open(path) as f:
                    out.append(json.load(f)["results"][0][key])
            return out

        for s in (8, 4096, 65536):
            self.add("verbs", "write bw / ib_write_bw", s, fx("write-bw", s, "bw_avg_MBps"),
                     perftest("ib_write_bw", s, 3), "MB/s", "higher", 0.95 if s >= 65536 else None)
            self.add("verbs", "write lat / ib_write_lat", s, fx("write-lat", s, "t_typical_us"),
                     perftest("ib_write_lat", s, 4), "us", "lower", 1.05 if s == 8 else None)
            self.add("verbs", "read bw / ib_read_bw", s, fx("read-bw", s, "bw_avg_MBps"),
                     perftest("ib_read_bw", s, 3), "MB/s", "higher", 0.95 if s >= 65536 else None)
        with open(f"{outdir}/load.txt") as f:
            load = " / ".join(l.strip() for l in f)
        self.slots["verbs"] = f"ran in the soft-RoCE VM (rxe0); guest uptime before / after: {load}"
        if dropped:
            self.slots["verbs"] += "; perftest could not report (clock calibration): " + ", ".join(dropped)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fabrix-perf", default=os.path.join(ROOT, "build", "perf", "fabrix-perf"))
    ap.add_argument("--out", default=None, help="JSON of every ratio (default: compare.json beside fabrix-perf)")
    ap.add_argument("--sizes", default="8,64,512,4096,65536,262144,1048576,4194304",
                    help="comma-separated message sizes")
    ap.add_argument("--transports", default="", help="UCX transports to run: shm,tcp (default both)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is compared")
    ap.add_argument("--slots", default="ucx,ofi,verbs", help="which comparisons to run")
    ap.add_argument("--verbs-dir", default="", help="parse this earlier verbs slot output instead of booting the VM")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.out is None:
        args.out = os.path.join(os.path.dirname(os.path.abspath(args.fabrix_perf)), "compare.json")
    args.transports = [t for t in args.transports.split(",") if t]
    if not os.access(args.fabrix_perf, os.X_OK):
        sys.exit(f"compare: {args.fabrix_perf} is not built (ninja -C build perf/fabrix-perf)")
    providers = subprocess.run([args.fabrix_perf, "--list-providers"], capture_output=True, text=True,
                               check=True).stdout.split()
    c = Compare(args)
    print(f"{'where':<6} {'fabrix / raw':<25} {'bytes':>8} {'fabrix':>11} {'raw':>11} {'unit':<5} {'ratio':>6} "
          f"{'best':>6}  target   (medians of --repeat runs; 'best': ratio of the best runs)")
    slots = args.slots.split(",")
    try:
        if "ucx" in slots:
            if "ucx" not in providers:
                c.slots["ucx"] = "skipped: fabrix-perf has no ucx provider in this build"
            elif not shutil.which("ucx_perftest"):
                c.slots["ucx"] = "skipped: ucx_perftest (ucx-utils) is not installed"
            else:
                c.ucx()
                c.slots["ucx"] = "ran (ucx_perftest, two processes over localhost)"
        if "ofi" in slots:
            c.ofi(providers)
        if "verbs" in slots:
            c.verbs(providers)
    finally:
        shutil.rmtree(c.tmp, ignore_errors=True)
    for name, what in c.slots.items():
        print(f"slot {name}: {what}")
    c.save()
    missed = [r for r in c.rows if r["met"] is False]
    print(f"targets missed: {len(missed)} of {sum(r['met'] is not None for r in c.rows)}; ratios in {args.out}")


if __name__ == "__main__":
    main()
