// The providers the conformance suite runs on: the static provider under
// test and any_provider opened by the same name — the same tests for both.
//
// Each provider's conformance binary is this suite compiled with
// FX_PROVIDER_HEADER naming its provider_<name>.hpp, which defines
// fxt::static_provider, fxt::provider_name, fxt::open_static() and
// fxt::unavailable_reason() (empty when the provider can run here).
// A provider header that defines FX_ANY_PROVIDER_ONLY (provider_plugin.hpp)
// has no static provider: the suite runs on any_provider alone, and every
// domain it opens is passed to its fxt::check_plugin_domain().
// FX_STATIC_PROVIDER_ONLY (meson -Dconformance_any_provider=false, the CI's
// sanitizer builds) compiles the static provider's cases alone.
#pragma once

#include "harness.hpp"

#ifndef FX_PROVIDER_HEADER
#error "compile the conformance suite with -DFX_PROVIDER_HEADER=\"provider_<name>.hpp\""
#endif
#include FX_PROVIDER_HEADER

namespace fxt {

template <class P>
struct open_provider;

#ifndef FX_ANY_PROVIDER_ONLY
template <>
struct open_provider<static_provider> {
  static fabrix::domain<static_provider> domain(const fabrix::domain_options& o = test_options()) {
    return open_static(o);
  }
};
#endif

template <>
struct open_provider<fabrix::any_provider> {
  static fabrix::any_domain domain(const fabrix::domain_options& o = test_options()) {
    auto d = must(fabrix::open(provider_name, o), "open(provider_name)");
#ifdef FX_ANY_PROVIDER_ONLY
    check_plugin_domain(d);
#endif
    return d;
  }
};

// Runs body(env) on `n` ranks of provider P, each opened with `options`.
template <class P, class Body>
void with_ranks_options(int n, const fabrix::domain_options& options, Body body,
                        std::chrono::seconds limit = std::chrono::seconds(90),
                        const std::function<ending(int)>& expected = {}) {
  run_ranks(
      n,
      [&](int rank, fabrix::bootstrap& boot) {
        rank_env<P> env(rank, boot, open_provider<P>::domain(options));
        body(env);
      },
      limit, expected);
}

// Runs body(env) on `n` ranks of provider P.
template <class P, class Body>
void with_ranks(int n, Body body, std::chrono::seconds limit = std::chrono::seconds(90),
                const std::function<ending(int)>& expected = {}) {
  with_ranks_options<P>(n, test_options(), std::move(body), limit, expected);
}

}  // namespace fxt

#ifdef FX_ANY_PROVIDER_ONLY
#define FX_PROVIDERS fabrix::any_provider
#elif defined(FX_STATIC_PROVIDER_ONLY)
#define FX_PROVIDERS fxt::static_provider
#else
#define FX_PROVIDERS fxt::static_provider, fabrix::any_provider
#endif
