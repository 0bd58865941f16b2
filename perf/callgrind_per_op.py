#!/usr/bin/env python3
"""Instructions per operation on the initiator, by function: fabrix-perf
runs twice under callgrind (N and 2N operations, same options), and the
difference of each function's self cost, divided by N, is what one more
operation costs (setup and teardown cancel out). The initiator is the
first process of a --loopback run.
  python3 perf/callgrind_per_op.py [N=100000] [FABRIX_PERF] [-- fabrix-perf options]
default options: UCX shared memory, 8 B writes, post lists of 32, unsignaled:
  --provider ucx --transport sysv,posix,cma write bw -s 8 -l 32 --unsignaled"""
import collections, glob, os, re, subprocess, sys, tempfile

args = sys.argv[1:]
extra = []
if "--" in args:
    extra = args[args.index("--") + 1:]
    args = args[:args.index("--")]
N = int(args[0]) if args else 100000
FP = args[1] if len(args) > 1 else "build/perf/fabrix-perf"
opts = extra or ["--provider", "ucx", "--transport", "sysv,posix,cma", "write", "bw", "-s", "8", "-l", "32",
                 "--unsignaled"]
env = dict(os.environ, UCX_WARN_UNUSED_ENV_VARS="n")


def profile(n):
    d = tempfile.mkdtemp(prefix="cg-")
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={d}/cg.%p",
                    os.path.abspath(FP), "--loopback"] + opts + ["-n", str(n)], cwd=d, env=env, check=True,
                   capture_output=True, timeout=900)
    first = sorted(glob.glob(f"{d}/cg.*"), key=lambda f: int(f.rsplit(".", 1)[1]))[0]
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", first],
                         capture_output=True, text=True, check=True).stdout
    cost = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line:
            name = re.sub(r"\s*\[.*\]$", "", m.group(2))
            src, _, fn = name.partition(":")
            cost[src.rsplit("/", 1)[-1] + ": " + fn[:100]] += int(m.group(1).replace(",", ""))
    return cost


a, b = profile(N), profile(2 * N)
per_op = {k: (b[k] - a.get(k, 0)) / N for k in b}
print(f"fabrix-perf --loopback {' '.join(opts)}: instructions per operation on the initiator "
      f"(callgrind, {N} vs {2 * N} operations)")
print(f"total {sum(per_op.values()):.0f}")
for k, v in sorted(per_op.items(), key=lambda x: -x[1]):
    if v >= 1.0:
        print(f"{v:8.1f}  {k}")
