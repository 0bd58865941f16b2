// The providers the conformance suite runs on: each static provider compiled
// in, and any_provider opened by name — the same tests for both.
#pragma once

#include "harness.hpp"

#include <fabrix/ucx.hpp>

namespace fxt {

template <class P>
struct open_provider;

template <>
struct open_provider<fabrix::ucx::provider> {
  static fabrix::domain<fabrix::ucx::provider> domain() {
    return must(fabrix::ucx::domain::create(test_options()), "ucx domain");
  }
};

template <>
struct open_provider<fabrix::any_provider> {
  static fabrix::any_domain domain() { return must(fabrix::open("ucx", test_options()), "open(\"ucx\")"); }
};

// Runs body(env) on `n` ranks of provider P.
template <class P, class Body>
void with_ranks(int n, Body body, std::chrono::seconds limit = std::chrono::seconds(90),
                const std::function<ending(int)>& expected = {}) {
  run_ranks(
      n,
      [&](int rank, fabrix::bootstrap& boot) {
        rank_env<P> env(rank, boot, open_provider<P>::domain());
        body(env);
      },
      limit, expected);
}

}  // namespace fxt

#define FX_PROVIDERS fabrix::ucx::provider, fabrix::any_provider
