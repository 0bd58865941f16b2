// fabrix_cuda_coll_combine / fabrix_cuda_coll_copy: the device side of the
// collectives' device_kernels (see collective_launch.hpp). One grid-stride
// kernel per (element type, op), chosen through a table indexed by
// combine_index; nothing is allocated per call.
#include <fabrix/cuda/collective_launch.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace {

namespace cl = fabrix::cuda::coll_launch;

// The host's std::min / std::max exactly (the same element wins on ties
// and NaNs), so host and device reductions agree bit for bit.
template <class T, int Op>
__device__ __forceinline__ T apply(T x, T y) {
  if (Op == 0) return x + y;
  if (Op == 1) return y < x ? y : x;
  return x < y ? y : x;
}

template <class T, int Op>
__global__ void combine_kernel(T* out, const T* a, const T* b, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = apply<T, Op>(a[i], b[i]);
}

using launcher = cudaError_t (*)(cudaStream_t, void*, const void*, const void*, std::size_t);

template <class T, int Op>
cudaError_t launch(cudaStream_t stream, void* out, const void* a, const void* b, std::size_t n) {
  const cl::geometry g = cl::launch_geometry(n);
  combine_kernel<T, Op>
      <<<g.blocks, g.threads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  return cudaGetLastError();
}

template <class T>
constexpr launcher row(int op) {
  return op == 0 ? &launch<T, 0> : op == 1 ? &launch<T, 1> : &launch<T, 2>;
}

// In combine_index order: type-major (i32, i64, f32, f64), then op (sum, min, max).
const launcher table[cl::type_count * cl::op_count] = {
    row<std::int32_t>(0), row<std::int32_t>(1), row<std::int32_t>(2), row<std::int64_t>(0),
    row<std::int64_t>(1), row<std::int64_t>(2), row<float>(0),        row<float>(1),
    row<float>(2),        row<double>(0),       row<double>(1),       row<double>(2),
};

}  // namespace

extern "C" int fabrix_cuda_coll_combine(void* stream, int type, int op, void* out, const void* a, const void* b,
                                        std::size_t n) {
  const int index = cl::combine_index(type, op);
  if (index < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (n == 0) return static_cast<int>(cudaSuccess);
  return static_cast<int>(table[index](static_cast<cudaStream_t>(stream), out, a, b, n));
}

extern "C" int fabrix_cuda_coll_copy(void* stream, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return static_cast<int>(cudaSuccess);
  return static_cast<int>(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}
