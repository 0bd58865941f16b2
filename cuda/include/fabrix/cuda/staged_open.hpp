// Staged providers for fabrix::open(): after enable_staged_providers<E>(),
// every network provider registered at that moment ("ucx", "ofi", "verbs")
// is also registered as "<name>+staged" — the same provider wrapped in
// staged<any_provider, E>, one priority step below it.
//
//   fabrix::cuda::enable_staged_providers();        // <fabrix/cuda/staged_cuda.hpp>: the CUDA engine
//   auto dom = fabrix::open("ucx+staged").value();  // dom.caps().gpu: direct, staged or none
//
// "<name>+staged" opens only by name: "auto" keeps choosing among the plain
// providers (a staged entry refuses "auto"), so including CUDA support never
// changes what an existing program gets. Call it after the provider headers
// are included (their registration runs at static initialisation) and before
// opening; calling it again registers providers added since. The first
// engine type that registers a name keeps it. Not thread-safe (like the
// registry). Needs no CUDA headers; the engine decides.
#pragma once

#include <fabrix/any_provider.hpp>
#include <fabrix/cuda/staged.hpp>

#include <algorithm>
#include <deque>
#include <string>
#include <string_view>

namespace fabrix::cuda {

inline constexpr std::string_view staged_suffix = "+staged";

namespace detail {

template <staging_engine Engine>
result<std::unique_ptr<fabrix::detail::any_domain_base>> open_staged_entry(const domain_options& opts) {
  const std::string_view want = opts.provider;
  if (want.size() <= staged_suffix.size() || want.substr(want.size() - staged_suffix.size()) != staged_suffix)
    return unexpected(status::unsupported, "staged providers open by name only (e.g. \"ucx+staged\"), not as \"auto\"",
                      "staging");
  domain_options inner = opts;
  inner.provider = std::string(want.substr(0, want.size() - staged_suffix.size()));
  return fabrix::detail::open_erased<staged<any_provider, Engine>>(inner);
}

}  // namespace detail

template <staging_engine Engine>
void enable_staged_providers() {
  static std::deque<std::string> names;  // the registry keeps string_views into these
  auto& registry = fabrix::detail::provider_registry();
  const auto before = registry;
  for (const auto& e : before) {
    // cuda_ipc moves device memory itself; staged entries are not staged twice.
    if (e.name == "cuda_ipc" || e.name.ends_with(staged_suffix)) continue;
    std::string n = std::string(e.name) + std::string(staged_suffix);
    if (std::any_of(registry.begin(), registry.end(), [&](const auto& x) { return x.name == n; })) continue;
    names.push_back(std::move(n));
    registry.push_back({names.back(), e.priority - 1, &detail::open_staged_entry<Engine>});
  }
}

}  // namespace fabrix::cuda
