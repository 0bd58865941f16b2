// libfabric return codes (-FI_E*, or positive errno in CQ error entries) ->
// fabrix::status, and error values that carry libfabric's text.
#pragma once

#include <fabrix/result.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

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

// What an error entry's prov_errno holds, per libfabric provider: an errno
// (tcp, rxm over tcp, sockets, udp, shm), an ibv_wc_status (verbs, and rxm
// over verbs, which passes its verbs entry on), or something we don't read.
enum class prov_errno_kind : std::uint8_t { unknown, errno_value, ibv_wc_status };

inline prov_errno_kind prov_errno_kind_of(std::string_view prov_name) noexcept {
  if (prov_name.find("verbs") != std::string_view::npos) return prov_errno_kind::ibv_wc_status;
  for (std::string_view p : {"tcp", "sockets", "udp", "shm"})
    if (prov_name.find(p) != std::string_view::npos) return prov_errno_kind::errno_value;
  return prov_errno_kind::unknown;
}

// ibv_wc_status values (infiniband/verbs.h, stable ABI) that mean the peer
// or the connection to it is gone: WR_FLUSH_ERR (5: the QP already failed),
// RETRY_EXC_ERR (12), RNR_RETRY_EXC_ERR (13), REM_ABORT_ERR (16),
// RESP_TIMEOUT_ERR (20).
inline bool ibv_status_means_peer_loss(int wc_status) noexcept {
  return wc_status == 5 || wc_status == 12 || wc_status == 13 || wc_status == 16 || wc_status == 20;
}

// What an ibv_wc_status says of the operation itself, where libfabric's
// verbs provider reports only EIO (verbs_cq.c sets err = EIO, prov_errno =
// the status): as fabrix's verbs provider maps it (verbs/status.hpp).
// REM_ACCESS_ERR (10: the target's NIC refused the key, range or rights,
// as for a region deregistered on another node), LOC_PROT_ERR (4),
// LOC_ACCESS_ERR (8), MW_BIND_ERR (6): access_denied; REM_INV_REQ_ERR (9):
// invalid_argument; LOC_LEN_ERR (1): truncated; others provider_error.
inline status ibv_status_to_status(int wc_status) noexcept {
  switch (wc_status) {
    case 4:
    case 6:
    case 8:
    case 10: return status::access_denied;
    case 9: return status::invalid_argument;
    case 1: return status::truncated;
    default: return status::provider_error;
  }
}

inline unexpected fail(long code, const std::string& what) {
  return unexpected(to_status(code), what + ": " + fi_strerror(static_cast<int>(std::labs(code))), "ofi",
                    -std::labs(code));
}

}  // namespace fabrix::ofi::detail
