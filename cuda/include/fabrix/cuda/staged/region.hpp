// A registration made through a staged domain: host memory (and device
// memory when the inner provider reaches it directly) is the inner
// provider's own registration; staged device memory is not registered with
// the network at all (it is copied through the bounce slots) and carries a
// local-only remote_buffer that names the inner provider and domain, so its
// slices pass the core's checks like any other of the domain's.
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/remote_buffer.hpp>

#include <optional>
#include <utility>

namespace fabrix::cuda::detail {

// descriptor() of staged device regions: never dereferenced, only compared.
inline constexpr char staged_descriptor_tag = 0;

template <provider P>
class staged_region {
 public:
  explicit staged_region(typename P::region_impl inner) : inner_(std::move(inner)) {}
  explicit staged_region(const remote_buffer& local_only) : rb_(local_only) {}

  const remote_buffer& remote() const noexcept { return inner_ ? inner_->remote() : rb_; }
  void* descriptor() const noexcept {
    return inner_ ? inner_->descriptor() : const_cast<char*>(&staged_descriptor_tag);
  }
  bool staged() const noexcept { return !inner_; }

 private:
  std::optional<typename P::region_impl> inner_;
  remote_buffer rb_{};
};

}  // namespace fabrix::cuda::detail
