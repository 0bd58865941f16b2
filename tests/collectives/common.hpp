// Shared pieces of the collectives suite: ranks are forked processes of the
// conformance harness (tests/conformance/harness.hpp), each with its own
// domain of the provider under test (FX_PROVIDER_HEADER, the conformance
// suite's provider_<name>.hpp) on the transport FABRIX_TEST_TRANSPORT names.
// Every result is compared element by element with a serial reference that
// each rank computes from the deterministic inputs of all ranks.
#pragma once

#include "harness.hpp"

#ifndef FX_PROVIDER_HEADER
#error "compile the collectives suite with -DFX_PROVIDER_HEADER=\"provider_<name>.hpp\""
#endif
#include FX_PROVIDER_HEADER

#include <fabrix/collectives.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace fxc {

using P = fxt::static_provider;
using comm_t = fabrix::coll::communicator<P>;
using fabrix::coll::reduce_op;

// Small chunks and few slots, so that modest sizes already run many rounds
// with partial chunks; 264 bytes is a multiple of 8 but not of 16.
inline fabrix::coll::options small_chunks() {
  fabrix::coll::options o;
  o.chunk_bytes = 264;
  o.slots = 4;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// Runs body(comm, rank, size) on n ranks of the provider under test.
template <class Body>
void with_comm(int n, const fabrix::coll::options& o, Body body, std::chrono::seconds limit = std::chrono::seconds(90),
               const std::function<fxt::ending(int)>& expected = {}) {
  fxt::run_ranks(
      n,
      [&](int rank, fabrix::bootstrap& boot) {
        auto dom = fxt::open_static();
        auto comm = fxt::must(comm_t::create(dom, boot, o), "communicator::create");
        body(comm, rank, n);
        // When every rank lives, close the endpoints together: a UCX endpoint
        // closes gracefully only while its peer polls (a close that does not
        // finish makes the UCX provider's teardown abort in ucp_worker_destroy).
        if (!expected) (void)boot.barrier();
      },
      limit, expected);
}

// Rank r's element i: a small integer, so sums are exact in float too.
template <class T>
T value(int rank, std::size_t i, std::uint64_t salt = 0) {
  const std::uint64_t x = (static_cast<std::uint64_t>(rank) * 7919u + i * 31u + salt * 104729u) % 2001u;
  return static_cast<T>(static_cast<long long>(x) - 1000);
}

template <class T>
T combine(T a, T b, reduce_op op) {
  switch (op) {
    case reduce_op::sum: return a + b;
    case reduce_op::min: return a < b ? a : b;
    case reduce_op::max: return a > b ? a : b;
  }
  return a;
}

// The reduction over all ranks of element i (serial reference).
template <class T>
T reference(int n, std::size_t i, reduce_op op, std::uint64_t salt = 0) {
  T acc = value<T>(0, i, salt);
  for (int r = 1; r < n; ++r) acc = combine(acc, value<T>(r, i, salt), op);
  return acc;
}

template <class T>
void check_ok(const fabrix::result<T>& r, const char* what) {
  if (!r) fxt::rank_fail(what, __FILE__, __LINE__, r.error().describe());
}

// Fails the rank at the first element that differs from `want(i)`.
template <class T, class Want>
void expect_elements(const std::vector<T>& got, Want want, const std::string& what) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i))
      fxt::rank_fail(what.c_str(), __FILE__, __LINE__,
                     "element " + std::to_string(i) + " of " + std::to_string(got.size()) + ": got " +
                         std::to_string(got[i]) + ", want " + std::to_string(want(i)));
  }
}

}  // namespace fxc
