// Peer liveness for peers on this node. UCX 1.13's shared-memory transports
// have no peer-failure support, so for such peers fabrix checks the process
// directly: gone, a zombie, or a new process with the same pid (start time
// differs) all count as dead. "This node" means the same kernel boot and the
// same pid namespace — only then are the peer's pid and /proc comparable.
#pragma once

#include <fabrix/detail/process_identity.hpp>

#include <cstddef>
#include <string>

namespace fabrix::ucx::detail {

// The /proc check itself is the core's, shared with the libfabric provider.
using fabrix::detail::process_gone;
using fabrix::detail::process_identity;
using fabrix::detail::read_proc_stat;
using fabrix::detail::self_identity;

// False when a UCX_TLS list names no shared-memory transport (e.g. "tcp"):
// then UCX's own peer-failure mode costs nothing and is used even on this node.
inline bool may_use_shared_memory(const std::string& tls) {
  static constexpr const char* shm[] = {"sm", "shm", "sysv", "posix", "cma", "knem", "xpmem"};
  if (tls.empty() || tls == "all") return true;
  std::size_t start = 0;
  while (start <= tls.size()) {
    std::size_t end = tls.find(',', start);
    if (end == std::string::npos) end = tls.size();
    const std::string name = tls.substr(start, end - start);
    for (const char* s : shm)
      if (name == s || name == std::string("^") + s) return name[0] != '^';
    start = end + 1;
  }
  return tls[0] == '^';  // an exclusion list keeps the transports it does not name
}

// True when a UCX_TLS list names only InfiniBand/RoCE transports whose RMA
// and atomics the NIC performs and checks (rc, dc, with ud or ib for
// wire-up): a region's key stops working when ucp_mem_unmap deregisters it.
// Anything else (tcp, shared memory, self, cuda, the default "all", an
// exclusion list) may have UCX emulate RMA in software, without any check at
// the target, so fabrix checks those operations itself (rma.hpp).
inline bool hardware_rma_only(const std::string& tls) {
  static constexpr const char* ib[] = {"rc", "rc_v", "rc_verbs", "rc_x", "rc_mlx5", "dc", "dc_x", "dc_mlx5", "ib"};
  static constexpr const char* wireup[] = {"ud", "ud_v", "ud_verbs", "ud_x", "ud_mlx5"};
  if (tls.empty() || tls == "all" || tls[0] == '^') return false;
  bool rma = false;
  std::size_t start = 0;
  while (start <= tls.size()) {
    std::size_t end = tls.find(',', start);
    if (end == std::string::npos) end = tls.size();
    const std::string name = tls.substr(start, end - start);
    bool known = false;
    for (const char* s : ib)
      if (name == s) known = rma = true;
    for (const char* s : wireup)
      if (name == s) known = true;
    if (!known) return false;
    start = end + 1;
  }
  return rma;
}

}  // namespace fabrix::ucx::detail
