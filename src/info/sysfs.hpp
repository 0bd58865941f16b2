// Small reads of sysfs for fabrix-info: one line of a file, a directory's
// entries. Missing files read as empty; nothing throws. sysfs_root() is
// "/sys" unless `--sysfs DIR` names a fake tree (tests): only what
// fabrix-info reads from sysfs itself moves (GPUs on PCI and their PCIe and
// NUMA distances to RDMA devices), not what rdma-core or the providers see.
#pragma once

#include "value.hpp"

#include <dirent.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace fabrix::info {

inline std::string& sysfs_root() {
  static std::string root = "/sys";
  return root;
}

inline std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

inline std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// A NUMA node as sysfs writes it ("-1": none known), or null when unreadable.
inline value numa_node(const std::string& device_dir) {
  const std::string n = first_line(device_dir + "/numa_node");
  char* end = nullptr;
  const long long node = std::strtoll(n.c_str(), &end, 10);
  if (n.empty() || *end != '\0') return nullptr;
  return static_cast<std::int64_t>(node);
}

}  // namespace fabrix::info
