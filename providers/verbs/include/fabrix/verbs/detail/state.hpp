// The verbs provider's state. domain_state and peer_state live on the heap
// so that pointers to them (peer lookup by QP number, the endpoint's domain)
// survive moves of domain_impl / endpoint_impl. Everything the data path
// touches is allocated when the domain or the endpoint is created.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/detail/periodic.hpp>
#include <fabrix/detail/remote_key_cache.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_buffer.hpp>
#include <fabrix/verbs/detail/address.hpp>
#include <fabrix/verbs/detail/credits.hpp>
#include <fabrix/verbs/detail/device.hpp>
#include <fabrix/verbs/detail/device_memory.hpp>
#include <fabrix/verbs/detail/options.hpp>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace fabrix::verbs::detail {

// wr_id: kind in the top byte, the rest an index or sequence number.
enum class wr_kind : std::uint8_t { rc_send = 1, srq_recv = 2, ud_recv = 3, ud_send = 4 };
inline constexpr std::uint64_t make_wr_id(wr_kind k, std::uint64_t n) noexcept {
  return (static_cast<std::uint64_t>(k) << 56) | (n & ((std::uint64_t{1} << 56) - 1));
}
inline constexpr wr_kind kind_of(std::uint64_t wr_id) noexcept { return static_cast<wr_kind>(wr_id >> 56); }
inline constexpr std::uint64_t index_of(std::uint64_t wr_id) noexcept { return wr_id & ((std::uint64_t{1} << 56) - 1); }
// An RC send's wr_id: its queue pair's slot in domain_state::slots (24 bits,
// so a CQE finds its queue pair without a hash lookup) and the low 32 bits
// of its ring seq (send_ring::seq_from restores the rest).
inline constexpr std::uint32_t max_slots = 1u << 24;
inline constexpr std::uint64_t rc_wr_id(std::uint32_t slot, std::uint64_t seq) noexcept {
  return make_wr_id(wr_kind::rc_send, (std::uint64_t{slot} << 32) | (seq & 0xffffffffu));
}
inline constexpr std::uint32_t slot_of(std::uint64_t wr_id) noexcept {
  return static_cast<std::uint32_t>(index_of(wr_id) >> 32);
}
inline constexpr std::uint32_t seq_bits_of(std::uint64_t wr_id) noexcept { return static_cast<std::uint32_t>(wr_id); }

inline constexpr std::uint32_t ud_slots = 16;         // handshake datagrams in flight, each way
inline constexpr std::uint32_t ud_slot_size = 128;    // 40-byte GRH + a hello, rounded
inline constexpr std::uint32_t ud_qkey = 0x46425856;  // "FBXV"
inline constexpr std::uint32_t max_probes = 64;       // liveness probes in flight per domain (post.hpp)

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using raw_buffer = std::unique_ptr<std::byte, free_deleter>;
inline raw_buffer page_aligned(std::size_t n) {
  void* p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  return raw_buffer(static_cast<std::byte*>(p));
}

// A user recv() waiting for a message from its queue pair's peer.
struct recv_wanted {
  std::byte* address = nullptr;
  std::uint64_t length = 0;
  std::uint64_t token = 0;
  std::uint8_t flags = 0;
};

struct domain_state;

struct peer_state {
  domain_state* dom = nullptr;
  op_options defaults = op_options::none;  // the queue pair's (detail::options_of)
  std::uint64_t finished = 0;              // unsignaled operations finished (endpoint_impl::finished)
  std::uint32_t peer_id = 0;               // completion::peer of what arrives on this queue pair
  std::uint32_t slot = 0;                  // in domain_state::slots; in every RC send's wr_id
  ibv_qp* qp = nullptr;
  ibv_qp_ex* qpx = nullptr;  // qp's extended send API (domain_state::wr_api); null: ibv_post_send
  ibv_ah* ah = nullptr;      // to the peer's UD queue pair (handshake); null for a loopback to self
  peer_address remote{};
  std::uint32_t seq = 0;  // which connect() between these two domains
  std::uint32_t my_psn = 0;
  std::uint32_t peer_qpn = 0;
  std::uint32_t peer_psn = 0;
  bool connected = false;

  // rdma_cm only (cm.hpp): the connection's id (its context points here),
  // where the connection got to, and why it failed while connecting.
  rdma_cm_id* cm_id = nullptr;
  enum class cm_phase : std::uint8_t { idle, resolving_addr, resolving_route, connecting, accepting, up, failed };
  cm_phase phase = cm_phase::idle;
  status cm_status = status::ok;
  std::string cm_error;
  bool disconnected = false;  // RDMA_CM_EVENT_DISCONNECTED: flushed requests fail with peer_unreachable

  send_ring ring;
  std::unique_ptr<ibv_send_wr[]> wrs;  // one post's chain, sq_depth long
  std::unique_ptr<ibv_sge[]> sges;     // max_sge per work request
  std::uint32_t max_sge = 1;
  std::uint32_t max_inline = 0;

  std::unique_ptr<recv_wanted[]> recvs;  // FIFO of user recv()s (domain_state::posted_recvs counts them)
  std::uint32_t recv_capacity = 0;
  std::uint64_t recv_head = 0, recv_tail = 0;
  std::deque<std::vector<std::byte>> unexpected;  // messages that arrived before a recv() (slow path)

  // Set at the first error completion: the queue pair is in the error state
  // and is never used again; posts return peer_unreachable.
  bool failed = false;
  int failure_code = 0;  // ibv_wc_status
  std::string failure_text;

  // Remote regions whose seal has been checked, and their rkeys (bounded).
  fabrix::detail::remote_key_cache<std::uint32_t> rkeys;
  // Imported keys (queue_pair::import): the region's address and rkey.
  struct imported_region {
    std::uint64_t base = 0;
    std::uint32_t rkey = 0;
  };
  fabrix::detail::import_table<imported_region> imports;

  explicit peer_state(std::uint32_t sq_depth) : ring(sq_depth) {}
};

// An rdma_cm connect request not yet claimed by a connect() (cm.hpp).
struct cm_waiting {
  rdma_cm_id* id = nullptr;
  cm_request req{};
  std::uint8_t initiator_depth = 0;
  std::uint8_t responder_resources = 0;
};

struct domain_state {
  options opts;
  device_choice dev;
  ibv_device_attr attr{};
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_qp* ud_qp = nullptr;
  std::uint32_t max_sge = 1;     // per work request, reads and writes
  std::uint32_t max_inline = 0;  // what the device granted on a test QP
  bool wr_api = false;           // RC queue pairs post through ibv_wr_* (options::wr_api, and the device has it)
  std::uint32_t max_rd_atomic = 1;
  std::uint32_t max_dest_rd_atomic = 1;
  unsigned unacked_events = 0;

  raw_buffer bounce;  // srq_depth receive buffers of msg_size
  ibv_mr* bounce_mr = nullptr;
  raw_buffer ud_buf;  // ud_slots receive + ud_slots send slots
  ibv_mr* ud_mr = nullptr;
  std::uint32_t ud_send_free = 0;  // bitmask of free send slots
  raw_buffer words;                // [0]: flush word peers read; [8]: where our flush reads land
  ibv_mr* flush_mr = nullptr;
  ibv_mr* scratch_mr = nullptr;

  std::uint64_t nonce = 0;
  fabrix::detail::seal_key secret{};
  std::uint64_t next_epoch = 1;
  fabrix::detail::completion_ring ring;
  cq_credits credits;
  // User recv()s waiting on any queue pair, and their bound
  // (domain_options::max_posted_recvs). They wait in software, not on the
  // CQ, so they take no CQ credits.
  std::size_t posted_recvs = 0;
  std::size_t max_posted_recvs = 0;
  // Liveness probes (post.hpp): in flight (their CQ entries are reserved
  // apart from the credits, at most max_probes), when the next round is due,
  // and poll() calls since probes were last considered.
  std::uint32_t probes_in_flight = 0;
  fabrix::detail::poll_clock poll_clock;  // probe_idle_peers (post.hpp); periodic.hpp
  fabrix::detail::schedule probe;
  std::uint32_t probe_tick = 0;

  std::unordered_map<std::uint32_t, peer_state*> by_qpn;  // SRQ completions name only the queue pair
  std::vector<peer_state*> slots;                         // peer_state::slot -> it; null when free
  std::vector<peer_state*> peers;
  std::unordered_map<std::uint64_t, std::uint32_t> connects_to;  // peer nonce -> connect() calls so far
  std::deque<hello> pending;                                     // hellos not yet claimed by a connect()
  std::uint64_t dropped_datagrams = 0;

  // rdma_cm (options::connect == rdma_cm; cm.hpp). ctx then belongs to
  // librdmacm (one of rdma_get_devices(), held until rdma_free_devices).
  ibv_context** cm_devices = nullptr;
  rdma_event_channel* cm_channel = nullptr;  // non-blocking; driven by poll()/wait()/connect()
  rdma_cm_id* cm_listener = nullptr;
  sockaddr_storage cm_addr{};  // where the listener is bound (port filled in)
  std::deque<cm_waiting> cm_requests;
  std::uint32_t cm_tick = 0;  // poll() calls since the event channel was last read
  std::uint64_t cm_rejected = 0;

  gpu_registration gpu = gpu_registration::none;  // probed at creation (device_memory.hpp)
  std::string gpu_why;                            // why none

  domain_state(const options& o, std::size_t max_outstanding, std::size_t max_recvs)
      : opts(o), ring(max_outstanding + max_recvs), credits(max_outstanding), max_posted_recvs(max_recvs) {}
  domain_state(const domain_state&) = delete;
  domain_state& operator=(const domain_state&) = delete;
  ~domain_state() {
    if (ud_qp) ibv_destroy_qp(ud_qp);
    if (srq) ibv_destroy_srq(srq);
    for (ibv_mr* m : {bounce_mr, ud_mr, flush_mr, scratch_mr})
      if (m) ibv_dereg_mr(m);
    if (cq) {
      if (unacked_events) ibv_ack_cq_events(cq, unacked_events);
      ibv_destroy_cq(cq);
    }
    if (channel) ibv_destroy_comp_channel(channel);
    if (pd) ibv_dealloc_pd(pd);
    for (const cm_waiting& w : cm_requests) {
      (void)rdma_reject(w.id, nullptr, 0);
      rdma_destroy_id(w.id);
    }
    if (cm_listener) rdma_destroy_id(cm_listener);
    if (cm_channel) rdma_destroy_event_channel(cm_channel);
    if (cm_devices)
      rdma_free_devices(cm_devices);  // ctx is one of them: not ours to close
    else if (ctx)
      ibv_close_device(ctx);
  }

  std::byte* bounce_slot(std::uint64_t i) const noexcept { return bounce.get() + i * opts.msg_size; }
  std::byte* ud_recv_slot(std::uint64_t i) const noexcept { return ud_buf.get() + i * ud_slot_size; }
  std::byte* ud_send_slot(std::uint64_t i) const noexcept { return ud_buf.get() + (ud_slots + i) * ud_slot_size; }
  std::uint64_t* flush_word() const noexcept { return reinterpret_cast<std::uint64_t*>(words.get()); }
  std::uint64_t* scratch_word() const noexcept { return reinterpret_cast<std::uint64_t*>(words.get() + 64); }
};

}  // namespace fabrix::verbs::detail
