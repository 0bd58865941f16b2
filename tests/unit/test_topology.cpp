// The core's PCIe topology (detail/topology.hpp) over a fake sysfs tree:
// which network devices are closest to a PCI function (a GPU), in what
// order, and what is passed over; which function a device sits on.
#include <fabrix/detail/topology.hpp>

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
namespace fd = fabrix::detail;

namespace {

// Socket 0: root complexes pci0000:00 and pci0000:40; socket 1: pci0000:80.
// Under one switch below pci0000:00: a GPU (0000:03:00.0) and a RoCE NIC
// (0000:04:00.0: mlx5_0 and its interface enp4s0).
struct fake_sysfs {
  fs::path root = fs::temp_directory_path() / ("fabrix-topology-" + std::to_string(::getpid()));
  fs::path dev = root / "devices";

  fake_sysfs() {
    fs::remove_all(root);
    const fs::path sw = dev / "pci0000:00/0000:00:01.0/0000:01:00.0";
    function(sw / "0000:02:00.0/0000:03:00.0", 0, "0000:03:00.0");
    function(sw / "0000:02:01.0/0000:04:00.0", 0);
    function(dev / "pci0000:00/0000:00:02.0/0000:05:00.0", 0);
    function(dev / "pci0000:00/0000:00:03.0", 0);
    function(dev / "pci0000:40/0000:40:01.0/0000:41:00.0", 0);
    function(dev / "pci0000:80/0000:80:01.0/0000:81:00.0", 1);
    fs::create_directories(dev / "pci0000:00/0000:00:03.0/virtio2");
    fs::create_directories(dev / "virtual/net/veth0");
    link("infiniband", "mlx5_0", sw / "0000:02:01.0/0000:04:00.0");
    link("net", "enp4s0", sw / "0000:02:01.0/0000:04:00.0");
    link("net", "eth0", dev / "pci0000:00/0000:00:03.0/virtio2");  // virtio: a child of the function
    link("net", "eth1", dev / "pci0000:00/0000:00:02.0/0000:05:00.0");
    link("net", "eth2", dev / "pci0000:40/0000:40:01.0/0000:41:00.0");
    link("net", "eth3", dev / "pci0000:80/0000:80:01.0/0000:81:00.0");
    link("net", "veth0", dev / "virtual/net/veth0");
    link("infiniband", "rxe0", dev / "virtual/net/veth0");
  }
  ~fake_sysfs() { fs::remove_all(root); }

  void function(const fs::path& p, int numa, const char* bus_id = nullptr) {
    fs::create_directories(p);
    std::ofstream(p / "numa_node") << numa << "\n";
    if (bus_id) {
      fs::create_directories(root / "bus/pci/devices");
      fs::create_directory_symlink(p, root / "bus/pci/devices" / bus_id);
    }
  }
  void link(const char* cls, const char* name, const fs::path& to) {
    fs::create_directories(root / "class" / cls / name);
    fs::create_directory_symlink(to, root / "class" / cls / name / "device");
  }
};

}  // namespace

TEST_CASE("topology: network devices closest to a PCI function first, RDMA devices first among equals") {
  fake_sysfs f;
  const auto near = fd::devices_near(f.root.string(), "0000:03:00.0");
  REQUIRE(near.size() == 6);  // veth0 and rxe0 are not on PCI
  const char* order[] = {"mlx5_0", "enp4s0", "eth0", "eth1", "eth2", "eth3"};
  const int hops[] = {4, 4, 5, 6, fd::other_root, fd::far_apart};
  for (std::size_t i = 0; i < near.size(); ++i) {
    CHECK(near[i].name == order[i]);
    CHECK(near[i].distance == hops[i]);
  }
  CHECK(near[0].rdma);
  CHECK_FALSE(near[1].rdma);
  CHECK(near[2].numa == 0);  // read from the PCI function, not from the virtio child
  CHECK(near[5].numa == 1);
  CHECK(fd::describe_distance(near[0].distance) == "4 PCIe hops");
  CHECK(fd::describe_distance(near[4].distance) == "same NUMA node, another root complex");
  CHECK(fd::describe_distance(near[5].distance) == "not on a shared PCIe tree");

  // A function that is not there: nothing is near it.
  CHECK(fd::devices_near(f.root.string(), "0000:ff:00.0").empty());
  CHECK(fd::devices_near((f.root / "nothing").string(), "0000:03:00.0").empty());
}

TEST_CASE("topology: the PCI function of a device by name, and of a device list (domain::device_pci)") {
  fake_sysfs f;
  const std::string root = f.root.string();
  CHECK(fd::device_pci_function(root, "mlx5_0") == std::optional<std::string>("0000:04:00.0"));
  CHECK(fd::device_pci_function(root, "mlx5_0:1") == std::optional<std::string>("0000:04:00.0"));  // a port
  CHECK(fd::device_pci_function(root, "enp4s0") == std::optional<std::string>("0000:04:00.0"));
  CHECK(fd::device_pci_function(root, "eth0") == std::optional<std::string>("0000:00:03.0"));  // virtio child
  CHECK(fd::device_pci_function(root, "eth3") == std::optional<std::string>("0000:81:00.0"));
  for (const char* none : {"veth0", "rxe0", "lo", "shm", "", ":1", "..", "../net/eth3", "nosuch"})
    CHECK_MESSAGE(!fd::device_pci_function(root, none).has_value(), none);
  // A NIC's device and its interface are one function; two functions, or
  // one device on none, are no one function.
  CHECK(fd::devices_pci_function(root, "mlx5_0:1,enp4s0") == std::optional<std::string>("0000:04:00.0"));
  CHECK(fd::devices_pci_function(root, "eth1") == std::optional<std::string>("0000:05:00.0"));
  CHECK_FALSE(fd::devices_pci_function(root, "eth1,eth2").has_value());
  CHECK_FALSE(fd::devices_pci_function(root, "enp4s0,veth0").has_value());
  CHECK_FALSE(fd::devices_pci_function(root, "").has_value());
}

TEST_CASE("topology: device texts naming a PCI function, and the sysfs root") {
  CHECK(fd::near_pci("pci:0000:3b:00.0") == std::optional<std::string>("0000:3b:00.0"));
  CHECK_FALSE(fd::near_pci("pci:").has_value());
  CHECK_FALSE(fd::near_pci("mlx5_0:1").has_value());
  CHECK_FALSE(fd::near_pci("eth0").has_value());
  const auto chain = fd::pci_chain("/sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0/infiniband/mlx5_0");
  REQUIRE(chain.size() == 3);
  CHECK(chain[2] == "0000:3b:00.0");
  CHECK(fd::pci_chain("/sys/devices/virtual/net/lo").empty());
  ::unsetenv("FABRIX_SYSFS");
  CHECK(fd::sysfs_root() == "/sys");
  ::setenv("FABRIX_SYSFS", "/tmp/fake-sys", 1);
  CHECK(fd::sysfs_root() == "/tmp/fake-sys");
  ::unsetenv("FABRIX_SYSFS");
}
