// Queue pairs made on first use (fabrix::lazy_mesh): three ranks in a ring,
// each connecting only to the next one, never back to the one before. The
// targets answer one-sided operations from a rank they have no queue pair
// to: writes land and read back, atomics return the old word, a flush
// completes, every byte is checked, and each rank made one queue pair.
// The mesh refuses a rank outside the job and makes each queue pair once.
// verbs, whose connect() is symmetric (both sides build the RC QP at once),
// makes the queue pairs from both sides, each rank in the order of its
// peers' ranks (as connect_all), and checks the same bytes.
#include "providers.hpp"

#include <cstdint>
#include <cstring>

using fabrix::access;
using fabrix::status;

namespace {
constexpr std::size_t ring_bytes = 256 * 1024;
constexpr std::uint64_t ring_seed = 4100;
}  // namespace

TEST_CASE_TEMPLATE("conformance: queue pairs made on first use, from one side only", P, FX_PROVIDERS) {
  fxt::with_ranks<P>(3, [](fxt::rank_env<P>& env) {
    // A domain of its own, so no queue pair of the harness's full mesh
    // connects the ranks behind the mesh's back.
    auto dom = fxt::open_provider<P>::domain();
    std::vector<fabrix::completion> polled;
    auto mesh = fxt::must(fabrix::lazy_mesh<P>::create(dom, env.boot, polled), "lazy_mesh::create");
    FX_CHECK(mesh.size() == 3);
    FX_CHECK(mesh.connected() == 0);
    FX_CHECK(!mesh.to(3).has_value());
    FX_CHECK(mesh.to(3).error().code == status::out_of_range);

    std::vector<std::byte> target(ring_bytes + 8), src(ring_bytes), back(ring_bytes + 8);
    auto mt = fxt::must(dom.register_memory(target, access::all_remote), "register target");
    auto ms = fxt::must(dom.register_memory(src, access::local), "register src");
    auto mb = fxt::must(dom.register_memory(back, access::local), "register back");
    const auto all = fxt::must(fabrix::exchange(env.boot, mt.remote(), dom, polled), "exchange");

    const auto next = static_cast<std::size_t>((env.rank + 1) % 3);
    const bool symmetric = dom.provider() == fabrix::provider_id::verbs;
    if (symmetric) {
      for (std::size_t r = 0; r < 3; ++r)
        if (r != static_cast<std::size_t>(env.rank)) FX_CHECK(mesh.to(r).has_value());
    }
    const std::size_t made = symmetric ? 2 : 1;
    auto qp = fxt::must(mesh.to(next), "mesh.to(next)");
    FX_CHECK(mesh.connected() == made);
    FX_CHECK(fxt::must(mesh.to(next), "mesh.to(next) again") == qp);  // made once
    FX_CHECK(qp->peer_id() == static_cast<std::uint32_t>(next));

    // Serves the rank before this one while it waits for its own ops.
    auto wait_ok = [&](std::uint64_t token) {
      auto c = fxt::await_token(dom, token, std::chrono::seconds(20));
      FX_CHECK(c.has_value());
      FX_CHECK(c->status == status::ok);
    };
    fxt::fill(src.data(), ring_bytes, ring_seed + static_cast<std::uint64_t>(env.rank));
    FX_CHECK_STATUS(qp->write(ms.slice(0, ring_bytes), all[next].slice(0, ring_bytes), 1), status::ok);
    wait_ok(1);
    FX_CHECK_STATUS(qp->read(mb.slice(0, ring_bytes), all[next].slice(0, ring_bytes), 2), status::ok);
    wait_ok(2);
    FX_CHECK(fxt::first_mismatch(back.data(), ring_bytes, ring_seed + static_cast<std::uint64_t>(env.rank)) ==
             ring_bytes);
    if constexpr (P::caps.atomics) {
      FX_CHECK_STATUS(qp->fetch_add(mb.slice(ring_bytes, 8), all[next].slice(ring_bytes, 8), 7, 3), status::ok);
      wait_ok(3);
      std::uint64_t old = 1;
      std::memcpy(&old, back.data() + ring_bytes, 8);
      FX_CHECK(old == 0);
    }
    FX_CHECK_STATUS(qp->flush(4), status::ok);
    wait_ok(4);

    // Every rank's ops are done once all are past this barrier; serving
    // while it waits lets the slowest finish.
    FX_CHECK(env.boot.barrier(fabrix::bootstrap_progress(dom, polled)).has_value());
    const auto before = static_cast<std::uint64_t>((env.rank + 2) % 3);
    FX_CHECK(fxt::first_mismatch(target.data(), ring_bytes, ring_seed + before) == ring_bytes);
    if constexpr (P::caps.atomics) {
      std::uint64_t word = 0;
      std::memcpy(&word, target.data() + ring_bytes, 8);
      FX_CHECK(word == 7);
    }
    FX_CHECK(mesh.connected() == made);
    FX_CHECK(env.boot.barrier(fabrix::bootstrap_progress(dom, polled)).has_value());
  });
}
