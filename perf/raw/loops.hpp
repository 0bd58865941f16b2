// The timed loops of raw_ofi and raw_ucx: fabrix-perf's bandwidth loop
// (perf/bw.hpp) and ping-pong (perf/lat.hpp), over a `Net` that makes the
// library calls directly. Same clock (perf/clock.hpp), same statistics
// (perf/stats.hpp), same layout of the registered region (perf/layout.hpp),
// same pattern, poison and markers (perf/pattern.hpp).
//
// A Net offers (all inline; nothing allocates):
//   std::byte* at(off)                 the registered region, this side
//   void aim(local, remote, rx, size)  the offsets and size of this step
//   uint64_t post_rma(test, n)         bw: posts n writes or reads local ->
//                                      remote (n > 1: one list), returns how
//                                      many went (fewer: back-pressure);
//                                      each posted one completes once
//   uint64_t post_one(test)            lat: one write or send local -> peer;
//                                      1 when a completion will come, 0 not
//   void post_recv()                   lat: one receive into rx
//   uint64_t poll(bool& recv_done)     drives progress once; returns the
//                                      local completions since the last
//                                      call, sets recv_done on a receive
//   void flush()                       after write bw (untimed): every
//                                      write is in place at the target
// Every wait is bounded by --timeout (a silent peer is a failure).
// Errors throw failure (exit 1); a wrong byte never becomes a number.
#pragma once

#include "../clock.hpp"
#include "../layout.hpp"
#include "../pattern.hpp"
#include "../stats.hpp"
#include "channel.hpp"
#include "common.hpp"

#include <atomic>
#include <vector>

namespace fabrix::raw {

using perf::bw_result;
using perf::marker;
using perf::stop_marker;
using perf::tick_clock;
using perf::ticks;

// bw.hpp's loop: keeps `depth` operations in flight, posts them `list` at a
// time, polls between posts; peak = the best window of about twenty. Calls
// `beat()` when a heartbeat is due (beat_timer), looking at the clock once
// per 256 turns, as bw.hpp does for its heartbeat word.
template <class Net, class Beat>
bw_result bw_run(Net& net, test_kind t, std::uint64_t size, std::uint64_t count, std::uint64_t depth,
                 std::uint64_t list, int timeout_s, Beat&& beat) {
  const tick_clock& tc = ticks();
  const std::uint64_t window = std::max<std::uint64_t>(depth, count / 20);
  std::uint64_t posted = 0, completed = 0;
  bool stop = count == 0, recv_done = false;
  // Looked at only when a poll found nothing; re-armed when it passes if
  // anything completed since it was armed, so the loop fails after
  // timeout_s to 2 * timeout_s without a completion, however long it runs.
  deadline until(timeout_s);
  std::uint64_t completed_when_armed = 0;
  const std::uint64_t t0 = tc.now();
  std::uint64_t window_start = t0, window_mark = window;
  double peak = 0;
  beat_timer beats(timeout_s);
  for (std::uint64_t turn = 1; !stop || completed < posted; ++turn) {
    if ((turn & 255) == 0 && beats.due()) beat();
    while (!stop && posted - completed + list <= depth) {
      const std::uint64_t n = std::min(list, count - posted);
      const std::uint64_t went = net.post_rma(t, n);
      posted += went;
      if (posted == count) stop = true;
      if (went < n) break;  // back-pressure: poll first
    }
    const std::uint64_t got = net.poll(recv_done);
    completed += got;
    if (got == 0 && until.passed()) {
      if (completed == completed_when_armed)
        fail("no completion for " + std::to_string(timeout_s) + " s in the bandwidth loop");
      until = deadline(timeout_s);
      completed_when_armed = completed;
    }
    if (completed >= window_mark) {
      const std::uint64_t now = tc.now();
      const double secs = tc.seconds(now - window_start);
      if (secs > 0)
        peak =
            std::max(peak, static_cast<double>(completed - (window_mark - window)) * static_cast<double>(size) / secs);
      window_start = now;
      window_mark = completed + window;
    }
  }
  const double secs = tc.seconds(tc.now() - t0);
  bw_result r;
  r.bytes = size;
  r.iterations = completed;
  r.seconds = secs;
  r.avg_bytes_per_s = secs > 0 ? static_cast<double>(completed) * static_cast<double>(size) / secs : 0;
  r.peak_bytes_per_s = std::max(peak, r.avg_bytes_per_s);
  r.msg_rate_mpps = secs > 0 ? static_cast<double>(completed) / secs / 1e6 : 0;
  return r;
}

// lat.hpp's ping-pong for write and send: the client sends message i whose
// last byte is marker(i), the server waits for it and answers; the sample is
// the round trip, halved. A write is seen by polling the target's last byte
// (driving progress between looks), a send by its receive. Each side also
// waits for its own previous operation (when it completes at all).
template <class Net>
class pingpong {
 public:
  pingpong(Net& net, const perf::layout& lay, test_kind t, std::uint64_t size, int timeout_s)
      : net_(net), lay_(lay), test_(t), size_(size), timeout_s_(timeout_s) {}

  std::vector<double> client(std::uint64_t warmup, std::uint64_t iters) {
    const tick_clock& tc = ticks();
    std::vector<double> samples;
    samples.reserve(iters);
    std::uint64_t before = tc.now();
    for (std::uint64_t i = 0; i < warmup + iters; ++i) {
      if (test_ == test_kind::send) net_.post_recv();
      mark(i);
      in_flight_ += net_.post_one(test_);
      (void)wait_arrival(i, false);
      const std::uint64_t after = tc.now();
      if (i >= warmup) samples.push_back(tc.seconds(after - before) * 0.5e6);
      before = after;
      last_ = i;
    }
    local()[size_ - 1] = std::byte{stop_marker};
    in_flight_ += net_.post_one(test_);
    bool recv_done = false;
    deadline until(timeout_s_);
    while (in_flight_ > 0) {
      in_flight_ -= net_.poll(recv_done);
      if (until.passed()) fail("the stop message did not complete in " + std::to_string(timeout_s_) + " s");
    }
    return samples;
  }

  // Answers until the stop marker; returns the messages answered. The first
  // receive (send test) is posted by the caller before `ready`.
  std::uint64_t echo() {
    for (std::uint64_t i = 0;; ++i) {
      if (wait_arrival(i, true)) return i;
      if (test_ == test_kind::send) net_.post_recv();
      mark(i);
      in_flight_ += net_.post_one(test_);
    }
  }

  std::uint64_t last() const noexcept { return last_; }

 private:
  std::byte* local() { return net_.at(lay_.local); }
  void mark(std::uint64_t i) { local()[size_ - 1] = std::byte{marker(i)}; }

  // Waits for message i (or the stop marker when `stoppable`); true on stop.
  bool wait_arrival(std::uint64_t i, bool stoppable) {
    const std::uint8_t want = marker(i);
    const auto* last = reinterpret_cast<const std::uint8_t*>(net_.at(lay_.target) + size_ - 1);
    const auto* rx_last = reinterpret_cast<const std::uint8_t*>(net_.at(lay_.rx) + size_ - 1);
    bool arrived = false, stopped = false, recv_done = false;
    deadline until(timeout_s_);
    for (;;) {
      if (test_ == test_kind::write && !arrived) {
        const std::uint8_t v = std::atomic_ref<const std::uint8_t>(*last).load(std::memory_order_acquire);
        if (v == want)
          arrived = true;
        else if (stoppable && v == stop_marker)
          stopped = arrived = true;
      }
      if (arrived && in_flight_ == 0) break;
      in_flight_ -= net_.poll(recv_done);
      if (recv_done && !arrived) {
        arrived = true;
        if (stoppable && *rx_last == stop_marker) stopped = true;
      }
      if (until.passed()) fail("no answer from the peer for " + std::to_string(timeout_s_) + " s in the latency loop");
    }
    if (test_ == test_kind::send && !stopped && *rx_last != want)
      fail("DATA CHECK FAILED: message " + std::to_string(i) + " ends in " + std::to_string(*rx_last) + ", expected " +
           std::to_string(want));
    return stopped;
  }

  Net& net_;
  const perf::layout& lay_;
  test_kind test_;
  std::uint64_t size_;
  int timeout_s_;
  std::uint64_t in_flight_ = 0;
  std::uint64_t last_ = 0;
};

// Empty when [0, len) of p is the pattern of `seed`, else what is wrong.
inline std::string check_bytes(const char* where, const std::byte* p, std::uint64_t len, std::uint64_t seed) {
  if (auto m = perf::check_pattern(p, len, seed))
    return std::string(where) + " byte " + std::to_string(m->offset) + " is " + std::to_string(m->got) + ", expected " +
           std::to_string(m->want);
  return {};
}

inline std::string check_last(const char* where, const std::byte* p, std::uint64_t size, std::uint8_t want) {
  const auto got = static_cast<std::uint8_t>(p[size - 1]);
  if (got != want)
    return std::string(where) + " last byte is " + std::to_string(got) + ", expected " + std::to_string(want);
  return {};
}

// Every step of the plan, in lockstep with the peer over `ch` (runner.hpp's
// order: prepare, ready, measure, done, check both sides, verdicts). The
// client prints one JSON line per step, tagged with `tool`.
template <class Net>
void run_steps(Net& net, channel& ch, const options& o, const perf::layout& lay, bool server, const char* tool) {
  const auto steps = plan(o);
  auto progress = [&] {
    bool r = false;
    (void)net.poll(r);
  };
  for (std::size_t idx = 0; idx < steps.size(); ++idx) {
    const step& st = steps[idx];
    const std::uint64_t seed = idx + 1;
    const bool bw = st.mode == mode_kind::bw;
    std::byte* target = net.at(lay.target);
    std::byte* local = net.at(lay.local);
    if (st.test == test_kind::read) {
      perf::fill_pattern(target, st.size, seed);
      perf::fill_poison(local, st.size, seed);
    } else {
      perf::fill_poison(target, st.size, seed);
      perf::fill_pattern(local, st.size, seed);
      target[st.size - 1] = std::byte{0};
      perf::fill_poison(net.at(lay.rx), st.size, seed);
    }
    net.aim(lay.local, lay.target, lay.rx, st.size);
    if (server && st.test == test_kind::send) net.post_recv();
    if (server)
      ch.send_u64(idx);
    else if (ch.recv_u64() != idx)
      fail("the sides are out of step");

    bw_result bwr;
    std::vector<double> samples;
    std::uint64_t last = 0;
    if (bw && !server) {
      const auto d = static_cast<std::uint64_t>(o.tx_depth);
      const auto l = static_cast<std::uint64_t>(o.post_list);
      auto beat = [&] { ch.beat(); };
      if (st.warmup) (void)bw_run(net, st.test, st.size, st.warmup, d, l, o.timeout_s, beat);
      bwr = bw_run(net, st.test, st.size, st.iters, d, l, o.timeout_s, beat);
      if (st.test == test_kind::write) net.flush();
      ch.send_u64(bwr.iterations);
    } else if (bw) {
      (void)ch.recv_progressing(progress, o.timeout_s);
    } else {
      pingpong<Net> pp(net, lay, st.test, st.size, o.timeout_s);
      if (server) {
        last = pp.echo();
        (void)ch.recv_progressing(progress, o.timeout_s);
      } else {
        samples = pp.client(st.warmup, st.iters);
        last = pp.last();
        ch.send_u64(last + 1);
      }
    }

    // Checks: what landed on this side, after the peer said it was done.
    std::string problem;
    if (bw && st.test == test_kind::read && !server) problem = check_bytes("read destination", local, st.size, seed);
    if (bw && st.test == test_kind::write && server) problem = check_bytes("write target", target, st.size, seed);
    if (!bw) {
      const std::uint8_t final_marker = server ? stop_marker : marker(last);
      const char* where = st.test == test_kind::write ? "write target" : "receive slot";
      const std::byte* p = st.test == test_kind::write ? target : net.at(lay.rx);
      problem = check_bytes(where, p, st.size - 1, seed);
      if (problem.empty()) problem = check_last(where, p, st.size, final_marker);
    }
    ch.send_u64(problem.empty() ? 1 : 0);
    const std::uint64_t theirs = ch.recv_u64();
    const std::string what = std::string(name(st.test)) + " " + name(st.mode) + " " + std::to_string(st.size) + " B";
    if (!problem.empty()) fail("DATA CHECK FAILED (" + what + "): " + problem);
    if (theirs != 1) fail("DATA CHECK FAILED (" + what + ") on the peer; see its output");
    if (server) continue;

    std::string row = std::string("{\"tool\": ") + quoted(tool) + ", \"test\": " + quoted(name(st.test)) +
                      ", \"mode\": " + quoted(name(st.mode)) + ", \"bytes\": " + std::to_string(st.size);
    if (bw) {
      constexpr double mib = 1024.0 * 1024.0;
      row += ", \"iterations\": " + std::to_string(bwr.iterations) + ", \"seconds\": " + number(bwr.seconds) +
             ", \"bw_peak_MBps\": " + number(bwr.peak_bytes_per_s / mib) +
             ", \"bw_avg_MBps\": " + number(bwr.avg_bytes_per_s / mib) +
             ", \"bw_avg_Gbps\": " + number(bwr.avg_bytes_per_s * 8 / 1e9) +
             ", \"msg_rate_Mpps\": " + number(bwr.msg_rate_mpps);
    } else {
      const perf::lat_result r = perf::latency_stats(samples, st.size);
      row += ", \"iterations\": " + std::to_string(r.iterations) + ", \"t_min_us\": " + number(r.t_min_us) +
             ", \"t_max_us\": " + number(r.t_max_us) + ", \"t_typical_us\": " + number(r.t_typical_us) +
             ", \"t_avg_us\": " + number(r.t_avg_us) + ", \"t_stdev_us\": " + number(r.t_stdev_us) +
             ", \"t_p99_us\": " + number(r.t_p99_us) + ", \"t_p999_us\": " + number(r.t_p999_us);
    }
    std::printf("%s, \"verified\": true}\n", row.c_str());
    std::fflush(stdout);
  }
}

}  // namespace fabrix::raw
