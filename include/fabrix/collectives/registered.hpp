// Buffers a user registers with a communicator (communicator::
// register_memory), so that collectives on memory inside them move chunks
// straight from and into it instead of copying through the scratch
// (zero_copy.hpp). The registry is what the communicator keeps; the handle
// is what the user holds.
//
// Lifetime: a handle deregisters its buffer when destroyed. It must not
// outlive its communicator, and must not be destroyed while a collective
// call of that communicator runs (calls are blocking, so: between calls).
// Threading: as the communicator, one thread at a time.
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/memory_region.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace fabrix::coll {

namespace detail {

template <provider P>
class registry {
 public:
  struct entry {
    std::uint64_t id;
    memory_region<P> region;
  };

  std::uint64_t add(memory_region<P> region) {
    entries_.push_back(std::make_unique<entry>(entry{next_id_, std::move(region)}));
    return next_id_++;
  }
  void remove(std::uint64_t id) {
    std::erase_if(entries_, [id](const auto& e) { return e->id == id; });
  }
  // The registration that holds all of [p, p + bytes), or nullptr.
  const memory_region<P>* find(const void* p, std::size_t bytes) const noexcept {
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& e : entries_) {
      const std::byte* base = e->region.data();
      if (b >= base && bytes <= e->region.size() && static_cast<std::size_t>(b - base) <= e->region.size() - bytes)
        return &e->region;
    }
    return nullptr;
  }
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  std::vector<std::unique_ptr<entry>> entries_;
  std::uint64_t next_id_ = 1;
};

}  // namespace detail

// Keeps one buffer registered with a communicator. Move-only.
template <provider P>
class registered_memory {
 public:
  registered_memory() = default;
  registered_memory(detail::registry<P>* r, std::uint64_t id) noexcept : registry_(r), id_(id) {}
  registered_memory(registered_memory&& o) noexcept
      : registry_(std::exchange(o.registry_, nullptr)), id_(std::exchange(o.id_, 0)) {}
  registered_memory& operator=(registered_memory&& o) noexcept {
    if (this != &o) {
      reset();
      registry_ = std::exchange(o.registry_, nullptr);
      id_ = std::exchange(o.id_, 0);
    }
    return *this;
  }
  registered_memory(const registered_memory&) = delete;
  registered_memory& operator=(const registered_memory&) = delete;
  ~registered_memory() { reset(); }

  // Deregisters now (the same as destroying the handle).
  void reset() noexcept {
    if (registry_ != nullptr) registry_->remove(id_);
    registry_ = nullptr;
  }

 private:
  detail::registry<P>* registry_ = nullptr;
  std::uint64_t id_ = 0;
};

}  // namespace fabrix::coll
