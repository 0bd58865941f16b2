// A fake sysfs tree for device choice by PCI distance (detail/topology.hpp):
// one GPU (0000:03:00.0) under a PCIe switch on socket 0, a function beside
// it under the same switch, and one on socket 1; network devices are linked
// to either. FABRIX_SYSFS points at it while it lives.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fxt {

struct fake_sysfs {
  static constexpr const char* gpu = "0000:03:00.0";
  std::filesystem::path root, near, far;

  explicit fake_sysfs(const std::string& tag = "a")
      : root(std::filesystem::temp_directory_path() / ("fabrix-sysfs-" + std::to_string(::getpid()) + "-" + tag)),
        near(root / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"),
        far(root / "devices/pci0000:80/0000:80:01.0/0000:81:00.0") {
    namespace fs = std::filesystem;
    fs::remove_all(root);
    const fs::path g = root / "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0" / gpu;
    for (const auto& [p, numa] : {std::pair{g, 0}, {near, 0}, {far, 1}}) {
      fs::create_directories(p);
      std::ofstream(p / "numa_node") << numa << "\n";
    }
    fs::create_directories(root / "bus/pci/devices");
    fs::create_directory_symlink(g, root / "bus/pci/devices" / gpu);
    ::setenv("FABRIX_SYSFS", root.c_str(), 1);
  }
  ~fake_sysfs() {
    ::unsetenv("FABRIX_SYSFS");
    std::filesystem::remove_all(root);
  }
  // Network interface `name` on the function `at` (near or far).
  void interface(const std::string& name, const std::filesystem::path& at) {
    std::filesystem::create_directories(root / "class/net" / name);
    std::filesystem::create_directory_symlink(at, root / "class/net" / name / "device");
  }
};

}  // namespace fxt
