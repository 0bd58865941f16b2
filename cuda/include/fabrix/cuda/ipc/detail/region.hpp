// A cuda_ipc registration. Device memory with remote rights is exported:
// cudaMalloc memory as a cudaIpcMemHandle_t in the key, cuMemCreate memory
// (POSIX fd handle type) as an export id whose fd the domain hands to peers
// that ask. Host memory may be registered for local use only (pinned with
// cudaHostRegister so copies to and from it are asynchronous).
// Destruction tells every connected peer (a `release` packet), so importers
// close their mapping of the allocation when no region of it is left.
#pragma once

#include <fabrix/cuda/ipc/detail/progress.hpp>
#include <fabrix/cuda/ipc/detail/state.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cuda_runtime_api.h>

#include <utility>

namespace fabrix::cuda::ipc::detail {

class region_impl {
 public:
  region_impl(detail::domain_state* d, const remote_buffer& rb, bool host_registered, bool exported)
      : d_(d), rb_(rb), host_registered_(host_registered), exported_(exported) {}
  region_impl(region_impl&& o) noexcept
      : d_(std::exchange(o.d_, nullptr)), rb_(o.rb_), host_registered_(o.host_registered_), exported_(o.exported_) {}
  region_impl& operator=(region_impl&& o) noexcept {
    if (this != &o) {
      release();
      d_ = std::exchange(o.d_, nullptr);
      rb_ = o.rb_;
      host_registered_ = o.host_registered_;
      exported_ = o.exported_;
    }
    return *this;
  }
  region_impl(const region_impl&) = delete;
  region_impl& operator=(const region_impl&) = delete;
  ~region_impl() { release(); }

  const remote_buffer& remote() const noexcept { return rb_; }
  void* descriptor() const noexcept { return nullptr; }  // copies need no local key

 private:
  void release() noexcept {
    if (!d_) return;
    if (exported_) {
      std::erase_if(d_->exports, [&](const detail::vmm_export& e) { return e.id == rb_.epoch; });
      for (auto& l : d_->links)
        if (!l->closed) (void)detail::send_on(*l, packet_type::release, rb_.epoch, 0);
    }
    if (host_registered_) {
      device_guard on(d_->device);
      cudaHostUnregister(reinterpret_cast<void*>(static_cast<std::uintptr_t>(rb_.address)));
    }
    d_ = nullptr;
  }

  detail::domain_state* d_ = nullptr;
  remote_buffer rb_;
  bool host_registered_ = false;
  bool exported_ = false;
};

}  // namespace fabrix::cuda::ipc::detail
