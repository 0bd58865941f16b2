// Buffers a user registers with a communicator (communicator::
// register_memory), or has it allocate (communicator::allocate_memory), so
// that collectives on memory inside them move chunks straight from and into
// it instead of copying through the scratch (zero_copy.hpp). The registry is
// what the communicator keeps; the handle is what the user holds; a
// peer_output is what a peer said of its own.
//
// Lifetime: a handle deregisters its buffer (and frees it, if allocated)
// when destroyed, or when its communicator is (a handle that outlives it is
// then empty). A registered buffer must stay allocated while registered.
// Threading: as the communicator, one thread at a time.
#pragma once

#include <fabrix/collectives/owned_region.hpp>
#include <fabrix/concepts.hpp>
#include <fabrix/memory_region.hpp>
#include <fabrix/remote_buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace fabrix::coll {

namespace detail {

template <provider P>
class registry {
 public:
  struct entry {
    std::uint64_t id;
    owned_region<P> mem;  // a user's buffer (mem.memory empty), or memory allocated for it
  };

  std::uint64_t add(owned_region<P> mem) {
    entries_.push_back(std::make_unique<entry>(entry{next_id_, std::move(mem)}));
    return next_id_++;
  }
  const entry* get(std::uint64_t id) const noexcept {
    for (const auto& e : entries_)
      if (e->id == id) return e.get();
    return nullptr;
  }
  // Whether `region` is one of these and came from the provider.
  bool from_provider(const memory_region<P>* region) const noexcept {
    for (const auto& e : entries_)
      if (&e->mem.region == region) return e->mem.from_provider;
    return false;
  }
  void remove(std::uint64_t id) {
    std::erase_if(entries_, [id](const auto& e) { return e->id == id; });
  }
  // The registration that holds all of [p, p + bytes), or nullptr.
  const memory_region<P>* find(const void* p, std::size_t bytes) const noexcept {
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& e : entries_) {
      const std::byte* base = e->mem.region.data();
      if (b >= base && bytes <= e->mem.region.size() &&
          static_cast<std::size_t>(b - base) <= e->mem.region.size() - bytes)
        return &e->mem.region;
    }
    return nullptr;
  }

 private:
  std::vector<std::unique_ptr<entry>> entries_;
  std::uint64_t next_id_ = 1;
};

// Where a peer's registered output is for the current call, as its output
// message said (zero_copy.hpp): `at` bytes into `region`. Not registered:
// write into its receive slots.
struct peer_output {
  bool registered = false;
  remote_buffer region{};
  std::uint64_t at = 0;

  // The peer's bytes [at + first, + len) for a chunk route (valid while this lives).
  remote_slice slice(std::uint64_t first, std::uint64_t len) const noexcept { return region.slice(at + first, len); }
};

}  // namespace detail

// Keeps one buffer registered with a communicator. Move-only.
template <provider P>
class registered_memory {
 public:
  registered_memory() = default;
  registered_memory(std::weak_ptr<detail::registry<P>> r, std::uint64_t id) noexcept
      : registry_(std::move(r)), id_(id) {}
  registered_memory(registered_memory&& o) noexcept
      : registry_(std::exchange(o.registry_, {})), id_(std::exchange(o.id_, 0)) {}
  registered_memory& operator=(registered_memory&& o) noexcept {
    if (this != &o) {
      reset();
      registry_ = std::exchange(o.registry_, {});
      id_ = std::exchange(o.id_, 0);
    }
    return *this;
  }
  registered_memory(const registered_memory&) = delete;
  registered_memory& operator=(const registered_memory&) = delete;
  ~registered_memory() { reset(); }

  // The buffer; empty once the handle or its communicator is gone.
  std::span<std::byte> bytes() const noexcept {
    auto r = registry_.lock();
    const auto* e = r ? r->get(id_) : nullptr;
    if (e == nullptr) return {};
    return {e->mem.region.data(), e->mem.region.size()};
  }
  // The buffer as elements of T (bytes() must hold whole T's, suitably aligned).
  template <class T>
  std::span<T> as() const noexcept {
    const auto b = bytes();
    return {reinterpret_cast<T*>(b.data()), b.size() / sizeof(T)};
  }

  // Deregisters (and frees, if allocated) now, the same as destroying the
  // handle. Not during a collective call of its communicator (calls are
  // blocking: between calls).
  void reset() noexcept {
    if (auto r = registry_.lock()) r->remove(id_);
    registry_.reset();
  }

 private:
  std::weak_ptr<detail::registry<P>> registry_;
  std::uint64_t id_ = 0;
};

}  // namespace fabrix::coll
