// Send-queue accounting, device-free (unit-tested).
//
// send_ring: one entry per work request on a queue pair's send queue, in
// posting order; entry `seq` lives at slot seq % capacity and its wr_id is
// seq. In a post call's chain only the last request that wants a completion
// is signaled, plus every `signal_every`-th request (by seq) so that a long
// run of unsignaled operations (op_options::unsignaled) keeps retiring; the
// others — unsignaled operations at the chain's end too — are posted
// unsignaled and retire with a later signaled request (a later operation's,
// a flush's or a liveness probe's). On an RC queue pair the send queue
// completes in order, so a signaled completion for `seq` retires every
// earlier entry too, and an error completion — which the device reports even
// for unsignaled requests — retires exactly its own entry after the earlier
// ones. The ring never holds more than `capacity` entries, so the device's
// send queue (created with that many entries) cannot overflow; a full ring is
// back-pressure (status::again).
//
// cq_credits: the domain-wide count of work requests that may still produce
// completion queue entries, so the shared CQ cannot overflow either (flushed
// requests produce entries whether signaled or not).
#pragma once

#include <fabrix/completion.hpp>

#include <cstdint>
#include <memory>

namespace fabrix::verbs::detail {

struct sq_entry {
  std::uint64_t token = 0;
  std::uint64_t bytes = 0;
  std::uint32_t imm = 0;
  opcode op = opcode::write;
  std::uint8_t flags = 0;
  bool internal = false;  // a liveness probe (post.hpp): no user completion, no CQ credit
  // op_options::unsignaled in effect: retiring it fine only counts it in the
  // queue pair's finished(); failing, it completes with its error as usual.
  bool unsignaled = false;
};

class send_ring {
 public:
  explicit send_ring(std::uint32_t capacity)
      : slots_(std::make_unique<sq_entry[]>(capacity)),
        capacity_(capacity),
        signal_every_(capacity / 4 ? capacity / 4 : 1) {}

  std::uint32_t capacity() const noexcept { return capacity_; }
  std::uint32_t in_flight() const noexcept { return static_cast<std::uint32_t>(head_ - tail_); }
  std::uint32_t room() const noexcept { return capacity_ - in_flight(); }
  bool empty() const noexcept { return head_ == tail_; }
  std::uint64_t next_seq() const noexcept { return head_; }
  std::uint64_t oldest_seq() const noexcept { return tail_; }

  // The entry that the i-th request of the next post will use (i < room()).
  sq_entry& staged(std::uint32_t i) noexcept { return slots_[(head_ + i) % capacity_]; }
  // Of n staged requests, one past the last that wants a completion (not
  // unsignaled); 0 when none does.
  std::uint32_t signal_point(std::uint32_t n) const noexcept {
    while (n > 0 && slots_[(head_ + n - 1) % capacity_].unsignaled) --n;
    return n;
  }
  // Whether the i-th staged request must be signaled, `point` being the
  // chain's signal_point().
  bool must_signal(std::uint32_t i, std::uint32_t point) const noexcept {
    return i + 1 == point || (head_ + i + 1) % signal_every_ == 0;
  }
  // The i-th staged request is posted signaled: until it retires a CQE is due.
  void note_signaled(std::uint32_t i) noexcept { signaled_end_ = head_ + i + 1; }
  // The first n staged entries were posted.
  void commit(std::uint32_t n) noexcept { head_ += n; }
  // Whether a signaled request is in flight (its CQE will retire what is
  // before it). False with entries in flight: they are unsignaled and wait
  // for a later signaled request.
  bool cqe_due() const noexcept { return signaled_end_ > tail_; }

  // The in-flight seq whose low 32 bits are `low` (the ring never holds
  // 2^31 entries); at or past next_seq() when none is.
  std::uint64_t seq_from(std::uint32_t low) const noexcept {
    return tail_ + static_cast<std::uint32_t>(low - static_cast<std::uint32_t>(tail_));
  }

  // Retires entries up to and including `seq`, calling f(entry, is_last)
  // for each in order (is_last for `seq` itself). Returns how many were
  // retired; 0 when `seq` is not in flight (a stale or foreign wr_id).
  template <class F>
  std::uint32_t retire_through(std::uint64_t seq, F&& f) {
    if (seq < tail_ || seq >= head_) return 0;
    std::uint32_t n = 0;
    while (tail_ <= seq) {
      f(slots_[tail_ % capacity_], tail_ == seq);
      ++tail_;
      ++n;
    }
    return n;
  }

 private:
  std::unique_ptr<sq_entry[]> slots_;
  std::uint32_t capacity_;
  std::uint32_t signal_every_;
  std::uint64_t head_ = 0;          // next seq to post
  std::uint64_t tail_ = 0;          // oldest seq not retired
  std::uint64_t signaled_end_ = 0;  // one past the newest signaled seq posted
};

class cq_credits {
 public:
  explicit cq_credits(std::uint64_t total) : left_(total), total_(total) {}
  std::uint64_t available() const noexcept { return left_; }
  std::uint64_t total() const noexcept { return total_; }
  void take(std::uint64_t n) noexcept { left_ -= n; }
  void give(std::uint64_t n) noexcept { left_ = left_ + n > total_ ? total_ : left_ + n; }

 private:
  std::uint64_t left_;
  std::uint64_t total_;
};

}  // namespace fabrix::verbs::detail
