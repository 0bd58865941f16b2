// Finding the device, port and GID a domain uses, and saying why.
//
// Device spec (options::device / domain_options::device / FABRIX_VERBS_DEVICE):
//   ""                  the first device with an active port (device list order)
//   "rxe0", "mlx5_0:1"  that device (and port); an error if it has no active port
//   "pci:0000:3b:00.0"  the device with an active port closest on PCIe to that
//                       PCI function (a GPU, say): fewest bridges between them,
//                       then another root complex on the same NUMA node
//                       (fabrix/detail/topology.hpp); ties keep device list order
// GID: the best-ranked entry of the port (gid.hpp) from ibv_query_gid_table,
// or from sysfs gid_attrs/types when that call fails; options::gid_index
// (FABRIX_VERBS_GID_INDEX) overrides it.
#pragma once

#include <fabrix/result.hpp>
#include <fabrix/verbs/detail/gid.hpp>
#include <fabrix/verbs/detail/options.hpp>
#include <fabrix/verbs/detail/status.hpp>
#include <fabrix/verbs/detail/topology.hpp>

#include <infiniband/verbs.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace fabrix::verbs::detail {

struct device_choice {
  std::string name;
  std::uint8_t port = 1;
  std::uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint16_t lid = 0;
  gid_entry gid{};
  std::string why_device;
  std::string why_gid;
};

struct device_spec {
  std::string name;      // empty: any
  int port = 0;          // 0: any
  std::string near_pci;  // "pci:" form
};

inline device_spec parse_device_spec(const std::string& s) {
  device_spec d;
  if (s.rfind("pci:", 0) == 0) {
    d.near_pci = s.substr(4);
    return d;
  }
  const auto colon = s.rfind(':');
  if (colon != std::string::npos && colon + 1 < s.size() &&
      s.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    d.name = s.substr(0, colon);
    d.port = std::stoi(s.substr(colon + 1).substr(0, 4));
  } else {
    d.name = s;
  }
  return d;
}

inline std::string read_small_file(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// The usable GID entries of one port.
inline std::vector<gid_entry> gid_table(ibv_context* ctx, const std::string& dev, std::uint8_t port,
                                        const ibv_port_attr& pa) {
  std::vector<gid_entry> out;
  const bool ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  const int len = pa.gid_tbl_len > 0 ? pa.gid_tbl_len : 1;
  std::vector<ibv_gid_entry> raw(static_cast<std::size_t>(len) * 4);
  const ssize_t n = ibv_query_gid_table(ctx, raw.data(), raw.size(), 0);
  if (n >= 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (raw[i].port_num != port) continue;
      gid_entry e;
      e.index = raw[i].gid_index;
      e.kind = raw[i].gid_type == IBV_GID_TYPE_ROCE_V2   ? gid_kind::roce_v2
               : raw[i].gid_type == IBV_GID_TYPE_ROCE_V1 ? gid_kind::roce_v1
                                                         : gid_kind::ib;
      if (!ethernet) e.kind = gid_kind::ib;
      std::memcpy(e.raw.data(), raw[i].gid.raw, 16);
      if (!is_zero(e.raw)) out.push_back(e);
    }
    return out;
  }
  // Older kernels: ibv_query_gid plus the type from sysfs.
  for (int i = 0; i < len; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(ctx, port, i, &g) != 0) continue;
    gid_entry e;
    e.index = static_cast<std::uint32_t>(i);
    std::memcpy(e.raw.data(), g.raw, 16);
    if (is_zero(e.raw)) continue;
    const auto kind =
        parse_sysfs_gid_type(read_small_file("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) +
                                             "/gid_attrs/types/" + std::to_string(i)),
                             ethernet);
    e.kind = kind ? *kind : (ethernet ? gid_kind::roce_v1 : gid_kind::ib);
    out.push_back(e);
  }
  return out;
}

struct opened_device {
  ibv_context* ctx = nullptr;
  device_choice choice;
};

// Picks and opens the device; the caller owns ctx (ibv_close_device).
inline result<opened_device> open_device(const options& o) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr || count == 0) {
    if (list) ibv_free_device_list(list);
    return unexpected(status::unsupported, "no RDMA device found (ibv_get_device_list returned none)", "verbs");
  }
  const device_spec spec = parse_device_spec(o.device);
  std::string refused;  // why candidates were passed over, for the error message
  opened_device best;
  int best_distance = far_apart + 1;
  for (int i = 0; i < count; ++i) {
    const std::string name = ibv_get_device_name(list[i]);
    if (!spec.name.empty() && name != spec.name) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) {
      refused += "; " + name + ": ibv_open_device failed";
      continue;
    }
    ibv_device_attr da{};
    bool kept = false;
    if (ibv_query_device(ctx, &da) == 0) {
      for (std::uint8_t port = 1; port <= da.phys_port_cnt && !kept; ++port) {
        if (spec.port != 0 && port != spec.port) continue;
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
          refused += "; " + name + ":" + std::to_string(port) + " is not active";
          continue;
        }
        const auto table = gid_table(ctx, name, port, pa);
        device_choice c;
        c.name = name;
        c.port = port;
        c.link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
        c.mtu = pa.active_mtu;
        c.lid = pa.lid;
        if (o.gid_index >= 0) {
          bool found = false;
          for (const auto& e : table)
            if (e.index == static_cast<std::uint32_t>(o.gid_index)) {
              c.gid = e;
              found = true;
            }
          if (!found) {
            refused += "; " + name + ":" + std::to_string(port) + " has no GID at index " + std::to_string(o.gid_index);
            continue;
          }
          c.why_gid = "GID index " + std::to_string(o.gid_index) + " as configured";
        } else {
          const auto pick = choose_gid(table);
          if (!pick && c.link_layer == IBV_LINK_LAYER_ETHERNET) {
            refused += "; " + name + ":" + std::to_string(port) + " has no usable GID (no IP address on its netdev?)";
            continue;
          }
          if (pick) c.gid = table[*pick];
          c.why_gid = "best of " + std::to_string(table.size()) + " GIDs";
        }
        int distance = 0;
        if (!spec.near_pci.empty()) {
          distance = device_distance(fabrix::detail::sysfs_root(), name, spec.near_pci);
          c.why_device = "closest to PCI " + spec.near_pci + " (" + fabrix::detail::describe_distance(distance) + ")";
        } else if (!spec.name.empty()) {
          c.why_device = "named " + o.device;
        } else {
          c.why_device = "first active port";
        }
        if (best.ctx == nullptr || distance < best_distance) {
          if (best.ctx && best.ctx != ctx) ibv_close_device(best.ctx);
          best = {ctx, c};
          best_distance = distance;
          kept = true;
        }
      }
    }
    if (!kept) ibv_close_device(ctx);
    if (best.ctx != nullptr && spec.near_pci.empty()) break;
  }
  ibv_free_device_list(list);
  if (best.ctx == nullptr) {
    const std::string what =
        o.device.empty() ? "no RDMA device with an active port" : "device '" + o.device + "' not usable";
    return unexpected(status::unsupported, what + (refused.empty() ? "" : " (" + refused.substr(2) + ")"), "verbs");
  }
  return best;
}

inline std::string mtu_text(ibv_mtu m) { return std::to_string(128 << static_cast<int>(m)); }

}  // namespace fabrix::verbs::detail
