// The importer's cache of opened peer allocations: each allocation is opened
// once (cudaIpcOpenMemHandle, or fd import + cuMemMap) however many regions
// and operations use it, and closed when no region of it is in use.
//
// Keyed by (exporter domain, buffer id, handle kind + bytes): the exporter's
// buffer id changes when an address is freed and reused, so a new allocation
// at an old address is a miss and is opened afresh, never served stale.
// Each entry records the region epochs (remote_buffer::epoch) that use it:
// release_epoch() — sent by the exporter when it deregisters a region — and
// release_owner() — when the peer goes away — drop them, and an entry with
// no epoch left is closed.
//
// Opener (the real one is opener.hpp; tests use a fake):
//   result<Mapping> open(std::uint64_t owner, const ipc_handle&)
//   void close(Mapping&)
// where Mapping has `std::byte* base` (the allocation's first byte here).
// Single-threaded. The caller makes sure no copy still uses a mapping it
// releases (the provider synchronizes the peer's stream first).
#pragma once

#include <fabrix/cuda/ipc/detail/handle.hpp>
#include <fabrix/result.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace fabrix::cuda::ipc {

template <class Opener>
class mapping_cache {
 public:
  using mapping = typename Opener::mapping;

  explicit mapping_cache(Opener opener, std::size_t max_entries = 4096)
      : opener_(std::move(opener)), max_entries_(max_entries) {}
  mapping_cache(const mapping_cache&) = delete;
  mapping_cache& operator=(const mapping_cache&) = delete;
  ~mapping_cache() { clear(); }

  // Where `h`'s allocation starts in this process, for region `epoch` of
  // domain `owner`; opened now if it is not open yet. Valid until that epoch
  // (or owner) is released.
  result<std::byte*> acquire(std::uint64_t owner, std::uint64_t epoch, const ipc_handle& h) {
    for (auto& e : entries_) {
      if (!same_allocation(e, owner, h)) continue;
      if (std::find(e.epochs.begin(), e.epochs.end(), epoch) == e.epochs.end()) e.epochs.push_back(epoch);
      return e.map.base;
    }
    if (entries_.size() >= max_entries_)
      return unexpected(status::no_memory,
                        "cuda_ipc: more than " + std::to_string(max_entries_) + " peer allocations open", "cuda_ipc");
    auto m = opener_.open(owner, h);
    if (!m) return unexpected(std::move(m).error());
    entries_.push_back(entry{owner, h.buffer_id, h.kind, h.handle_size, h.handle, std::move(*m), {epoch}});
    ++opens_;
    return entries_.back().map.base;
  }

  // Region `epoch` of `owner` is gone; closes allocations no region uses.
  void release_epoch(std::uint64_t owner, std::uint64_t epoch) {
    drop_if([&](entry& e) {
      if (e.owner != owner) return false;
      std::erase(e.epochs, epoch);
      return e.epochs.empty();
    });
  }
  // Every allocation of `owner` (a peer that went away).
  void release_owner(std::uint64_t owner) {
    drop_if([&](entry& e) { return e.owner == owner; });
  }
  void clear() {
    drop_if([](entry&) { return true; });
  }

  std::size_t size() const noexcept { return entries_.size(); }
  std::size_t opens() const noexcept { return opens_; }  // allocations opened so far
  bool holds(std::uint64_t owner) const noexcept {
    return std::any_of(entries_.begin(), entries_.end(), [&](const entry& e) { return e.owner == owner; });
  }
  Opener& opener() noexcept { return opener_; }

 private:
  struct entry {
    std::uint64_t owner;
    std::uint64_t buffer_id;
    handle_kind kind;
    std::uint16_t handle_size;
    std::array<std::byte, max_handle_size> handle;
    mapping map;
    std::vector<std::uint64_t> epochs;
  };

  static bool same_allocation(const entry& e, std::uint64_t owner, const ipc_handle& h) noexcept {
    return e.owner == owner && e.buffer_id == h.buffer_id && e.kind == h.kind && e.handle_size == h.handle_size &&
           std::memcmp(e.handle.data(), h.handle.data(), h.handle_size) == 0;
  }
  template <class Pred>
  void drop_if(Pred pred) {
    for (std::size_t i = 0; i < entries_.size();) {
      if (pred(entries_[i])) {
        opener_.close(entries_[i].map);
        entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  Opener opener_;
  std::size_t max_entries_;
  std::vector<entry> entries_;  // few: one per peer allocation in use
  std::size_t opens_ = 0;
};

}  // namespace fabrix::cuda::ipc
