// A libfabric memory registration (fi_mr_regattr, bound and enabled on the
// endpoint where the provider asks for FI_MR_ENDPOINT) and its remote_buffer,
// whose key bytes say how peers address it (key.hpp).
#pragma once

#include <fabrix/ofi/detail/key.hpp>
#include <fabrix/ofi/detail/state.hpp>
#include <fabrix/ofi/native.hpp>
#include <fabrix/remote_buffer.hpp>

#include <rdma/fi_domain.h>

#include <utility>

namespace fabrix::ofi::detail {

class region_impl {
 public:
  // `slot`: the registration's entry in `d`'s key table (detail::no_slot: none).
  region_impl(fid_mr* mr, const remote_buffer& rb, detail::domain_state* d, std::uint32_t slot)
      : mr_(mr), rb_(rb), d_(d), slot_(slot) {}
  region_impl(region_impl&& o) noexcept
      : mr_(std::exchange(o.mr_, nullptr)), rb_(o.rb_), d_(o.d_), slot_(std::exchange(o.slot_, detail::no_slot)) {}
  region_impl& operator=(region_impl&& o) noexcept {
    if (this != &o) {
      release();
      mr_ = std::exchange(o.mr_, nullptr);
      rb_ = o.rb_;
      d_ = o.d_;
      slot_ = std::exchange(o.slot_, detail::no_slot);
    }
    return *this;
  }
  ~region_impl() { release(); }

  const remote_buffer& remote() const noexcept { return rb_; }
  // fi_mr_desc: passed with every local buffer (required under FI_MR_LOCAL).
  void* descriptor() const noexcept { return mr_ ? fi_mr_desc(mr_) : nullptr; }
  native_region native() const noexcept { return {mr_}; }

 private:
  // Peers on this node refuse the key from the moment the slot is cleared;
  // the provider forgets it at fi_close. (The domain state outlives every
  // region: the core keeps it alive.)
  void release() noexcept {
    if (d_ && slot_ != detail::no_slot) {
      d_->keys.release(slot_);
      if (d_->local_reads) {  // a node-mate's read may be in its copy: wait for it (access_board.hpp)
        fabrix::detail::wait_for_node_mates(d_->boards, d_->nonce);
      }
    }
    slot_ = detail::no_slot;
    if (mr_) fi_close(&mr_->fid);
    mr_ = nullptr;
  }

  fid_mr* mr_ = nullptr;
  remote_buffer rb_;
  detail::domain_state* d_ = nullptr;
  std::uint32_t slot_ = detail::no_slot;
};

}  // namespace fabrix::ofi::detail
