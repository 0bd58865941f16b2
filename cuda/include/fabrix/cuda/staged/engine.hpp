// What the staged adapter needs from its copy engine, beyond
// staging_pipeline's copy_engine: a factory for `slots` engine slots and the
// host memory the bounce slots live in.
//
//   static result<E> create(int device, unsigned slots)
//   static result<typename E::host_memory> allocate_host(std::size_t bytes)
//   host_memory.bytes() -> std::span<std::byte>   (stable address, freed on destruction)
//
// cuda::stream_copy_engine (pinned memory, cudaMemcpyAsync) is the real one;
// tests use a memcpy engine over ordinary host memory. Needs no CUDA headers.
#pragma once

#include <fabrix/cuda/staging.hpp>
#include <fabrix/result.hpp>

#include <concepts>
#include <cstddef>
#include <span>

namespace fabrix::cuda {

// clang-format off
template <class E>
concept staging_engine = copy_engine<E> && std::movable<typename E::host_memory> &&
    requires(int device, unsigned slots, std::size_t bytes, const typename E::host_memory& m) {
      { E::create(device, slots) } -> std::same_as<result<E>>;
      { E::allocate_host(bytes) } -> std::same_as<result<typename E::host_memory>>;
      { m.bytes() } -> std::same_as<std::span<std::byte>>;
    };
// clang-format on

namespace detail {

// One staged operation's view of the shared engine: its pipeline's slots
// 0..depth-1 are the engine's slots base..base+depth-1.
template <class E>
struct lane_engine {
  E* engine = nullptr;
  unsigned base = 0;
  status start_copy(unsigned slot, void* dst, const void* src, std::size_t n) {
    return engine->start_copy(base + slot, dst, src, n);
  }
  status copy_state(unsigned slot) { return engine->copy_state(base + slot); }
};

}  // namespace detail
}  // namespace fabrix::cuda
