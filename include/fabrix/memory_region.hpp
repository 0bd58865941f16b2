// fabrix::memory_region<P> — a registered, contiguous buffer. Move-only; the
// registration is released when it is destroyed (it keeps its domain's
// provider state alive until then, see domain.hpp), and must outlive every
// operation that uses its slices.
#pragma once

#include <fabrix/concepts.hpp>
#include <fabrix/detail/domain_core.hpp>
#include <fabrix/detail/provider_impl.hpp>
#include <fabrix/local_slice.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace fabrix {

template <provider P>
class memory_region {
 public:
  memory_region(typename P::region_impl impl, std::shared_ptr<detail::domain_core<P>> core)
      : core_(std::move(core)), impl_(std::move(impl)) {}

  std::byte* data() const noexcept { return reinterpret_cast<std::byte*>(remote().address); }
  std::size_t size() const noexcept { return static_cast<std::size_t>(remote().length); }
  memory_location location() const noexcept { return remote().location; }
  access rights() const noexcept { return remote().rights; }

  // A range for local use in operations. Out of range gives a slice whose
  // use returns status::out_of_range (valid() false, owner 0).
  local_slice slice(std::uint64_t offset, std::uint64_t length) const noexcept {
    const remote_buffer& rb = remote();
    local_slice s{nullptr, length, impl_.descriptor(), 0, rb.location};
    if (offset <= rb.length && length <= rb.length - offset) {
      s.address = data() + offset;
      s.owner = rb.owner;
    }
    return s;
  }
  local_slice whole() const noexcept { return slice(0, size()); }

  // What a peer needs to target this region; send it with encode() or exchange().
  const remote_buffer& remote() const noexcept { return impl_.remote(); }

  // The provider's native objects (P's documented handle, e.g. the
  // ucp_mem_h of a fabrix::ucx region: fabrix/<provider>/native.hpp)
  // for calls fabrix does not make. They stay fabrix's, valid while this
  // object lives; native.hpp says what may be done with them. Only where the
  // provider documents one (not any_provider).
  auto native() const noexcept requires detail::has_native_handle<typename P::region_impl> { return impl_.native(); }

 private:
  friend struct detail::impl_access;
  std::shared_ptr<detail::domain_core<P>> core_;  // declared first: released after impl_
  typename P::region_impl impl_;
};

}  // namespace fabrix
