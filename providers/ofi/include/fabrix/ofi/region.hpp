// A libfabric memory registration (fi_mr_regattr, bound and enabled on the
// endpoint where the provider asks for FI_MR_ENDPOINT) and its remote_buffer,
// whose key bytes say how peers address it (key.hpp).
#pragma once

#include <fabrix/remote_buffer.hpp>

#include <rdma/fi_domain.h>

#include <utility>

namespace fabrix::ofi {

class region_impl {
 public:
  region_impl(fid_mr* mr, const remote_buffer& rb) : mr_(mr), rb_(rb) {}
  region_impl(region_impl&& o) noexcept : mr_(std::exchange(o.mr_, nullptr)), rb_(o.rb_) {}
  region_impl& operator=(region_impl&& o) noexcept {
    if (this != &o) {
      release();
      mr_ = std::exchange(o.mr_, nullptr);
      rb_ = o.rb_;
    }
    return *this;
  }
  ~region_impl() { release(); }

  const remote_buffer& remote() const noexcept { return rb_; }
  // fi_mr_desc: passed with every local buffer (required under FI_MR_LOCAL).
  void* descriptor() const noexcept { return mr_ ? fi_mr_desc(mr_) : nullptr; }
  fid_mr* native() const noexcept { return mr_; }

 private:
  void release() noexcept {
    if (mr_) fi_close(&mr_->fid);
    mr_ = nullptr;
  }

  fid_mr* mr_;
  remote_buffer rb_;
};

}  // namespace fabrix::ofi
