// PCIe distance between an RDMA device and another PCI function (a GPU),
// from sysfs: both are resolved to their canonical /sys/devices/pci.../
// paths, and the distance is the number of bridges between them (hops up
// from each to their closest common ancestor). Functions under different
// root complexes (e.g. different sockets) are `far_apart`. Device-free:
// `sysfs` is a root directory (normally "/sys"), so tests use a fake tree.
#pragma once

#include <stdlib.h>

#include <climits>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix::verbs::detail {

inline constexpr int far_apart = 1000;

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
    // Stop at the first component that is not a PCI node (e.g. "infiniband").
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

// Bridges between two PCI chains; far_apart when they share no root complex.
inline int pcie_distance(const std::vector<std::string>& a, const std::vector<std::string>& b) noexcept {
  if (a.empty() || b.empty() || a[0] != b[0]) return far_apart;
  std::size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  return static_cast<int>((a.size() - common) + (b.size() - common));
}

// Distance between RDMA device `ibdev` (e.g. "mlx5_0") and PCI function
// `bus_id` (e.g. "0000:3b:00.0"); far_apart when either is not found or is
// not on PCI (soft-RoCE devices are not).
inline int device_distance(const std::string& sysfs, const std::string& ibdev, const std::string& bus_id) {
  const auto dev = canonical(sysfs + "/class/infiniband/" + ibdev + "/device");
  const auto other = canonical(sysfs + "/bus/pci/devices/" + bus_id);
  if (!dev || !other) return far_apart;
  return pcie_distance(pci_chain(*dev), pci_chain(*other));
}

}  // namespace fabrix::verbs::detail
