// The target's half of a measurement: counts what arrives from the
// initiator (write_with_imm notifications, received messages) and keeps
// receives posted, one per receive slot, up to the number the initiator
// will send. Called for every completion that is not the initiator's own.
#pragma once

#include "control.hpp"
#include "options.hpp"
#include "session.hpp"

#include <limits>
#include <vector>

namespace fabrix::perf {

template <provider P>
class target_side {
 public:
  target_side(session<P>& s, test_kind t, std::uint64_t size) : s_(s), test_(t), size_(size) {
    if (t == test_kind::send) pending_.reserve(s.lay.rx_slots(size, s.slots));
  }

  // Posts the first receives (send test): one per slot, at most `expected`
  // (unbounded with -D: pass max()).
  void arm(std::uint64_t expected) {
    limit_ = expected;
    if (test_ != test_kind::send) return;
    const std::uint64_t n = std::min(s_.lay.rx_slots(size_, s_.slots), limit_);
    for (std::uint64_t slot = 0; slot < n; ++slot) post_recv(slot);
  }

  void on(const completion& c) {
    expect_ok(c, "target");
    retry_pending();
    if (c.op == opcode::remote_write_imm && test_ == test_kind::write_imm) {
      if (c.bytes != size_)
        fail("a notification reports " + std::to_string(c.bytes) + " bytes, expected " + std::to_string(size_));
      ++received_;
    } else if (c.op == opcode::recv && test_ == test_kind::send && c.token >= recv_token) {
      if (c.bytes != size_) fail("received " + std::to_string(c.bytes) + " bytes, expected " + std::to_string(size_));
      ++received_;
      if (posted_ < limit_) post_recv(c.token - recv_token);
    } else {
      fail("unexpected completion of " + std::string(to_string(c.op)) + " at the target");
    }
  }

  std::uint64_t received() const noexcept { return received_; }
  std::uint64_t posted() const noexcept { return posted_; }
  // The highest slot used + 1: the slots whose contents the checks compare.
  std::uint64_t slots_used() const noexcept { return std::min(posted_, s_.lay.rx_slots(size_, s_.slots)); }
  void set_limit(std::uint64_t limit) noexcept { limit_ = limit; }

  // Posts the receives that met back-pressure (`again`) earlier; the loops
  // that wait for arrivals call it between polls.
  void retry_pending() {
    while (!pending_.empty()) {
      if (!try_post(pending_.back())) return;
      pending_.pop_back();
    }
  }

 private:
  // Counts the receive as posted; one that meets `again` waits in pending_
  // (reserved for every slot: no allocation here) for retry_pending().
  void post_recv(std::uint64_t slot) {
    ++posted_;
    if (!pending_.empty() || !try_post(slot)) pending_.push_back(slot);
  }
  bool try_post(std::uint64_t slot) {
    const status st = s_.qps[0].recv(s_.local(s_.lay.rx + slot * size_, size_), recv_token + slot);
    if (st == status::again) return false;
    if (st != status::ok) fail("posting a receive: " + std::string(to_string(st)));
    return true;
  }

  session<P>& s_;
  test_kind test_;
  std::uint64_t size_;
  std::uint64_t limit_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t received_ = 0;
  std::uint64_t posted_ = 0;  // including those waiting in pending_
  std::vector<std::uint64_t> pending_;
};

}  // namespace fabrix::perf
