// fabrix::coll::communicator<P> — a job's ranks wired for collectives: a
// queue pair per rank (bootstrap's connect_all), one registered scratch
// region cut into per-peer send and receive slots (see channel.hpp), the
// peers' remote_buffers, and the notification-driven engine the algorithms
// (ring.hpp, alltoall.hpp, barrier()) run on.
//
// Data path: every chunk is one write_with_imm from a send slot here into
// the matching receive slot at the peer; the receiver learns of it from the
// notification, never by polling memory. Nothing is registered or allocated
// per call: the scratch (options.hpp: scratch_bytes) is registered once.
//
// Errors: a collective returns an error result instead of hanging: a dead
// peer (an operation to it fails, or a probe flush does while nothing
// moves) gives peer_unreachable, silence past options::timeout gives
// timed_out. The rank that sees the failure tells the others (an abort
// notification), so they return within a probe interval too. After any
// error the communicator is broken: every later call returns that error.
//
// Requirements: the domain is used only by this communicator (it consumes
// every completion the domain returns) and outlives it. Every rank calls the
// same collectives in the same order with matching sizes (a size mismatch
// that the receiver can see is reported as invalid_argument). One thread at
// a time, the thread that owns the domain. Progress happens only inside the
// communicator's calls.
#pragma once

#include <fabrix/bootstrap.hpp>
#include <fabrix/collectives/channel.hpp>
#include <fabrix/collectives/notify.hpp>
#include <fabrix/collectives/options.hpp>
#include <fabrix/connect.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/domain.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
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

  // Collective over `boot`: connects every rank, registers and exchanges the
  // scratch, and checks that all ranks passed the same chunk_bytes and slots.
  static result<communicator> create(domain<P>& dom, bootstrap& boot, const options& o = {}) {
    static_assert(P::caps.write_with_imm, "fabrix::coll needs write_with_imm (P::caps.write_with_imm)");
    if (o.slots < 2 || o.slots % 2 != 0 || o.slots > (1u << 16))
      return unexpected(status::invalid_argument, "collectives: slots must be even, between 2 and 65536");
    if (o.chunk_bytes < 8 || o.chunk_bytes % 8 != 0 || o.chunk_bytes > (std::size_t{1} << 30))
      return unexpected(status::invalid_argument, "collectives: chunk_bytes must be a multiple of 8 up to 1 GiB");
    if (boot.size() > detail::max_ranks) return unexpected(status::invalid_argument, "collectives: at most 1024 ranks");

    std::array<std::byte, 12> mine{};
    fabrix::detail::le_writer w(mine.data());
    w.put<std::uint64_t>(o.chunk_bytes);
    w.put<std::uint32_t>(o.slots);
    auto all = boot.allgather(mine);
    if (!all) return unexpected(std::move(all).error());
    for (std::size_t r = 0; r < all->size(); ++r) {
      if ((*all)[r].size() != mine.size() || !std::equal(mine.begin(), mine.end(), (*all)[r].begin()))
        return unexpected(status::invalid_argument,
                          "collectives: rank " + std::to_string(r) + " uses other chunk_bytes/slots than this rank");
    }

    auto qps = connect_all(dom, boot);
    if (!qps) return unexpected(std::move(qps).error());
    communicator c(dom, boot.rank(), boot.size(), o, std::move(*qps));
    if (c.size_ > 1) {
      const std::size_t bytes = scratch_bytes(o, c.size_);
      const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
      c.scratch_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
      if (!c.scratch_) return unexpected(status::no_memory, "collectives: cannot allocate scratch");
      auto mr = dom.register_memory(c.scratch_.get(), bytes, memory_location{}, access::remote_write);
      if (!mr) return unexpected(std::move(mr).error());
      c.region_.emplace(std::move(*mr));
      auto peers = exchange(boot, c.region_->remote());
      if (!peers) return unexpected(std::move(peers).error());
      c.peers_ = std::move(*peers);
      // Wire every endpoint in both directions now (transports such as UCX
      // connect lazily, and finishing a connection needs the peer's
      // progress), so that probes and teardown never wait for that later.
      if (auto r = c.greet_all(); !r) return unexpected(r.error());
    }
    return c;
  }

  communicator(communicator&& o) noexcept
      : dom_(std::exchange(o.dom_, nullptr)),
        rank_(o.rank_),
        size_(o.size_),
        opts_(o.opts_),
        qps_(std::move(o.qps_)),
        scratch_(std::move(o.scratch_)),
        region_(std::move(o.region_)),
        peers_(std::move(o.peers_)),
        channels_(std::move(o.channels_)),
        work_(std::move(o.work_)),
        failure_(std::move(o.failure_)),
        outstanding_(o.outstanding_),
        aborts_in_flight_(o.aborts_in_flight_),
        probes_in_flight_(o.probes_in_flight_),
        awaited_(o.awaited_),
        barrier_epoch_(o.barrier_epoch_),
        idle_polls_(o.idle_polls_),
        last_motion_(o.last_motion_),
        last_probe_(o.last_probe_) {}
  communicator& operator=(communicator&&) = delete;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  // Lets this rank's operations finish (bounded) so peers are not left
  // waiting for a notification still queued here.
  // After a failure, probes every peer first, so that the provider learns
  // which peers are dead (their endpoints then close at once, while a
  // graceful close to a dead peer would wait).
  ~communicator() {
    if (dom_ == nullptr || !region_) return;
    closing_ = true;
    if (failure_) {
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || channels_[p].probing) continue;
        if (qps_[p].flush(token(token_kind::probe, p, 0)) == status::ok) {
          channels_[p].probing = true;
          ++outstanding_;
          ++probes_in_flight_;
        }
      }
      const auto settle = clock::now() + std::chrono::milliseconds(500);
      while (probes_in_flight_ > 0 && clock::now() < settle) {
        if (!progress()) std::this_thread::yield();
      }
    }
    const auto until = clock::now() + std::min(opts_.timeout, std::chrono::milliseconds(2000));
    while (outstanding_ > 0 && clock::now() < until) {
      if (!progress()) (void)dom_->wait(std::chrono::milliseconds(10));
    }
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  const options& opts() const noexcept { return opts_; }
  domain<P>& dom() noexcept { return *dom_; }

  // Ok, or the error that broke this communicator.
  result<void> health() const {
    if (failure_) return unexpected(*failure_);
    return {};
  }

  // Returns on every rank once all ranks have entered it (dissemination
  // barrier over notifications: ceil(log2 n) rounds).
  result<void> barrier() {
    if (auto h = health(); !h) return h;
    const auto until = deadline();
    ++barrier_epoch_;
    int round = 0;
    for (int dist = 1; dist < size_; dist *= 2, ++round) {
      const int to = (rank_ + dist) % size_;
      const int from = (rank_ - dist + size_) % size_;
      for (;;) {
        const status s = notify(to, detail::notify_kind::barrier, static_cast<std::uint64_t>(round));
        if (s == status::ok) break;
        if (s != status::again) return fail(s, "barrier notification to rank " + std::to_string(to));
        if (auto r = idle(until); !r) return r;
      }
      while (channels_[from].barrier_seen[round] < barrier_epoch_) {
        if (auto r = idle(until); !r) return r;
      }
    }
    return finish(until);
  }

  // --- the engine, for the algorithm headers ---------------------------------
  // Per-call bookkeeping of 4 * size() counters, allocated once (no
  // allocation per call); contents are the caller's.
  std::span<std::uint64_t> work() noexcept { return work_; }

  clock::time_point deadline() const { return clock::now() + opts_.timeout; }

  // The next chunk to `peer` may be posted now (credit and send slot free).
  bool can_send(int peer) const noexcept {
    const detail::channel& ch = channels_[peer];
    return !failure_ && ch.sending[ch.sent % opts_.slots] == 0 && ch.sent - ch.peer_consumed < opts_.slots;
  }
  // Where to put the next chunk to `peer` (chunk_bytes long). Only after can_send().
  std::byte* send_slot(int peer) noexcept { return scratch_.get() + send_offset(peer, channels_[peer].sent); }
  // Posts the next chunk to `peer`: the first `bytes` of its send slot. Only
  // after can_send(). An error also breaks the communicator.
  result<void> post(int peer, std::size_t bytes) {
    detail::channel& ch = channels_[peer];
    const std::uint64_t k = ch.sent;
    const std::uint32_t slot = static_cast<std::uint32_t>(k % opts_.slots);
    const std::size_t remote_off = recv_offset_at(peer, k);
    const status s = qps_[peer].write_with_imm(
        region_->slice(send_offset(peer, k), bytes), peers_[peer].slice(remote_off, bytes),
        detail::encode(detail::notify_kind::data, rank_, k), token(token_kind::data, peer, slot));
    if (s != status::ok) return fail(s, "posting a chunk to rank " + std::to_string(peer));
    ch.sending[slot] = 1;
    ++ch.sent;
    ++outstanding_;
    ++awaited_;
    return {};
  }
  // The next chunk from `peer` if it has landed (its size in `bytes`), else nullptr.
  const std::byte* landed(int peer, std::size_t& bytes) const noexcept {
    const detail::channel& ch = channels_[peer];
    const std::uint32_t slot = static_cast<std::uint32_t>(ch.consumed % opts_.slots);
    if (failure_ || ch.landed[slot] != ch.consumed + 1) return nullptr;
    bytes = ch.landed_bytes[slot];
    return scratch_.get() + recv_offset(peer, ch.consumed);
  }
  // Done with the chunk landed() returned; its slot goes back to the peer
  // with the next credit.
  void consume(int peer) noexcept {
    detail::channel& ch = channels_[peer];
    ch.landed[ch.consumed % opts_.slots] = 0;
    ++ch.consumed;
  }
  // A landed chunk whose size is not what this rank expects: the ranks
  // disagree about the call.
  result<void> size_mismatch(int peer, std::size_t got, std::size_t want) {
    return fail(status::invalid_argument, "rank " + std::to_string(peer) + " sent a chunk of " + std::to_string(got) +
                                              " bytes where " + std::to_string(want) +
                                              " were expected (mismatched collective calls)");
  }

  // Polls the domain, handles what it returned and returns credits. True
  // when anything happened.
  bool progress() {
    std::array<completion, 64> buf;
    const std::size_t n = dom_->poll(buf);
    for (std::size_t i = 0; i < n; ++i) {
      if (buf[i].op == opcode::remote_write_imm)
        on_notification(buf[i]);
      else
        on_local(buf[i]);
    }
    const bool credited = send_credits();
    if (n > 0 || credited) {
      last_motion_ = clock::now();
      idle_polls_ = 0;
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
    if (++idle_polls_ < spin_polls) return {};
    const auto now = clock::now();
    if (now >= until)
      return fail(status::timed_out, "collective did not finish within " + std::to_string(opts_.timeout.count()) +
                                         " ms (a peer stopped answering); " + describe_channels());
    if (now - last_motion_ >= opts_.probe_interval && now - last_probe_ >= opts_.probe_interval) probe();
    if (awaited_ > 0 || now - last_motion_ < opts_.spin) {
      // Poll, letting other processes on this core run. Own writes in
      // flight may need only local progress, which wakes no event fd (UCX's
      // cma copies large puts inside worker progress): never sleep on them.
      std::this_thread::yield();
    } else {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
      (void)dom_->wait(std::clamp(left, std::chrono::milliseconds(1), wait_slice));
    }
    progress();
    return health();
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
    while (awaited_ > 0) {
      if (auto r = idle(until); !r) return r;
    }
    return health();
  }

  // Breaks the communicator with this error and tells the other ranks.
  result<void> fail(status s, std::string what) {
    if (failure_) return unexpected(*failure_);
    failure_ = make_error(s, "rank " + std::to_string(rank_) + ": " + std::move(what), "collectives");
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ && notify(p, detail::notify_kind::abort, 0) == status::ok) ++aborts_in_flight_;
    }
    // Send the aborts out (they need this rank's progress), bounded.
    const auto until = clock::now() + std::chrono::milliseconds(500);
    while (aborts_in_flight_ > 0 && clock::now() < until) {
      if (!progress()) (void)dom_->wait(std::chrono::milliseconds(5));
    }
    return unexpected(*failure_);
  }

 private:
  enum class token_kind : std::uint64_t { data = 1, credit, barrier, abort, probe };
  static constexpr int spin_polls = 64;
  static constexpr std::uint64_t greet_round = 31;           // dissemination rounds use 0..10
  static constexpr std::chrono::milliseconds wait_slice{5};  // a bound on any missed wake-up

  communicator(domain<P>& dom, int rank, int size, const options& o, std::vector<queue_pair<P>> qps)
      : dom_(&dom), rank_(rank), size_(size), opts_(o), qps_(std::move(qps)) {
    channels_.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) channels_.emplace_back(o.slots);
    work_.resize(4 * static_cast<std::size_t>(size));
  }

  static std::uint64_t token(token_kind k, int peer, std::uint32_t slot) noexcept {
    return (static_cast<std::uint64_t>(k) << 56) | (static_cast<std::uint64_t>(peer) << 32) | slot;
  }

  // Scratch layout: for each other rank q (in rank order, skipping self), a
  // receive area of `slots` chunks then a send area of `slots` chunks.
  std::size_t area(int owner, int other) const noexcept {
    const int index = other < owner ? other : other - 1;
    return static_cast<std::size_t>(index) * 2 * opts_.slots * opts_.chunk_bytes;
  }
  std::size_t slot_offset(std::uint64_t k) const noexcept { return (k % opts_.slots) * opts_.chunk_bytes; }
  std::size_t recv_offset(int peer, std::uint64_t k) const noexcept { return area(rank_, peer) + slot_offset(k); }
  std::size_t send_offset(int peer, std::uint64_t k) const noexcept {
    return area(rank_, peer) + opts_.slots * opts_.chunk_bytes + slot_offset(k);
  }
  // Where chunk k to `peer` lands in the peer's scratch.
  std::size_t recv_offset_at(int peer, std::uint64_t k) const noexcept { return area(peer, rank_) + slot_offset(k); }

  // Per peer: chunks sent/credited by it, consumed/credited back, in flight.
  std::string describe_channels() const {
    std::string out = "channels (sent/acked, consumed/credited, ops in flight " + std::to_string(outstanding_) + ", " +
                      std::to_string(probes_in_flight_) + " probes):";
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const detail::channel& ch = channels_[p];
      std::size_t busy = 0;
      for (auto b : ch.sending) busy += b;
      out += " rank " + std::to_string(p) + " " + std::to_string(ch.sent) + "/" + std::to_string(ch.peer_consumed) +
             ", " + std::to_string(ch.consumed) + "/" + std::to_string(ch.credited) + ", " + std::to_string(busy) +
             " writes;";
    }
    return out;
  }

  // One barrier notification (round greet_round) to every peer and one
  // from every peer.
  result<void> greet_all() {
    const auto until = deadline();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      for (;;) {
        const status s = notify(p, detail::notify_kind::barrier, greet_round);
        if (s == status::ok) break;
        if (s != status::again) return fail(s, "greeting rank " + std::to_string(p));
        if (auto r = idle(until); !r) return r;
      }
    }
    for (int p = 0; p < size_; ++p) {
      while (p != rank_ && channels_[p].barrier_seen[greet_round] == 0) {
        if (auto r = idle(until); !r) return r;
      }
    }
    return finish(until);
  }

  // A zero-byte write_with_imm carrying a notification.
  status notify(int peer, detail::notify_kind kind, std::uint64_t counter) {
    const token_kind tk = kind == detail::notify_kind::credit    ? token_kind::credit
                          : kind == detail::notify_kind::barrier ? token_kind::barrier
                                                                 : token_kind::abort;
    const status s = qps_[peer].write_with_imm(region_->slice(0, 0), peers_[peer].slice(0, 0),
                                               detail::encode(kind, rank_, counter), token(tk, peer, 0));
    if (s == status::ok) {
      ++outstanding_;
      if (tk == token_kind::barrier) ++awaited_;
    }
    return s;
  }

  bool send_credits() {
    bool any = false;
    for (int p = 0; p < size_ && !failure_; ++p) {
      detail::channel& ch = channels_[p];
      if (ch.consumed == ch.credited) continue;
      const status s = notify(p, detail::notify_kind::credit, ch.consumed);
      if (s == status::again) break;  // retried on the next progress()
      if (s != status::ok) {
        (void)fail(s, "returning credits to rank " + std::to_string(p));
        return true;
      }
      ch.credited = ch.consumed;
      any = true;
    }
    return any;
  }

  // Flushes every peer not already probed: a dead peer fails the flush.
  void probe() {
    last_probe_ = clock::now();
    for (int p = 0; p < size_ && !failure_; ++p) {
      detail::channel& ch = channels_[p];
      if (p == rank_ || ch.probing) continue;
      const status s = qps_[p].flush(token(token_kind::probe, p, 0));
      if (s == status::ok) {
        ch.probing = true;
        ++outstanding_;
        ++probes_in_flight_;
      } else if (s != status::again) {
        (void)fail(s, "rank " + std::to_string(p) + " is unreachable");
      }
    }
  }

  void on_local(const completion& c) {
    const auto kind = static_cast<token_kind>(c.token >> 56);
    const int peer = static_cast<int>((c.token >> 32) & 0xffffff);
    if (peer >= size_) return;  // not ours
    --outstanding_;
    switch (kind) {
      case token_kind::data:
        channels_[peer].sending[c.token & 0xffffffffu] = 0;
        --awaited_;
        break;
      case token_kind::probe:
        channels_[peer].probing = false;
        --probes_in_flight_;
        break;
      case token_kind::abort: --aborts_in_flight_; return;  // best effort
      case token_kind::barrier: --awaited_; break;
      case token_kind::credit: break;
    }
    if (c.status != status::ok && !closing_)
      (void)fail(c.status, std::string(kind == token_kind::probe ? "probe of" : "operation to") + " rank " +
                               std::to_string(peer) + " failed (" + std::string(to_string(c.status)) + ")");
  }

  void on_notification(const completion& c) {
    const detail::notification n = detail::decode(c.imm);
    if (n.source >= size_ || n.source == rank_) return;  // not from a rank of this job
    detail::channel& ch = channels_[n.source];
    switch (n.kind) {
      case detail::notify_kind::data: {
        const std::uint64_t k = detail::widen(ch.consumed, n.counter);
        if (k >= ch.consumed + opts_.slots || c.bytes > opts_.chunk_bytes) {
          (void)fail(status::provider_error, "rank " + std::to_string(n.source) + " broke the chunk protocol");
          return;
        }
        ch.landed[k % opts_.slots] = k + 1;
        ch.landed_bytes[k % opts_.slots] = static_cast<std::uint32_t>(c.bytes);
        break;
      }
      case detail::notify_kind::credit: {
        const std::uint64_t v = detail::widen(ch.peer_consumed, n.counter);
        if (v <= ch.sent) ch.peer_consumed = v;
        break;
      }
      case detail::notify_kind::barrier:
        if (n.counter < 32) ++ch.barrier_seen[n.counter];
        break;
      case detail::notify_kind::abort:
        if (!failure_)
          failure_ = make_error(status::peer_unreachable,
                                "rank " + std::to_string(rank_) + ": rank " + std::to_string(n.source) +
                                    " aborted the collective (it lost a peer or timed out)",
                                "collectives");
        break;
    }
  }

  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };

  domain<P>* dom_;
  int rank_;
  int size_;
  options opts_;
  std::vector<queue_pair<P>> qps_;
  std::unique_ptr<std::byte, free_deleter> scratch_;
  std::optional<memory_region<P>> region_;
  std::vector<remote_buffer> peers_;
  std::vector<detail::channel> channels_;
  std::vector<std::uint64_t> work_;
  std::optional<error> failure_;
  std::uint64_t outstanding_ = 0;  // operations posted here and not yet completed
  int aborts_in_flight_ = 0;
  std::uint64_t probes_in_flight_ = 0;
  bool closing_ = false;       // in the destructor: errors are expected, not reported
  std::uint64_t awaited_ = 0;  // data writes and barrier notifications in flight
  std::uint64_t barrier_epoch_ = 0;
  int idle_polls_ = 0;
  clock::time_point last_motion_ = clock::now();
  clock::time_point last_probe_ = clock::now();
};

}  // namespace fabrix::coll
