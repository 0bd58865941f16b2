// The rdma-core (verbs) provider: RC queue pairs over InfiniBand or RoCE.
// Including this header registers "verbs" with fabrix::open() as well, with
// the highest priority: "auto" picks it whenever an RDMA device with an
// active port is present (and falls back to the next provider otherwise).
//
//   fabrix::verbs::domain dom = fabrix::verbs::domain::create({.device = "mlx5_0"}).value();
//
// Tested on soft-RoCE (rdma_rxe) in a VM. See providers/verbs/README.md for
// the mapping, ordering rules, flush, error mapping and limits.
//
// Stable: this header, <fabrix/verbs/native.hpp> (the native objects
// native() hands out) and <fabrix/verbs/cuda.hpp> (the GPU backend).
// Everything under fabrix/verbs/detail/ is internal and may change in any
// release.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/domain.hpp>
#include <fabrix/verbs/detail/domain.hpp>
#include <fabrix/verbs/detail/status.hpp>
#include <fabrix/verbs/native.hpp>

#include <string>

namespace fabrix::verbs {

struct provider {
  static constexpr std::string_view name = "verbs";
  static constexpr provider_id id = provider_id::verbs;
  static constexpr capabilities caps = detail::verbs_caps;
  using domain_impl = detail::domain_impl;
  using endpoint_impl = detail::endpoint_impl;
  using region_impl = detail::region_impl;
};

static_assert(fabrix::provider<provider>);

using domain = fabrix::domain<provider>;
using queue_pair = fabrix::queue_pair<provider>;
using memory_region = fabrix::memory_region<provider>;

// A verbs completion's error in words: "remote access error" etc. (the
// ibv_wc_status_str of its native_code); empty when it succeeded.
inline std::string describe(const completion& c) {
  if (c.status == status::ok) return {};
  std::string s(fabrix::to_string(c.status));
  if (c.native_code != 0) s += std::string(" (") + detail::wc_text(c.native_code) + ")";
  return s;
}

namespace detail {
inline const bool registered = fabrix::detail::register_provider<verbs::provider>(60);
}

}  // namespace fabrix::verbs
