// RDMA devices as rdma-core sees them: each port's state, link layer and
// MTU, its usable GIDs (type, address, network device) and the one the verbs
// provider would choose, the device's PCI function and NUMA node, and which
// device a verbs domain would open here and why (FABRIX_VERBS_DEVICE,
// FABRIX_VERBS_GID_INDEX applied).
#include "sections.hpp"
#include "sysfs.hpp"

#if FABRIX_HAVE_VERBS
#include <infiniband/verbs.h>
#include <fabrix/verbs/detail/device.hpp>
#include <fabrix/verbs/detail/gid.hpp>
#include <fabrix/verbs/detail/options.hpp>
#include <fabrix/verbs/detail/topology.hpp>
#endif

#include <cerrno>
#include <cstring>

namespace fabrix::info {

#if FABRIX_HAVE_VERBS

namespace {

namespace vd = fabrix::verbs::detail;

value gids_of(ibv_context* ctx, const std::string& dev, std::uint8_t port, const ibv_port_attr& pa) {
  const std::vector<vd::gid_entry> table = vd::gid_table(ctx, dev, port, pa);
  const auto best = vd::choose_gid(table);
  value list = value::make_array();
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::string idx = std::to_string(table[i].index);
    value g = value::make_object();
    g.set("index", static_cast<std::int64_t>(table[i].index))
        .set("type", vd::to_string(table[i].kind))
        .set("address", vd::gid_text(table[i].raw))
        .set("netdev",
             first_line("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/gid_attrs/ndevs/" + idx))
        .set("best", best && *best == i);
    list.push(std::move(g));
  }
  return list;
}

value port_of(ibv_context* ctx, const std::string& dev, std::uint8_t port) {
  value p = value::make_object();
  p.set("port", static_cast<std::int64_t>(port));
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, port, &pa) != 0) return p.set("error", "ibv_query_port failed");
  p.set("state", ibv_port_state_str(pa.state))
      .set("link_layer", pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand")
      .set("active_mtu", static_cast<std::int64_t>(128 << static_cast<int>(pa.active_mtu)))
      .set("max_mtu", static_cast<std::int64_t>(128 << static_cast<int>(pa.max_mtu)))
      .set("lid", static_cast<std::int64_t>(pa.lid))
      .set("gids", gids_of(ctx, dev, port, pa));
  return p;
}

value device_of(ibv_device* d) {
  const std::string name = ibv_get_device_name(d);
  value v = value::make_object();
  v.set("name", name);
  const std::string sys = "/sys/class/infiniband/" + name + "/device";
  const auto pci = vd::canonical(sys);
  const auto chain = pci ? vd::pci_chain(*pci) : std::vector<std::string>{};
  v.set("pci", chain.empty() ? value("none (not a PCI device)") : value(chain.back()));
  v.set("numa_node", chain.empty() ? value(nullptr) : numa_node(sys));
  ibv_context* ctx = ibv_open_device(d);
  if (ctx == nullptr) return v.set("error", std::string("ibv_open_device: ") + std::strerror(errno));
  ibv_device_attr attr{};
  if (ibv_query_device(ctx, &attr) == 0) {
    v.set("firmware", attr.fw_ver);
    value ports = value::make_array();
    for (std::uint8_t p = 1; p <= attr.phys_port_cnt; ++p) ports.push(port_of(ctx, name, p));
    v.set("ports", std::move(ports));
  } else {
    v.set("error", "ibv_query_device failed");
  }
  ibv_close_device(ctx);
  return v;
}

// What a verbs domain would open, with the environment's options.
value choice() {
  auto o = fabrix::verbs::options_from_env();
  if (!o) return value("none: " + o.error().describe());
  auto d = vd::open_device(*o);
  if (!d) return value("none: " + d.error().describe());
  value c = value::make_object();
  c.set("device", d->choice.name)
      .set("port", static_cast<std::int64_t>(d->choice.port))
      .set("gid_index", static_cast<std::int64_t>(d->choice.gid.index))
      .set("gid", vd::gid_text(d->choice.gid.raw))
      .set("why_device", d->choice.why_device)
      .set("why_gid", d->choice.why_gid);
  ibv_close_device(d->ctx);
  return c;
}

}  // namespace

value rdma_devices_section() {
  value s = value::make_object();
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  value devices = value::make_array();
  if (list == nullptr) {
    const int e = errno;
    // ENOSYS: the kernel offers no RDMA (ib_uverbs not loaded, or none built).
    s.set("error", std::string("ibv_get_device_list: ") + std::strerror(e) +
                       (e == ENOSYS ? " (no RDMA in this kernel, or ib_uverbs not loaded)" : ""));
  } else {
    for (int i = 0; i < n; ++i) devices.push(device_of(list[i]));
    ibv_free_device_list(list);
  }
  s.set("devices", std::move(devices)).set("verbs_would_use", choice());
  return s;
}

#else

value rdma_devices_section() {
  value s = value::make_object();
  s.set("devices", value::make_array()).set("verbs_would_use", "none: fabrix-info was built without rdma-core");
  return s;
}

#endif

}  // namespace fabrix::info
