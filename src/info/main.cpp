// fabrix-info: what fabrix would use on this machine, and why not the rest.
//
//   fabrix-info [--json] [--section NAME]... [--sysfs DIR]
//
// Sections: build, providers, rdma_devices, gpus, bootstrap, environment
// (all by default). Text is for people; --json is one JSON object (one
// member per section) for scripts. Exit 0 when the report was made, 2 for a
// bad argument. Opening a provider here is what fabrix::open(name) does in a
// program with the same environment. --sysfs reads GPUs and PCIe topology
// from a fake sysfs tree instead of /sys (sysfs.hpp; for tests).
#include "sections.hpp"
#include "sysfs.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

struct section {
  const char* name;
  fabrix::info::value (*build)();
};

constexpr section sections[] = {
    {"build", fabrix::info::build_section},
    {"providers", fabrix::info::providers_section},
    {"rdma_devices", fabrix::info::rdma_devices_section},
    {"gpus", fabrix::info::gpus_section},
    {"bootstrap", fabrix::info::bootstrap_section},
    {"environment", fabrix::info::environment_section},
};

int usage(const char* why) {
  if (why) std::fprintf(stderr, "fabrix-info: %s\n", why);
  std::fprintf(stderr,
               "usage: fabrix-info [--json] [--section NAME]... [--sysfs DIR]\n"
               "sections: build providers rdma_devices gpus bootstrap environment (default: all)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::vector<const section*> wanted;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--section" && i + 1 < argc) {
      const std::string name = argv[++i];
      const section* found = nullptr;
      for (const section& s : sections)
        if (name == s.name) found = &s;
      if (found == nullptr) return usage(("no section " + name).c_str());
      wanted.push_back(found);
    } else if (arg == "--sysfs" && i + 1 < argc) {
      fabrix::info::sysfs_root() = argv[++i];
    } else if (arg == "-h" || arg == "--help") {
      usage(nullptr);
      return 0;
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (wanted.empty())
    for (const section& s : sections) wanted.push_back(&s);

  // gpus is built first: its CUDA probe forks, and a fork after a provider
  // has opened an RDMA device makes UCX warn (ibv_fork_init).
  std::vector<fabrix::info::value> built(wanted.size());
  for (std::size_t i = 0; i < wanted.size(); ++i)
    if (wanted[i]->build == fabrix::info::gpus_section) built[i] = wanted[i]->build();
  for (std::size_t i = 0; i < wanted.size(); ++i)
    if (wanted[i]->build != fabrix::info::gpus_section) built[i] = wanted[i]->build();
  fabrix::info::value report = fabrix::info::value::make_object();
  for (std::size_t i = 0; i < wanted.size(); ++i) report.set(wanted[i]->name, std::move(built[i]));
  const std::string out = json ? report.json() : report.text();
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}
