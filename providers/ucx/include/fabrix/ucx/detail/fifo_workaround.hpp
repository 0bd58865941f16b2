// A stall in UCX's shared-memory transports (sysv, posix) before 1.19.1.
//
// A sender's messages wait in UCX for room in the peer's receive FIFO, and
// under load two processes that both keep polling can stay stuck that way
// for good: ucp_worker_progress finds nothing to do on either side (seen
// with Debian 12's UCX 1.13.1: three 64 KiB puts, emulated with active
// messages over sysv, about 1 run in 120 of the staging test under 8-way
// load). The receiver moves the FIFO's tail only once per
// FIFO_RELEASE_FACTOR x FIFO_SIZE messages read (32 by default); moved
// after every message, the same load ran 1040 times without a stall. UCX
// fixed its FIFO room check in 1.19.1 (openucx/ucx#10823).
//
// So, for UCX older than 1.19.1, creating a domain sets
// UCX_SYSV_FIFO_RELEASE_FACTOR and UCX_POSIX_FIFO_RELEASE_FACTOR to 0.01
// (every message) in the environment, unless they are set already: UCX
// reads transport settings from the environment when it opens an interface,
// and ucp_config_modify does not reach them in these releases. Like any
// setenv, not safe while another thread reads the environment.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdlib>

namespace fabrix::ucx::detail {

inline bool fifo_release_is_racy() noexcept {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major * 10000 + minor * 100 + release < 11901;  // 1.19.1
}

// Call before ucp_init.
inline void release_fifo_every_message() noexcept {
  if (!fifo_release_is_racy()) return;
  ::setenv("UCX_SYSV_FIFO_RELEASE_FACTOR", "0.01", 0);  // 0: a value the user set stands
  ::setenv("UCX_POSIX_FIFO_RELEASE_FACTOR", "0.01", 0);
}

}  // namespace fabrix::ucx::detail
