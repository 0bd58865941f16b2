// The seam between the collectives and memory the CPU cannot touch.
//
// A communicator made with options::device (a device_kernels) keeps its
// scratch in memory that object allocates, and its collectives then take
// buffers in that same memory (memory_location equal to location()). Every
// local data movement goes through copy / combine, which only enqueue work
// (on one stream, in order); ready() waits for all of it. The collectives
// call ready() before a chunk's write is posted (its send slot is filled)
// and before a received chunk's slot goes back to the peer (it is read), and
// before they return (the output is complete).
//
// The core defines only this interface (no CUDA header): the CUDA
// implementation is fabrix::cuda::collective_kernels
// (<fabrix/cuda/collective_kernels.hpp>, in the fabrix-cuda dependency).
//
// Threading: used by one communicator's thread. Lifetime: outlives every
// communicator made with it. The hot path allocates nothing.
#pragma once

#include <fabrix/collectives/reduce.hpp>
#include <fabrix/memory.hpp>
#include <fabrix/result.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fabrix::coll {

// The element types of reductions, as a runtime value (the kernel table's index).
enum class element_type : std::uint8_t { i32, i64, f32, f64 };
inline constexpr std::size_t element_type_count = 4;
inline constexpr std::size_t reduce_op_count = 3;

template <element T>
constexpr element_type element_type_of() noexcept {
  if constexpr (std::same_as<T, std::int32_t>) return element_type::i32;
  if constexpr (std::same_as<T, std::int64_t>) return element_type::i64;
  if constexpr (std::same_as<T, float>) return element_type::f32;
  if constexpr (std::same_as<T, double>) return element_type::f64;
}

constexpr std::size_t element_size(element_type t) noexcept {
  return t == element_type::i32 || t == element_type::f32 ? 4 : 8;
}

class device_kernels {
 public:
  virtual ~device_kernels() = default;
  // Where allocate() memory lives and where the collectives' buffers must be.
  virtual memory_location location() const noexcept = 0;
  // Scratch for a communicator (once, at creation); the provider registers it
  // with remote_write. Freed with deallocate() after its deregistration.
  virtual result<void*> allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  // Enqueue dst[0, bytes) = src[0, bytes) (may be the same pointer; not
  // otherwise overlapping). Returns the enqueue error, if any.
  virtual status copy(void* dst, const void* src, std::size_t bytes) noexcept = 0;
  // Enqueue out[i] = a[i] op b[i] for n elements of `type`; out may be a or b.
  virtual status combine(element_type type, reduce_op op, void* out, const void* a, const void* b,
                         std::size_t n) noexcept = 0;
  // Waits until everything enqueued has finished; the first failure of any
  // of it (an error result) otherwise.
  virtual result<void> ready() = 0;
};

namespace detail {

// The algorithms' kernel interface over a device_kernels: records the first
// enqueue error and reports it from ready().
class device_adapter {
 public:
  explicit device_adapter(device_kernels& k) noexcept : k_(&k) {}
  void copy(void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0 && first_ == status::ok) first_ = k_->copy(dst, src, bytes);
  }
  template <element T>
  void combine(T* out, const T* a, const T* b, std::size_t n, reduce_op op) noexcept {
    if (n != 0 && first_ == status::ok) first_ = k_->combine(element_type_of<T>(), op, out, a, b, n);
  }
  result<void> ready() {
    if (first_ != status::ok)
      return unexpected(first_, "collectives: enqueueing a device kernel failed", "collectives");
    return k_->ready();
  }

 private:
  device_kernels* k_;
  status first_ = status::ok;
};

}  // namespace detail

}  // namespace fabrix::coll
