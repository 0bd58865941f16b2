#!/usr/bin/env python3
"""Plans the GPU bundle from a configured meson build dir (used by
tests/gpu/bundle.sh; runs on the build machine, never on the GPU machine).

usage: plan.py BUILD_DIR SOURCE_ROOT PLAN_DIR

Reads `meson introspect --tests` and `--targets` and writes into PLAN_DIR:
  targets.txt  ninja targets (paths relative to BUILD_DIR) the checks need,
               one a line: every executable behind a test of the suites
               gpu, cuda, cuda_ipc and gpu-verbs (its command or a target it
               depends on), plus tests/gpu/gpu_bench, perf/fabrix-perf (with -Dperf) and
               src/info/fabrix-info (check fabrix_info: its report, in its log)
  scripts.txt  source files the checks run through an interpreter (e.g.
               perf/check_run.py) and their sibling modules, relative to
               SOURCE_ROOT
  checks.sh    one `check NAME KIND TIMEOUT [VAR=VALUE...] -- ARGV...` line
               per check, in the order the runner runs them, with paths
               rewritten into the bundle ("$B"/bin/..., "$B"/share/...).
               KIND is `gpu` (needs a CUDA device: suites gpu, gpu-verbs,
               cuda_ipc, and the bench) or `host` (the GPU-free cuda suite).
Exits 2 when the build dir has no GPU test (configured without CUDA)."""
import json
import os
import shlex
import subprocess
import sys

SUITES = {"gpu", "cuda", "cuda_ipc", "gpu-verbs"}
GPU_SUITES = {"gpu", "gpu-verbs", "cuda_ipc"}
EXTRA = {"tests/gpu/gpu_bench": True, "perf/fabrix-perf": False, "src/info/fabrix-info": False}  # path: required
BENCH_TIMEOUT = 120


def introspect(build, what):
    out = subprocess.run(["meson", "introspect", what, build], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    build, src, plan = (os.path.realpath(p) for p in sys.argv[1:4])
    tests = introspect(build, "--tests")
    targets = introspect(build, "--targets")
    files_of = {t["id"]: [os.path.realpath(f) for f in t["filename"]] for t in targets}
    exe_files = {os.path.realpath(f) for t in targets if t["type"] == "executable" for f in t["filename"]}

    def in_build(path):
        return path.startswith(build + "/")

    wanted, scripts, checks = set(), set(), []
    for t in tests:
        suites = {s.split(":", 1)[-1] for s in t["suite"]}
        if not suites & SUITES:
            continue
        cmd = list(t["cmd"])
        for dep in t.get("depends", []):
            wanted.update(f for f in files_of.get(dep, []) if f in exe_files)
        argv = []
        for i, arg in enumerate(cmd):
            # Meson runs a test with the build dir as its cwd, so a relative
            # argument may name a built file (perf/fabrix-perf).
            path = os.path.realpath(arg if os.path.isabs(arg) else os.path.join(build, arg))
            if i == 0 and os.path.basename(arg).startswith("python3"):
                argv.append("python3")  # whatever python3 the GPU machine has, if any
            elif path in exe_files and in_build(path):
                wanted.add(path)
                argv.append('"$B"/bin/' + shlex.quote(os.path.relpath(path, build)))
            elif path.startswith(src + "/") and not in_build(path) and os.path.isfile(path):
                folder = os.path.dirname(path)
                scripts.update(os.path.relpath(os.path.join(folder, f), src)
                               for f in os.listdir(folder) if f.endswith(".py"))
                scripts.add(os.path.relpath(path, src))
                argv.append('"$B"/share/' + shlex.quote(os.path.relpath(path, src)))
            elif os.path.isabs(arg) and (in_build(path) or path.startswith(src + "/")):
                sys.exit(f"plan.py: test {t['name']}: cannot carry {arg} into the bundle")
            else:
                argv.append(shlex.quote(arg))
        kind = "gpu" if suites & GPU_SUITES else "host"
        env = [shlex.quote(f"{k}={v}") for k, v in sorted((t.get("env") or {}).items())]
        # Run order: the GPU-free checks, the gpu suite, then gpu-verbs, then
        # the cuda_ipc conformance entries (which skip on every machine).
        order = 0 if kind == "host" else 1 if "gpu" in suites else 3 if "gpu-verbs" in suites else 4
        checks.append((order, len(checks), t["name"], kind, int(t.get("timeout") or 60), env, argv))

    if not any(c[3] == "gpu" for c in checks):
        print(f"plan.py: {build} has no GPU test: configure it with -Dcuda=enabled", file=sys.stderr)
        sys.exit(2)

    for rel, required in EXTRA.items():
        path = os.path.join(build, rel)
        if path in exe_files:
            wanted.add(path)
        elif required:
            sys.exit(f"plan.py: {build} has no target {rel}")
    bench = '"$B"/bin/tests/gpu/gpu_bench'
    checks.append((2, len(checks), "gpu_bench", "gpu", BENCH_TIMEOUT, [], [bench, '"$OUT"/bandwidth.json']))
    if os.path.join(build, "perf/fabrix-perf") in wanted:  # fabrix-perf's cuda_ipc figures (figures.sh)
        checks.append((2, len(checks), "gpu_figures", "gpu", BENCH_TIMEOUT, [],
                       ["bash", '"$B"/share/figures.sh', '"$B"/bin/perf/fabrix-perf', '"$OUT"/figures.txt']))

    if os.path.join(build, "src/info/fabrix-info") in wanted:  # the report of what fabrix would use there
        checks.append((0, len(checks), "fabrix_info", "host", 60, [], ['"$B"/bin/src/info/fabrix-info']))

    os.makedirs(plan, exist_ok=True)
    with open(os.path.join(plan, "targets.txt"), "w") as f:
        f.writelines(os.path.relpath(p, build) + "\n" for p in sorted(wanted))
    with open(os.path.join(plan, "scripts.txt"), "w") as f:
        f.writelines(s + "\n" for s in sorted(scripts))
    with open(os.path.join(plan, "checks.sh"), "w") as f:
        f.write("# The checks, generated by tests/gpu/bundle.sh from `meson introspect --tests`\n"
                "# (suites gpu, cuda, cuda_ipc, gpu-verbs) plus the bandwidth sweep; run.sh\n"
                "# sources this with B (the bundle) and OUT set.\n"
                "# check NAME KIND TIMEOUT [VAR=VALUE...] -- ARGV...\n")
        for _, _, name, kind, timeout, env, argv in sorted(checks):
            f.write(" ".join(["check", shlex.quote(name), kind, str(timeout)] + env + ["--"] + argv) + "\n")


if __name__ == "__main__":
    main()
