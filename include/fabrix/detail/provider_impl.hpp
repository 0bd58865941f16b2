// fabrix::detail::provider_impl(x): the provider's own object behind a
// domain, queue pair or memory region (P::domain_impl, P::endpoint_impl,
// P::region_impl), with everything the provider keeps inside it.
//
// For fabrix's own tests and tools, which check a provider's internal state
// (counters, the last error, which path an operation took). Provider
// internals are not a stable API: they change without notice. Applications
// use native() instead, which hands out only the documented native objects
// (fabrix/<provider>/native.hpp).
#pragma once

#include <fabrix/concepts.hpp>

namespace fabrix {

template <provider P>
class domain;
template <provider P>
class queue_pair;
template <provider P>
class memory_region;

namespace detail {

// The one friend of domain, queue_pair and memory_region that reaches their
// provider objects.
struct impl_access {
  template <provider P>
  static typename P::domain_impl& of(domain<P>& d) noexcept {
    return d.impl();
  }
  template <provider P>
  static typename P::endpoint_impl& of(queue_pair<P>& q) noexcept {
    return q.impl_;
  }
  template <provider P>
  static typename P::region_impl& of(memory_region<P>& r) noexcept {
    return r.impl_;
  }
};

template <class T>
auto& provider_impl(T& x) noexcept {
  return impl_access::of(x);
}

// Whether the provider object offers native() (its documented handle).
template <class Impl>
concept has_native_handle = requires(const Impl& i) {
  i.native();
};

}  // namespace detail
}  // namespace fabrix
