// domain_options::device for UCX: UCX_NET_DEVICES as written ("mlx5_0:1",
// "eth0", a comma list), or "pci:<bus id>": every network device at the
// closest distance to that PCI function (a GPU, say; core
// detail/topology.hpp). An RDMA NIC's device and its network interface are
// one PCI function, so both are named ("mlx5_0:1,enp4s0"): UCX may then
// use its verbs transports over the one and tcp over the other. An RDMA
// device is named with its first active port (sysfs ports/<n>/state), port
// 1 when none says so.
#pragma once

#include <fabrix/detail/topology.hpp>
#include <fabrix/result.hpp>

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace fabrix::ucx::detail {

struct net_devices {
  std::string value;  // for UCX_NET_DEVICES; empty: UCX's default
  std::string why;    // for describe(); empty when named directly
};

inline std::string active_port(const std::string& sysfs, const std::string& rdma_device) {
  const std::string dir = sysfs + "/class/infiniband/" + rdma_device + "/ports";
  std::vector<int> ports;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] >= '1' && e->d_name[0] <= '9') ports.push_back(std::atoi(e->d_name));
    ::closedir(d);
  }
  std::sort(ports.begin(), ports.end());
  for (int p : ports) {
    std::ifstream f(dir + "/" + std::to_string(p) + "/state");
    std::string state;
    std::getline(f, state);
    if (state.find("ACTIVE") != std::string::npos) return std::to_string(p);
  }
  return "1";
}

inline result<net_devices> resolve_net_devices(const std::string& device) {
  const auto bus = fabrix::detail::near_pci(device);
  if (!bus) return net_devices{device, {}};
  const std::string sysfs = fabrix::detail::sysfs_root();
  const auto near = fabrix::detail::devices_near(sysfs, *bus);
  if (near.empty())
    return unexpected(
        status::invalid_argument,
        "device '" + device + "': no PCI function " + *bus + " under " + sysfs + ", or no network device on PCI",
        "ucx");
  net_devices out;
  for (const auto& n : near) {
    if (n.distance != near.front().distance) break;
    out.value += (out.value.empty() ? "" : ",") + (n.rdma ? n.name + ":" + active_port(sysfs, n.name) : n.name);
  }
  out.why = "closest to PCI " + *bus + ": " + fabrix::detail::describe_distance(near.front().distance);
  return out;
}

}  // namespace fabrix::ucx::detail
