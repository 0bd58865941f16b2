// A communicator's scratch: the one registered region its chunks move
// through, and where each channel's slots lie in it.
//
// Layout: for each other rank q (in rank order, skipping self), a receive
// area of `slots` chunks, then a send area of `slots` chunks. Every rank
// uses the same layout, so a rank computes where its chunk lands at a peer.
//
// Memory: host memory (page aligned) or, with a device_kernels, memory it
// allocates (device memory). Allocated once, at the communicator's creation;
// freed after the region on it is deregistered (the owner's member order).
#pragma once

#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/result.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace fabrix::coll::detail {

struct scratch_layout {
  int rank = 0;
  std::uint32_t slots = 2;
  std::size_t chunk_bytes = 8;

  // Offset of the areas `owner` keeps for its channel with `other`.
  std::size_t area(int owner, int other) const noexcept {
    const int index = other < owner ? other : other - 1;
    return static_cast<std::size_t>(index) * 2 * slots * chunk_bytes;
  }
  std::size_t slot_offset(std::uint64_t k) const noexcept { return (k % slots) * chunk_bytes; }
  // Where chunk k from `peer` lands here.
  std::size_t recv_offset(int peer, std::uint64_t k) const noexcept { return area(rank, peer) + slot_offset(k); }
  // Where chunk k to `peer` is staged here.
  std::size_t send_offset(int peer, std::uint64_t k) const noexcept {
    return area(rank, peer) + slots * chunk_bytes + slot_offset(k);
  }
  // Where chunk k to `peer` lands in the peer's scratch.
  std::size_t recv_offset_at(int peer, std::uint64_t k) const noexcept { return area(peer, rank) + slot_offset(k); }
};

class scratch_memory {
 public:
  scratch_memory() = default;
  // `bytes` of host memory, or of `device`'s memory when it is not null
  // (it must outlive this object).
  static result<scratch_memory> create(std::size_t bytes, device_kernels* device) {
    scratch_memory m;
    if (device != nullptr) {
      auto p = device->allocate(bytes);
      if (!p) return unexpected(std::move(p).error());
      m.ptr_ = static_cast<std::byte*>(*p);
      m.device_ = device;
      m.where_ = device->location();
      return m;
    }
    const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
    m.ptr_ = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
    if (m.ptr_ == nullptr) return unexpected(status::no_memory, "collectives: cannot allocate scratch");
    return m;
  }
  scratch_memory(scratch_memory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), device_(std::exchange(o.device_, nullptr)), where_(o.where_) {}
  scratch_memory& operator=(scratch_memory&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      device_ = std::exchange(o.device_, nullptr);
      where_ = o.where_;
    }
    return *this;
  }
  scratch_memory(const scratch_memory&) = delete;
  scratch_memory& operator=(const scratch_memory&) = delete;
  ~scratch_memory() { release(); }

  std::byte* data() const noexcept { return ptr_; }
  memory_location location() const noexcept { return where_; }

 private:
  void release() noexcept {
    if (ptr_ == nullptr) return;
    if (device_ != nullptr)
      device_->deallocate(ptr_);
    else
      std::free(ptr_);
    ptr_ = nullptr;
  }

  std::byte* ptr_ = nullptr;
  device_kernels* device_ = nullptr;
  memory_location where_{};
};

}  // namespace fabrix::coll::detail
