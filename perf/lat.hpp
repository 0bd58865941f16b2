// The latency loops, perftest's method:
//   write, write_imm, send — ping-pong. The client sends message i (its last
//     byte is marker(i)), the server waits for it and answers with the same
//     marker; the client's sample is the round trip, reported halved.
//     write waits by polling the last byte of the target buffer (driving
//     progress between looks); write_imm waits for the notification carrying
//     i; send waits for the receive. One operation in flight per side.
//   read, fetch_add, compare_swap — the client posts one operation and waits
//     for its completion; the sample is that whole time (not halved). The
//     server only drives progress (inside its control exchange).
// After the timed iterations the client sends one message with the stop
// marker (0xFF / imm 0xFFFFFFFF), so -D works without the server knowing
// the count. Samples are stored in a vector sized before the loop.
#pragma once

#include "bw.hpp"
#include "clock.hpp"
#include "control.hpp"
#include "heartbeat.hpp"
#include "pattern.hpp"
#include "session.hpp"

#include <atomic>
#include <chrono>
#include <vector>

namespace fabrix::perf {

template <provider P>
class lat_loop {
 public:
  lat_loop(session<P>& s, const step& st) : s_(s), st_(st) {
    src_ = s.local(s.lay.local, st.size);
    dst_ = s.remote(s.lay.target, st.size);
    rx_ = s.local(s.lay.rx, st.size);
    // Built once: per iteration only write_with_imm's value changes, so the
    // loop measures posting, not filling ~140-byte descriptors (as a user's
    // hot loop that reuses its operations would).
    message_op_ = st.test == test_kind::write       ? op::write(src_, dst_, 1)
                  : st.test == test_kind::write_imm ? op::write_with_imm(src_, dst_, 0, 1)
                                                    : op::send(src_, 1);
    message_name_ = to_string(st.test).data();
    recv_op_ = op::recv(rx_, recv_token);
    read_op_ = op::read(src_, dst_, 1);
    early_.reserve(1);
  }

  // Client: returns the samples in microseconds (round trip / 2 for ping-pong).
  std::vector<double> client(std::uint64_t warmup, std::uint64_t iters, double duration_s) {
    using clock = std::chrono::steady_clock;
    const tick_clock& tc = ticks();
    const std::uint64_t cap = iters ? iters : std::uint64_t{4} << 20;
    std::vector<double> samples;
    samples.reserve(cap);
    const bool pingpong = !is_atomic(st_.test) && st_.test != test_kind::read;
    const double scale = pingpong ? 0.5e6 : 1e6;
    clock::time_point deadline{};
    std::uint64_t before = tc.now();  // one reading per iteration, like perftest
    for (std::uint64_t i = 0;; ++i) {
      if (i == warmup && duration_s > 0)
        deadline =
            clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(duration_s));
      if (i >= warmup) {
        const std::uint64_t timed = i - warmup;
        if (iters ? timed >= iters : (timed >= cap || clock::now() >= deadline)) break;
      }
      one(i);
      const std::uint64_t after = tc.now();
      if (i >= warmup) samples.push_back(tc.seconds(after - before) * scale);
      if (!pingpong) beat_.tick(after);  // the server only waits; a ping-pong's answers it
      before = after;
      last_ = i;
    }
    if (pingpong) send_stop();
    wait_heartbeat();
    return samples;
  }

  // Server side of a ping-pong: answers until the stop marker. Returns the
  // number of messages answered.
  std::uint64_t echo() {
    if (st_.test == test_kind::send) post(recv_op_, "recv");
    for (std::uint64_t i = 0;; ++i) {
      if (wait_arrival(i, true)) return i;
      if (st_.test == test_kind::send) post(recv_op_, "recv");
      mark(i);
      post_message(static_cast<std::uint32_t>(i));
      last_ = i;
    }
  }

  // A notification the server's control exchange polled before echo()
  // started (the client may post message 0 as soon as it has seen `ready`).
  void add_early(const completion& c) { early_.push_back(c); }

  std::uint64_t last_iteration() const noexcept { return last_; }
  std::uint64_t atomic_sum() const noexcept { return atomic_sum_; }

 private:
  // One client iteration.
  void one(std::uint64_t i) {
    switch (st_.test) {
      case test_kind::write:
      case test_kind::write_imm:
      case test_kind::send:
        if (st_.test == test_kind::send) post(recv_op_, "recv");
        mark(i);
        post_message(static_cast<std::uint32_t>(i));
        (void)wait_arrival(i, false);
        break;
      case test_kind::read:
        post(read_op_, "read");
        wait_local();
        break;
      case test_kind::fetch_add:
      case test_kind::compare_swap: {
        const bool fa = st_.test == test_kind::fetch_add;
        const local_slice res = s_.local(s_.lay.results, 8);
        const remote_slice tgt = s_.remote(s_.lay.target, 8);
        post(fa ? op::fetch_add(res, tgt, 1, 1) : op::compare_swap(res, tgt, i, i + 1, 1), "atomic");
        wait_local();
        std::uint64_t old = 0;
        std::memcpy(&old, s_.pull(s_.lay.results, 8), 8);
        if (old != i)
          fail("DATA CHECK FAILED: " + std::string(to_string(st_.test)) + " returned " + std::to_string(old) +
               ", expected " + std::to_string(i));
        ++atomic_sum_;
        break;
      }
    }
  }

  void mark(std::uint64_t i) noexcept {
    if (st_.size == 0) return;
    s_.at(s_.lay.local)[st_.size - 1] = std::byte{marker(i)};
    if (s_.on_device()) s_.push(s_.lay.local + st_.size - 1, 1);
  }

  // Posts this loop's message: a write, a write_with_imm carrying `imm`, or a send.
  void post_message(std::uint32_t imm) {
    if (st_.test == test_kind::write_imm) message_op_.imm = imm;
    post(message_op_, message_name_);
    ++in_flight_;
  }

  void send_stop() {
    s_.at(s_.lay.local)[st_.size - 1] = std::byte{stop_marker};
    if (s_.on_device()) s_.push(s_.lay.local + st_.size - 1, 1);
    post_message(stop_imm);
    while (in_flight_ > 0) poll_once();
  }

  void post(const operation& o, const char* what) {
    for (;;) {
      const status st = s_.qps[0].post(o);
      if (st == status::ok) return;
      if (st != status::again) fail(std::string("posting ") + what + ": " + std::string(to_string(st)));
      poll_once();
    }
  }

  // Waits for message i (or the stop marker when `stoppable`); true on stop.
  // Also waits until our own previous operation completed, so its source
  // buffer may be changed.
  bool wait_arrival(std::uint64_t i, bool stoppable) {
    const std::uint8_t want = marker(i);
    const auto* last = reinterpret_cast<const std::uint8_t*>(s_.at(s_.lay.target) + st_.size - 1);
    const auto* rx_last = reinterpret_cast<const std::uint8_t*>(s_.at(s_.lay.rx) + st_.size - 1);
    arrived_ = false;
    stopped_ = false;
    imm_want_ = static_cast<std::uint32_t>(i);
    for (const completion& c : early_) handle(c);
    early_.clear();
    std::uint64_t spin = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.opts.timeout_s);
    for (;;) {
      if (st_.test == test_kind::write && !arrived_) {
        if (s_.on_device()) (void)s_.pull(s_.lay.target + st_.size - 1, 1);
        const std::uint8_t v = std::atomic_ref<const std::uint8_t>(*last).load(std::memory_order_acquire);
        if (v == want)
          arrived_ = true;
        else if (stoppable && v == stop_marker)
          stopped_ = arrived_ = true;
      }
      if (arrived_ && in_flight_ == 0) break;
      poll_once();
      if (st_.test == test_kind::send && arrived_ && s_.on_device()) (void)s_.pull(s_.lay.rx + st_.size - 1, 1);
      if (st_.test == test_kind::send && arrived_ && !stopped_ && stoppable && *rx_last == stop_marker) stopped_ = true;
      if ((++spin & 4095) == 0 && std::chrono::steady_clock::now() > deadline)
        fail("no answer from the peer for " + std::to_string(s_.opts.timeout_s) + " s in the latency loop");
    }
    if (st_.test == test_kind::send && !stopped_ && *rx_last != want)
      fail("DATA CHECK FAILED: message " + std::to_string(i) + " ends in " + std::to_string(*rx_last) + ", expected " +
           std::to_string(want));
    return stopped_;
  }

  void wait_local() {
    ++in_flight_;
    std::uint64_t spin = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.opts.timeout_s);
    while (in_flight_ > 0) {
      poll_once();
      if ((++spin & 4095) == 0 && std::chrono::steady_clock::now() > deadline)
        fail("an operation did not complete in " + std::to_string(s_.opts.timeout_s) + " s");
    }
  }

  // The last heartbeat's completion, before another poller could see it.
  void wait_heartbeat() {
    std::uint64_t spin = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.opts.timeout_s);
    while (beat_.in_flight()) {
      poll_once();
      if ((++spin & 4095) == 0 && std::chrono::steady_clock::now() > deadline)
        fail("a heartbeat did not complete in " + std::to_string(s_.opts.timeout_s) + " s");
    }
  }

  void poll_once() {
    const std::size_t n = s_.dom.poll(cs_);
    for (std::size_t k = 0; k < n; ++k) handle(cs_[k]);
  }

  void handle(const completion& c) {
    if (beat_.on(c)) return;
    expect_ok(c, "latency loop");
    switch (c.op) {
      case opcode::remote_write_imm:
        if (c.imm == stop_imm)
          stopped_ = true;
        else if (c.imm != imm_want_)
          fail("DATA CHECK FAILED: notification " + std::to_string(c.imm) + ", expected " + std::to_string(imm_want_));
        if (c.bytes != st_.size) fail("a notification reports " + std::to_string(c.bytes) + " bytes");
        arrived_ = true;
        break;
      case opcode::recv:
        if (c.bytes != st_.size)
          fail("received " + std::to_string(c.bytes) + " bytes, expected " + std::to_string(st_.size));
        arrived_ = true;
        break;
      default: --in_flight_; break;
    }
  }

  session<P>& s_;
  const step& st_;
  local_slice src_, rx_;
  remote_slice dst_;
  operation message_op_, recv_op_, read_op_;
  const char* message_name_ = nullptr;  // for errors; looked up once, not per post
  // poll()'s output, a member: a local array would be zeroed (completion's
  // default member initializers) on every poll of the spin loop, ~600 bytes
  // of stores that raw loops over ibv_wc / fi_cq_entry / ucp never pay.
  completion cs_[16];
  std::uint64_t in_flight_ = 0;
  std::uint64_t last_ = 0;
  std::uint64_t atomic_sum_ = 0;
  std::uint32_t imm_want_ = 0;
  bool arrived_ = false;
  bool stopped_ = false;
  std::vector<completion> early_;
  heartbeat<P> beat_{s_};
};

}  // namespace fabrix::perf
