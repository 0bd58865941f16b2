// fabrix::cuda::collective_kernels — the collectives' device_kernels
// (<fabrix/collectives/device_kernels.hpp>) for one CUDA device: scratch in
// device memory, copies and reductions enqueued on one non-blocking stream
// of its own (cuda/src/collective_kernels.cu), ready() synchronizes that
// stream.
//
//   auto k = fabrix::cuda::collective_kernels::create(0).value();
//   fabrix::coll::options o;
//   o.device = k.get();                      // outlives the communicator
//   auto comm = fabrix::coll::communicator<fabrix::cuda_ipc::provider>::create(dom, boot, o).value();
//   fabrix::coll::allreduce(comm, std::span<float>(dev_ptr, n), fabrix::coll::reduce_op::sum, k->location());
//
// Scratch is VMM memory (cuMemCreate, POSIX fd handle): the driver keeps it
// alive while a peer still maps it, so a communicator may be destroyed
// before its peers have dropped their mappings (cudaMalloc memory freed
// while imported would be undefined behaviour, cuda/README.md).
//
// Threading: one thread at a time (the communicator's). Allocation happens
// only in allocate() (communicator creation); copy / combine allocate nothing.
#pragma once

#include <fabrix/collectives/device_kernels.hpp>
#include <fabrix/cuda/collective_launch.hpp>
#include <fabrix/cuda/device_buffer.hpp>
#include <fabrix/cuda/runtime.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace fabrix::cuda {

static_assert(coll_launch::combine_index(static_cast<int>(coll::element_type::f64),
                                         static_cast<int>(coll::reduce_op::max)) ==
                  coll_launch::type_count * coll_launch::op_count - 1,
              "collective_launch.hpp's type and op order must be fabrix::coll's");

class collective_kernels final : public coll::device_kernels {
 public:
  // On CUDA device `device`; `scratch_kind`: how allocate() gets memory.
  static result<std::unique_ptr<collective_kernels>> create(int device = 0, allocation scratch_kind = allocation::vmm) {
    device_guard on(device);
    cudaStream_t s = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
      return cuda_fail(e, "collective_kernels: cudaStreamCreateWithFlags");
    return std::unique_ptr<collective_kernels>(new collective_kernels(device, scratch_kind, s));
  }
  ~collective_kernels() override {
    device_guard on(device_);
    cudaStreamSynchronize(stream_);
    buffers_.clear();
    cudaStreamDestroy(stream_);
  }
  collective_kernels(const collective_kernels&) = delete;
  collective_kernels& operator=(const collective_kernels&) = delete;

  memory_location location() const noexcept override { return {memory_kind::cuda_device, device_}; }

  result<void*> allocate(std::size_t bytes) override {
    auto b = device_buffer::create(bytes, device_, kind_);
    if (!b) return unexpected(std::move(b).error());
    void* p = b->data();
    buffers_.push_back(std::move(*b));
    return p;
  }
  void deallocate(void* p) noexcept override {
    std::erase_if(buffers_, [p](const device_buffer& b) { return b.data() == p; });
  }

  status copy(void* dst, const void* src, std::size_t bytes) noexcept override {
    device_guard on(device_);
    return to_status(static_cast<cudaError_t>(fabrix_cuda_coll_copy(stream_, dst, src, bytes)));
  }
  status combine(coll::element_type type, coll::reduce_op op, void* out, const void* a, const void* b,
                 std::size_t n) noexcept override {
    device_guard on(device_);
    return to_status(static_cast<cudaError_t>(
        fabrix_cuda_coll_combine(stream_, static_cast<int>(type), static_cast<int>(op), out, a, b, n)));
  }
  result<void> ready() override {
    device_guard on(device_);
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess)
      return cuda_fail(e, "collective kernels (cudaStreamSynchronize)", "collectives");
    return {};
  }

  cudaStream_t stream() const noexcept { return stream_; }

 private:
  collective_kernels(int device, allocation kind, cudaStream_t s) : device_(device), kind_(kind), stream_(s) {}

  int device_;
  allocation kind_;
  cudaStream_t stream_;
  std::vector<device_buffer> buffers_;  // allocate()'s, until deallocate()
};

}  // namespace fabrix::cuda
