// A memory registration (ibv_reg_mr) and its rkey, carried in a
// remote_buffer as 4 little-endian key bytes.
#pragma once

#include <fabrix/remote_buffer.hpp>
#include <fabrix/verbs/native.hpp>

#include <infiniband/verbs.h>

#include <utility>

namespace fabrix::verbs::detail {

class region_impl {
 public:
  native_region native() const noexcept { return {mr_}; }
  region_impl(ibv_mr* mr, const remote_buffer& rb) : mr_(mr), rb_(rb) {}
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
  // The ibv_mr (local slices carry it; its lkey goes into scatter-gather lists).
  void* descriptor() const noexcept { return mr_; }

 private:
  // gcc 12 at -O1 sees this read as maybe uninitialized when a
  // std::variant holding another provider's region is destroyed (routed's
  // one_of): a false positive that -Werror would turn into a user's build
  // failure. mr_ is always initialized (nullptr by default).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  void release() noexcept {
    if (mr_) ibv_dereg_mr(mr_);
    mr_ = nullptr;
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  ibv_mr* mr_ = nullptr;
  remote_buffer rb_;
};

}  // namespace fabrix::verbs::detail
