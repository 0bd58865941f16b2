// A FIFO of completions that providers fill from their callbacks and drain in
// poll(). Capacity is reserved up front; it doubles only when more inbound
// events (notifications) arrive than were reserved — never per operation in
// the steady state. Single-threaded, like its domain.
#pragma once

#include <fabrix/completion.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace fabrix::detail {

class completion_ring {
 public:
  explicit completion_ring(std::size_t capacity = 1024) : slots_(round_up(capacity)) {}

  bool empty() const noexcept { return head_ == tail_; }
  std::size_t size() const noexcept { return tail_ - head_; }

  void push(const completion& c) {
    if (size() == slots_.size()) grow();
    slots_[tail_++ & (slots_.size() - 1)] = c;
  }
  // Moves up to out.size() completions into `out`, oldest first.
  std::size_t drain(std::span<completion> out) noexcept {
    std::size_t n = 0;
    while (n < out.size() && !empty()) out[n++] = slots_[head_++ & (slots_.size() - 1)];
    return n;
  }

 private:
  static std::size_t round_up(std::size_t n) {
    std::size_t p = 16;
    while (p < n) p *= 2;
    return p;
  }
  void grow() {
    std::vector<completion> bigger(slots_.size() * 2);
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) bigger[i] = slots_[(head_ + i) & (slots_.size() - 1)];
    slots_.swap(bigger);
    head_ = 0;
    tail_ = n;
  }

  std::vector<completion> slots_;
  std::size_t head_ = 0;  // monotonic; index = counter & (capacity - 1)
  std::size_t tail_ = 0;
};

}  // namespace fabrix::detail
