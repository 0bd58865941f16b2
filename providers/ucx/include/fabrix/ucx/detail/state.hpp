// The UCX provider's state. domain_state and peer_state live on the heap so
// their addresses, handed to UCX as callback arguments, survive moves of the
// owning domain_impl / endpoint_impl.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/detail/access_board.hpp>
#include <fabrix/detail/cma.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/detail/intrusive_fifo.hpp>
#include <fabrix/detail/key_table.hpp>
#include <fabrix/detail/periodic.hpp>
#include <fabrix/detail/remote_key_cache.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/ucx/detail/liveness.hpp>

#include <ucp/api/ucp.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace fabrix::ucx::detail {

struct peer_state;
struct domain_state;

// Active-message ids on a fabrix worker.
inline constexpr unsigned am_notify = 17;
inline constexpr unsigned am_rma = 18;        // a checked one-sided request (rma.hpp)
inline constexpr unsigned am_rma_reply = 19;  // its answer
// Set in the epoch of regions UCX allocated (allocate_memory); sealed with
// the rest of the remote_buffer.
inline constexpr std::uint64_t ucx_allocated = std::uint64_t{1} << 63;
// Such a region's slot in its domain's key table (fabrix/detail/key_table.hpp)
// sits in the 16 epoch bits below the flag, sealed too; 0: no slot (no table,
// or it was full), not checked. The epoch counter keeps the low 47 bits.
inline constexpr unsigned key_slot_shift = 47;
inline constexpr std::uint64_t key_slot_mask = std::uint64_t{0xffff} << key_slot_shift;
static_assert(fabrix::detail::key_table_slots - 1 <= (key_slot_mask >> key_slot_shift));
inline constexpr std::uint32_t key_slot_of(std::uint64_t epoch) noexcept {
  return static_cast<std::uint32_t>((epoch & key_slot_mask) >> key_slot_shift);
}
inline constexpr std::uint32_t unknown_peer = completion::unknown_peer;
inline constexpr std::uint32_t notify_magic = 0x46425849;   // "FBXI"
inline constexpr std::uint32_t rma_magic = 0x46425852;      // "FBXR"
inline constexpr std::uint32_t reply_magic = 0x46425841;    // "FBXA"
inline constexpr std::uint32_t replies_magic = 0x46425842;  // "FBXB": several answers in one AM

// The whole payload of a write_with_imm notification (an AM header).
struct notify_header {
  std::uint32_t magic = notify_magic;
  std::uint32_t imm = 0;
  std::uint64_t bytes = 0;
  std::uint64_t sender = 0;  // the sending domain's nonce: names the queue pair (completion::peer)
};

// A one-sided operation fabrix carries itself (rma.hpp): the AM header; a
// write's bytes are the AM's payload.
enum class rma_kind : std::uint8_t { write = 1, read, fetch_add, compare_swap };
struct rma_header {
  std::uint32_t magic = rma_magic;
  rma_kind kind = rma_kind::write;
  std::uint8_t pad[3] = {};
  std::uint32_t index = 0;    // the initiator's op slot, echoed in the reply
  std::uint32_t seq = 0;      // and its use number: a late or forged reply matches nothing
  std::uint64_t sender = 0;   // the initiator domain's nonce: the reply goes to its queue pair
  std::uint64_t epoch = 0;    // the target region (remote_buffer::epoch)
  std::uint64_t address = 0;  // target address and length
  std::uint64_t length = 0;
  std::uint64_t operand = 0;  // fetch_add: the addend; compare_swap: the value to swap in
  std::uint64_t compare = 0;  // compare_swap: the expected value
  // sender_proof(target's secret, sender): shows a target with no queue pair
  // to the sender that the sender holds its address blob (rma.hpp).
  std::uint64_t proof = 0;
};
struct rma_reply_header {
  std::uint32_t magic = reply_magic;
  std::uint32_t index = 0;
  std::uint32_t seq = 0;
  std::uint8_t result = 0;  // a fabrix::status
  std::uint8_t pad[3] = {};
  std::uint64_t sender = 0;  // the target domain's nonce
  std::uint64_t value = 0;   // atomics: the old value
};

// One answer inside a batch: the header's magic is replies_magic, its index
// the number of entries, and the AM's data that many of these (answers
// without bytes only: writes and atomics; a read's answer goes alone).
struct rma_reply_entry {
  std::uint32_t index = 0;
  std::uint32_t seq = 0;
  std::uint8_t result = 0;
  std::uint8_t pad[7] = {};
  std::uint64_t value = 0;
};
inline constexpr std::size_t max_batched_replies = 64;

// An answer's fields as a batch carries them (and as the initiator settles
// a single answer too).
inline rma_reply_entry entry_of(const rma_reply_header& h) noexcept {
  rma_reply_entry e;
  e.index = h.index;
  e.seq = h.seq;
  e.result = h.result;
  e.value = h.value;
  return e;
}

// A live registration as the target sees it: what a checked request may touch.
struct region_entry {
  std::uintptr_t address = 0;
  std::uint64_t length = 0;
  access rights = access::local;
};

// An answer to a checked request, waiting to be sent (run_deferred) or in
// flight. Pooled by the domain; `data` keeps its capacity between uses, so
// reads allocate only when they are larger than any before.
struct reply_slot {
  rma_reply_header h{};
  domain_state* dom = nullptr;
  peer_state* to = nullptr;  // while queued
  // Or, answering a domain with no queue pair here, the endpoint UCX handed
  // the request's handler (reply_ep). Valid only until the next
  // ucp_worker_progress: send_replies runs before that (rma.hpp).
  ucp_ep_h reply_ep = nullptr;
  // A read's bytes, copied out of the region when the request was checked;
  // or a batch's rma_reply_entry array (send_replies).
  std::vector<std::byte> data;
  bool read = false;  // answers a read: sent alone, with its bytes
  reply_slot* next = nullptr;
};

// The unpacked rkeys of one endpoint (fabrix/detail/remote_key_cache.hpp).
using rkey_cache = fabrix::detail::remote_key_cache<ucp_rkey_h, &ucp_rkey_destroy>;

// Where an operation is. Every op starts in `data` (a flush in user_flush);
// write_with_imm then goes imm_flush -> imm_notify; a delivered write or send
// on a native lane goes to delivery_flush. An op that may not start yet waits
// on its peer's `parked` list in its first stage; a fenced op that must wait
// for native operations goes fence_flush -> fence_start -> data.
enum class stage : std::uint8_t { data, imm_flush, imm_notify, user_flush, delivery_flush, fence_flush, fence_start };

// An operation's state. Every use starts from op_fields{} (recycle); the
// scratch below is written by post_one / post_checked before it is read
// (`local` and `memh` up to nlocal, `header` for write_with_imm, `rma` whole),
// so it is left as the last use wrote it: resetting ~700 bytes per operation
// was the most expensive line of a small write (issue 16, callgrind).
struct op_slot;
struct op_fields {
  completion c{};
  domain_state* dom = nullptr;
  peer_state* peer = nullptr;
  void* request = nullptr;    // outstanding recv request, for cancellation
  std::uint32_t pending = 0;  // UCX requests of the current stage, +1 while posting
  ucs_status_t first_error = UCS_OK;
  stage st = stage::data;
  bool in_use = false;
  bool abandoned = false;             // completion delivered early (dead peer); UCX still owns requests
  bool from_recv_pool = false;        // taken from domain_state::recvs, not ::ops
  bool checked = false;               // carried as a checked request (rma.hpp)
  bool awaiting_reply = false;        // a checked request whose reply has not come yet
  status remote_status = status::ok;  // what the target's check said
  std::uint32_t seq = 0;              // use number, echoed by replies
  std::uint32_t nlocal = 0;           // local slices of a checked request / recv buffer
  std::uint64_t recv_length = 0;      // recv: the message's full length (truncation)
  std::uint64_t operand = 0;          // atomic operand buffer: must live until completion
  // What the op needs to start later than post() (a parked op): resolved
  // target (never the remote_buffer pointer, which dies when post returns)
  // and local slices (`local`, with their memory handles).
  std::uint64_t raddr = 0;            // target address
  std::uint64_t roffset = 0;          // offset in the target region (mapped regions)
  std::uint64_t rlength = 0;          // target length
  std::uint64_t repoch = 0;           // the target region's epoch (checked requests, key table)
  std::uint64_t compare = 0;          // compare_swap: expected value
  std::uint64_t flush_mark = 0;       // an endpoint flush: peer_state::native_posted when it was posted
  std::uint64_t flush_rma_mark = 0;   // ... and peer_state::rma_posted
  bool flushing = false;              // an endpoint flush of this op is in flight (peer_state::flushes_in_flight)
  bool unsignaled = false;            // op_options::unsignaled: no completion on success, counted
  bool delivered = false;             // op_options::delivered on a native lane: flushed before it completes
  bool fenced = false;                // op_options::fence: starts after everything earlier is at the target
  bool imm_started = false;           // a write_with_imm counted in peer_state::imm_in_progress
  rkey_cache::entry* rkey = nullptr;  // held while UCX may use it: until the slot goes back (release_slot)
  op_slot* next = nullptr;            // deferred / parked list link
  op_slot* next_free = nullptr;       // slot_pool link
};
struct op_scratch {
  rma_header rma{};                      // AM header of a checked request: must live until the AM completes
  std::array<ucp_dt_iov_t, 16> local{};  // checked read/atomic: where the reply's bytes go; write: the payload
  notify_header header{};                // AM header: must live until the AM completes
  std::array<ucp_mem_h, 16> memh{};      // native puts/gets: each local slice's handle
};
struct op_slot : op_fields, op_scratch {
  void recycle() noexcept { static_cast<op_fields&>(*this) = op_fields{}; }
};

// Intrusive FIFO of slots (no allocation).
using op_list = fabrix::detail::intrusive_fifo<op_slot>;

// A closed queue pair's endpoint while UCX still works on it. The domain
// moves every closing endpoint on in poll()/wait() — together, so closing
// many costs one timeout, not one each — and, bounded, before destroying the
// worker: flush (error-handling endpoints to a live peer) until it completes,
// the peer fails or flush_deadline; then close. The peer state (UCX's error
// handler argument, the rkeys the requests may use) lives until both
// requests are done.
struct closing_endpoint {
  std::unique_ptr<peer_state> peer;
  void* flush = nullptr;
  void* close = nullptr;
  bool close_started = false;
  bool was_failed = false;
  std::chrono::steady_clock::time_point flush_deadline{};
};

// Frees `req` (a request posted without callback) once it has completed.
inline void reap_request(void*& req) noexcept {
  if (req && ucp_request_check_status(req) != UCS_INPROGRESS) {
    ucp_request_free(req);
    req = nullptr;
  }
}

struct domain_state {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  std::uint64_t nonce = 0;            // random: names this domain in remote_buffers and tags
  fabrix::detail::seal_key secret{};  // random: seals our remote_buffers; given to connected peers
  std::uint64_t next_epoch = 1;
  // Which of our UCX-allocated regions are alive, for peers on this node that
  // use them directly (post.hpp). Not mapped: shm_open failed; those regions
  // then take no slot.
  fabrix::detail::key_table keys;
  // Node-mates' registered host memory is reached by CMA (cma.hpp), and the
  // boards of this user's domains on this node, as the last region release
  // found them (access_board.hpp: scan_boards): a release waits on them.
  bool cma = false;
  // Smaller writes and reads go as checked requests (cma.hpp: by_cma).
  std::uint64_t cma_min_bytes = fabrix::detail::default_cma_min_bytes;
  std::vector<fabrix::detail::board_watch> boards;
  std::string transport;    // UCX_TLS in force, for describe()
  std::string net_devices;  // domain_options::device as UCX_NET_DEVICES, and why, for describe()
  // UCX_NET_DEVICES in force at creation (ours, else the environment's);
  // empty for UCX's default. domain_impl::device_pci() reads its devices.
  std::string net_device_list;
  // ucp_context_query lists UCS_MEMORY_TYPE_CUDA: this UCX build (its cuda
  // transports) registers and moves device memory itself. Debian 12's UCX
  // 1.13.1 is built without CUDA, so this is false there.
  bool cuda_memory = false;
  fabrix::detail::completion_ring ring;
  fabrix::detail::slot_pool<op_slot> ops;
  fabrix::detail::slot_pool<op_slot> recvs;  // posted recvs: their own bound (max_posted_recvs)
  std::uint32_t next_seq = 0;
  op_list deferred;                         // slots whose next stage starts in poll()
  std::uint64_t dropped_notifications = 0;  // malformed notify AMs from peers
  std::uint64_t dropped_requests = 0;       // malformed or unattributable checked requests / replies
  process_identity self = self_identity();
  std::vector<peer_state*> watched;       // peers whose liveness fabrix checks itself
  fabrix::detail::poll_clock poll_clock;  // liveness of `watched`: periodic.hpp
  fabrix::detail::schedule liveness;
  std::vector<closing_endpoint> closing;  // endpoints UCX still closes
  std::chrono::steady_clock::time_point next_closing_check{};
  bool cancel_abandoned_recvs = false;  // a peer failed inside a callback: cancel its recvs after progress
  bool start_parked = false;            // a peer's parked ops may start now (run_deferred starts them)
  ucp_datatype_t recv_dt = 0;           // generic datatype of recvs (truncation keeps the prefix)

  // Checked one-sided operations (rma.hpp): live registrations by epoch, the
  // queue pairs by peer domain nonce, and the replies to send.
  std::unordered_map<std::uint64_t, region_entry> regions;
  std::unordered_map<std::uint64_t, peer_state*> peers;
  std::vector<peer_state*> connected;
  std::deque<reply_slot> reply_store;  // stable addresses; grows, never shrinks
  reply_slot* free_replies = nullptr;
  reply_slot* replies_head = nullptr;  // replies to send in run_deferred, in order
  reply_slot* replies_tail = nullptr;

  explicit domain_state(std::size_t max_outstanding, std::size_t max_posted_recvs = 1024)
      : ring(max_outstanding + max_posted_recvs), ops(max_outstanding), recvs(max_posted_recvs) {
    for (op_slot* s = recvs.begin(); s != recvs.end(); ++s) s->from_recv_pool = true;
  }
  domain_state(const domain_state&) = delete;
  domain_state& operator=(const domain_state&) = delete;

  peer_state* find_peer(std::uint64_t nonce) const noexcept {
    auto it = peers.find(nonce);
    return it == peers.end() ? nullptr : it->second;
  }
  void add_peer(peer_state* p);
  void remove_peer(peer_state* p) noexcept;

  reply_slot* take_reply() {
    reply_slot* r = free_replies;
    if (r)
      free_replies = r->next;
    else
      r = &reply_store.emplace_back();
    r->next = nullptr;
    r->dom = this;
    return r;
  }
  void give_back_reply(reply_slot* r) noexcept {
    r->to = nullptr;
    r->reply_ep = nullptr;
    r->next = free_replies;
    free_replies = r;
  }

  // Calls f(slot) for every slot of both pools (in use or not).
  template <class F>
  void each_slot(F&& f) {
    for (op_slot* op = ops.begin(); op != ops.end(); ++op) f(op);
    for (op_slot* op = recvs.begin(); op != recvs.end(); ++op) f(op);
  }

  void advance_closing() noexcept;  // endpoint.hpp

  // Order: every endpoint close is finished (progressing the worker, at most
  // 2 x close_limit for all of them together) before the worker is destroyed
  // — UCX asserts on close requests the user still holds. A close that still
  // has not finished is released to UCX (which completes it while destroying
  // the worker); its rkeys are then leaked rather than freed under a live
  // request.
  ~domain_state();

  // How long a close may wait for a live peer (its flush) and for UCX.
  static constexpr std::chrono::milliseconds close_limit{2000};
};

struct peer_state {
  domain_state* dom = nullptr;
  op_options defaults = op_options::none;  // the queue pair's (detail::options_of)
  std::uint64_t finished = 0;              // unsignaled operations finished (endpoint_impl::finished)
  std::uint32_t peer_id = 0;               // completion::peer of what arrives on this queue pair
  ucp_ep_h ep = nullptr;
  std::uint64_t send_tag = 0;              // our domain's nonce: tags our sends
  std::uint64_t recv_tag = 0;              // the peer domain's nonce: matches its sends, owns its regions
  fabrix::detail::seal_key peer_secret{};  // verifies the peer's remote_buffers
  std::uint64_t proof = 0;                 // rma_header::proof of our requests to it
  bool failed = false;                     // set by UCX's error handler or by teardown
  bool detects_failure = true;             // UCP_ERR_HANDLING_MODE_PEER: UCX reports this peer's death
  bool same_node = false;                  // the peer process can be checked in /proc (liveness.hpp)
  process_identity identity;               // the peer process, for the liveness check
  ucs_status_t failure = UCS_OK;
  bool checked_rma = true;  // one-sided ops go as checked requests (rma.hpp), not UCX RMA
  std::uint32_t imm_in_progress = 0;
  std::uint32_t checked_in_flight = 0;  // checked requests whose reply has not come
  // Native operations (put, get, atomic, tagged send, notification AM) whose
  // arrival at the target nothing but an endpoint flush tells: those posted,
  // and how many of them the last completed endpoint flush covered. Equal:
  // a fence needs no flush.
  std::uint64_t native_posted = 0;
  std::uint64_t native_flushed = 0;
  // The same for native puts, gets and atomics alone (UCX RMA lanes: never
  // on a checked_rma endpoint), which a write_with_imm's notification must
  // follow: equal, and it needs no endpoint flush. Endpoint flushes in
  // flight, the rma_posted the latest of them covers, and the notifications
  // waiting for one of them (run_deferred: one flush serves a batch).
  std::uint64_t rma_posted = 0;
  std::uint64_t rma_flushed = 0;
  std::uint32_t flushes_in_flight = 0;
  std::uint64_t rma_flush_posted = 0;
  op_list flush_waiters;
  bool fence_flushing = false;  // a fenced op waits for its endpoint flush: everything later waits behind it
  // Ops that have not started, in post order: flushes waiting for
  // notifications and checked requests, fenced ops waiting for everything
  // before them, and every op posted behind one of those (start_parked).
  op_list parked;
  op_list parked_imms;  // write_with_imm notifications waiting for earlier checked requests
  rkey_cache rkeys;     // unpacked once per remote region, bounded
  // Imported keys (queue_pair::import): entries of `rkeys`, each held until
  // released (so never evicted); destroyed with the cache.
  fabrix::detail::import_table<rkey_cache::entry*> imports;
  // The peer domain's key table, when it is on this node (post.hpp).
  fabrix::detail::key_table_map peer_keys;
  // Its registered host memory is reached by CMA (cma.hpp); cleared when the
  // kernel refuses (those operations then go as checked requests).
  bool cma = false;
};

inline void domain_state::add_peer(peer_state* p) {
  connected.push_back(p);
  peers.try_emplace(p->recv_tag, p);
}

// Another queue pair to the same peer domain, if any, answers for it next.
inline void domain_state::remove_peer(peer_state* p) noexcept {
  std::erase(connected, p);
  auto it = peers.find(p->recv_tag);
  if (it == peers.end() || it->second != p) return;
  peers.erase(it);
  for (peer_state* q : connected)
    if (q->recv_tag == p->recv_tag) {
      peers.emplace(q->recv_tag, q);
      break;
    }
}

}  // namespace fabrix::ucx::detail
