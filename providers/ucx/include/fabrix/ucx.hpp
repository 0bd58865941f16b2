// The UCX (UCP) provider. Including this header registers "ucx" with
// fabrix::open() as well.
//
//   fabrix::ucx::domain dom = fabrix::ucx::domain::create({.transport = "tcp"}).value();
//
// Tested transports: tcp, and shared memory (sysv, posix, cma). See
// providers/ucx/README.md for the ordering rules and what is not supported.
//
// Stable: this header and <fabrix/ucx/native.hpp> (the native objects
// native() hands out). Everything under fabrix/ucx/detail/ is
// internal and may change in any release.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/ucx/detail/domain.hpp>
#include <fabrix/ucx/native.hpp>

namespace fabrix::ucx {

struct provider {
  static constexpr std::string_view name = "ucx";
  static constexpr provider_id id = provider_id::ucx;
  static constexpr capabilities caps = detail::ucx_caps;
  using domain_impl = detail::domain_impl;
  using endpoint_impl = detail::endpoint_impl;
  using region_impl = detail::region_impl;
};

static_assert(fabrix::provider<provider>);

using domain = fabrix::domain<provider>;
using queue_pair = fabrix::queue_pair<provider>;
using memory_region = fabrix::memory_region<provider>;

namespace detail {
inline const bool registered = fabrix::detail::register_provider<ucx::provider>(50);
}

}  // namespace fabrix::ucx
