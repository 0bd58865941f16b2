// Where network devices sit on PCIe, from sysfs, for every provider: a
// domain_options::device of the form "pci:<bus id>" (e.g. "pci:0000:3b:00.0",
// a GPU's PCI function) names the network device closest to that function.
//
// Distance between two PCI functions: both are resolved to their canonical
// /sys/devices/pci.../ paths; under one root complex it is the number of
// bridges between them (hops up from each to their closest common
// ancestor); under different root complexes on the same NUMA node it is
// `other_root` (more than any bridge count); otherwise (another socket, a
// device not on PCI, a path that does not resolve) `far_apart`.
//
// Candidates: the RDMA devices of sysfs class/infiniband and the network
// interfaces of class/net that sit on PCI (virtual ones, veths, lo and
// soft-RoCE devices have no PCI function and are passed over), closest
// first, RDMA devices before interfaces at equal distance, then by name.
//
// sysfs root: "/sys", or FABRIX_SYSFS (a fake tree, for tests; as hwloc's
// HWLOC_FSROOT); only fabrix's own choice reads it, not rdma-core, UCX or
// libfabric. Nothing here caches: a domain resolves its device once, at
// creation. Threading: free functions, no shared state.
#pragma once

#include <fabrix/detail/env.hpp>

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix::detail {

inline constexpr int other_root = 500;
inline constexpr int far_apart = 1000;

inline std::string sysfs_root() {
  const char* env = env_text("FABRIX_SYSFS");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("/sys");
}

// The PCI path components of a canonical sysfs device path, from the root
// complex down: ".../devices/pci0000:00/0000:00:01.0/0000:3b:00.0" gives
// {"pci0000:00", "0000:00:01.0", "0000:3b:00.0"}. Empty when not a PCI path.
inline std::vector<std::string> pci_chain(std::string_view path) {
  std::vector<std::string> out;
  const auto at = path.find("/devices/pci");
  if (at == std::string_view::npos) return out;
  path.remove_prefix(at + 9);
  while (!path.empty()) {
    const auto slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    // Stop at the first component that is not a PCI node (e.g. "infiniband", "virtio2").
    const bool is_pci = out.empty() ? part.starts_with("pci") : (part.size() >= 7 && part[4] == ':');
    if (!is_pci) break;
    out.emplace_back(part);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

inline std::optional<std::string> canonical(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return std::nullopt;
  return std::string(buf);
}

// A PCI function's place: its chain and its NUMA node (-1: unknown).
struct pci_place {
  std::vector<std::string> chain;
  int numa = -1;
  bool on_pci() const noexcept { return !chain.empty(); }
};

// The place of the device whose sysfs link (or directory) is `path`.
inline pci_place place_of(const std::string& path) {
  pci_place p;
  const auto real = canonical(path);
  if (!real) return p;
  p.chain = pci_chain(*real);
  if (!p.on_pci()) return p;
  // numa_node lives in the PCI function's directory (a virtio or
  // infiniband child below it has none).
  const std::string& last = p.chain.back();
  const std::string dir = real->substr(0, real->find(last) + last.size());
  std::ifstream f(dir + "/numa_node");
  int n = -1;
  if (f >> n) p.numa = n;
  return p;
}

// Bridges between two PCI chains; far_apart when they share no root complex.
inline int pcie_distance(const std::vector<std::string>& a, const std::vector<std::string>& b) noexcept {
  if (a.empty() || b.empty() || a[0] != b[0]) return far_apart;
  std::size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  return static_cast<int>((a.size() - common) + (b.size() - common));
}

inline int distance(const pci_place& a, const pci_place& b) noexcept {
  if (!a.on_pci() || !b.on_pci()) return far_apart;
  if (a.chain[0] == b.chain[0]) return pcie_distance(a.chain, b.chain);
  return a.numa >= 0 && a.numa == b.numa ? other_root : far_apart;
}

// The PCI function `bus_id` (e.g. "0000:3b:00.0") under `sysfs`.
inline pci_place pci_function(const std::string& sysfs, const std::string& bus_id) {
  return place_of(sysfs + "/bus/pci/devices/" + bus_id);
}

// "pci:<bus id>" → the bus id; nothing for any other device text.
inline std::optional<std::string> near_pci(std::string_view device) {
  if (!device.starts_with("pci:") || device.size() == 4) return std::nullopt;
  return std::string(device.substr(4));
}

struct near_device {
  std::string name;  // an RDMA device ("mlx5_0") or a network interface ("eth0")
  bool rdma = false;
  int distance = far_apart;
  int numa = -1;
};

// Every RDMA device and network interface on PCI, closest to `bus_id`
// first (above). Empty when `bus_id` is no PCI function under `sysfs`.
inline std::vector<near_device> devices_near(const std::string& sysfs, const std::string& bus_id) {
  std::vector<near_device> out;
  const pci_place target = pci_function(sysfs, bus_id);
  if (!target.on_pci()) return out;
  for (const bool rdma : {true, false}) {
    const std::string dir = sysfs + (rdma ? "/class/infiniband" : "/class/net");
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const pci_place p = place_of(dir + "/" + e->d_name + "/device");
      if (!p.on_pci()) continue;
      out.push_back({e->d_name, rdma, distance(p, target), p.numa});
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end(), [](const near_device& a, const near_device& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    if (a.rdma != b.rdma) return a.rdma;
    return a.name < b.name;
  });
  return out;
}

// The PCI function (bus id, "0000:3b:00.0") of network device `name`
// under `sysfs`: an RDMA device ("mlx5_0", a ":<port>" suffix ignored) or a
// network interface ("enp59s0"); nullopt where it is neither or sits on no
// PCI function (lo, veths, soft-RoCE). What a provider reports as
// domain::device_pci().
inline std::optional<std::string> device_pci_function(const std::string& sysfs, std::string_view name) {
  if (const auto colon = name.find(':'); colon != std::string_view::npos) name = name.substr(0, colon);
  if (name.empty() || name.find('/') != std::string_view::npos || name == "." || name == "..") return std::nullopt;
  for (const char* cls : {"/class/infiniband/", "/class/net/"}) {
    const pci_place p = place_of(sysfs + cls + std::string(name) + "/device");
    if (p.on_pci()) return p.chain.back();
  }
  return std::nullopt;
}

// The one PCI function of a comma list of network devices (an RDMA NIC's
// device and its interface are one function); nullopt where they sit on
// none, or on more than one (the provider may use any of them).
inline std::optional<std::string> devices_pci_function(const std::string& sysfs, std::string_view list) {
  std::optional<std::string> one;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto f = device_pci_function(sysfs, list.substr(0, comma));
    if (!f || (one && *one != *f)) return std::nullopt;
    one = f;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return one;
}

// How far, in words: "2 PCIe hops", "same NUMA node, another root
// complex", "not on a shared PCIe tree".
inline std::string describe_distance(int d) {
  if (d == other_root) return "same NUMA node, another root complex";
  if (d >= far_apart) return "not on a shared PCIe tree";
  return std::to_string(d) + " PCIe hop" + (d == 1 ? "" : "s");
}

}  // namespace fabrix::detail
