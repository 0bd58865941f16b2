// Registrations that end with their region, where the NIC checks RMA.
//
// Over an RDMA-only UCX_TLS (liveness.hpp: hardware_rma_only) fabrix posts
// plain ucp_put_nbx/ucp_get_nbx and relies on the NIC to refuse a key whose
// region is gone. UCX's registration cache (UCX_IB_REG_METHODS, default
// "rcache,odp,direct") defeats that: ucp_mem_unmap leaves the memory
// registered for reuse, so a peer holding the old key still wrote into
// memory its owner had released (seen on rxe0). A domain over such a
// UCX_TLS therefore creates its UCX context with UCX_IB_REG_METHODS=direct:
// ucp_mem_unmap deregisters at once. fabrix registers a region once, not
// per operation, so the cache bought it nothing on its own data path;
// UCX's internal registrations (rendezvous of large tagged messages from
// unregistered memory) pay one registration each instead.
//
// UCX reads memory-domain settings from the environment in ucp_init, and
// ucp_config_modify does not reach them in these releases: the variable is
// set around ucp_init only and restored after, so other UCX users in the
// process keep their cache. A value the user set stands. Like any setenv,
// not safe while another thread reads the environment.
#pragma once

#include <cstdlib>

namespace fabrix::ucx::detail {

class direct_registration_scope {
 public:
  explicit direct_registration_scope(bool wanted) {
    if (!wanted || std::getenv(name) != nullptr) return;
    active_ = ::setenv(name, "direct", 1) == 0;
  }
  ~direct_registration_scope() {
    if (active_) ::unsetenv(name);
  }
  direct_registration_scope(const direct_registration_scope&) = delete;
  direct_registration_scope& operator=(const direct_registration_scope&) = delete;

  // Whether this scope set the variable (false: not wanted, or the user's value stands).
  bool active() const noexcept { return active_; }

 private:
  static constexpr const char* name = "UCX_IB_REG_METHODS";
  bool active_ = false;
};

}  // namespace fabrix::ucx::detail
