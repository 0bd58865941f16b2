// GPUs: NVIDIA display/3D functions on PCI (from sysfs, so they are listed
// without a driver), their NUMA node and their PCIe distance to every RDMA
// device (bridges between them; the verbs provider's "pci:" device choice
// uses the same count), and whether the CUDA runtime fabrix was built with
// finds a usable device.
#include "sections.hpp"
#include "sysfs.hpp"

#if FABRIX_HAVE_VERBS
#include <fabrix/verbs/topology.hpp>
#endif
#if FABRIX_HAVE_CUDA
#include <fabrix/cuda/available.hpp>
#endif

namespace fabrix::info {

namespace {

constexpr const char* pci_devices = "/sys/bus/pci/devices";

bool is_nvidia_gpu(const std::string& bus_id) {
  const std::string dir = std::string(pci_devices) + "/" + bus_id;
  const std::string klass = first_line(dir + "/class");  // 0x030000 VGA, 0x030200 3D
  return first_line(dir + "/vendor") == "0x10de" && klass.rfind("0x03", 0) == 0;
}

value distances_to_nics(const std::string& bus_id) {
  value list = value::make_array();
#if FABRIX_HAVE_VERBS
  for (const std::string& ib : entries("/sys/class/infiniband")) {
    const int d = fabrix::verbs::detail::device_distance("/sys", ib, bus_id);
    value e = value::make_object();
    e.set("rdma_device", ib)
        .set("pcie_bridges", d == fabrix::verbs::detail::far_apart ? value("not on the same PCIe tree")
                                                                   : value(static_cast<std::int64_t>(d)));
    list.push(std::move(e));
  }
#else
  (void)bus_id;
#endif
  return list;
}

}  // namespace

value gpus_section() {
  value s = value::make_object();
  value gpus = value::make_array();
  for (const std::string& bus_id : entries(pci_devices)) {
    if (!is_nvidia_gpu(bus_id)) continue;
    value g = value::make_object();
    g.set("pci", bus_id)
        .set("device_id", first_line(std::string(pci_devices) + "/" + bus_id + "/device"))
        .set("numa_node", numa_node(std::string(pci_devices) + "/" + bus_id))
        .set("to_rdma_devices", distances_to_nics(bus_id));
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
