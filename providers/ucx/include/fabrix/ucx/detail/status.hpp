// ucs_status_t -> fabrix::status, and error values that carry UCX's text.
#pragma once

#include <fabrix/result.hpp>

#include <ucs/type/status.h>

#include <string>

namespace fabrix::ucx::detail {

inline status to_status(ucs_status_t s) noexcept {
  if (s == UCS_OK) return status::ok;
  if (s == UCS_INPROGRESS) return status::in_progress;
  if (s <= UCS_ERR_FIRST_LINK_FAILURE && s >= UCS_ERR_LAST_ENDPOINT_FAILURE) return status::peer_unreachable;
  switch (s) {
    case UCS_ERR_NO_RESOURCE: return status::again;
    case UCS_ERR_NO_MEMORY: return status::no_memory;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR: return status::invalid_argument;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED: return status::peer_unreachable;
    case UCS_ERR_MESSAGE_TRUNCATED: return status::truncated;
    case UCS_ERR_CANCELED: return status::canceled;
    case UCS_ERR_TIMED_OUT: return status::timed_out;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED: return status::unsupported;
    case UCS_ERR_OUT_OF_RANGE: return status::out_of_range;
    default: return status::provider_error;
  }
}

inline unexpected fail(ucs_status_t s, const std::string& what) {
  return unexpected(to_status(s), what + ": " + ucs_status_string(s), "ucx", static_cast<long>(s));
}

}  // namespace fabrix::ucx::detail
