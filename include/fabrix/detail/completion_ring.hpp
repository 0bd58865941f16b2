// A FIFO of completions that providers fill from their callbacks and drain in
// poll(). Capacity is reserved up front; it doubles only when more inbound
// events (notifications) arrive than were reserved — never per operation in
// the steady state. Single-threaded, like its domain.
#pragma once

#include <fabrix/completion.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace fabrix::detail {

class completion_ring {
 public:
  explicit completion_ring(std::size_t capacity = 1024) : slots_(round_up(capacity)), mask_(slots_.size() - 1) {}

  bool empty() const noexcept { return head_ == tail_; }
  std::size_t size() const noexcept { return tail_ - head_; }

  // Small enough to inline into a provider's post path; grow() is not.
  void push(const completion& c) {
    if (size() > mask_) grow();
    slots_[tail_++ & mask_] = c;
  }
  // Moves up to out.size() completions into `out`, oldest first.
  std::size_t drain(std::span<completion> out) noexcept {
    const std::size_t n = std::min(out.size(), size());
    for (std::size_t i = 0; i < n; ++i) out[i] = slots_[(head_ + i) & mask_];
    head_ += n;
    return n;
  }

 private:
  static std::size_t round_up(std::size_t n) {
    std::size_t p = 16;
    while (p < n) p *= 2;
    return p;
  }
  [[gnu::noinline]] void grow() {
    std::vector<completion> bigger(slots_.size() * 2);
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) bigger[i] = slots_[(head_ + i) & mask_];
    slots_.swap(bigger);
    mask_ = slots_.size() - 1;
    head_ = 0;
    tail_ = n;
  }

  std::vector<completion> slots_;
  std::size_t mask_;      // slots_.size() - 1 (a power of two less one)
  std::size_t head_ = 0;  // monotonic; index = counter & (capacity - 1)
  std::size_t tail_ = 0;
};

}  // namespace fabrix::detail
