// The cuda_ipc provider's state. domain_state and peer_state live on the
// heap so that pointers to them (op slots, links, the opener's context)
// survive moves of domain_impl / endpoint_impl.
#pragma once

#include <fabrix/completion.hpp>
#include <fabrix/cuda/ipc/detail/doorbell.hpp>
#include <fabrix/cuda/ipc/detail/mapping_cache.hpp>
#include <fabrix/cuda/ipc/detail/opener.hpp>
#include <fabrix/cuda/ipc/detail/socket.hpp>
#include <fabrix/cuda/ipc/detail/wire.hpp>
#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/import_table.hpp>
#include <fabrix/detail/intrusive_fifo.hpp>
#include <fabrix/detail/remote_key_cache.hpp>
#include <fabrix/detail/siphash.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/operation.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <poll.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace fabrix::cuda::ipc::detail {

struct peer_state;
struct domain_state;

// copying: the op's copies / kernel are on the peer's stream.
// notifying: a write_with_imm whose data is in place; its notification
// packet waits for room in the socket.
enum class stage : std::uint8_t { copying, notifying };

// op_slot::event before an event covers the op (see record_events).
inline constexpr std::int32_t no_event = -1;

struct op_slot {
  completion c{};
  peer_state* peer = nullptr;
  stage st = stage::copying;
  bool in_use = false;
  bool unsignaled = false;       // op_options::unsignaled: a completion only if it fails
  local_slice recv_dst{};        // recv: where the message goes
  op_slot* next = nullptr;       // in-flight / recv list link
  op_slot* next_free = nullptr;  // slot_pool link
  // The slot whose CUDA event, recorded on the peer's stream after this op's
  // work, tells when it is done: one event covers every op posted since the
  // previous one (the last of them owns it), so posts cost no event record.
  std::int32_t event = no_event;
};

// Intrusive FIFO of slots (no allocation).
using op_list = fabrix::detail::intrusive_fifo<op_slot>;

// One Unix socket connection. Outgoing links are made by our connect() and
// carry our notifications, messages and fd requests; inbound links are
// accepted from peers and carry theirs. Either end may send `release`.
struct link {
  unique_fd fd;
  std::uint64_t nonce = 0;  // the peer domain (inbound: from its hello)
  bool outgoing = false;
  bool closed = false;
  // Outgoing: the peer domain's doorbell once it has sent it; send_on rings
  // it after every packet. Inbound: `rings` says the peer does that with ours.
  doorbell peer_bell;
  bool rings = false;
  // Inbound: which of that domain's connect()s to us this is (0, 1, ...,
  // from the order of their hellos). Its notifications name our queue pair
  // with the same number among ours to that domain (the k-th connect() pairs
  // with the k-th, as connect_all makes them); `peer` caches it.
  std::uint32_t seq = 0;
  peer_state* peer = nullptr;
};

// A received fd_reply, until the fetch that asked for it takes it.
struct fd_reply {
  std::uint64_t nonce = 0;
  std::uint64_t export_id = 0;
  std::uint64_t err = 0;
  unique_fd fd;
};

// A message that arrived before a matching recv was posted.
struct unexpected_message {
  std::uint64_t nonce = 0;
  std::vector<std::byte> bytes;
};

// A VMM allocation exported by one of our regions.
struct vmm_export {
  std::uint64_t id = 0;    // the region's epoch
  std::uint64_t seal = 0;  // the region's remote_buffer seal: an fd_request must quote it
  unique_fd fd;
};

inline result<unique_fd> fetch_fd(void* domain, std::uint64_t owner, std::uint64_t export_id);

struct domain_state {
  int device = 0;
  std::uint64_t nonce = 0;            // random: names this domain in remote_buffers
  fabrix::detail::seal_key secret{};  // random: seals our remote_buffers; given to connected peers
  std::uint64_t next_epoch = 1;
  std::uint64_t node = 0;
  std::string socket_name;
  std::string host;
  unique_fd listener;
  fabrix::detail::completion_ring ring;
  decltype(&::cuMemcpyAsync) memcpy_async = nullptr;  // the driver's (copy_async); nullptr: the runtime's
  fabrix::detail::slot_pool<op_slot> ops;             // every operation but recv (max_outstanding)
  fabrix::detail::slot_pool<op_slot> recv_ops;        // posted recv()s (domain_options::max_posted_recvs)
  std::vector<cudaEvent_t> events;                    // per op slot, created on the slot's first use
  unsigned long long* atomic_scratch = nullptr;       // device: one old value per op slot
  std::vector<std::unique_ptr<link>> links;
  std::vector<peer_state*> peers;
  std::vector<unexpected_message> unexpected;  // bounded by max_unexpected
  std::vector<fd_reply> fd_replies;
  std::vector<vmm_export> exports;
  mapping_cache<cuda_opener> cache;
  std::vector<std::byte> rx = std::vector<std::byte>(max_packet);   // one received packet
  std::vector<std::byte> tx = std::vector<std::byte>(max_message);  // device -> host bounce for send
  std::vector<pollfd> pfds;                                         // reused by poll() / wait()
  std::uint64_t dropped_packets = 0;                                // malformed or unexpected peer packets
  // When poll() reads the sockets (links_due): when our doorbell moved since
  // the last read; on every call (every 16th while copies run) while a link
  // does not ring it or a read stopped at its budget; and at least every
  // sweep_every, for accepts, closed connections and the packets peers send
  // back on our own connections, none of which ring.
  doorbell bell;
  std::uint64_t bell_seen = 0;
  bool serve_every_poll = true;
  std::chrono::steady_clock::time_point next_sweep{};
  std::uint32_t polls_since_links = 0;
  std::uint64_t socket_reads = 0;  // serve_links calls (each one poll(2)), for tests and counters
  std::uint64_t fetch_proof = 0;   // the seal of the region whose VMM fd fetch_fd asks for
  std::unordered_map<std::uint64_t, std::uint32_t> connects_to;  // peer nonce -> our connect()s to it so far
  std::unordered_map<std::uint64_t, std::uint32_t> hellos_from;  // peer nonce -> its connect()s to us so far

  static constexpr std::size_t max_unexpected = 1024;

  domain_state(int dev, std::size_t max_outstanding, std::size_t max_recvs)
      : device(dev),
        ring(max_outstanding + max_recvs),
        ops(max_outstanding),
        recv_ops(max_recvs),
        events(max_outstanding, nullptr),
        cache(cuda_opener(dev, &fetch_fd, this)) {}
  domain_state(const domain_state&) = delete;
  domain_state& operator=(const domain_state&) = delete;
  ~domain_state() {
    device_guard on(device);
    cache.clear();
    for (auto ev : events)
      if (ev) cudaEventDestroy(ev);
    if (atomic_scratch) cudaFree(atomic_scratch);
  }

  std::size_t slot_index(const op_slot* op) const noexcept { return static_cast<std::size_t>(op - ops_begin()); }
  const op_slot* ops_begin() const noexcept { return const_cast<domain_state*>(this)->ops.begin(); }
};

// Sends one packet on `l` and, when we hold that domain's doorbell, rings it.
inline status send_on(link& l, packet_type t, std::uint64_t a, std::uint64_t b, std::span<const std::byte> payload = {},
                      int pass_fd = -1) noexcept {
  const status s = send_packet(l.fd.get(), t, a, b, payload, pass_fd);
  if (s == status::ok) l.peer_bell.ring();
  return s;
}

struct peer_state {
  domain_state* dom = nullptr;
  op_options defaults = op_options::none;  // the queue pair's (detail::options_of)
  std::uint64_t finished = 0;              // unsignaled operations finished (endpoint_impl::finished)
  std::uint32_t peer_id = 0;               // completion::peer of what arrives on this queue pair
  link* out = nullptr;                     // owned by dom->links
  std::uint64_t nonce = 0;
  std::uint32_t seq = 0;  // which of our connect()s to that domain (link::seq pairs with it)
  fabrix::detail::seal_key secret{};
  bool same_process = false;  // another domain of this process: addresses are usable as they are
  cudaStream_t stream = nullptr;
  op_list inflight;  // in stream order
  op_list recvs;     // posted receives, oldest first
  // The first op of `inflight` that no event covers yet (they are its tail),
  // and how many there are.
  op_slot* unrecorded = nullptr;
  std::uint32_t unrecorded_count = 0;
  bool failed = false;
  std::string failure;
  // Peer regions this endpoint has verified and mapped: byte 0 of each in
  // this process (the kit's bounded cache; an evicted region is verified and
  // looked up in the domain's mapping cache again on its next use).
  fabrix::detail::remote_key_cache<std::byte*> regions;
  fabrix::detail::import_table<std::byte*> imports;  // imported keys: the regions' mapped bytes
};

}  // namespace fabrix::cuda::ipc::detail
