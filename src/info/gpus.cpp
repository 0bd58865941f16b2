// GPUs: NVIDIA display/3D functions on PCI (from sysfs, so they are listed
// without a driver), their NUMA node, and against every RDMA device its
// PCIe distance (bridges between them; the verbs provider's "pci:" device
// choice uses the same count) and whether both sit on one NUMA node, with
// the closest device named; and whether the CUDA runtime fabrix was built
// with finds a usable device.
#include "sections.hpp"
#include "sysfs.hpp"

#include <algorithm>
#include <string>
#include <vector>

#if FABRIX_HAVE_VERBS
#include <fabrix/verbs/detail/topology.hpp>
#endif
#if FABRIX_HAVE_CUDA
#include <fabrix/cuda/available.hpp>
#endif

namespace fabrix::info {

namespace {

std::string pci_devices() { return sysfs_root() + "/bus/pci/devices"; }

bool is_nvidia_gpu(const std::string& bus_id) {
  const std::string dir = pci_devices() + "/" + bus_id;
  const std::string klass = first_line(dir + "/class");  // 0x030000 VGA, 0x030200 3D
  return first_line(dir + "/vendor") == "0x10de" && klass.rfind("0x03", 0) == 0;
}

// Each RDMA device against the GPU at `bus_id` (NUMA node `gpu_numa`),
// and the closest one in `closest` ("none" when none shares its PCIe tree).
value distances_to_nics(const std::string& bus_id, const value& gpu_numa, std::string& closest) {
  value list = value::make_array();
  closest = "none on the same PCIe tree";
#if FABRIX_HAVE_VERBS
  namespace vd = fabrix::verbs::detail;
  int best = vd::far_apart;
  std::vector<std::string> devices = entries(sysfs_root() + "/class/infiniband");
  std::sort(devices.begin(), devices.end());
  for (const std::string& ib : devices) {
    const int d = vd::device_distance(sysfs_root(), ib, bus_id);
    const value nic_numa = numa_node(sysfs_root() + "/class/infiniband/" + ib + "/device");
    value e = value::make_object();
    e.set("rdma_device", ib)
        .set("pcie_bridges", d == vd::far_apart                ? value("not on the same PCIe tree")
                             : d == fabrix::detail::other_root ? value("same NUMA node, another root complex")
                                                               : value(static_cast<std::int64_t>(d)))
        .set("numa_node", nic_numa)
        .set("same_numa_node", gpu_numa.is_int() && nic_numa.is_int() && gpu_numa.as_int() >= 0 &&
                                   gpu_numa.as_int() == nic_numa.as_int());
    list.push(std::move(e));
    if (d < best) {
      best = d;
      closest = ib;
    }
  }
#else
  (void)bus_id;
  (void)gpu_numa;
  closest = "unknown: fabrix-info was built without rdma-core";
#endif
  return list;
}

}  // namespace

value gpus_section() {
  value s = value::make_object();
  value gpus = value::make_array();
  for (const std::string& bus_id : entries(pci_devices())) {
    if (!is_nvidia_gpu(bus_id)) continue;
    const std::string dir = pci_devices() + "/" + bus_id;
    const value numa = numa_node(dir);
    std::string closest;
    value nics = distances_to_nics(bus_id, numa, closest);
    value g = value::make_object();
    g.set("pci", bus_id)
        .set("device_id", first_line(dir + "/device"))
        .set("numa_node", numa)
        .set("to_rdma_devices", std::move(nics))
        .set("closest_rdma_device", closest);
    gpus.push(std::move(g));
  }
  s.set("on_pci", std::move(gpus));
#if FABRIX_HAVE_CUDA
  const std::string why = fabrix::cuda::unavailable_reason();
  s.set("cuda_runtime", why.empty() ? std::string("a device is usable") : why);
#else
  s.set("cuda_runtime", "none: fabrix-info was built without CUDA");
#endif
  return s;
}

}  // namespace fabrix::info
