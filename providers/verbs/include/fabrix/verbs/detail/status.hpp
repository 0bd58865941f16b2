// ibv_wc_status / errno -> fabrix::status, and errors that carry verbs' text.
#pragma once

#include <fabrix/result.hpp>

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace fabrix::verbs::detail {

inline status to_status(ibv_wc_status s) noexcept {
  switch (s) {
    case IBV_WC_SUCCESS: return status::ok;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_MW_BIND_ERR: return status::access_denied;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return status::peer_unreachable;
    case IBV_WC_WR_FLUSH_ERR: return status::canceled;
    case IBV_WC_LOC_LEN_ERR: return status::truncated;
    case IBV_WC_REM_INV_REQ_ERR: return status::invalid_argument;
    case IBV_WC_RESP_TIMEOUT_ERR: return status::timed_out;
    default: return status::provider_error;
  }
}

// The text of a completion's native_code (an ibv_wc_status) from this provider.
inline const char* wc_text(int native_code) noexcept {
  return ibv_wc_status_str(static_cast<ibv_wc_status>(native_code));
}

inline status errno_status(int e) noexcept {
  switch (e) {
    case ENOMEM: return status::no_memory;
    case EINVAL: return status::invalid_argument;
    case EACCES:
    case EPERM: return status::access_denied;
    case EOPNOTSUPP: return status::unsupported;
    case ETIMEDOUT: return status::timed_out;
    default: return status::provider_error;
  }
}

// For calls that report through errno (or return it).
inline unexpected fail(int e, const std::string& what) {
  return unexpected(errno_status(e), what + ": " + std::strerror(e), "verbs", e);
}

}  // namespace fabrix::verbs::detail
