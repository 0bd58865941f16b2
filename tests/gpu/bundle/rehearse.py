#!/usr/bin/env python3
"""Meson test gpu-bundle: the GPU bundle rehearsed on a machine without a GPU.

usage: rehearse.py SOURCE_ROOT BUILD_DIR

1. tests/gpu/bundle.sh --no-build BUILD_DIR into a temporary folder (the
   build dir's executables, nothing compiled), under 64 MiB; its MANIFEST
   names every file with the right size and sha256.
2. ldd on every executable and library in it, with the runner's
   LD_LIBRARY_PATH: each dependency resolves into the bundle or to glibc;
   "not found" only for the GPU driver (libcuda.so.1, libnvidia-*).
3. run.sh from another directory with a scrubbed environment
   (env -i PATH=/usr/bin:/bin OUT=...), then again with a PATH holding only
   bash and coreutils (no python3, tar, grep, nvidia-smi), and (as root,
   where mount namespaces work) chrooted into a root that holds only glibc,
   bash and coreutils, so nothing can come from the system's UCX,
   libfabric, rdma-core or libstdc++: every check the
   build dir's suites gpu, cuda, cuda_ipc and gpu-verbs define is there
   with its meson arguments; every GPU check is skipped because there is no
   device (never passed, never failed), the GPU-free ones pass, the run
   takes seconds and writes at most 8 files.
4. The runner's verdicts on a fake bundle of scripted checks: exit 77 and a
   doctest run with no passed case are skipped, a timeout and a crash are
   failed; and a damaged bundle fails its checks."""
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time

GLIBC = re.compile(r"^(linux-vdso\.so|ld-linux[-\w]*\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|"
                   r"libresolv\.so|libutil\.so)")
DRIVER = re.compile(r"^(libcuda\.so\.1|libnvidia-[\w.-]+\.so[.\d]*)$")
NO_DEVICE = re.compile(r"no CUDA device|no RDMA device|has no device here")
MAX_BYTES = 64 << 20
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)
        print("FAIL:", what)
    return ok


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def expected_checks(build):
    tests = json.loads(subprocess.run(["meson", "introspect", "--tests", build], check=True, capture_output=True,
                                      text=True).stdout)
    want = {}
    for t in tests:
        suites = {s.split(":", 1)[-1] for s in t["suite"]}
        if suites & {"gpu", "cuda", "cuda_ipc", "gpu-verbs"}:
            want[t["name"]] = ("gpu" if suites & {"gpu", "gpu-verbs", "cuda_ipc"} else "host", t)
    want["gpu_bench"] = ("gpu", None)
    if os.path.isfile(os.path.join(build, "perf", "fabrix-perf")):
        want["gpu_figures"] = ("gpu", None)  # share/figures.sh
    if os.path.isfile(os.path.join(build, "src", "info", "fabrix-info")):
        want["fabrix_info"] = ("host", None)  # its report of that machine, in its log
    return want


def check_manifest(bundle):
    listed = {}
    with open(os.path.join(bundle, "MANIFEST")) as f:
        for line in f:
            sha, size, path = line.rstrip("\n").split(" ", 2)
            listed[path] = (sha, int(size))
    present = set()
    for d, _, files in os.walk(bundle):
        for name in files:
            rel = os.path.relpath(os.path.join(d, name), bundle)
            if rel != "MANIFEST":
                present.add(rel)
            check(not os.path.islink(os.path.join(d, name)), f"{rel} is a link (the bundle holds plain files)")
    check(present == set(listed), f"MANIFEST lists {sorted(set(listed) ^ present)} wrongly")
    for rel, (sha, size) in listed.items():
        path = os.path.join(bundle, rel)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data = f.read()
            check(len(data) == size and hashlib.sha256(data).hexdigest() == sha, f"MANIFEST entry of {rel} is wrong")


def check_ldd(bundle):
    libpath = ":".join(os.path.join(bundle, "lib", d) for d in ("", "ucx", "cxx"))
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": libpath}
    elves = []
    for d, _, files in os.walk(bundle):
        elves += [os.path.join(d, f) for f in files if is_elf(os.path.join(d, f))]
    check(len(elves) >= 10, f"only {len(elves)} ELF files in the bundle")
    for elf in sorted(elves):
        rel = os.path.relpath(elf, bundle)
        out = subprocess.run(["ldd", elf], env=env, capture_output=True, text=True)
        if not check(out.returncode == 0, f"ldd {rel} failed: {out.stderr.strip()}"):
            continue
        for line in out.stdout.splitlines():
            words = line.split()
            if not words:
                continue
            name = words[0]
            if "=>" not in words:  # linux-vdso.so.1 (0x...), /lib64/ld-linux-x86-64.so.2 (0x...)
                check(GLIBC.match(os.path.basename(name)), f"{rel}: unexpected ldd line {line.strip()!r}")
                continue
            target = words[2]
            if target == "not":
                check(DRIVER.match(name), f"{rel}: {name} not found (only the GPU driver may be absent)")
            elif GLIBC.match(name):
                continue
            else:
                real = os.path.realpath(target)
                check(real.startswith(os.path.realpath(bundle) + "/"), f"{rel}: {name} resolves to {target}, "
                      "outside the bundle")


def run_bundle(bundle, cwd, out, path, extra_env=None):
    env = {"PATH": path, "OUT": out}
    env.update(extra_env or {})
    t0 = time.monotonic()
    p = subprocess.run(["bash", os.path.join(bundle, "run.sh")], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=120)
    took = time.monotonic() - t0
    summary = None
    try:
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"run.sh (PATH={path}) wrote no readable summary.json: {e}\n{p.stdout}\n{p.stderr}")
    return p, took, summary


def check_no_gpu_run(label, p, took, summary, want, out):
    if summary is None:
        return
    print(f"{label}: run.sh exited {p.returncode} in {took:.1f} s: {summary['passed']} passed, "
          f"{summary['failed']} failed, {summary['skipped']} skipped")
    check(p.returncode == 0, f"{label}: run.sh exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
    check(took < 30, f"{label}: run.sh took {took:.0f} s without a GPU (should end in seconds)")
    check(summary["bundle_intact"] is True, f"{label}: the bundle's MANIFEST check failed")
    got = {c["name"]: c for c in summary["checks"]}
    check(set(got) == set(want), f"{label}: checks {sorted(set(got) ^ set(want))} missing or extra")
    for name, (kind, _) in want.items():
        c = got.get(name)
        if c is None:
            continue
        check(c["kind"] == kind, f"{label}: {name} is kind {c['kind']}, expected {kind}")
        if kind == "gpu":
            check(c["status"] == "skipped" and NO_DEVICE.search(c["reason"]),
                  f"{label}: GPU check {name} is {c['status']} ({c['reason']!r}), expected skipped for no device")
        else:
            check(c["status"] == "passed", f"{label}: GPU-free check {name} is {c['status']} ({c['reason']!r})")
    files = os.listdir(out)
    check(len(files) <= 8, f"{label}: {len(files)} files under OUT: {files}")
    check("bandwidth.json" not in files, f"{label}: bandwidth.json written without a GPU")
    check("figures.txt" not in files, f"{label}: figures.txt written without a GPU")
    check("summary.txt" in files and "nvidia-smi.txt" in files, f"{label}: files under OUT: {files}")


def check_commands(bundle, want):
    """Each check runs its meson test's command: same arguments and env."""
    with open(os.path.join(bundle, "checks.sh")) as f:
        lines = [l for l in f if l.startswith("check ")]
    text = "".join(lines)
    for name, (_, t) in want.items():
        if t is None:
            continue
        line = next((l for l in lines if l.split()[1].strip("'") == name), None)
        if not check(line is not None, f"checks.sh has no line for {name}"):
            continue
        for arg in t["cmd"][1:]:
            if "/" in arg:
                arg = os.path.basename(arg)
            check(arg in line or repr(arg) in line or f"'{arg}'" in line, f"checks.sh: {name} lost argument {arg!r}")
        for k, v in (t.get("env") or {}).items():
            check(f"{k}={v}" in line, f"checks.sh: {name} lost env {k}={v}")
    check("gpu_bench" in text, "checks.sh has no bandwidth sweep")


def minimal_path(tmp):
    """A folder with bash and coreutils only, or None where dpkg cannot say which."""
    try:
        files = subprocess.run(["dpkg", "-L", "coreutils"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    d = os.path.join(tmp, "minbin")
    os.makedirs(d)
    for f in files.split() + [shutil.which("bash") or "/bin/bash"]:
        if re.match(r"^/(usr/)?s?bin/[^/]+$", f) and os.path.isfile(f) and os.access(f, os.X_OK):
            dest = os.path.join(d, os.path.basename(f))
            if not os.path.exists(dest):
                os.symlink(os.path.realpath(f), dest)
    return d


def bare_root(tmp, minbin, bundle):
    """A root holding only glibc, bash and coreutils, the bundle bind-mounted
    at /opt/bundle: no UCX, libfabric, rdma-core or libstdc++ of the
    system's to fall back on. Returns the command that runs run.sh there, or
    None where mount namespaces are not allowed (not root, a container)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("chroot"):
        return None
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return None
    root = os.path.join(tmp, "bare")
    for d in ("usr/bin", "lib64", "lib/x86_64-linux-gnu", "tmp", "dev", "proc", "sys", "opt/bundle", "etc"):
        os.makedirs(os.path.join(root, d))
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    os.symlink("usr/bin", os.path.join(root, "bin"))
    libs = set()
    for name in os.listdir(minbin):
        exe = os.path.realpath(os.path.join(minbin, name))
        shutil.copy(exe, os.path.join(root, "usr/bin", name))
        out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
        libs.update(w[2] for w in (l.split() for l in out.splitlines()) if len(w) > 2 and w[1] == "=>")
    for lib in libs | {"/lib64/ld-linux-x86-64.so.2"}:
        dest = "lib64" if "ld-linux" in lib else "lib/x86_64-linux-gnu"
        shutil.copy(lib, os.path.join(root, dest, os.path.basename(lib)))
    for name in ("libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libresolv.so.2"):
        src = os.path.join("/lib/x86_64-linux-gnu", name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(root, "lib/x86_64-linux-gnu", name))
    with open(os.path.join(root, "etc/hosts"), "w") as f:
        f.write("127.0.0.1 localhost\n")
    # Exit 99: the mounts were refused (a container without the capability).
    script = (f"{{ mount --bind /dev {root}/dev && mount -t proc proc {root}/proc && mount --rbind /sys {root}/sys && "
              f"mount --bind {bundle} {root}/opt/bundle; }} || exit 99; "
              f"exec chroot {root} /usr/bin/env -i PATH=/usr/bin OUT=/tmp/out /usr/bin/bash /opt/bundle/run.sh")
    return root, ["unshare", "-m", "--propagation", "private", "bash", "-c", script]


def fake_bundle(bundle, tmp):
    """The runner over scripted checks, to pin its verdicts."""
    fake = os.path.join(tmp, "fake")
    os.makedirs(fake)
    shutil.copy(os.path.join(bundle, "run.sh"), fake)
    with open(os.path.join(bundle, "bundle.env")) as f:
        env = [l for l in f if not l.startswith("ibv_drivers=")]
    with open(os.path.join(fake, "bundle.env"), "w") as f:
        f.writelines(env)
    doctest = "[doctest] test cases: {} | {} passed | 0 failed | {} skipped"
    cases = {
        "exit0": ("passed", "echo '" + doctest.format(3, 3, 0) + "'"),
        "exit77": ("skipped", "echo 'x: skipped: no CUDA device here'; exit 77"),
        "doctest-none-passed": ("skipped", "echo '" + doctest.format(2, 0, 2) + "'"),
        "doctest-nothing-run": ("skipped", "echo '" + doctest.format(0, 0, 0) + "'"),
        "exit1": ("failed", "exit 1"),
        "crash": ("failed", "kill -SEGV $$"),
        "hang": ("failed", "sleep 30"),
    }
    with open(os.path.join(fake, "checks.sh"), "w") as f:
        for name, (_, script) in cases.items():
            limit = 2 if name == "hang" else 20
            f.write(f"check {name} gpu {limit} FAKE=1 -- bash -c {shlex.quote(script)}\n")
    with open(os.path.join(fake, "MANIFEST"), "w") as f:
        for name in ("bundle.env", "checks.sh", "run.sh"):
            data = open(os.path.join(fake, name), "rb").read()
            f.write(f"{hashlib.sha256(data).hexdigest()} {len(data)} {name}\n")
    out = os.path.join(tmp, "fake-out")
    p, took, summary = run_bundle(fake, tmp, out, "/usr/bin:/bin")
    if summary is None:
        return
    check(p.returncode == 1, f"fake bundle: run.sh exited {p.returncode} with failed checks, expected 1")
    got = {c["name"]: c for c in summary["checks"]}
    for name, (status, _) in cases.items():
        c = got.get(name, {})
        check(c.get("status") == status, f"fake bundle: {name} is {c.get('status')} ({c.get('reason')!r}), "
              f"expected {status}")
    check("timed out" in got.get("hang", {}).get("reason", ""), f"fake bundle: hang: {got.get('hang')}")
    check(took < 20, f"fake bundle: took {took:.0f} s")


def main():
    src, build = (os.path.realpath(a) for a in sys.argv[1:3])
    want = expected_checks(build)
    tmp = tempfile.mkdtemp(prefix="gpu-bundle-rehearsal-", dir=build)
    bundle = os.path.join(tmp, "bundle")
    t0 = time.monotonic()
    p = subprocess.run(["bash", os.path.join(src, "tests/gpu/bundle.sh"), "--no-build", build, bundle],
                       capture_output=True, text=True)
    print(p.stdout + p.stderr, end="")
    if not check(p.returncode == 0, f"bundle.sh exited {p.returncode}"):
        sys.exit(1)
    print(f"bundle.sh: {time.monotonic() - t0:.1f} s")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(bundle) for f in fs)
    print(f"bundle: {size / 2**20:.1f} MiB")
    check(size < MAX_BYTES, f"the bundle is {size} bytes, over 64 MiB")
    check_manifest(bundle)
    check_commands(bundle, want)
    check_ldd(bundle)

    elsewhere = os.path.join(tmp, "elsewhere")
    os.makedirs(elsewhere)
    out = os.path.join(tmp, "out-scrubbed")
    check_no_gpu_run("env -i PATH=/usr/bin:/bin", *run_bundle(bundle, elsewhere, out, "/usr/bin:/bin"), want, out)

    minbin = minimal_path(tmp)
    if minbin is None:
        print("no dpkg: the bash-and-coreutils-only run is left out")
    else:
        out = os.path.join(tmp, "out-minimal")
        p, took, summary = run_bundle(bundle, elsewhere, out, minbin)
        check_no_gpu_run("PATH=bash+coreutils", p, took, summary, want, out)
        if summary is not None:
            check(summary["python3"] == "", "PATH=bash+coreutils: run.sh found a python3")
            check(os.path.isfile(os.path.join(out, "logs.txt")), "PATH=bash+coreutils: no logs.txt (no tar)")
            perf = [c for c in summary["checks"] if "perf" in c["name"]]
            for c in perf:  # the bash copy of check_run.py ran, and saw no device
                check(NO_DEVICE.search(c["reason"]), f"PATH=bash+coreutils: {c}")

        # Again in a root with nothing but glibc, bash and coreutils: what
        # the bundle loads (UCX's modules too) must come from the bundle.
        bare = bare_root(tmp, minbin, bundle)
        if bare is None:
            print("no mount namespace here (not root, or a container): the bare-root run is left out")
        else:
            root, cmd = bare
            t = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            took = time.monotonic() - t
            out = os.path.join(root, "tmp/out")
            if p.returncode == 99:
                print(f"mounts refused here ({p.stderr.strip()}): the bare-root run is left out")
                bare = None
        if bare is not None:
            try:
                with open(os.path.join(out, "summary.json")) as f:
                    summary = json.load(f)
            except (OSError, ValueError) as e:
                summary = None
                check(False, f"bare root: no summary.json ({e}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
            check_no_gpu_run("bare root (glibc, bash, coreutils)", p, took, summary, want, out)

    # A damaged bundle: its checks fail, none runs.
    with open(os.path.join(bundle, "checks.sh"), "a") as f:
        f.write("# tampered\n")
    out = os.path.join(tmp, "out-damaged")
    p, took, summary = run_bundle(bundle, elsewhere, out, "/usr/bin:/bin", {"CHECKS": "cuda_parts"})
    if summary is not None:
        check(p.returncode == 1 and summary["bundle_intact"] is False and summary["failed"] == 1,
              f"damaged bundle: exit {p.returncode}, {summary}")

    fake_bundle(bundle, tmp)

    print(f"rehearsal: {time.monotonic() - t0:.1f} s, {len(problems)} problems")
    if problems:
        print(f"kept {tmp} for a look")
        sys.exit(1)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
