// The libfabric provider's state. domain_state and peer_state live on the
// heap so that their addresses survive moves of the owning domain_impl /
// endpoint_impl; op_slots live in a pool allocated once per domain, and a
// slot's address is the operation's libfabric context.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/detail/access_board.hpp>
#include <fabrix/detail/cma.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/detail/intrusive_fifo.hpp>
#include <fabrix/detail/key_table.hpp>
#include <fabrix/detail/periodic.hpp>
#include <fabrix/detail/process_identity.hpp>
#include <fabrix/detail/remote_key_cache.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/ofi/detail/key.hpp>
#include <fabrix/ofi/detail/status.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_buffer.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace fabrix::ofi::detail {

// The key table is provider-independent (fabrix/detail/key_table.hpp); the
// slot travels in the key bytes (key.hpp).
using fabrix::detail::key_table;
using fabrix::detail::key_table_map;
using fabrix::detail::key_table_name;
using fabrix::detail::key_table_slots;

// Local slices per operation that a slot can hold (the runtime limit is the
// provider's iov_limit, if smaller).
inline constexpr std::size_t max_iov = 16;

// Words of domain_state::operands per operation slot.
inline constexpr std::size_t operand_words = 3;

struct peer_state;
struct domain_state;

// posted: libfabric owns the slot until its completion; parked: waiting in
// its peer's queue (see post.hpp); abandoned: its completion was delivered
// early (dead peer) and libfabric may still return it.
enum class slot_state : std::uint8_t { free, parked, posted, abandoned };

struct op_slot {
  fi_context2 ctx{};  // first member: libfabric's per-operation scratch (FI_CONTEXT/FI_CONTEXT2)
  completion c{};
  peer_state* peer = nullptr;
  slot_state st = slot_state::free;
  bool counted = false;                         // in peer->inflight
  bool recv_slot = false;                       // counts against max_posted_recvs, not max_outstanding
  bool notify_stage = false;                    // a split write_with_imm whose data has been delivered
  bool unsignaled = false;                      // op_options::unsignaled: completes only if it fails (finish())
  bool fenced = false;                          // op_options::fence: starts only when its peer is quiet (post.hpp)
  std::uint32_t posted_epoch = 0;               // domain_state::sweep_epoch when handed to libfabric (timeouts)
  std::chrono::steady_clock::time_point due{};  // a stale-key operation: when its verdict is given
  // What to post, kept so that a parked operation can be posted later.
  std::uint32_t iov_count = 0;
  std::uint64_t raddr = 0;  // libfabric target address (virtual or offset)
  std::uint64_t rkey = 0;
  // A local read (post.hpp): the region's slot and epoch in the target's key
  // table, checked inside the access board when it starts.
  bool local_read = false;
  std::uint32_t rslot = 0;
  std::uint64_t repoch = 0;
  op_slot* next = nullptr;       // parked-queue link
  op_slot* next_free = nullptr;  // slot_pool link
  // Scratch, the last members: fill_slot writes [0, iov_count) before
  // anything reads them, so recycle() leaves them as the last use wrote them.
  iovec iov[max_iov]{};
  void* desc[max_iov]{};

  // Back to the initial state, all but the scratch (slot_pool::give_back):
  // a few stores of ~130 bytes instead of resetting all ~520 per operation.
  void recycle() noexcept;
};
static_assert(std::is_standard_layout_v<op_slot>, "op_slot's address must be its ctx's address");
static_assert(std::is_trivially_copyable_v<op_slot>, "recycle() copies the initial state's bytes");

inline void op_slot::recycle() noexcept {
  static constexpr op_slot initial{};
  std::memcpy(static_cast<void*>(this), &initial, offsetof(op_slot, iov));
}

inline op_slot* slot_of(void* context) noexcept { return reinterpret_cast<op_slot*>(context); }

// Tags: a user send carries the sending domain's nonce, whose top bit is
// always clear; a notification message carries only the top bit.
inline constexpr std::uint64_t notify_tag_bit = std::uint64_t{1} << 63;

// Intrusive FIFO of slots (no allocation).
using op_list = fabrix::detail::intrusive_fifo<op_slot>;

struct domain_state {
  fi_info* info = nullptr;  // the chosen provider's description
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  bool wakeup = true;  // domain_options::wakeup: open the CQ with FI_WAIT_FD where it can
  int wait_fd = -1;    // the CQ's FI_WAIT_FD, or -1 (wait() then sleeps in short slices)
  std::uint64_t mr_mode = 0;
  bool hmem = false;  // the provider has FI_HMEM: cuda_device memory registers as FI_HMEM_CUDA
  bool manual_progress = true;
  // shm: reads whose range the target's key table confirms are done by this
  // process (shm's fast RMA, CMA) inside the access board; releasing a region
  // waits for node-mates' boards (region.hpp).
  bool local_reads = false;
  std::vector<fabrix::detail::board_watch> boards;  // node-mates' boards, for region releases
  // shm: writes and reads of at least cma_min_bytes to node-mates' confirmed
  // host memory are fabrix's own CMA copies (post.hpp, by_cma).
  // FABRIX_OFI_CMA, FABRIX_OFI_CMA_MIN_BYTES (setup.hpp).
  bool cma = false;
  std::uint64_t cma_min_bytes = 0;
  std::uint64_t cma_operations = 0;     // operations done by CMA (diagnostics, tests)
  bool atomics = false;                 // FI_UINT64 FI_SUM (fetch) and FI_CSWAP are valid
  std::size_t iov_limit = 1;            // local slices per write/read/send
  bool cq_data_carries_length = false;  // cq_data_size >= 8: imm in the low half, length in the high half
  // write_with_imm goes as two writes: the data, then (once delivered) a
  // zero-length write carrying the value. shm 1.17 never completes a write
  // that has both FI_REMOTE_CQ_DATA and FI_DELIVERY_COMPLETE.
  bool split_imm = false;
  // write_with_imm's notification goes as a tagged message {imm, length}
  // after its data is delivered, instead of as CQ data: for providers whose
  // CQ data cannot carry the length (cq_data_size < 8, e.g. verbs;ofi_rxm,
  // whose remote-write entries report len 0 in 1.17). Implies split_imm.
  bool notify_by_message = false;
  prov_errno_kind errno_kind = prov_errno_kind::unknown;  // how to read error entries' prov_errno

  std::uint64_t nonce = 0;            // random: names this domain in remote_buffers and tags its sends
  fabrix::detail::seal_key secret{};  // random: seals our remote_buffers; given to connected peers
  std::uint64_t next_epoch = 1;
  std::uint64_t next_key = 1;  // counter behind requested keys (no FI_MR_PROV_KEY): see requested_key() in setup.hpp

  fabrix::detail::completion_ring ring;
  // One pool for every operation; receives and the rest have their own
  // bounds (domain_options::max_posted_recvs, max_outstanding) within it.
  fabrix::detail::slot_pool<op_slot> ops;
  std::size_t max_ops = 0, max_recvs = 0;
  std::size_t ops_in_use = 0, recvs_in_use = 0;
  // Sends of at most this many bytes may go as fi_tinject (post.hpp,
  // inject_send); 0: never. tx_attr->inject_size.
  std::size_t inject_size = 0;
  key_table keys;       // which of our registrations are alive (key_table.hpp)
  op_list stale;        // operations through a peer's dead key, awaiting their verdict (post.hpp)
  bool source = false;  // FI_SOURCE: CQ entries name the sender (completion::peer)
  // Atomic operands (operand, compare) of slot i at [3i], [3i+1], or a
  // notification message {imm, length, nonce} at [3i..3i+2]: registered
  // once, because FI_MR_LOCAL providers need descriptors for them too.
  std::unique_ptr<std::uint64_t[]> operands;
  fid_mr* operand_mr = nullptr;
  void* operand_desc = nullptr;

  // The tail every recv gets after the caller's buffer: an oversized message
  // spills here and completes as truncated, instead of libfabric truncating
  // it (tcp;ofi_rxm 1.17 drops the connection when it truncates). Contents
  // are never read.
  static constexpr std::size_t discard_size = std::size_t{1} << 20;
  std::unique_ptr<std::byte[]> discard = std::make_unique<std::byte[]>(discard_size);
  fid_mr* discard_mr = nullptr;

  // Receives for notifications sent as messages (notify_by_message): tag
  // notify_tag_bit, any sender. Reposted as soon as each one is handled;
  // more than notify_rx_count arriving at once wait in libfabric's
  // unexpected-message queue. Buffers registered once (notify_mr).
  struct notify_rx {
    fi_context2 ctx{};
    std::uint64_t buf[3]{};  // imm, length, the sender domain's nonce
  };
  static constexpr std::size_t notify_rx_count = 64;
  std::unique_ptr<notify_rx[]> notify_rxs;
  fid_mr* notify_mr = nullptr;

  std::vector<peer_state*> peers;  // connected endpoints (for liveness)
  // Peers whose parked queue is not empty: all that progress() drains, so a
  // poll costs nothing per idle peer. Capacity kept at peers' (connect), so
  // park() never allocates.
  std::vector<peer_state*> busy;
  fabrix::detail::process_identity self = fabrix::detail::self_identity();
  // periodic_checks (progress.hpp): liveness of peers on this node, the
  // timeout sweep; periodic.hpp.
  fabrix::detail::poll_clock poll_clock;
  fabrix::detail::schedule liveness, sweep;

  // Operations libfabric may never complete (see expire_operations in
  // progress.hpp): an RMA or atomic still in flight after op_timeout fails
  // its peer with timed_out. Zero: never. The sweep runs at most every
  // sweep_period; an operation's age is counted in sweeps, so it never
  // expires early (it may expire up to one period late).
  std::chrono::milliseconds op_timeout{0};
  static constexpr std::chrono::milliseconds sweep_period{100};
  static constexpr std::chrono::milliseconds stale_verdict_delay{100};
  std::uint32_t sweep_epoch = 0;
  std::uint64_t expired_operations = 0;

  std::string last_error;          // text of the latest error completion
  std::uint64_t stray_errors = 0;  // error entries with no operation of ours
  std::uint64_t dropped_notifications = 0;

  domain_state(std::size_t max_outstanding, std::size_t max_posted_recvs)
      // Injected sends and CMA copies complete without a slot, at most
      // max_outstanding waiting to be polled (post.hpp): room for them too,
      // so the ring never grows for operations of ours.
      : ring(2 * max_outstanding + max_posted_recvs),
        ops(max_outstanding + max_posted_recvs),
        max_ops(max_outstanding),
        max_recvs(max_posted_recvs),
        operands(std::make_unique<std::uint64_t[]>(operand_words * (max_outstanding + max_posted_recvs))) {}
  domain_state(const domain_state&) = delete;
  domain_state& operator=(const domain_state&) = delete;
  // The endpoint closes first: until then our notification receives are
  // posted with notify_mr's descriptor, and rxm still matches messages that
  // arrive during fi_close(ep) against them (it reads the descriptor to
  // learn the buffer's memory type). Closing the MRs first made that a
  // use-after-free: ranks crashed in the leaver's fi_close on verbs;ofi_rxm
  // when a peer kept writing to them (15 of 15 runs with MALLOC_PERTURB_).
  ~domain_state() {
    if (ep) fi_close(&ep->fid);
    if (notify_mr) fi_close(&notify_mr->fid);
    if (discard_mr) fi_close(&discard_mr->fid);
    if (operand_mr) fi_close(&operand_mr->fid);
    if (av) fi_close(&av->fid);
    if (cq) fi_close(&cq->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }

  std::size_t index_of(const op_slot* op) noexcept { return static_cast<std::size_t>(op - ops.begin()); }
};

// A free slot for a receive or another operation, within that kind's bound;
// nullptr when the bound is reached.
inline op_slot* take_slot(domain_state& d, bool recv) noexcept {
  std::size_t& used = recv ? d.recvs_in_use : d.ops_in_use;
  if (used >= (recv ? d.max_recvs : d.max_ops)) return nullptr;
  op_slot* op = d.ops.take();
  if (op == nullptr) return nullptr;
  ++used;
  op->recv_slot = recv;
  return op;
}
inline void release_slot(domain_state& d, op_slot* op) noexcept {
  --(op->recv_slot ? d.recvs_in_use : d.ops_in_use);
  d.ops.give_back(op);
}

// An imported key (queue_pair::import): what operations need of its region.
struct imported_region {
  remote_key key;
  std::uint64_t base = 0;   // remote_buffer::address
  std::uint64_t epoch = 0;  // remote_buffer::epoch (key_is_stale)
};

struct peer_state {
  domain_state* dom = nullptr;
  op_options defaults = op_options::none;  // the queue pair's (detail::options_of)
  std::uint64_t finished = 0;              // unsignaled operations finished (endpoint_impl::finished)
  std::uint32_t peer_id = 0;               // completion::peer of what arrives on this queue pair
  fi_addr_t addr = FI_ADDR_UNSPEC;
  std::vector<std::byte> name;             // the peer's libfabric address (fi_getname bytes)
  std::uint64_t nonce = 0;                 // the peer domain's: tags its sends, owns its regions
  fabrix::detail::seal_key peer_secret{};  // verifies the peer's remote_buffers
  fabrix::detail::process_identity identity;
  bool watched = false;  // on this node: fabrix checks the process itself
  // Writes and reads may go by CMA (domain_state::cma, its key table mapped);
  // cleared when the kernel refuses to attach to the peer (EPERM).
  bool cma = false;
  bool failed = false;
  int failure = 0;                     // FI_E* (positive) that failed it
  status failure_status = status::ok;  // what its operations complete with since
  std::uint32_t inflight = 0;          // posted, not yet completed (recvs excluded)
  op_list parked;
  bool busy = false;                                     // in dom->busy
  fabrix::detail::remote_key_cache<remote_key> regions;  // verified once per remote region, bounded
  fabrix::detail::import_table<imported_region> imports;
  key_table_map peer_keys;  // the peer's key table, when it is on this node
};

// Parks `op` in its peer's queue (at the back, or at the front for one
// that must go next), and puts the peer on the domain's busy list.
inline void park(peer_state& p, op_slot* op, bool front = false) {
  op->st = slot_state::parked;
  if (front)
    p.parked.push_front(op);
  else
    p.parked.push_back(op);
  if (!p.busy) {
    p.busy = true;
    p.dom->busy.push_back(&p);
  }
}

}  // namespace fabrix::ofi::detail
