// A fixed pool of per-operation state, allocated once when the domain is
// created: taking and returning a slot is O(1) and never allocates. An empty
// pool is back-pressure (status::again), not an error. Slots have stable
// addresses, so a slot pointer can be a provider's callback argument.
// Single-threaded, like its domain.
#pragma once

#include <cstddef>
#include <memory>

namespace fabrix::detail {

// Slot must have a `Slot* next_free` member. A slot goes back reset to
// Slot{}, or, when Slot has `void recycle() noexcept`, reset by that: a slot
// with large buffers that every use writes before it reads them (iovecs, AM
// headers) resets only the rest, so returning a slot costs a few stores, not
// a memset of the whole slot per operation.
template <class Slot>
class slot_pool {
 public:
  explicit slot_pool(std::size_t capacity) : slots_(std::make_unique<Slot[]>(capacity)), capacity_(capacity) {
    for (std::size_t i = 0; i < capacity; ++i) slots_[i].next_free = i + 1 < capacity ? &slots_[i + 1] : nullptr;
    free_ = capacity ? &slots_[0] : nullptr;
  }

  // nullptr when every slot is in use.
  Slot* take() noexcept {
    Slot* s = free_;
    if (s) {
      free_ = s->next_free;
      s->next_free = nullptr;
      ++in_use_;
    }
    return s;
  }
  void give_back(Slot* s) noexcept {
    if constexpr (requires { s->recycle(); })
      s->recycle();
    else
      *s = Slot{};
    s->next_free = free_;
    free_ = s;
    --in_use_;
  }

  std::size_t in_use() const noexcept { return in_use_; }
  std::size_t capacity() const noexcept { return capacity_; }
  // For teardown walks over every slot (in use or not).
  Slot* begin() noexcept { return slots_.get(); }
  Slot* end() noexcept { return slots_.get() + capacity_; }

 private:
  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_;
  Slot* free_ = nullptr;
  std::size_t in_use_ = 0;
};

}  // namespace fabrix::detail
