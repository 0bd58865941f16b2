// Queue pairs made on first use (fabrix::lazy_mesh), from one side only:
// rank 0 connects to rank 1 through the mesh; rank 1 never connects back and
// only serves (it polls while it waits in a barrier). Rank 1 answers the
// one-sided operations of a rank it has no queue pair to: a write lands and
// reads back, fetch_add returns the old word, a flush completes, and rank 1
// finds every byte in place. The mesh refuses a rank outside the job and
// makes each queue pair once. verbs, whose connect() is symmetric (both
// sides build the RC QP at once), connects from both sides and checks the
// same bytes. Two ranks, so it also runs between two kernels (tests/vm).
#include "providers.hpp"

#include <cstdint>
#include <cstring>

using fabrix::access;
using fabrix::status;

namespace {
constexpr std::size_t lazy_bytes = 256 * 1024;
constexpr std::uint64_t lazy_seed = 4100;
}  // namespace

TEST_CASE_TEMPLATE("conformance: queue pairs made on first use, from one side only", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(2, [](fxt::rank_env<P>& env) {
    // A domain of its own, so no queue pair of the harness's full mesh
    // connects the ranks behind the mesh's back.
    auto dom = fxt::open_provider<P>::domain();
    std::vector<fabrix::completion> polled;
    auto mesh = fxt::must(fabrix::lazy_mesh<P>::create(dom, env.boot, polled), "lazy_mesh::create");
    FX_CHECK(mesh.size() == 2);
    FX_CHECK(mesh.connected() == 0);
    FX_CHECK(!mesh.to(2).has_value());
    FX_CHECK(mesh.to(2).error().code == status::out_of_range);

    std::vector<std::byte> target(lazy_bytes + 8), src(lazy_bytes), back(lazy_bytes + 8);
    auto mt = fxt::must(dom.register_memory(target, access::all_remote), "register target");
    auto ms = fxt::must(dom.register_memory(src, access::local), "register src");
    auto mb = fxt::must(dom.register_memory(back, access::local), "register back");
    const auto all = fxt::must(fabrix::exchange(env.boot, mt.remote(), dom, polled), "exchange");
    const bool symmetric = dom.provider() == fabrix::provider_id::verbs;

    if (env.rank == 0) {
      auto qp = fxt::must(mesh.to(1), "mesh.to(1)");
      FX_CHECK(mesh.connected() == 1);
      FX_CHECK(fxt::must(mesh.to(1), "mesh.to(1) again") == qp);  // made once
      FX_CHECK(qp->peer_id() == 1u);
      auto wait_ok = [&](std::uint64_t token) {
        auto c = fxt::await_token(dom, token, std::chrono::seconds(20));
        FX_CHECK(c.has_value());
        FX_CHECK(c->status == status::ok);
      };
      fxt::fill(src.data(), lazy_bytes, lazy_seed);
      FX_CHECK_STATUS(qp->write(ms.slice(0, lazy_bytes), all[1].slice(0, lazy_bytes), 1), status::ok);
      wait_ok(1);
      FX_CHECK_STATUS(qp->read(mb.slice(0, lazy_bytes), all[1].slice(0, lazy_bytes), 2), status::ok);
      wait_ok(2);
      FX_CHECK(fxt::first_mismatch(back.data(), lazy_bytes, lazy_seed) == lazy_bytes);
      if constexpr (P::caps.atomics) {
        FX_CHECK_STATUS(qp->fetch_add(mb.slice(lazy_bytes, 8), all[1].slice(lazy_bytes, 8), 7, 3), status::ok);
        wait_ok(3);
        std::uint64_t old = 1;
        std::memcpy(&old, back.data() + lazy_bytes, 8);
        FX_CHECK(old == 0);
      }
      FX_CHECK_STATUS(qp->flush(4), status::ok);
      wait_ok(4);
    } else if (symmetric) {
      FX_CHECK(mesh.to(0).has_value());
    }
    // Rank 1 serves while it waits here; rank 0 arrives once its ops are done.
    FX_CHECK(env.boot.barrier(fabrix::bootstrap_progress(dom, polled)).has_value());
    if (env.rank == 1) {
      FX_CHECK(mesh.connected() == (symmetric ? 1u : 0u));
      FX_CHECK(fxt::first_mismatch(target.data(), lazy_bytes, lazy_seed) == lazy_bytes);
      if constexpr (P::caps.atomics) {
        std::uint64_t word = 0;
        std::memcpy(&word, target.data() + lazy_bytes, 8);
        FX_CHECK(word == 7);
      }
    }
    FX_CHECK(env.boot.barrier(fabrix::bootstrap_progress(dom, polled)).has_value());
  });
}
