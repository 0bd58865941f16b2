// The access board: how a domain that reaches a node-mate's registered
// memory by a system call of its own (process_vm_writev / process_vm_readv:
// the kernel copies, the target takes no part) and the target that
// deregisters that memory agree that no copy lands after deregistration
// returns — the guarantee a checked request or an RDMA NIC gives elsewhere.
//
// Each domain's key table (key_table.hpp) holds a board word (slot 1),
// written only by its own domain and read by its node-mates. The initiator,
// per operation (board_enter, the call, board_leave):
//   1. its board := the target domain's nonce              (seq_cst store)
//   2. load the region's slot in the target's key table     (seq_cst load)
//      and refuse the operation unless it still holds the region's epoch;
//   3. the system call; then its board := 0.
// The target, deregistering (key_table::release, scan_boards,
// wait_for_boards):
//   1. the region's slot := 0                                (seq_cst store)
//   2. for each node-mate's board (every domain of this user on this node):
//      wait while it holds this domain's nonce and that process is still
//      there                                                 (seq_cst load)
// The two store-then-load pairs are a Dekker handshake: either the
// initiator's load sees the cleared slot (and it copies nothing), or the
// target's load sees the board (and it waits until the call has returned).
//
// A node-mate that is gone (or a zombie) copies nothing more. A stopped one
// (SIGSTOP, a debugger) is waited for: it may have stopped between its check
// and its call, so the target cannot tell that the call will not still come.
// Threading: one domain posts from one thread at a time, so one board word
// per domain suffices; wait_for_boards reads peers' tables only.
#pragma once

#include <fabrix/detail/key_table.hpp>
#include <fabrix/detail/process_identity.hpp>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fabrix::detail {

enum class board_verdict : std::uint8_t {
  go,      // the region is alive: the call may run (then board_leave)
  stale,   // the target deregistered it
  closed,  // the target closed its domain
};

// Steps 1 and 2 of the initiator. `own` is this domain's table (read-write),
// `target` the target's (read-only), `slot` and `epoch` the region's. On any
// verdict but go the board is already clear again.
inline board_verdict board_enter(key_table_map& own, const key_table_map& target, std::uint64_t target_nonce,
                                 std::uint32_t slot, std::uint64_t epoch) noexcept {
  own.store_seq_cst(key_table_board_slot, target_nonce);
  if (target.load_seq_cst(slot) == epoch) return board_verdict::go;
  own.store(key_table_board_slot, 0);
  return target.load(key_table_open_slot) != 0 ? board_verdict::stale : board_verdict::closed;
}

// Step 3's end: the call has returned.
inline void board_leave(key_table_map& own) noexcept { own.store(key_table_board_slot, 0); }

// A node-mate's board, as a target watches it.
struct board_watch {
  std::uint64_t nonce = 0;    // the node-mate domain's
  process_identity identity;  // its process, for the liveness check
  key_table_map map;          // its key table, read-only
};

// Brings `boards` up to date with the key tables of this user's domains on
// this node (/dev/shm/fabrix_<pid>_<nonce>_keys, key_table.hpp): maps the
// new ones, drops those whose table is gone (their domain closed). A target
// cannot rely on the peers it connected to: a node-mate's queue pair to it
// is that node-mate's alone, so one may copy without the target ever having
// connected back, and it must be waited for all the same. Tables of other
// users are left out: the kernel would not let their processes attach to
// this one's memory (and fabrix does not try, cma.hpp). Costs one readdir
// of /dev/shm per call; called when a region that node-mates may copy into
// is released, never on the data path.
inline void scan_boards(std::vector<board_watch>& boards) {
  const uid_t me = ::geteuid();
  std::vector<std::uint64_t> seen;
  each_fabrix_shm_object([&](std::string_view, std::uint32_t pid, std::uint64_t nonce, std::string_view rest) {
    if (rest != "_keys") return;
    seen.push_back(nonce);
    if (std::any_of(boards.begin(), boards.end(), [&](const board_watch& b) { return b.nonce == nonce; })) return;
    board_watch b;
    b.nonce = nonce;
    b.identity.pid = pid;
    char state = 0;
    if (!read_proc_stat(pid, state, b.identity.start_time)) return;  // gone: it copies nothing
    b.map = key_table_map::open(key_table_name(pid, nonce), false);
    if (b.map.mapped() && b.map.owner_uid() == me) boards.push_back(std::move(b));
  });
  std::erase_if(boards,
                [&](const board_watch& b) { return std::find(seen.begin(), seen.end(), b.nonce) == seen.end(); });
}

// Target step 2, after the region's slot was cleared: returns once no
// node-mate in `boards` is inside (or about to make) a call on this
// domain's memory. Spins briefly (a copy takes microseconds), then yields
// and looks the process up in /proc between reads.
inline void wait_for_boards(std::span<const board_watch> boards, std::uint64_t self_nonce) {
  for (const board_watch& b : boards) {
    if (!b.map.mapped()) continue;
    for (unsigned spins = 0; b.map.load_seq_cst(key_table_board_slot) == self_nonce; ++spins) {
      if (spins < 256) continue;
      if (process_gone(b.identity)) break;  // it copies nothing more
      ::sched_yield();
    }
  }
}

// Target step 2 whole: after the region's slot was cleared, finds every
// node-mate's board (scan_boards) and waits for those that name this domain
// (wait_for_boards). What a provider's region release calls.
inline void wait_for_node_mates(std::vector<board_watch>& boards, std::uint64_t self_nonce) {
  scan_boards(boards);
  wait_for_boards(boards, self_nonce);
}

}  // namespace fabrix::detail
