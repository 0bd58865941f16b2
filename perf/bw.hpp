// The bandwidth loop of the initiator: keeps up to -t operations in flight,
// posts them -l at a time (one post call per list, queue pairs round-robin
// per list), and polls completions in batches. Each operation owns a slot
// (its token) while in flight: atomics use the slot's remote word and result
// word, and every atomic result is checked as it completes. The other tests
// need nothing per operation: their operations all carry token 0, and the
// loop's count of what is in flight is the only bound (as in raw_ucx).
//
// Nothing is allocated inside the loop: the operation list, the slot stack
// and the per-slot counters are sized before the clock starts.
//
// --unsignaled (not atomics): every operation of a list but the last is
// unsignaled; --cq-mod N: every operation but each N-th, across lists. An
// unsignaled operation (never an atomic, so never slotted) counts as done
// when the queue pairs' finished() says so. A provider may count them only
// when a later flush completes, so when nothing signaled is left in flight
// and the loop cannot post (window full, pushed back, or done) it posts a
// flush on every queue pair.
#pragma once

#include "clock.hpp"
#include "control.hpp"
#include "heartbeat.hpp"
#include "session.hpp"
#include "stats.hpp"
#include "target.hpp"

#include <chrono>
#include <vector>

namespace fabrix::perf {

// Per-slot bookkeeping of the atomics: how many ops each slot has completed
// (the expected old value follows from it) and their checksum for the target.
struct atomic_book {
  std::vector<std::uint64_t> done;  // per slot
  std::uint64_t sum = 0;            // what the target's words must add up to
  static std::uint64_t addend(std::uint64_t slot) noexcept { return slot + 1; }
};

template <provider P>
class bw_initiator {
 public:
  bw_initiator(session<P>& s, const step& st, target_side<P>* also_target)
      : s_(s), st_(st), target_(also_target), ops_(static_cast<std::size_t>(s.opts.post_list)), free_(s.slots) {
    for (std::uint64_t i = 0; i < s.slots; ++i) free_[i] = static_cast<std::uint32_t>(s.slots - 1 - i);
    book_.done.assign(s.slots, 0);
    dst_ = s.remote(s.lay.target, st.size);
    src_ = s.local(s.lay.local, st.size);
    for (auto& o : ops_) o = make_op(0);  // per post only the slot-dependent fields change
  }

  // Runs `count` operations (or until `deadline` when count == 0) and
  // returns the timing of the run. Warmup is a run whose result is dropped.
  // Fails (exit status 1) when no operation completes for --timeout
  // seconds while some are outstanding, rather than spinning forever.
  bw_result run(std::uint64_t count, std::chrono::steady_clock::time_point deadline) {
    using clock = std::chrono::steady_clock;
    const tick_clock& tc = ticks();
    const std::uint64_t depth = s_.slots;
    const auto list = static_cast<std::uint64_t>(s_.opts.post_list);
    const std::uint64_t window = std::max<std::uint64_t>(depth, (count ? count : 100000) / 20);
    std::uint64_t posted = 0, completed = 0, batches = 0;
    std::uint64_t signaled_done = 0;
    const std::uint64_t finished_base = finished_now();
    bool stop = false;
    const std::uint64_t t0 = tc.now();
    std::uint64_t window_start = t0;
    std::uint64_t window_mark = window;
    double peak = 0;
    completion cs[64];
    std::uint64_t spin = 0;
    const loop_shape k = shape();
    stall_watch watch(s_.opts.timeout_s);
    while (!stop || completed < posted) {
      if ((++spin & 63) == 0) {
        if (!stop && count == 0 && clock::now() >= deadline) stop = true;
        if ((spin & 255) == 0) beat_.tick(tc.now());
      }
      auto room = [&] { return posted - completed + list <= depth; };  // for one more list
      bool pushed_back = false;
      while (!stop && room()) {
        const std::uint64_t n = count ? std::min(list, count - posted) : list;
        if (n == 0) {
          stop = true;
          break;
        }
        const std::uint64_t went = post_list(n, batches++, k);
        posted += went;
        if (count && posted == count) stop = true;
        if (went < n) {  // back-pressure: poll first
          pushed_back = true;
          break;
        }
      }
      const std::size_t got = s_.dom.poll(cs);
      for (std::size_t i = 0; i < got; ++i) signaled_done += on_completion(cs[i], k);
      completed = k.unsignaled ? signaled_done + (finished_now() - finished_base) : signaled_done;
      watch.check(completed, posted, completed);
      // A flush retires unsignaled operations only where the loop cannot go
      // on without them: it may not post (window full, provider pushed back)
      // or has nothing left to post. Otherwise a later signaled operation
      // (one in every --cq-mod, which is at most -t) will come.
      const bool blocked = stop || pushed_back || !room();
      if (k.unsignaled && signaled_out_ == 0 && flushes_ == 0 && completed < posted && blocked) retire_unsignaled();
      if (completed >= window_mark) {
        const std::uint64_t now = tc.now();
        const double secs = tc.seconds(now - window_start);
        if (secs > 0)
          peak = std::max(
              peak, static_cast<double>(completed - (window_mark - window)) * static_cast<double>(st_.size) / secs);
        window_start = now;
        window_mark = completed + window;
      }
    }
    const double secs = tc.seconds(tc.now() - t0);
    // A retiring flush or a heartbeat may still be in flight (the operations
    // a flush covers were counted before it completed): they end here,
    // untimed, so that none of their completions reaches another poller.
    while (flushes_ > 0 || beat_.in_flight()) {
      const std::size_t got = s_.dom.poll(cs);
      for (std::size_t i = 0; i < got; ++i) signaled_done += on_completion(cs[i], k);
      watch.check(2 * flushes_ + (beat_.in_flight() ? 1 : 0), posted, completed);  // falls with each
    }
    total_ += completed;
    bw_result r;
    r.bytes = st_.size;
    r.iterations = completed;
    r.seconds = secs;
    r.avg_bytes_per_s = secs > 0 ? static_cast<double>(completed) * static_cast<double>(st_.size) / secs : 0;
    r.peak_bytes_per_s = std::max(peak, r.avg_bytes_per_s);
    r.msg_rate_mpps = secs > 0 ? static_cast<double>(completed) / secs / 1e6 : 0;
    return r;
  }

  std::uint64_t total() const noexcept { return total_; }
  const atomic_book& book() const noexcept { return book_; }

 private:
  static constexpr std::uint64_t flush_token = recv_token - 1;

  // Fails the run when `progress` has not moved for `timeout_s` seconds:
  // the clock is read once every 4096 polls without progress, never on a
  // poll that made some.
  class stall_watch {
   public:
    explicit stall_watch(int timeout_s) : timeout_(std::chrono::seconds(timeout_s)) {}
    void check(std::uint64_t progress, std::uint64_t posted, std::uint64_t completed) {
      if (progress != seen_) {
        seen_ = progress;
        idle_polls_ = 0;
        return;
      }
      if ((++idle_polls_ & 4095) != 0) return;
      const auto now = std::chrono::steady_clock::now();
      if (idle_polls_ == 4096) {
        quiet_since_ = now;
      } else if (now - quiet_since_ > timeout_) {
        fail("no operation completed for " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
             " s in the bandwidth loop (" + std::to_string(posted) + " posted, " + std::to_string(completed) +
             " completed; is the peer alive?)");
      }
    }

   private:
    std::chrono::steady_clock::duration timeout_;
    std::uint64_t seen_ = ~std::uint64_t{0};
    std::uint64_t idle_polls_ = 0;
    std::chrono::steady_clock::time_point quiet_since_{};
  };

  // What the loop decides per operation from settings fixed for the run,
  // held in run()'s locals: the library calls in the loop may write any
  // memory as far as the compiler knows, so members would be loaded again
  // after each of them (and the queue pair picked with a division).
  struct loop_shape {
    bool slotted;            // slotted_
    bool unsignaled;         // unsignaled_
    bool per_op_fields;      // set_slot() per operation: atomics, write_imm
    bool one_qp;             // s_.qps.size() == 1
    bool send;               // sends go on queue pair 0
    queue_pair<P>* first;    // s_.qps[0]
    target_side<P>* target;  // target_
  };
  loop_shape shape() noexcept {
    return {slotted_,
            unsignaled_,
            slotted_ || st_.test == test_kind::write_imm,
            s_.qps.size() == 1,
            st_.test == test_kind::send,
            &s_.qps[0],
            target_};
  }

  // One completion of the loop; returns 1 for a signaled operation's.
  [[gnu::always_inline]] std::uint64_t on_completion(const completion& c, const loop_shape& k) {
    if (c.op == opcode::flush && c.token == flush_token) {
      expect_ok(c, "bandwidth loop (flush of unsignaled operations)");
      --flushes_;
    } else if (c.token < recv_token && c.op != opcode::remote_write_imm && c.op != opcode::recv) {
      if (c.status != status::ok) expect_ok(c, "bandwidth loop");
      if (k.slotted)
        on_done(c.token);
      else if (c.token != 0)
        unknown_token(c.token);
      --signaled_out_;
      return 1;
    } else if (beat_.on(c)) {
      // the heartbeat's own: nothing else to do
    } else if (k.target != nullptr) {
      k.target->on(c);
    } else {
      expect_ok(c, "bandwidth loop");
      fail("unexpected completion of " + std::string(to_string(c.op)) + " in the bandwidth loop");
    }
    return 0;
  }

  // Posts n operations in one call; returns how many went out. Inlined into
  // run(), its one caller: a call per post list cost ~19 instructions per
  // operation at -l 1 (callgrind).
  [[gnu::always_inline]] std::uint64_t post_list(std::uint64_t n, std::uint64_t batch, const loop_shape& k) {
    operation* ops = ops_.data();
    if (k.per_op_fields)
      for (std::uint64_t i = 0; i < n; ++i) set_slot(ops[i], k.slotted ? pop_slot() : 0);
    if (k.unsignaled)
      for (std::uint64_t i = 0; i < n; ++i) ops[i].options = signaled(i, n) ? op_options::none : op_options::unsignaled;
    queue_pair<P>* qp = k.first;
    if (!k.one_qp) {
      const std::uint64_t q = k.send ? 0 : batch;
      for (std::uint64_t i = 0; i < n; ++i) s_.retarget(ops[i], q);
      qp = &s_.qp(q);
    }
    const post_result r = qp->post(std::span<const operation>(ops, n));
    if (r.status != status::ok && r.status != status::again)
      fail(std::string("posting ") + std::string(to_string(st_.test)) + ": " + std::string(to_string(r.status)));
    if (r.posted < n) {
      if (k.slotted)
        for (std::uint64_t i = n; i > r.posted; --i) free_[free_top_++] = static_cast<std::uint32_t>(ops[i - 1].token);
      if (cq_mod_ > 1) {  // those go again: --cq-mod counts what went out
        op_seq_ -= n - r.posted;
        while (next_signal_ > op_seq_ + cq_mod_) next_signal_ -= cq_mod_;
      }
    }
    if (!k.unsignaled) {
      signaled_out_ += r.posted;
      return r.posted;
    }
    for (std::uint64_t i = 0; i < r.posted; ++i)
      if (!has(ops[i].options, op_options::unsignaled)) ++signaled_out_;
    return r.posted;
  }

  // Whether operation i of a list of n gives a completion.
  bool signaled(std::uint64_t i, std::uint64_t n) noexcept {
    if (cq_mod_ <= 1) return i + 1 == n;  // --unsignaled
    if (++op_seq_ != next_signal_) return false;
    next_signal_ += cq_mod_;
    return true;
  }

  std::uint64_t finished_now() const noexcept {
    std::uint64_t n = 0;
    if (unsignaled_)
      for (const auto& qp : s_.qps) n += qp.finished();
    return n;
  }

  // A flush on every queue pair: when it completes, every unsignaled
  // operation before it is counted.
  void retire_unsignaled() {
    for (auto& qp : s_.qps) {
      const status st = qp.flush(flush_token);
      if (st == status::again) continue;  // retried on the next pass
      if (st != status::ok) fail("posting a flush: " + std::string(to_string(st)));
      ++flushes_;
    }
  }

  std::uint64_t pop_slot() noexcept { return free_[--free_top_]; }

  // The fields of a prebuilt operation that depend on its slot.
  void set_slot(operation& o, std::uint64_t slot) noexcept {
    o.token = slot;
    switch (st_.test) {
      case test_kind::write_imm: o.imm = static_cast<std::uint32_t>(imm_seq_++ & 0x7fffffff); break;
      case test_kind::fetch_add:
      case test_kind::compare_swap: o = make_op(slot); break;
      default: break;
    }
  }

  operation make_op(std::uint64_t slot) noexcept {
    switch (st_.test) {
      case test_kind::write: return op::write(src_, dst_, slot);
      case test_kind::read: return op::read(src_, dst_, slot);
      case test_kind::write_imm:
        return op::write_with_imm(src_, dst_, static_cast<std::uint32_t>(imm_seq_++ & 0x7fffffff), slot);
      case test_kind::send: return op::send(src_, slot);
      case test_kind::fetch_add:
        return op::fetch_add(s_.local(s_.lay.results + slot * 8, 8), s_.remote(s_.lay.target + slot * 8, 8),
                             atomic_book::addend(slot), slot);
      case test_kind::compare_swap:
        return op::compare_swap(s_.local(s_.lay.results + slot * 8, 8), s_.remote(s_.lay.target + slot * 8, 8),
                                book_.done[slot], book_.done[slot] + 1, slot);
    }
    return {};
  }

  [[gnu::cold, gnu::noinline]] void unknown_token(std::uint64_t token) {
    fail("a completion carries an unknown token " + std::to_string(token));
  }

  // A slotted (atomic) operation completed: check its result, free its slot.
  void on_done(std::uint64_t slot) {
    if (slot >= s_.slots) unknown_token(slot);
    std::uint64_t old = 0;
    std::memcpy(&old, s_.pull(s_.lay.results + slot * 8, 8), 8);
    const std::uint64_t k = book_.done[slot]++;
    const std::uint64_t want = st_.test == test_kind::fetch_add ? k * atomic_book::addend(slot) : k;
    if (old != want)
      fail("DATA CHECK FAILED: " + std::string(to_string(st_.test)) + " slot " + std::to_string(slot) + " returned " +
           std::to_string(old) + ", expected " + std::to_string(want));
    book_.sum += st_.test == test_kind::fetch_add ? atomic_book::addend(slot) : 1;
    free_[free_top_++] = static_cast<std::uint32_t>(slot);
  }

  session<P>& s_;
  const step& st_;
  target_side<P>* target_;
  std::vector<operation> ops_;
  std::vector<std::uint32_t> free_;
  std::uint64_t free_top_ = free_.size();
  atomic_book book_;
  remote_slice dst_;
  local_slice src_;
  std::uint64_t imm_seq_ = 0;
  std::uint64_t total_ = 0;
  bool slotted_ = is_atomic(st_.test);  // operations own a slot while in flight
  bool unsignaled_ = (s_.opts.unsignaled || s_.opts.cq_mod > 1) && !slotted_;
  std::uint64_t cq_mod_ = static_cast<std::uint64_t>(s_.opts.cq_mod);
  std::uint64_t op_seq_ = 0;             // operations posted under --cq-mod
  std::uint64_t next_signal_ = cq_mod_;  // the op_seq_ of the next signaled one
  std::uint64_t signaled_out_ = 0;       // signaled operations in flight
  std::uint64_t flushes_ = 0;            // retire_unsignaled() flushes in flight
  heartbeat<P> beat_{s_};                // keeps the waiting peer from giving up on a long run
};

}  // namespace fabrix::perf
