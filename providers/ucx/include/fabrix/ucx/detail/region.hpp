// A ucp_mem_map registration and its packed rkey, carried in a remote_buffer.
#pragma once

#include <fabrix/remote_buffer.hpp>
#include <fabrix/ucx/detail/state.hpp>
#include <fabrix/ucx/native.hpp>

#include <ucp/api/ucp.h>

#include <utility>

namespace fabrix::ucx::detail {

class region_impl {
 public:
  native_region native() const noexcept { return {memh_}; }
  region_impl(detail::domain_state* d, ucp_mem_h memh, const remote_buffer& rb) : d_(d), memh_(memh), rb_(rb) {}
  region_impl(region_impl&& o) noexcept : d_(o.d_), memh_(std::exchange(o.memh_, nullptr)), rb_(o.rb_) {}
  region_impl& operator=(region_impl&& o) noexcept {
    if (this != &o) {
      release();
      d_ = o.d_;
      memh_ = std::exchange(o.memh_, nullptr);
      rb_ = o.rb_;
    }
    return *this;
  }
  ~region_impl() { release(); }

  const remote_buffer& remote() const noexcept { return rb_; }
  void* descriptor() const noexcept { return memh_; }

 private:
  // The region leaves the target's tables first: from then on checked
  // requests through its remote_buffer are answered stale_key (rma.hpp), and
  // peers on this node that use an allocated region directly see its key
  // table slot cleared (post.hpp). Node-mates that copy by CMA (cma.hpp) may
  // be inside a copy that checked the slot before: release returns once
  // none is (access_board.hpp), so the caller may free the memory.
  void release() noexcept {
    if (memh_) {
      d_->regions.erase(rb_.epoch);
      if (const std::uint32_t slot = detail::key_slot_of(rb_.epoch); slot != 0) {
        d_->keys.release(slot);
        if ((rb_.epoch & detail::ucx_allocated) == 0) {
          fabrix::detail::wait_for_node_mates(d_->boards, d_->nonce);
        }
      }
      ucp_mem_unmap(d_->context, memh_);
    }
    memh_ = nullptr;
  }

  detail::domain_state* d_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  remote_buffer rb_;
};

}  // namespace fabrix::ucx::detail
