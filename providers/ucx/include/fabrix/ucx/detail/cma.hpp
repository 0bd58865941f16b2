// fabrix's own cross-memory attach (CMA) for node-mates' registered host
// memory: a write or read of a region a peer on this node registered itself
// (register_memory of host memory, not allocate_memory) is one
// process_vm_writev / process_vm_readv by the initiator — one-sided, the
// target takes no part and need not poll — where UCX 1.13 over shared
// memory would emulate it (its cma lane ignores keys, so fabrix carried such
// operations as checked requests, which wait for the target's progress).
//
// What keeps it as safe as a checked request:
//  - the remote_buffer is verified (seal, owner) when it is first used or
//    imported, and range and rights at every post (validate.hpp), as before;
//    and its range and rights against the extent the target registered in
//    its key table (post.hpp, owner_confirms): a member of the job can seal
//    a buffer that claims more than the region, and CMA has no target-side
//    check to stop it;
//  - the region's slot in the target's key table is checked inside the
//    access-board handshake (fabrix/detail/access_board.hpp), so nothing is
//    copied after the target's deregistration returned: stale_key;
//  - only between processes of one user (the peer's key table is ours), on
//    one node (same pid namespace: its pid is its pid here), and where the
//    domain may use shared memory (UCX_TLS; tcp-only domains stay on tcp).
// The kernel refusing the call (EPERM: ptrace_scope, another user) turns CMA
// off for that peer and the operation goes as a checked request; atomics
// always do (a system call cannot be atomic with the target's CPU), and so
// do writes and reads under FABRIX_UCX_CMA_MIN_BYTES (default 16 KiB).
// FABRIX_UCX_CMA=0 turns it off for the domain.
//
// Trust: a node-mate that bypassed fabrix could write anywhere in the
// target's memory — but only where the kernel already lets it attach to
// the target (PTRACE_MODE_ATTACH_REALCREDS), which is what makes the call
// work at all. The residual risk that a dead target's pid is reused within
// one liveness period (periodic.hpp) before fabrix sees it gone is the same
// as UCX's own cma transport's.
#pragma once

#include <fabrix/detail/cma.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/status.hpp>
#include <fabrix/ucx/detail/state.hpp>

#include <sys/uio.h>

#include <array>
#include <cstdint>

namespace fabrix::ucx::detail {

inline void* slice_address(const local_slice& l) noexcept { return l.address; }
inline void* slice_address(const ucp_dt_iov_t& l) noexcept { return l.buffer; }

// Whether an operation of `code` and `length` bytes through `e` goes by CMA
// now. Smaller ones than domain_state::cma_min_bytes go as checked requests:
// while the target polls, those are faster (a system call costs ~1.5 us;
// measured, perf/README.md), and they need its progress only as much as
// notifications do.
inline bool by_cma(const peer_state& p, const rkey_cache::entry& e, opcode code, std::uint64_t length) noexcept {
  return e.by_cma && p.cma && length >= p.dom->cma_min_bytes &&
         (code == opcode::write || code == opcode::read || code == opcode::write_with_imm);
}

// The operation: the board handshake around one copy (detail/cma.hpp).
// status::ok, or what the operation completes with; status::again: the
// kernel refused the peer (p.cma is now false): carry this operation as a
// checked request instead.
template <class Slices>
inline status cma_operation(peer_state& p, const rkey_cache::entry& e, opcode code, std::uint64_t roffset,
                            std::uint64_t length, const Slices& slices) noexcept {
  using fabrix::detail::cma_verdict;
  std::array<iovec, 16> local{};
  std::size_t n = 0;
  for (const auto& l : slices) {
    if (n == local.size()) return status::access_denied;  // validate.hpp bounds slices by caps().max_sge (16)
    local[n++] = iovec{slice_address(l), l.length};
  }
  domain_state& d = *p.dom;
  const std::uint64_t epoch = e.verified.epoch;
  const fabrix::detail::cma_target t{&p.peer_keys, p.recv_tag, key_slot_of(epoch), epoch, p.identity.pid};
  switch (fabrix::detail::cma_under_board(d.keys.map, t, code, e.verified.address + roffset, length,
                                          std::span<const iovec>(local.data(), n))) {
    case cma_verdict::done: return status::ok;
    case cma_verdict::stale: return status::stale_key;
    case cma_verdict::closed:
    case cma_verdict::gone: return status::peer_unreachable;
    case cma_verdict::not_permitted: p.cma = false; return status::again;
    case cma_verdict::fault: return status::access_denied;
  }
  return status::provider_error;
}

}  // namespace fabrix::ucx::detail
