// The verbs provider's tunables: queue depths, RC timeouts and retries, GID
// and device overrides. Defaults suit a real RoCE/IB fabric; every field can
// be set from the environment (FABRIX_VERBS_*), which overrides the struct
// passed in code. Read once, when a domain is created.
#pragma once

#include <fabrix/detail/env.hpp>
#include <fabrix/result.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace fabrix::verbs {

// How connect() sets up an RC queue pair with a peer (both sides must agree;
// a mismatch is refused with invalid_argument naming the setting).
//   bootstrap  UD "hello" datagrams between the two domains (handshake.hpp):
//              needs nothing but the exchanged address blobs
//   rdma_cm    the librdmacm connection manager (cm.hpp): each domain listens
//              on its device's IP address; resolves routes like TCP, works
//              through IP routers, needs the rdma_cm/rdma_ucm kernel modules
enum class connect_method : std::uint8_t { bootstrap = 0, rdma_cm = 1 };

inline const char* to_string(connect_method m) noexcept {
  return m == connect_method::rdma_cm ? "rdma_cm" : "bootstrap";
}

struct options {
  // RC local ACK timeout exponent: 4.096 us * 2^timeout per try (14 ≈ 67 ms).
  // With retry_cnt, bounds how long a dead peer goes unnoticed.  FABRIX_VERBS_TIMEOUT
  std::uint8_t timeout = 14;
  std::uint8_t retry_cnt = 7;       // transport retries, 0..7          FABRIX_VERBS_RETRY_CNT
  std::uint8_t rnr_retry = 7;       // receiver-not-ready retries; 7 = forever   FABRIX_VERBS_RNR_RETRY
  std::uint8_t min_rnr_timer = 12;  // 0.64 ms
  std::uint32_t sq_depth = 256;     // send queue entries per queue pair   FABRIX_VERBS_SQ_DEPTH
  std::uint32_t max_inline = 128;   // bytes written inline (asked; the device may give less)  FABRIX_VERBS_INLINE
  std::uint32_t srq_depth = 128;    // receives on the shared receive queue  FABRIX_VERBS_SRQ_DEPTH
  std::uint32_t msg_size = 65536;   // largest send (bounce buffer per receive)  FABRIX_VERBS_MSG_SIZE
  // User recv()s waiting per queue pair; 0: as many as the domain's bound,
  // domain_options::max_posted_recvs (which counts every queue pair's).
  std::uint32_t recv_depth = 0;
  // A queue pair with recv()s waiting and nothing else in flight is probed
  // this often (an 8-byte read of the peer's flush word, no user
  // completion), so that a dead peer fails it and its recv()s instead of
  // leaving them waiting forever; 0: never.  FABRIX_VERBS_PROBE_MS
  std::uint32_t probe_ms = 1000;
  int gid_index = -1;  // -1: choose automatically         FABRIX_VERBS_GID_INDEX
  // Device: "" (auto), "rxe0", "mlx5_0:1" (port 1), or "pci:0000:3b:00.0"
  // (the device closest to that PCI function, e.g. a GPU).  FABRIX_VERBS_DEVICE;
  // domain_options::device wins over both when set.
  std::string device;
  std::chrono::milliseconds connect_timeout{30000};    // FABRIX_VERBS_CONNECT_TIMEOUT_MS
  connect_method connect = connect_method::bootstrap;  // FABRIX_VERBS_CONNECT=bootstrap|rdma_cm
  std::uint16_t cm_port = 0;                           // rdma_cm listening port; 0: any free one   FABRIX_VERBS_CM_PORT
  // Post through the extended send API (ibv_wr_*, ibv_qp_ex) where the
  // device offers it for every opcode fabrix posts; 0: always
  // ibv_post_send.  FABRIX_VERBS_WR_API
  std::uint8_t wr_api = 1;
};

namespace detail {
using fabrix::detail::env_number;
using fabrix::detail::env_text;
}  // namespace detail

// `base` with the environment applied, or invalid_argument naming the variable.
inline result<options> options_from_env(options base = {}) {
  std::string why;
  long connect_ms = static_cast<long>(base.connect_timeout.count());
  if (!detail::env_number("FABRIX_VERBS_TIMEOUT", base.timeout, 0, 31, why) ||
      !detail::env_number("FABRIX_VERBS_RETRY_CNT", base.retry_cnt, 0, 7, why) ||
      !detail::env_number("FABRIX_VERBS_RNR_RETRY", base.rnr_retry, 0, 7, why) ||
      !detail::env_number("FABRIX_VERBS_SQ_DEPTH", base.sq_depth, 2, 1 << 16, why) ||
      !detail::env_number("FABRIX_VERBS_INLINE", base.max_inline, 0, 4096, why) ||
      !detail::env_number("FABRIX_VERBS_SRQ_DEPTH", base.srq_depth, 2, 1 << 16, why) ||
      !detail::env_number("FABRIX_VERBS_MSG_SIZE", base.msg_size, 64, 1 << 24, why) ||
      !detail::env_number("FABRIX_VERBS_GID_INDEX", base.gid_index, -1, 1 << 16, why) ||
      !detail::env_number("FABRIX_VERBS_CONNECT_TIMEOUT_MS", connect_ms, 1, 3600L * 1000, why) ||
      !detail::env_number("FABRIX_VERBS_CM_PORT", base.cm_port, 0, 65535, why) ||
      !detail::env_number("FABRIX_VERBS_PROBE_MS", base.probe_ms, 0, 3600 * 1000, why) ||
      !detail::env_number("FABRIX_VERBS_WR_API", base.wr_api, 0, 1, why))
    return unexpected(status::invalid_argument, why, "verbs");
  if (const char* m = detail::env_text("FABRIX_VERBS_CONNECT")) {
    const std::string v = m;
    if (v == "bootstrap")
      base.connect = connect_method::bootstrap;
    else if (v == "rdma_cm")
      base.connect = connect_method::rdma_cm;
    else
      return unexpected(status::invalid_argument, "FABRIX_VERBS_CONNECT=" + v + " is not bootstrap or rdma_cm",
                        "verbs");
  }
  base.connect_timeout = std::chrono::milliseconds(connect_ms);
  if (const char* d = detail::env_text("FABRIX_VERBS_DEVICE")) base.device = d;
  return base;
}

}  // namespace fabrix::verbs
