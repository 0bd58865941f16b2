// PCIe distance between an RDMA device and another PCI function (a GPU):
// the core's topology (fabrix/detail/topology.hpp), asked about one RDMA
// device. `sysfs` is a root directory (normally "/sys"), so tests use a
// fake tree.
#pragma once

#include <fabrix/detail/topology.hpp>

#include <string>

namespace fabrix::verbs::detail {

using fabrix::detail::canonical;
using fabrix::detail::far_apart;
using fabrix::detail::pci_chain;
using fabrix::detail::pcie_distance;

// Distance between RDMA device `ibdev` (e.g. "mlx5_0") and PCI function
// `bus_id` (e.g. "0000:3b:00.0"); far_apart when either is not found or is
// not on PCI (soft-RoCE devices are not), other_root for another root
// complex on the same NUMA node.
inline int device_distance(const std::string& sysfs, const std::string& ibdev, const std::string& bus_id) {
  return fabrix::detail::distance(fabrix::detail::place_of(sysfs + "/class/infiniband/" + ibdev + "/device"),
                                  fabrix::detail::pci_function(sysfs, bus_id));
}

}  // namespace fabrix::verbs::detail
