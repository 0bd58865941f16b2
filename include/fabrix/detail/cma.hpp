// Provider kit: fabrix's own cross-memory attach (CMA) to a node-mate's
// registered host memory. A write or read is one process_vm_writev /
// process_vm_readv by the initiator, inside the access-board handshake
// (access_board.hpp), so nothing is copied after the target's
// deregistration has returned. The target takes no part and need not poll.
//
// What the caller must have checked first (the providers' post paths): the
// remote_buffer's seal and owner, range and rights at every post
// (validate.hpp), and its range and rights against the extent the target
// registered in its key table (key_table.hpp, confirms_claim): CMA has no
// target-side check to stop a member of the job who sealed a buffer that
// claims more than the region. Only between processes of one user on one
// node (the target's key table is ours to map; its pid is its pid here),
// and only for host memory.
//
// Threading: as the domain's post path (one thread at a time per domain:
// one board word per domain).
#pragma once

#include <fabrix/detail/access_board.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/status.hpp>

#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdint>
#include <span>

namespace fabrix::detail {

// The UCX provider's default smallest write or read by CMA: below it UCX's
// shared-memory path is faster while the target polls (a system call costs
// ~1.5 us here; providers/ucx/README.md). The ofi provider's is 0 (setup.hpp).
inline constexpr std::uint64_t default_cma_min_bytes = 16 * 1024;

enum class cma_result : std::uint8_t {
  done,
  not_permitted,  // EPERM: the kernel does not let this process attach to the peer
  gone,           // ESRCH: the target process has exited
  fault,          // EFAULT, or a partial copy: memory not mapped on one side
};

// One process_vm_writev (write) or process_vm_readv (read) between `local`
// and `length` bytes at `raddr` in process `pid`.
inline cma_result cma_copy(std::uint32_t pid, opcode code, std::uint64_t raddr, std::uint64_t length,
                           std::span<const iovec> local) noexcept {
  if (length == 0) return cma_result::done;
  const iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(raddr)), length};
  const auto tid = static_cast<pid_t>(pid);
  const auto n = static_cast<unsigned long>(local.size());
  const ssize_t got = code == opcode::read ? ::process_vm_readv(tid, local.data(), n, &remote, 1, 0)
                                           : ::process_vm_writev(tid, local.data(), n, &remote, 1, 0);
  if (got >= 0) return static_cast<std::uint64_t>(got) == length ? cma_result::done : cma_result::fault;
  if (errno == EPERM) return cma_result::not_permitted;
  if (errno == ESRCH) return cma_result::gone;
  return cma_result::fault;
}

// Where the region of a CMA copy is, in the target's key table.
struct cma_target {
  const key_table_map* keys = nullptr;  // the target's table (mapped)
  std::uint64_t nonce = 0;              // the target domain's: what our board announces
  std::uint32_t slot = 0;               // the region's slot
  std::uint64_t epoch = 0;              // the region's epoch: what the slot holds while it lives
  std::uint32_t pid = 0;
};

enum class cma_verdict : std::uint8_t {
  done,           // copied: the bytes are in place (write) or here (read)
  stale,          // the target deregistered the region: nothing copied
  closed,         // the target closed its domain: nothing copied
  not_permitted,  // the kernel refused this peer: nothing copied
  gone,           // the target process has exited
  fault,          // memory not mapped on one side (the copy may be partial)
};

// The board handshake around one copy. `own` is this domain's key table.
inline cma_verdict cma_under_board(key_table_map& own, const cma_target& t, opcode code, std::uint64_t raddr,
                                   std::uint64_t length, std::span<const iovec> local) noexcept {
  switch (board_enter(own, *t.keys, t.nonce, t.slot, t.epoch)) {
    case board_verdict::go: break;
    case board_verdict::stale: return cma_verdict::stale;
    case board_verdict::closed: return cma_verdict::closed;
  }
  const cma_result r = cma_copy(t.pid, code, raddr, length, local);
  board_leave(own);
  switch (r) {
    case cma_result::done: return cma_verdict::done;
    case cma_result::not_permitted: return cma_verdict::not_permitted;
    case cma_result::gone: return cma_verdict::gone;
    case cma_result::fault: return cma_verdict::fault;
  }
  return cma_verdict::fault;
}

}  // namespace fabrix::detail
