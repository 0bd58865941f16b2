// The libfabric provider (FI_EP_RDM). Including this header registers "ofi"
// with fabrix::open() as well (priority 40, after "ucx").
//
//   fabrix::domain_options opts;
//   opts.transport = "tcp;ofi_rxm";
//   fabrix::ofi::domain dom = fabrix::ofi::domain::create(opts).value();
//
// domain_options::transport is a libfabric provider name ("tcp;ofi_rxm",
// "shm", "verbs;ofi_rxm", "efa", ...); empty lets libfabric choose. Tested:
// tcp;ofi_rxm and shm. See providers/ofi/README.md for the ordering rules,
// the memory-registration modes handled and what is not supported.
//
// Stable: this header and <fabrix/ofi/native.hpp> (the native objects
// native() hands out). Everything under fabrix/ofi/detail/ is
// internal and may change in any release.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/ofi/detail/domain.hpp>
#include <fabrix/ofi/native.hpp>

namespace fabrix::ofi {

struct provider {
  static constexpr std::string_view name = "ofi";
  static constexpr provider_id id = provider_id::ofi;
  static constexpr capabilities caps = detail::ofi_caps;
  using domain_impl = detail::domain_impl;
  using endpoint_impl = detail::endpoint_impl;
  using region_impl = detail::region_impl;
};

static_assert(fabrix::provider<provider>);

using domain = fabrix::domain<provider>;
using queue_pair = fabrix::queue_pair<provider>;
using memory_region = fabrix::memory_region<provider>;

namespace detail {
inline const bool registered = fabrix::detail::register_provider<ofi::provider>(40);
}

}  // namespace fabrix::ofi
