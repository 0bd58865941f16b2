// The device kernels of the collectives (cuda/src/collective_kernels.cu, in
// libfabrix_cuda_kernels): element-wise combine for sum/min/max over
// int32/int64/float/double, and stream-ordered copies. A C ABI, so the
// header-only C++20 code compiled by the host compiler links against the
// nvcc-built object; the launch geometry and the dispatch index are plain
// constexpr functions (no CUDA needed) so they are unit-tested everywhere
// (tests/collectives/unit_device_dispatch.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabrix::cuda::coll_launch {

// Element types and ops in the order of fabrix::coll::element_type and
// fabrix::coll::reduce_op (collective_kernels.hpp checks that they agree).
inline constexpr int type_count = 4;  // i32, i64, f32, f64
inline constexpr int op_count = 3;    // sum, min, max

// Index of the (type, op) kernel in the dispatch table, -1 when either is
// out of range.
constexpr int combine_index(int type, int op) noexcept {
  if (type < 0 || type >= type_count || op < 0 || op >= op_count) return -1;
  return type * op_count + op;
}

inline constexpr unsigned threads_per_block = 256;
// Grid-stride loops: more blocks than this add nothing but launch cost.
inline constexpr unsigned max_blocks = 4096;

struct geometry {
  unsigned blocks = 0;  // 0: nothing to launch
  unsigned threads = threads_per_block;
};

// One thread per element up to max_blocks * threads_per_block elements;
// beyond that each thread strides over several.
constexpr geometry launch_geometry(std::size_t n) noexcept {
  const std::size_t blocks = (n + threads_per_block - 1) / threads_per_block;
  return {static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks), threads_per_block};
}

}  // namespace fabrix::cuda::coll_launch

extern "C" {

// Enqueue out[i] = a[i] op b[i], i < n, on `stream` (a cudaStream_t).
// `type` and `op` as above; out may alias a or b. Returns a cudaError_t
// value: 0 when enqueued (or n == 0), cudaErrorInvalidValue (1) for an
// unknown type or op, else the launch error.
int fabrix_cuda_coll_combine(void* stream, int type, int op, void* out, const void* a, const void* b, std::size_t n);
// Enqueue a copy of `bytes` between any two device (or pinned host)
// addresses on `stream`. Returns a cudaError_t value.
int fabrix_cuda_coll_copy(void* stream, void* dst, const void* src, std::size_t bytes);
}
