// libfabric return codes (-FI_E*, or positive errno in CQ error entries) ->
// fabrix::status, and error values that carry libfabric's text.
#pragma once

#include <fabrix/result.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace fabrix::ofi::detail {

// `code` is a libfabric error number, either sign (FI_EAGAIN or -FI_EAGAIN).
inline status to_status(long code) noexcept {
  switch (std::labs(code)) {
    case 0: return status::ok;
    case FI_EAGAIN: return status::again;
    case FI_ENOMEM: return status::no_memory;
    case FI_EINVAL:
    case FI_EBADFLAGS:
    case FI_EMSGSIZE: return status::invalid_argument;
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED: return status::access_denied;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_EADDRNOTAVAIL:
    case FI_ESHUTDOWN:
    case FI_EHOSTDOWN:
    case FI_ENETDOWN:
    case EPIPE: return status::peer_unreachable;
    case FI_ETIMEDOUT: return status::timed_out;
    case FI_ETRUNC:
    case FI_ETOOSMALL: return status::truncated;
    case FI_ECANCELED: return status::canceled;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
    case FI_ENODATA: return status::unsupported;
    case ERANGE: return status::out_of_range;
    default: return status::provider_error;
  }
}

inline unexpected fail(long code, const std::string& what) {
  return unexpected(to_status(code), what + ": " + fi_strerror(static_cast<int>(std::labs(code))), "ofi",
                    -std::labs(code));
}

}  // namespace fabrix::ofi::detail
