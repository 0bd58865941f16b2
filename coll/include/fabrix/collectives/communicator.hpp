// fabrix::coll::communicator<P> — a job's ranks wired for collectives (the
// mesh: a queue pair per rank and one registered scratch region cut into
// per-peer send and receive slots, mesh.hpp / scratch.hpp), a channel per
// peer (channel.hpp: slots, credits), and the notification-driven engine
// the algorithms (ring.hpp, alltoall.hpp, barrier()) run on. Its handling
// of completions and notifications is in protocol.hpp, barrier() in
// barrier.hpp.
//
// Data path: every chunk is one write_with_imm from a send slot here into
// the matching receive slot at the peer; the receiver learns of it from the
// notification, never by polling memory. Nothing is registered or allocated
// per call: the scratch (options.hpp: scratch_bytes) is registered once. It
// is host memory (from the provider where it allocates, mesh.hpp), or
// device memory with options::device (device_kernels.hpp).
// Buffers the user registers (register_memory) or has it allocate
// (allocate_memory) let allreduce, allgather and alltoall(v) write chunks
// from and into them directly (zero_copy.hpp),
// skipping the local copies through the slots; the slots' credits still
// pace every chunk.
//
// Errors (liveness.hpp): a collective returns an error result instead of
// hanging: a dead peer (an operation to it fails, or a probe flush does
// while nothing moves) gives peer_unreachable, silence past options::timeout
// gives timed_out. The rank that sees the failure tells the others (an
// abort notification), so they return within a probe interval too. After
// any error the communicator is broken: every later call returns that error.
//
// Requirements: the domain outlives the communicator. Created on the domain
// itself, the communicator consumes every completion the domain returns, so
// nothing else may use the domain meanwhile. Created on a completion_router
// (<fabrix/completion_router.hpp>) over the domain, it takes a lane for its
// tag (options::tag) and polls only its own completions; the application
// and other communicators (other tags) use the same domain through the
// router's other lanes. Every rank calls the
// same collectives in the same order with matching sizes (a size mismatch
// that the receiver can see is reported as invalid_argument). One thread at
// a time, the thread that owns the domain. Progress happens only inside the
// communicator's calls.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/collectives/channel.hpp>
#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/collectives/liveness.hpp>
#include <fabrix/collectives/mesh.hpp>
#include <fabrix/collectives/notify.hpp>
#include <fabrix/collectives/options.hpp>
#include <fabrix/collectives/registered.hpp>
#include <fabrix/collectives/setup.hpp>
#include <fabrix/collectives/tokens.hpp>
#include <fabrix/completion_router.hpp>
#include <fabrix/domain.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace fabrix::coll {

template <provider P>
class communicator {
 public:
  using clock = std::chrono::steady_clock;

  // Collective over `boot`: checks that all ranks passed the same
  // chunk_bytes, slots, tag and kind of scratch memory, connects every rank,
  // registers and exchanges the scratch. The communicator owns every
  // completion `dom` returns while it lives.
  static result<communicator> create(domain<P>& dom, bootstrap& boot, const options& o = {}) {
    return create_on(dom, nullptr, boot, o);
  }
  // The same on a domain shared through `router` (which outlives the
  // communicator): takes the lane of options::tag (invalid_argument on
  // every rank when any rank's router has that tag claimed already).
  static result<communicator> create(completion_router<P>& router, bootstrap& boot, const options& o = {}) {
    return create_on(router.dom(), &router, boot, o);
  }

  communicator(communicator&& o) noexcept
      : mesh_(std::move(o.mesh_)),
        opts_(o.opts_),
        channels_(std::move(o.channels_)),
        work_(std::move(o.work_)),
        peer_outputs_(std::move(o.peer_outputs_)),
        live_(std::move(o.live_)),
        registry_(std::move(o.registry_)),
        direct_chunks_(o.direct_chunks_),
        barrier_epoch_(o.barrier_epoch_),
        router_(o.router_),
        lane_(o.lane_) {
    o.mesh_.dom = nullptr;
    o.router_ = nullptr;
  }
  communicator& operator=(communicator&&) = delete;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  // Lets this rank's operations finish (bounded) so peers are not left
  // waiting for a notification still queued here.
  // After a failure, probes every peer first, so that the provider learns
  // which peers are dead (their endpoints then close at once, while a
  // graceful close to a dead peer would wait).
  // Then gives its router lane back.
  ~communicator() {
    settle();
    if (router_ != nullptr) router_->close(lane_);
  }

  int rank() const noexcept { return mesh_.rank; }
  int size() const noexcept { return mesh_.size; }
  const options& opts() const noexcept { return opts_; }
  domain<P>& dom() noexcept { return *mesh_.dom; }
  // Where the scratch is, and so where the collectives' buffers must be.
  memory_location memory() const noexcept {
    return opts_.device != nullptr ? opts_.device->location() : memory_location{};
  }
  // The kernels for that memory; null for host memory.
  device_kernels* device() const noexcept { return opts_.device; }

  // Ok, or the error that broke this communicator.
  result<void> health() const {
    if (live_.failure) return unexpected(*live_.failure);
    return {};
  }

  // Returns on every rank once all ranks have entered it (dissemination
  // barrier over notifications: ceil(log2 n) rounds).
  result<void> barrier();

  // Registers [addr, addr + bytes) of memory() with the domain so that
  // allreduce and alltoall(v) (input, output) and allgather (output) calls
  // on buffers inside it write chunks straight from and into it
  // (zero_copy.hpp) instead of copying them through the scratch. Not
  // collective: each rank registers its own buffers, and each call tells
  // the ranks that write into its output where it is. Registration costs
  // what the provider's does: register a buffer once and reuse it, never per
  // call. The handle (registered.hpp) deregisters when destroyed (between
  // calls), or when the communicator is destroyed.
  result<registered_memory<P>> register_memory(void* addr, std::size_t bytes) {
    auto mr = dom().register_memory(addr, bytes, memory(), access::remote_write);
    if (!mr) return unexpected(std::move(mr).error());
    const std::uint64_t id = registry_->add(detail::owned_region<P>{{}, std::move(*mr), false});
    return registered_memory<P>(registry_, id);
  }
  template <class T>
  result<registered_memory<P>> register_memory(std::span<T> buf) {
    return register_memory(static_cast<void*>(buf.data()), buf.size_bytes());
  }
  // `bytes` of memory() allocated and registered for this communicator, as
  // register_memory registers (the handle's bytes()/as<T>() give it; freed
  // with the handle or the communicator). Host memory comes from the
  // provider where it can allocate (domain::allocate_memory): with UCX over
  // shared memory the peers map it, so chunks written into it are one copy,
  // as MPI_Alloc_mem's memory is for MPI. Allocate buffers that are reused,
  // never per call.
  result<registered_memory<P>> allocate_memory(std::size_t bytes) {
    if (bytes == 0) return unexpected(status::invalid_argument, "allocate_memory: empty length", "collectives");
    auto m = detail::allocate_registered(dom(), bytes, device());
    if (!m) return unexpected(std::move(m).error());
    return registered_memory<P>(registry_, registry_->add(std::move(*m)));
  }
  // Whether peers should write chunks straight into registration `r` (one
  // this communicator holds) rather than into this rank's slots: unless
  // the slots came from the provider and `r` did not. (UCX over shared
  // memory writes into its own allocations with one copy, but emulates a
  // write into other memory with active messages: two copies, 8 KiB at a
  // time, slower than the slots and a local copy.)
  bool takes_direct_writes(const memory_region<P>* r) const noexcept {
    return !slots_from_provider() || registry_->from_provider(r);
  }
  // Whether the scratch came from the provider (domain::allocate_memory).
  bool slots_from_provider() const noexcept { return mesh_.scratch && mesh_.scratch->from_provider; }
  // The registration holding [p, p + bytes), or nullptr.
  const memory_region<P>* registered(const void* p, std::size_t bytes) const noexcept {
    return registry_->find(p, bytes);
  }
  // Chunks this communicator has written from or into registered buffers
  // instead of its slots, since it was created (a diagnostic: shows whether
  // calls took the zero-copy path).
  std::uint64_t direct_chunks() const noexcept { return direct_chunks_; }

  // --- the engine, for the algorithm headers ---------------------------------
  // Per-call bookkeeping of 6 * size() counters, allocated once (no
  // allocation per call); contents are the caller's.
  std::span<std::uint64_t> work() noexcept { return work_; }
  // Per-call room for what each peer said of its output (zero_copy.hpp),
  // size() entries, allocated once; contents are the caller's. Chunk routes
  // point into it, so it stays put while the communicator lives.
  std::span<detail::peer_output> peer_outputs() noexcept { return peer_outputs_; }

  clock::time_point deadline() const { return clock::now() + opts_.timeout; }

  // The next chunk to `peer` may be posted now (credit and send slot free).
  bool can_send(int peer) const noexcept { return !live_.failure && channels_[peer].can_send(); }
  // Where to put the next chunk to `peer` (chunk_bytes long). Only after can_send().
  std::byte* send_slot(int peer) noexcept { return mesh_.send_slot(peer, channels_[peer].sent); }
  // Posts the next chunk to `peer`: by default the first `bytes` of its send
  // slot into the peer's receive slot; `route` may name a registered range
  // to write from (the send slot stays free) and one at the peer to write
  // into (the peer's receive slot is left alone, though the chunk still
  // takes one of its credits). Only after can_send(). An error also breaks
  // the communicator.
  result<void> post(int peer, std::size_t bytes, const detail::chunk_route& route = {}) {
    detail::channel& ch = channels_[peer];
    const std::uint64_t k = ch.sent;
    const auto slot = static_cast<std::uint32_t>(k % opts_.slots);
    const bool from_slot = !route.from;
    const std::uint64_t token = from_slot ? detail::make_token(opts_.tag, detail::token_kind::data, peer, slot)
                                          : detail::make_token(opts_.tag, detail::token_kind::direct, peer, 0);
    const status s = mesh_.write_chunk(peer, k, bytes, detail::encode(opts_.tag, detail::notify_kind::data, rank(), k),
                                       token, route);
    if (s != status::ok) return fail(s, "posting a chunk to rank " + std::to_string(peer));
    (void)ch.posted(from_slot);
    if (route.from || route.to) ++direct_chunks_;
    ++live_.outstanding;
    ++live_.awaited;
    return {};
  }
  // The next chunk from `peer` if it has landed (its size in `bytes`), else nullptr.
  const std::byte* landed(int peer, std::size_t& bytes) const noexcept {
    const detail::channel& ch = channels_[peer];
    if (live_.failure || !ch.next_landed(bytes)) return nullptr;
    return mesh_.recv_slot(peer, ch.consumed);
  }
  // Done with the chunk landed() returned; its slot goes back to the peer
  // with the next credit.
  void consume(int peer) noexcept { channels_[peer].consume(); }
  // Consumes the chunk landed() returned from `from` by sending it on, as
  // it is, as the next chunk to `to` (no copy: written from the receive
  // slot, which goes back to `from` once that write has completed here).
  // Only after can_send(to). An error also breaks the communicator.
  result<void> forward(int from, int to, std::size_t bytes) {
    detail::channel& in = channels_[from];
    detail::channel& out = channels_[to];
    const std::uint64_t k = out.sent;
    const auto slot = static_cast<std::uint32_t>(in.consumed % opts_.slots);
    const status s = mesh_.forward_chunk(from, in.consumed, to, k, bytes,
                                         detail::encode(opts_.tag, detail::notify_kind::data, rank(), k),
                                         detail::make_token(opts_.tag, detail::token_kind::forward, from, slot));
    if (s != status::ok) return fail(s, "forwarding a chunk to rank " + std::to_string(to));
    (void)out.posted(false);
    in.consume(true);
    ++live_.outstanding;
    ++live_.awaited;
    return {};
  }
  // A landed chunk whose size is not what this rank expects: the ranks
  // disagree about the call.
  result<void> size_mismatch(int peer, std::size_t got, std::size_t want) {
    return fail(status::invalid_argument, "rank " + std::to_string(peer) + " sent a chunk of " + std::to_string(got) +
                                              " bytes where " + std::to_string(want) +
                                              " were expected (mismatched collective calls)");
  }

  // Polls the domain, handles what it returned and returns the credits
  // owed (`which`: all, or only half-slot batches: channel.hpp). True when
  // anything happened.
  bool progress(detail::credits which = detail::credits::all) {
    std::array<completion, 64> buf;
    const std::size_t n = router_ != nullptr ? router_->poll(lane_, buf) : dom().poll(buf);
    for (std::size_t i = 0; i < n; ++i) {
      if (buf[i].op == opcode::remote_write_imm)
        on_notification(buf[i]);
      else
        on_local(buf[i]);
    }
    const bool credited = send_credits(which);
    if (n > 0 || credited) {
      live_.moved(clock::now());
      return true;
    }
    return false;
  }

  // For an algorithm that cannot move now: progresses, and when nothing
  // happens for a while, probes peers and sleeps on the domain. Returns an
  // error when the communicator failed or `until` passed.
  result<void> idle(clock::time_point until) {
    if (auto h = health(); !h) return h;
    if (progress()) return {};
    if (++live_.idle_polls < detail::liveness::spin_polls) return {};
    const auto now = clock::now();
    if (now >= until)
      return fail(status::timed_out, "collective did not finish within " + std::to_string(opts_.timeout.count()) +
                                         " ms (a peer stopped answering); " + describe_channels());
    if (live_.probe_due(now, opts_.probe_interval)) probe();
    if (live_.awaited > 0 || now - live_.last_motion < opts_.spin) {
      // Poll, letting other processes on this core run. Own writes in
      // flight may need only local progress, which wakes no event fd (UCX's
      // cma copies large puts inside worker progress): never sleep on them.
      std::this_thread::yield();
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
      (void)wait(std::clamp(left, std::chrono::milliseconds(1), detail::liveness::wait_slice));
    }
    progress();
    return health();
  }

  // The tail of every algorithm's loop: after a pass that `moved` something,
  // polls once (credits in batches); after one that did not, idles (which
  // fails at `until`, and returns every credit owed).
  result<void> advance(bool moved, clock::time_point until) {
    if (!moved) return idle(until);
    progress(detail::credits::in_batches);
    return {};
  }

  // Ends a call: returns pending credits and waits until this rank's data
  // writes and barrier notifications have completed here (a
  // write_with_imm's notification leaves only while this rank polls; the
  // peers that wait for them are polling). Credits, probes and aborts may
  // stay in flight: they can need the progress of a peer that has finished
  // the call already, and no peer needs them before its next call, when
  // both sides poll again.
  result<void> finish(clock::time_point until) {
    progress();
    while (live_.awaited > 0) {
      if (auto r = idle(until); !r) return r;
    }
    return health();
  }

  // Breaks the communicator with this error and tells the other ranks.
  result<void> fail(status s, std::string what) {
    if (live_.failure) return unexpected(*live_.failure);
    live_.failure = make_error(s, "rank " + std::to_string(rank()) + ": " + std::move(what), "collectives");
    for (int p = 0; p < size(); ++p) {
      if (p != rank() && notify(p, detail::notify_kind::abort, 0) == status::ok) ++live_.aborts_in_flight;
    }
    // Send the aborts out (they need this rank's progress), bounded.
    const auto until = clock::now() + std::chrono::milliseconds(500);
    while (live_.aborts_in_flight > 0 && clock::now() < until) {
      if (!progress()) (void)wait(std::chrono::milliseconds(5));
    }
    return unexpected(*live_.failure);
  }
  // The same for an error of the local kernels (device_kernels::ready()).
  result<void> fail(const error& e) { return fail(e.code, "local kernels: " + e.describe()); }

 private:
  static constexpr std::uint64_t greet_round = 31;  // dissemination rounds use 0..10

  static result<communicator> create_on(domain<P>& dom, completion_router<P>* router, bootstrap& boot,
                                        const options& o) {
    static_assert(P::caps.write_with_imm, "fabrix::coll needs write_with_imm (P::caps.write_with_imm)");
    if (auto r = detail::check_options(o, boot.size()); !r) return unexpected(r.error());
    if (auto r = detail::check_memory(o, dom.caps(), P::name); !r) return unexpected(r.error());
    // The router's lane for this tag (none to take without a router).
    using lane_t = typename completion_router<P>::lane;
    result<lane_t> lane = router != nullptr ? router->open(detail::filter_of(o.tag)) : result<lane_t>(lane_t{});
    // Gives the lane back unless the communicator took it.
    auto give_back = [&] {
      if (router != nullptr && lane) router->close(*lane);
    };
    if (auto r = detail::agree(boot, o, lane.has_value()); !r) {
      give_back();
      if (!lane) return unexpected(std::move(lane).error());
      return unexpected(r.error());
    }
    auto m = detail::mesh<P>::create(dom, boot, o);
    if (!m) {
      give_back();
      return unexpected(std::move(m).error());
    }
    communicator c(std::move(*m), o);
    c.router_ = router;
    c.lane_ = *lane;
    // Wire every endpoint in both directions now (transports such as UCX
    // connect lazily, and finishing a connection needs the peer's progress),
    // so that probes and teardown never wait for that later.
    if (c.size() > 1)
      if (auto r = c.greet_all(); !r) return unexpected(r.error());  // c's destructor gives the lane back
    return c;
  }

  // Lets this rank's operations finish, bounded (see the destructor).
  void settle() {
    if (mesh_.dom == nullptr || !mesh_.scratch) return;
    live_.closing = true;
    if (live_.failure) {
      for (int p = 0; p < size(); ++p)
        if (p != rank() && !channels_[p].probing) (void)start_probe(p);
      const auto probed = clock::now() + std::chrono::milliseconds(500);
      while (live_.probes_in_flight > 0 && clock::now() < probed) {
        if (!progress()) std::this_thread::yield();
      }
    }
    const auto until = clock::now() + std::min(opts_.timeout, std::chrono::milliseconds(2000));
    while (live_.outstanding > 0 && clock::now() < until) {
      if (!progress()) (void)wait(std::chrono::milliseconds(10));
    }
  }

  communicator(detail::mesh<P> m, const options& o)
      : mesh_(std::move(m)), opts_(o), registry_(std::make_shared<detail::registry<P>>()) {
    channels_.reserve(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) channels_.emplace_back(o.slots);
    work_.resize(6 * static_cast<std::size_t>(size()));
    peer_outputs_.resize(static_cast<std::size_t>(size()));
  }

  // Sleeps on the domain (through the router's lane when shared).
  status wait(std::chrono::milliseconds timeout) {
    return router_ != nullptr ? router_->wait(lane_, timeout) : dom().wait(timeout);
  }

  // protocol.hpp: notifications, credits, probes, completions.
  std::string describe_channels() const;
  // A notification, retried while the provider pushes back.
  result<void> notify_until(int peer, detail::notify_kind kind, std::uint64_t counter, clock::time_point until);
  status notify(int peer, detail::notify_kind kind, std::uint64_t counter);
  bool send_credits(detail::credits which);
  status start_probe(int p);
  // Flushes every peer not already probed: a dead peer fails the flush.
  void probe();
  void on_local(const completion& c);
  void on_notification(const completion& c);
  // barrier.hpp: one barrier notification (round greet_round) to every
  // peer and one from every peer.
  result<void> greet_all();

  detail::mesh<P> mesh_;
  options opts_;
  std::vector<detail::channel> channels_;
  std::vector<std::uint64_t> work_;
  std::vector<detail::peer_output> peer_outputs_;
  detail::liveness live_;
  // Shared with the handles (weakly), so that they keep finding it when the
  // communicator moves and find nothing once it is gone. Declared after
  // mesh_: the registrations are released before the mesh's.
  std::shared_ptr<detail::registry<P>> registry_;
  std::uint64_t direct_chunks_ = 0;
  std::uint64_t barrier_epoch_ = 0;
  // The lane this communicator polls, when created on a router; else null.
  completion_router<P>* router_ = nullptr;
  typename completion_router<P>::lane lane_{};
};

}  // namespace fabrix::coll

// The out-of-class members.
#include <fabrix/collectives/barrier.hpp>
#include <fabrix/collectives/protocol.hpp>
