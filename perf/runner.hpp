// One measurement (test, mode, size) on both sides, in lockstep:
//   1. prepare: fill what the peer will read with the pattern, poison what
//      it will write, zero the atomics' words, post the first receives;
//   2. exchange `ready`;
//   3. measure: the initiator(s) run the loop; the server of a ping-pong
//      echoes; a pure target drives progress inside its `done` exchange;
//   4. make the data visible (flush every queue pair), exchange `done` with
//      the counts, wait for every notification / message counted;
//   5. check every byte that moved, exchange `verified` — a failure on
//      either side ends the run with exit status 1 on both.
// Seeds differ per step, so bytes left from an earlier step never pass.
#pragma once

#include "bw.hpp"
#include "control.hpp"
#include "lat.hpp"
#include "pattern.hpp"
#include "report.hpp"
#include "session.hpp"
#include "target.hpp"

#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

namespace fabrix::perf {

template <provider P>
class runner {
 public:
  runner(session<P>& s, report* rep) : s_(s), ctl_(s), rep_(rep) {}

  void run(const step& st, std::uint64_t index) {
    const std::uint64_t seed = index + 1;
    const bool client = !s_.server();
    const bool bw = st.mode == mode_kind::bw;
    const bool initiator = client || (bw && s_.opts.bidirectional);
    const bool target = !client || (bw && s_.opts.bidirectional);
    prepare(st, seed);

    target_side<P> tgt(s_, st.test, st.size);
    const std::uint64_t expected = st.iters ? st.iters + st.warmup : std::numeric_limits<std::uint64_t>::max();
    if (bw && target) tgt.arm(expected);
    // The ping-pong server: the client may post message 0 as soon as it has
    // seen `ready`, so its notification can surface inside this side's
    // `ready` exchange; it belongs to the latency loop.
    lat_loop<P> echo_loop(s_, st);
    const bool echo_server = !bw && !client && st.test == test_kind::write_imm;
    auto on_target = [&](const completion& c) {
      if (echo_server && c.op == opcode::remote_write_imm && c.status == status::ok) {
        echo_loop.add_early(c);
        return;
      }
      if (!target) {
        expect_ok(c, "control exchange");
        fail("unexpected completion of " + std::string(to_string(c.op)) + " during a control exchange");
      }
      tgt.on(c);
    };
    ctl_.exchange({.kind = msg_kind::ready}, msg_kind::ready, index, on_target);

    control_msg mine{.kind = msg_kind::done};
    std::optional<bw_result> bwr;
    std::vector<double> samples;
    std::uint64_t last_iteration = 0;
    if (bw) {
      if (initiator) {
        bw_initiator<P> init(s_, st, target ? &tgt : nullptr);
        const auto far = std::chrono::steady_clock::now() + std::chrono::hours(24);
        if (st.warmup) (void)init.run(st.warmup, far);
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                   std::chrono::duration<double>(s_.opts.duration_s));
        bwr = init.run(st.iters, deadline);
        flush_all(target ? &tgt : nullptr);
        mine.count = init.total();
        mine.sum = init.book().sum;
        mine.bytes_per_s = bwr->avg_bytes_per_s;
      }
    } else if (client) {
      lat_loop<P> loop(s_, st);
      samples = loop.client(st.warmup, st.iters, s_.opts.duration_s);
      last_iteration = loop.last_iteration();
      mine.count = loop.last_iteration() + 1;
      mine.sum = loop.atomic_sum();
    } else if (st.test == test_kind::write || st.test == test_kind::write_imm || st.test == test_kind::send) {
      lat_loop<P>& loop = echo_loop;
      mine.count = loop.echo();
      last_iteration = mine.count ? mine.count - 1 : 0;
    }
    const control_msg peer = ctl_.exchange(mine, msg_kind::done, index, on_target);

    // The initiator's count tells the target how much must still arrive.
    if (bw && target && (st.test == test_kind::write_imm || st.test == test_kind::send)) {
      wait_received(tgt, peer.count, on_target);
    }

    std::string problem = check(st, seed, client, initiator, target, peer, tgt, last_iteration);
    control_msg verdict{.kind = msg_kind::verified};
    verdict.ok = problem.empty() ? 1 : 0;
    // A send target with -D may hold receives the initiator never matched.
    verdict.count = bw && target && st.test == test_kind::send ? tgt.posted() - tgt.received() : 0;
    const control_msg theirs = ctl_.exchange(verdict, msg_kind::verified, index, on_target);
    if (!problem.empty()) fail("DATA CHECK FAILED (" + describe(st) + "): " + problem);
    if (theirs.ok != 1) fail("DATA CHECK FAILED (" + describe(st) + ") on the peer; see its output");
    if (bw && st.test == test_kind::send) drain_surplus(st, theirs.count, tgt, target, index, on_target);

    if (rep_ == nullptr) return;
    if (bw) {
      bw_result r = *bwr;
      if (s_.opts.bidirectional) {
        r.avg_bytes_per_s += peer.bytes_per_s;
        r.peak_bytes_per_s += peer.bytes_per_s;
        r.msg_rate_mpps = r.avg_bytes_per_s / static_cast<double>(st.size) / 1e6;
      }
      rep_->bw_row(st.test, r);
    } else {
      rep_->lat_row(st.test, latency_stats(samples, st.size));
    }
  }

  void finish() { ctl_.exchange({.kind = msg_kind::bye}, msg_kind::bye, std::numeric_limits<std::uint64_t>::max()); }

 private:
  static std::string describe(const step& st) {
    return std::string(to_string(st.test)) + " " + std::string(to_string(st.mode)) + " " + std::to_string(st.size) +
           " B";
  }

  void prepare(const step& st, std::uint64_t seed) {
    std::byte* target = s_.at(s_.lay.target);
    std::byte* local = s_.at(s_.lay.local);
    if (is_atomic(st.test)) {
      std::memset(target, 0, s_.slots * 8);
      std::memset(s_.at(s_.lay.results), 0xEE, s_.slots * 8);
      if (s_.on_device()) s_.push(0, s_.lay.total);
      return;
    }
    if (st.test == test_kind::read) {
      fill_pattern(target, st.size, seed);
      fill_poison(local, st.size, seed);
    } else {
      fill_poison(target, st.size, seed);
      fill_pattern(local, st.size, seed);
      target[st.size - 1] = std::byte{0};  // no marker yet
      const std::uint64_t slots = s_.lay.rx_slots(st.size, s_.slots);
      for (std::uint64_t k = 0; k < slots; ++k) fill_poison(s_.at(s_.lay.rx + k * st.size), st.size, seed);
    }
    if (s_.on_device()) s_.push(0, s_.lay.total);
  }

  // Every queue pair's operations complete at the target before `done`.
  void flush_all(target_side<P>* tgt) {
    std::size_t posted = 0;  // flushes posted so far (`again`: poll, then post the rest)
    std::size_t left = s_.qps.size();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.opts.timeout_s);
    completion cs[32];
    for (std::uint64_t spin = 0; left > 0; ++spin) {
      for (; posted < s_.qps.size(); ++posted) {
        const status st = s_.qps[posted].flush(control_token | 0x100 | posted);
        if (st == status::again) break;
        if (st != status::ok) fail("flush: " + std::string(to_string(st)));
      }
      const std::size_t n = s_.dom.poll(cs);
      for (std::size_t i = 0; i < n; ++i) {
        if (cs[i].op == opcode::flush) {
          expect_ok(cs[i], "flush");
          if (cs[i].token - (control_token | 0x100) >= s_.qps.size())
            fail("a flush completion that is not one of these (token " + std::to_string(cs[i].token) + ")");
          --left;
        } else if (tgt) {
          tgt->on(cs[i]);
        } else {
          expect_ok(cs[i], "flush");
          fail("unexpected completion of " + std::string(to_string(cs[i].op)) + " while flushing");
        }
      }
      if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline) fail("flush did not complete");
    }
  }

  template <class OnTarget>
  void wait_received(target_side<P>& tgt, std::uint64_t count, OnTarget& on_target) {
    if (tgt.received() > count)
      fail("received " + std::to_string(tgt.received()) + " messages, the peer sent " + std::to_string(count));
    tgt.set_limit(count);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.opts.timeout_s);
    completion cs[32];
    for (std::uint64_t spin = 0; tgt.received() < count; ++spin) {
      tgt.retry_pending();
      const std::size_t n = s_.dom.poll(cs);
      for (std::size_t i = 0; i < n; ++i) on_target(cs[i]);
      if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline)
        fail("only " + std::to_string(tgt.received()) + " of " + std::to_string(count) + " arrived");
    }
  }

  // With -D the send target may have receives left posted; the initiator
  // sends that many more (untimed) so none survives into the next step.
  template <class OnTarget>
  void drain_surplus(const step& st, std::uint64_t surplus, target_side<P>& tgt, bool target, std::uint64_t index,
                     OnTarget& on_target) {
    if (surplus > 0 && (!s_.server() || s_.opts.bidirectional)) {
      for (std::uint64_t k = 0; k < surplus; ++k) {
        const completion c = post_and_wait(op::send(s_.local(s_.lay.local, st.size), 1), on_target);
        expect_ok(c, "drain send");
      }
    }
    if (target) wait_received(tgt, tgt.posted(), on_target);
    ctl_.exchange({.kind = msg_kind::ready}, msg_kind::ready, index | (std::uint64_t{1} << 48), on_target);
  }

  template <class OnTarget>
  completion post_and_wait(const operation& o, OnTarget& on_target) {
    completion cs[16];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(s_.opts.timeout_s);
    bool posted = false;  // `again`: poll, then post again
    for (std::uint64_t spin = 0;; ++spin) {
      if (!posted) {
        const status st = s_.qps[0].post(o);
        if (st != status::ok && st != status::again) fail("post: " + std::string(to_string(st)));
        posted = st == status::ok;
      }
      if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline)
        fail(std::string(to_string(o.code)) + " did not complete in " + std::to_string(s_.opts.timeout_s) + " s");
      const std::size_t n = s_.dom.poll(cs);
      std::optional<completion> mine;
      for (std::size_t i = 0; i < n; ++i) {
        if (cs[i].op == o.code && cs[i].token == o.token)
          mine = cs[i];
        else
          on_target(cs[i]);
      }
      if (mine) return *mine;
    }
  }

  // Empty when every byte this side can see is right, else what is wrong.
  std::string check(const step& st, std::uint64_t seed, bool client, bool initiator, bool target,
                    const control_msg& peer, target_side<P>& tgt, std::uint64_t last_iteration) {
    auto at = [&](const char* where, const std::byte* p, std::uint64_t len) -> std::string {
      if (auto m = check_pattern(p, len, seed))
        return std::string(where) + " byte " + std::to_string(m->offset) + " is " + std::to_string(m->got) +
               ", expected " + std::to_string(m->want);
      return {};
    };
    auto last_byte = [&](const char* where, const std::byte* p, std::uint8_t want) -> std::string {
      const auto got = static_cast<std::uint8_t>(p[st.size - 1]);
      if (got != want)
        return std::string(where) + " last byte is " + std::to_string(got) + ", expected " + std::to_string(want);
      return {};
    };
    if (s_.on_device()) (void)s_.pull(0, s_.lay.total);
    const std::byte* tgt_mem = s_.at(s_.lay.target);
    const std::byte* local = s_.at(s_.lay.local);
    const std::byte* rx = s_.at(s_.lay.rx);

    if (is_atomic(st.test)) {
      // The target's words must add up to what the initiator's ops put there.
      const bool peer_initiated = st.mode == mode_kind::bw ? (s_.server() || s_.opts.bidirectional) : s_.server();
      if (!peer_initiated) return {};
      std::uint64_t sum = 0;
      for (std::uint64_t k = 0; k < s_.slots; ++k) {
        std::uint64_t v = 0;
        std::memcpy(&v, tgt_mem + k * 8, 8);
        sum += v;
      }
      if (sum != peer.sum)
        return "the atomic words add up to " + std::to_string(sum) + ", expected " + std::to_string(peer.sum);
      return {};
    }
    if (st.mode == mode_kind::bw) {
      std::string e;
      if (initiator && st.test == test_kind::read) e = at("read destination", local, st.size);
      if (e.empty() && target && peer.count > 0) {
        if (st.test == test_kind::write || st.test == test_kind::write_imm) e = at("write target", tgt_mem, st.size);
        if (st.test == test_kind::send)
          for (std::uint64_t k = 0; k < tgt.slots_used() && e.empty(); ++k)
            e = at("receive slot", rx + k * st.size, st.size);
      }
      return e;
    }
    // Latency: the message body everywhere it landed, and its final marker.
    const std::uint8_t final_marker = client ? marker(last_iteration) : stop_marker;
    switch (st.test) {
      case test_kind::read: return client ? at("read destination", local, st.size) : std::string{};
      case test_kind::write:
      case test_kind::write_imm: {
        std::string e = at("write target", tgt_mem, st.size - 1);
        return e.empty() ? last_byte("write target", tgt_mem, final_marker) : e;
      }
      case test_kind::send: {
        std::string e = at("receive slot", rx, st.size - 1);
        return e.empty() ? last_byte("receive slot", rx, final_marker) : e;
      }
      default: return {};
    }
  }

  session<P>& s_;
  control_channel<P> ctl_;
  report* rep_;
};

}  // namespace fabrix::perf
