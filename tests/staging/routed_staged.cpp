// The routed domain's staged route (routed/config.hpp, class `staged`):
// with staged providers enabled and a net provider that does not reach
// device memory, the default routes add "ucx+staged", and this process's
// device memory moves to and from peers' host memory through it. Host
// memory stands in for device memory (test_engine), so it runs everywhere.
// Two ranks on two nodes (FABRIX_TEST_SPLIT_NODES=2, meson.build): each
// writes from its "device" memory into the other's host memory and reads
// it back into device memory, through the remote_buffer and through an
// imported key, and host memory still goes over the net route; every byte
// is checked by the reader and by the target, and a notification after a
// staged write finds its bytes in place. A peer's device memory is
// out of reach (nothing direct) and refused. For routed<> and for a static
// routed<ucx, ucx+staged>.
#include "harness.hpp"
#include "post_all.hpp"
#include "test_engine.hpp"

#include <fabrix/cuda/staged.hpp>
#include <fabrix/cuda/staged_open.hpp>
#include <fabrix/routed.hpp>
#include <fabrix/ucx.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace {

using fabrix::status;
using fxt::first_mismatch;
using fxt::must;

constexpr std::size_t chunk = 64 << 10;  // FABRIX_STAGING_CHUNK
constexpr std::size_t slot = 10 * chunk + 123;
const fabrix::memory_location device{fabrix::memory_kind::cuda_device, 0};

std::uint64_t seed_of(int writer, std::size_t size) { return 9000 + static_cast<std::uint64_t>(writer) * 97 + size; }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// routed<> finds "ucx+staged" in the registry (enable_staged_providers);
// routed<ucx, ucx+staged> holds both by type.
using routed_static =
    fabrix::routed<fabrix::ucx::provider, fabrix::cuda::staged<fabrix::ucx::provider, fxt::test_engine>>;

TEST_CASE_TEMPLATE("routed: the default routes stage this process's device memory where nothing is direct", P,
                   fabrix::routed<>, routed_static) {
  fabrix::cuda::enable_staged_providers<fxt::test_engine>();
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fxt::rank_env<P> env(rank, boot, must(fabrix::domain<P>::create(fxt::test_options()), "routed domain"));
    const std::string dom = env.dom.describe();
    if (!has(dom, "[staged=ucx ") || !has(dom, "gpu staged") || env.dom.caps().gpu != fabrix::gpu_path::staged)
      fxt::rank_fail("the staged route", __FILE__, __LINE__, dom);
    const int peer = 1 - rank;
    auto& qp = env.qps[static_cast<std::size_t>(peer)];
    const std::string route = qp.describe();
    if (!has(route, "host memory: ucx (peer on another node)") ||
        !has(route, "this process's device memory to host memory: ucx+staged (staged through host memory"))
      fxt::rank_fail("the queue pair's routes", __FILE__, __LINE__, route);

    // target: two slots the peer writes (remote_buffer, imported key) and
    // one for a host write; scratch for notifications.
    std::vector<std::byte> target(3 * slot), scratch(64), dev(slot), dev2(slot + 1), host(4096), peer_dev(4096);
    auto target_mr = env.reg(target);
    auto scratch_mr = env.reg(scratch);
    auto host_mr = env.reg(host, fabrix::access::local);
    auto dev_mr = must(env.dom.register_memory(dev.data(), dev.size(), device, fabrix::access::local), "device");
    auto dev2_mr = must(env.dom.register_memory(dev2.data(), dev2.size(), device, fabrix::access::local), "device");
    // Device memory offered to peers: this domain reaches it for nobody.
    auto peer_dev_mr =
        must(env.dom.register_memory(peer_dev.data(), peer_dev.size(), device, fabrix::access::all_remote),
             "device, remote rights");
    const auto peers = env.share(target_mr);
    const auto peer_scratch = env.share(scratch_mr);
    const auto peers_dev = env.share(peer_dev_mr);
    const auto& theirs = peers[static_cast<std::size_t>(peer)];
    auto key = must(qp.import(theirs), "import");

    std::uint64_t token = 1;
    for (std::size_t s : {std::size_t{1}, std::size_t{100}, chunk, 3 * chunk + 5, slot}) {
      // From device memory, by the remote_buffer; back into device memory.
      fxt::fill(dev.data(), s, seed_of(rank, s));
      env.complete_ok(qp.write(dev_mr.slice(0, s), theirs.slice(0, s), token), token);
      ++token;
      std::memset(dev2.data(), 0, dev2.size());
      env.complete_ok(qp.read(dev2_mr.slice(0, s), theirs.slice(0, s), token), token);
      ++token;
      FX_CHECK(first_mismatch(dev2.data(), s, seed_of(rank, s)) == s);
      FX_CHECK(dev2[s] == std::byte{0});
      // Through the imported key, into the second slot.
      fxt::fill(dev.data(), s, seed_of(rank, s) + 1);
      env.complete_ok(qp.write(dev_mr.slice(0, s), key.slice(slot, s), token), token);
      ++token;
      std::memset(dev2.data(), 0, dev2.size());
      env.complete_ok(qp.read(dev2_mr.slice(0, s), key.slice(slot, s), token), token);
      ++token;
      FX_CHECK(first_mismatch(dev2.data(), s, seed_of(rank, s) + 1) == s);
    }
    // Host memory goes over the net route as before, in one batch with a
    // staged write and a flush covering both.
    fxt::fill(host.data(), host.size(), seed_of(rank, 7));
    fxt::fill(dev.data(), 4096, seed_of(rank, 8));
    const fabrix::operation batch[] = {
        fabrix::op::write(host_mr.slice(0, 4096), theirs.slice(2 * slot, 4096), token),
        fabrix::op::write(dev_mr.slice(0, 4096), theirs.slice(2 * slot + 4096, 4096), token + 1),
        fabrix::op::flush(token + 2),
    };
    // The flush may say again while the staged write runs (staged.hpp):
    // poll and post the rest.
    fxt::post_all(env, qp, batch);
    for (std::uint64_t t = token; t < token + 3; ++t) FX_CHECK_STATUS(env.next_token(t).status, status::ok);
    token += 3;
    // A notification after a staged write arrives after its bytes (it goes
    // on the host route's endpoint, held behind a flush of the staged one).
    fxt::fill(dev.data(), 4096, seed_of(rank, 9));
    const fabrix::operation notify[] = {
        fabrix::op::write(dev_mr.slice(0, 4096), theirs.slice(2 * slot + 8192, 4096), token),
        fabrix::op::write_with_imm(scratch_mr.slice(0, 0), peer_scratch[static_cast<std::size_t>(peer)].slice(0, 0), 77,
                                   token + 1),
    };
    fxt::post_all(env, qp, notify);
    for (std::uint64_t t = token; t < token + 2; ++t) FX_CHECK_STATUS(env.next_token(t).status, status::ok);
    token += 2;
    env.next([](const fabrix::completion& c) { return c.op == fabrix::opcode::remote_write_imm && c.imm == 77; });
    FX_CHECK(first_mismatch(target.data() + 2 * slot + 8192, 4096, seed_of(peer, 9)) == 4096);
    // The peer's device memory: no provider here reaches it.
    FX_CHECK_STATUS(qp.write(dev_mr.slice(0, 8), peers_dev[static_cast<std::size_t>(peer)].slice(0, 8), token),
                    status::unsupported);
    FX_CHECK_STATUS(qp.release(key), status::ok);

    env.sync(scratch_mr, peer_scratch, 1);  // both wrote all; the last sizes' bytes are in place
    FX_CHECK(first_mismatch(target.data(), slot, seed_of(peer, slot)) == slot);
    FX_CHECK(first_mismatch(target.data() + slot, slot, seed_of(peer, slot) + 1) == slot);
    FX_CHECK(first_mismatch(target.data() + 2 * slot, 4096, seed_of(peer, 7)) == 4096);
    FX_CHECK(first_mismatch(target.data() + 2 * slot + 4096, 4096, seed_of(peer, 8)) == 4096);
    env.sync(scratch_mr, peer_scratch, 2);
  });
}
