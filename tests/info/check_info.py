#!/usr/bin/env python3
"""Checks fabrix-info against what this machine and environment are.

  check_info.py FABRIX_INFO ENV_HPP [--expect-rdma DEVICE] [--plugin-dirs DIR:DIR]

ENV_HPP is include/fabrix/detail/env.hpp: its table is the list of variables
the report must show. Every provider must state its GPU path and why; the
GPU-NIC-NUMA distances are checked against a fake sysfs tree (--sysfs). With --expect-rdma (inside the VM), DEVICE must be
listed with an active port and a RoCE v2 GID, and the verbs provider must
open and say it would use it. With --plugin-dirs (tests/plugin's build
directories: the UCX plugin and the C test plugins), the plugins found there
are checked: shadowed, loaded, refused, each with what it says. Each failed check prints what was seen; exit 1
on the first, 0 when all pass.
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def fail(what, seen=None):
    print(f"check_info: FAIL: {what}")
    if seen is not None:
        print(json.dumps(seen, indent=1)[:3000])
    sys.exit(1)


def run(binary, *args, env_extra=None, expect_rc=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIX_")}
    env.update({"UCX_WARN_UNUSED_ENV_VARS": "n"})
    env.update(env_extra or {})
    p = subprocess.run([binary, *args], capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != expect_rc:
        fail(f"fabrix-info {' '.join(args)} exited {p.returncode}, expected {expect_rc}: {p.stderr[-500:]}")
    return p.stdout


def check_topology(binary, with_verbs):
    """GPU to RDMA device distances and NUMA nodes, read from a fake sysfs
    tree (--sysfs): socket 0 has a PCIe switch with NIC mlx5_0 and GPU
    0000:04:00.0 under it and mlx5_1 on another root port; socket 1 has
    mlx5_2; rxe0 is not on PCI."""
    with tempfile.TemporaryDirectory() as root:
        dev = os.path.join(root, "devices")
        sw = os.path.join(dev, "pci0000:00/0000:00:01.0/0000:01:00.0")
        gpu = os.path.join(sw, "0000:02:01.0/0000:04:00.0")
        nics = {"mlx5_0": (os.path.join(sw, "0000:02:00.0/0000:03:00.0"), "0"),
                "mlx5_1": (os.path.join(dev, "pci0000:00/0000:00:02.0/0000:05:00.0"), "0"),
                "mlx5_2": (os.path.join(dev, "pci0000:80/0000:80:01.0/0000:81:00.0"), "1"),
                "rxe0": (os.path.join(dev, "virtual/net/eth0"), None)}
        for name, (where, numa) in nics.items():
            os.makedirs(where)
            if numa is not None:
                open(os.path.join(where, "numa_node"), "w").write(numa + "\n")
            os.makedirs(os.path.join(root, "class/infiniband", name))
            os.symlink(where, os.path.join(root, "class/infiniband", name, "device"))
        os.makedirs(gpu)
        for f, v in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2335"), ("numa_node", "0")):
            open(os.path.join(gpu, f), "w").write(v + "\n")
        os.makedirs(os.path.join(root, "bus/pci/devices"))
        os.symlink(gpu, os.path.join(root, "bus/pci/devices/0000:04:00.0"))
        gpus = json.loads(run(binary, "--json", "--section", "gpus", "--sysfs", root))["gpus"]["on_pci"]
    if len(gpus) != 1 or gpus[0]["pci"] != "0000:04:00.0" or gpus[0]["numa_node"] != 0:
        fail("the fake tree's GPU 0000:04:00.0 on NUMA node 0 is not reported", gpus)
    if not with_verbs:
        return
    seen = {d["rdma_device"]: (d["pcie_bridges"], d["same_numa_node"]) for d in gpus[0]["to_rdma_devices"]}
    far = "not on the same PCIe tree"
    want = {"mlx5_0": (4, True), "mlx5_1": (6, True), "mlx5_2": (far, False), "rxe0": (far, False)}
    if seen != want or gpus[0]["closest_rdma_device"] != "mlx5_0":
        fail(f"GPU to RDMA device distances {seen}, expected {want} and mlx5_0 closest", gpus)


def provider_number(name):
    """fabrix::provider_id_of for a name that is not built in."""
    h = 0xcbf29ce484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001b3) % 2**64
    return 256 + h % 65280


def check_plugins(binary, dirs):
    """The plugins section with FABRIX_PROVIDER_PATH=dirs: the UCX plugin is
    shadowed by the compiled-in ucx (and not loaded), the C test plugin
    "good" loads (version 1) and says why its domain does not open, broken
    ones say why they do not load."""
    providers = json.loads(run(binary, "--json", "--section", "providers",
                               env_extra={"FABRIX_PROVIDER_PATH": dirs}))["providers"]
    plugins = providers["plugins"]
    if plugins["path"][:len(dirs.split(":"))] != dirs.split(":"):
        fail(f"the plugin path does not start with FABRIX_PROVIDER_PATH's {dirs}", plugins)
    found = {p["name"]: p for p in plugins["found"]}
    for name in ("ucx", "good", "abifuture", "wrongid"):
        if name not in found:
            fail(f"plugin {name} not listed", plugins)
    if "compiled-in" not in found["ucx"].get("used", "") or "loads" in found["ucx"]:
        fail("the UCX plugin should be shadowed by the compiled-in ucx, and not loaded", found["ucx"])
    good = found["good"]
    if not good["loads"] or good["abi_version"] != 1 or good["wire_id"] != provider_number("good") \
            or good["opens"] or "stub plugin: no domain here" not in good["why_not"]:
        fail("plugin good: loads, version 1, its name's number, and its domain's refusal", good)
    for name, says in (("abifuture", "ABI version 3"), ("wrongid", "wire_id is 7")):
        if found[name]["loads"] or says not in found[name]["why_not"]:
            fail(f"plugin {name} should not load, saying '{says}'", found[name])
    if providers["auto"].startswith("none"):
        fail("with plugins on the path, auto reports none", providers)
    text = run(binary, "--section", "providers", env_extra={"FABRIX_PROVIDER_PATH": dirs})
    if "plugins:" not in text or "libfabrix-good.so" not in text:
        fail("the text report does not list the plugins")


def main():
    args = sys.argv[1:]
    expect_rdma = None
    if "--expect-rdma" in args:
        i = args.index("--expect-rdma")
        expect_rdma = args[i + 1]
        del args[i:i + 2]
    plugin_dirs = None
    if "--plugin-dirs" in args:
        i = args.index("--plugin-dirs")
        plugin_dirs = args[i + 1]
        del args[i:i + 2]
    binary, env_hpp = args
    table = re.findall(r'\{"(FABRIX_[A-Z0-9_]+)",', open(env_hpp).read())
    if len(table) < 10:
        fail(f"read only {len(table)} variables from {env_hpp}")

    # The whole report, with one known variable set and one misspelt.
    doc = json.loads(run(binary, "--json", env_extra={"FABRIX_VERBS_GID_INDEX": "2",
                                                      "FABRIX_VERBS_GID_INDX": "1"}))
    sections = ["build", "providers", "rdma_devices", "gpus", "bootstrap", "environment"]
    if list(doc) != sections:
        fail(f"sections {list(doc)}, expected {sections}")

    compiled = doc["build"]["providers"]
    listed = [p["name"] for p in doc["providers"]["compiled_in"]]
    if not compiled or compiled != listed:
        fail(f"build lists providers {compiled}, the providers section {listed}", doc["providers"])
    for p in doc["providers"]["compiled_in"]:
        if p["opens"]:
            caps = p["capabilities"]
            if caps["gpu_path"] not in ("none", "staged", "direct") or not p["describe"]:
                fail(f"provider {p['name']} opened but reports {caps}", p)
            # The PCI function of its device: one sysfs has, or none.
            pci = p.get("device_pci") or ""
            if not pci.startswith("none") and (not pci or not os.path.exists("/sys/bus/pci/devices/" + pci)):
                fail(f"provider {p['name']} reports device PCI function {pci!r}, not in sysfs", p)
        elif not p.get("why_not"):
            fail(f"provider {p['name']} does not open and says nothing of why", p)
        gpu = p.get("gpu", {})
        if not gpu.get("why") or gpu.get("path") != (p["capabilities"]["gpu_path"] if p["opens"] else "none"):
            fail(f"provider {p['name']}: no GPU path with its reason, or one that is not its capability", p)
    if not doc["providers"].get("gpu_staged"):
        fail("the providers section does not say what carries GPU buffers where no provider does", doc["providers"])
    # Host memory over tcp always works where UCX or libfabric is built in.
    # With an RDMA device libfabric picks verbs;ofi_rxm, which on rxe fails
    # without FI_UNIVERSE_SIZE (tests/vm/meson.build): there the report
    # must only say why.
    for name in ("ucx", "ofi"):
        p = next((p for p in doc["providers"]["compiled_in"] if p["name"] == name), None)
        if p is not None and not p["opens"] and not (name == "ofi" and expect_rdma):
            fail(f"{name} is compiled in but does not open here", p)
    if any(p["opens"] for p in doc["providers"]["compiled_in"]) and doc["providers"]["auto"].startswith("none"):
        fail("a provider opens but auto reports none", doc["providers"])

    env = doc["environment"]
    names = [v["name"] for v in env["variables"]]
    if names != table:
        fail(f"environment lists {len(names)} variables, env.hpp has {len(table)}",
             sorted(set(names) ^ set(table)))
    values = {v["name"]: v["value"] for v in env["variables"]}
    if values["FABRIX_VERBS_GID_INDEX"] != "2" or any(v is not None for k, v in values.items()
                                                       if k != "FABRIX_VERBS_GID_INDEX"):
        fail("variable values are not what was set (only FABRIX_VERBS_GID_INDEX=2)", values)
    if env["set_but_not_read_by_the_library"] != ["FABRIX_VERBS_GID_INDX"]:
        fail("the misspelt FABRIX_VERBS_GID_INDX is not reported", env)

    boot = doc["bootstrap"]
    if boot["engine"] != "tcp" or boot["tcp_store"]["size"] != 1:
        fail("without a launcher the bootstrap should be a TCP store of one", boot)
    boot = json.loads(run(binary, "--json", "--section", "bootstrap", env_extra={
        "FABRIX_RANK": "1", "FABRIX_SIZE": "3", "FABRIX_BOOTSTRAP": "127.0.0.1:7"}))["bootstrap"]
    if boot["engine"] != "tcp" or (boot["tcp_store"]["rank"], boot["tcp_store"]["size"]) != (1, 3) \
            or boot["tcp_store"]["root"] != "127.0.0.1:7":
        fail("FABRIX_RANK=1 FABRIX_SIZE=3 FABRIX_BOOTSTRAP=127.0.0.1:7 not reported", boot)
    boot = json.loads(run(binary, "--json", "--section", "bootstrap",
                          env_extra={"FABRIX_BOOTSTRAP_ENGINE": "carrier-pigeon"}))["bootstrap"]
    if not boot["engine"].startswith("none") or "FABRIX_BOOTSTRAP_ENGINE" not in boot["engine"]:
        fail("a bad FABRIX_BOOTSTRAP_ENGINE is not reported as such", boot)

    # RDMA devices: every one sysfs shows is listed; inside the VM, the one expected.
    sysfs = sorted(os.listdir("/sys/class/infiniband")) if os.path.isdir("/sys/class/infiniband") else []
    rdma = doc["rdma_devices"]
    if "rdma-core" not in str(rdma["verbs_would_use"]) and sorted(d["name"] for d in rdma["devices"]) != sysfs:
        fail(f"sysfs shows RDMA devices {sysfs}", rdma)
    if expect_rdma:
        dev = next((d for d in rdma["devices"] if d["name"] == expect_rdma), None)
        if dev is None:
            fail(f"{expect_rdma} not listed", rdma)
        active = [p for p in dev["ports"] if "active" in p["state"].lower()]
        if not active or not any(g["type"] == "RoCE v2" for g in active[0]["gids"]):
            fail(f"{expect_rdma}: no active port with a RoCE v2 GID", dev)
        if sum(g["best"] for g in active[0]["gids"]) != 1:
            fail(f"{expect_rdma}: not exactly one GID marked best", dev)
        # The GID index set above (2) may not exist on rxe0: ask without it.
        rdma = json.loads(run(binary, "--json", "--section", "rdma_devices"))["rdma_devices"]
        if not isinstance(rdma["verbs_would_use"], dict) or rdma["verbs_would_use"]["device"] != expect_rdma:
            fail(f"the verbs provider would not use {expect_rdma}", rdma)
        providers = json.loads(run(binary, "--json", "--section", "providers"))["providers"]
        verbs = next((p for p in providers["compiled_in"] if p["name"] == "verbs"), None)
        if verbs is None or not verbs["opens"]:
            fail("verbs does not open where an RDMA device is", verbs)

    check_topology(binary, "verbs" in compiled)
    if plugin_dirs:
        check_plugins(binary, plugin_dirs)
    elif doc["providers"]["plugins"]["found"]:
        fail("plugins listed where none were put on the path", doc["providers"]["plugins"])

    # The text form has every section and provider; bad arguments are refused.
    text = run(binary)
    for word in sections + compiled:
        if word not in text:
            fail(f"the text report does not mention {word}")
    run(binary, "--section", "no-such-section", expect_rc=2)
    run(binary, "--jsn", expect_rc=2)
    print(f"check_info: ok ({len(compiled)} providers, {len(table)} variables, RDMA devices {sysfs})")


if __name__ == "__main__":
    main()
