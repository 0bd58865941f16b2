// fabrix's own CMA over libfabric's shm (ofi/detail/post.hpp, by_cma): a write or
// read of a node-mate's registered host memory whose range the node-mate's
// key table confirms is one process_vm_writev / process_vm_readv by the
// initiator, inside the access board. What that must give:
//   - one-sided: it completes, bytes in place, while the target does not
//     poll (it waits in a bootstrap barrier);
//   - after the region's release returned, nothing more is copied: the
//     operation fails stale_key and the bytes stay the owner's;
//   - a member's forged, correctly sealed remote_buffer that claims more
//     than the region never goes by CMA (not confirmed): shm refuses it at
//     the target, and no guard byte changes;
//   - FABRIX_OFI_CMA and FABRIX_OFI_CMA_MIN_BYTES are read strictly.
// Runs over shm with FABRIX_OFI_CMA_MIN_BYTES=0 (meson.build), so 64-byte
// operations go by CMA too, and a short operation timeout (shm never answers
// a refused operation; fabrix's timeout does).
#include "forge.hpp"
#include "harness.hpp"

#include <fabrix/ofi.hpp>

#include <cstring>
#include <optional>
#include <string>

using fabrix::access;
using fabrix::status;

namespace {

constexpr std::size_t block = 64 * 1024;

}  // namespace

TEST_CASE("ofi shm: writes and reads by CMA complete with their bytes while the target does not poll") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    if (rank == 0) std::printf("ofi domain: %s\n", dom.describe().c_str());
    FX_CHECK(dom.describe().find("by CMA from 0 B") != std::string::npos);
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    std::vector<std::byte> target(2 * block), local(2 * block);
    auto mt = fxt::must(dom.register_memory(target, access::all_remote), "register target");
    auto ml = fxt::must(dom.register_memory(local, access::local), "register local");
    auto peers = fxt::must(fabrix::exchange(boot, mt.remote()), "exchange");
    if (rank == 1) fxt::fill(target.data() + block, block, 9);  // what rank 0 reads
    FX_CHECK(boot.barrier().has_value());
    if (rank == 0) {
      auto& qp = qps[1];
      fxt::fill(local.data(), block, 7);
      FX_CHECK_STATUS(qp.write(ml.slice(0, block), peers[1].slice(0, block), 1), status::ok);
      const auto w = fxt::await_token(dom, 1);
      FX_CHECK(w.has_value());
      FX_CHECK_STATUS(w->status, status::ok);
      FX_CHECK(w->bytes == block);
      // An imported key takes the same path; an unsignaled read is counted.
      auto key = fxt::must(qp.import(peers[1]), "import");
      const std::uint64_t before = qp.finished();
      FX_CHECK_STATUS(qp.read(ml.slice(block, block), key.slice(block, block), 2, fabrix::op_options::unsignaled),
                      status::ok);
      FX_CHECK(qp.finished() - before == 1);  // complete when post() returned
      FX_CHECK(fxt::first_mismatch(local.data() + block, block, 9) == block);
      FX_CHECK(fabrix::detail::provider_impl(dom).cma_operations() == 2);
    }
    // Rank 1 reaches this barrier without polling its domain once.
    FX_CHECK(boot.barrier().has_value());
    if (rank == 1) FX_CHECK(fxt::first_mismatch(target.data(), block, 7) == block);
    FX_CHECK(boot.barrier().has_value());
  });
}

TEST_CASE("ofi shm: after the region's release returned, a CMA write fails stale_key and copies nothing") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    std::vector<std::byte> target(4096), local(4096);
    std::optional<fabrix::memory_region<fabrix::ofi::provider>> mt(
        fxt::must(dom.register_memory(target, access::all_remote), "register target"));
    auto ml = fxt::must(dom.register_memory(local, access::local), "register local");
    auto peers = fxt::must(fabrix::exchange(boot, mt->remote()), "exchange");
    if (rank == 0) {
      auto key = fxt::must(qps[1].import(peers[1]), "import");
      fxt::fill(local.data(), 4096, 3);
      FX_CHECK_STATUS(qps[1].write(ml.slice(0, 4096), key.slice(0, 4096), 1), status::ok);
      const auto first = fxt::await_token(dom, 1);
      FX_CHECK(first.has_value() && first->status == status::ok);
      FX_CHECK(fabrix::detail::provider_impl(dom).cma_operations() == 1);
      FX_CHECK(boot.barrier().has_value());  // rank 1 releases the region
      FX_CHECK(boot.barrier().has_value());  // released, and its bytes are the owner's again
      fxt::fill(local.data(), 4096, 4);
      FX_CHECK_STATUS(qps[1].write(ml.slice(0, 4096), key.slice(0, 4096), 2), status::ok);
      const auto second = fxt::await_token(dom, 2);
      FX_CHECK(second.has_value());
      FX_CHECK_STATUS(second->status, status::stale_key);
      FX_CHECK(second->bytes == 0);
      FX_CHECK(fabrix::detail::provider_impl(dom).cma_operations() == 1);  // nothing copied
    } else {
      FX_CHECK(boot.barrier().has_value());
      FX_CHECK(fxt::first_mismatch(target.data(), 4096, 3) == 4096);
      mt.reset();
      std::memset(target.data(), 0xee, target.size());
      FX_CHECK(boot.barrier().has_value());
    }
    FX_CHECK(boot.barrier().has_value());
    if (rank == 1)
      for (std::byte b : target) FX_CHECK(b == std::byte{0xee});
    FX_CHECK(boot.barrier().has_value());
  });
}

TEST_CASE("ofi shm: a forged, correctly sealed buffer that claims more than the region never goes by CMA") {
  constexpr std::size_t region_size = 4096, guard = 4096;
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    auto dom = fxt::must(fabrix::ofi::domain::create(fxt::test_options()), "ofi domain");
    auto qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all");
    auto blobs = fxt::must(boot.allgather(fxt::must(dom.address(), "address")), "allgather");
    std::vector<std::byte> buf(guard + region_size + guard), local(64);
    std::memset(buf.data(), 0xab, buf.size());
    auto mt = fxt::must(dom.register_memory(buf.data() + guard, region_size, {}, access::all_remote), "register");
    auto ml = fxt::must(dom.register_memory(local, access::local), "register local");
    auto peers = fxt::must(fabrix::exchange(boot, mt.remote()), "exchange");
    if (rank == 0) {
      const fabrix::remote_buffer forged = fxt::reseal_longer(peers[1], blobs[1], region_size + guard);
      std::memset(local.data(), 0x42, local.size());
      FX_CHECK_STATUS(qps[1].write(ml.slice(0, 64), forged.slice(region_size, 64), 7), status::ok);
      const auto c = fxt::await_token(dom, 7, fabrix::detail::provider_impl(dom).op_timeout() + fxt::answer_margin);
      FX_CHECK(c.has_value());
      if (c) {
        FX_CHECK(fabrix::is_error(c->status));
        FX_CHECK(c->bytes == 0);
      }
      FX_CHECK(fabrix::detail::provider_impl(dom).cma_operations() == 0);
    } else {
      fxt::serve_for(dom, fabrix::detail::provider_impl(dom).op_timeout() +
                              std::chrono::seconds(3));  // refusing, as long as rank 0 waits
    }
    FX_CHECK(boot.barrier().has_value());
    if (rank == 1) {
      for (std::size_t i = 0; i < guard; ++i) FX_CHECK(buf[i] == std::byte{0xab});
      for (std::size_t i = guard + region_size; i < buf.size(); ++i) FX_CHECK(buf[i] == std::byte{0xab});
    }
    FX_CHECK(boot.barrier().has_value());
  });
}

TEST_CASE("ofi shm: FABRIX_OFI_CMA and FABRIX_OFI_CMA_MIN_BYTES are read strictly") {
  const auto open = [] { return fabrix::ofi::domain::create(fxt::test_options()); };
  const fxt::scoped_env no_min("FABRIX_OFI_CMA_MIN_BYTES", nullptr);
  fxt::check_env_refused("FABRIX_OFI_CMA", {"2", "-1", "yes"}, open);
  fxt::check_env_refused("FABRIX_OFI_CMA_MIN_BYTES", {"-1", "16q", "99999999999999"}, open);
  {
    const fxt::scoped_env min("FABRIX_OFI_CMA_MIN_BYTES", "32k");
    auto dom = open();
    REQUIRE(dom);
    CHECK(dom->describe().find("by CMA from 32768 B") != std::string::npos);
  }
  const fxt::scoped_env off("FABRIX_OFI_CMA", "0");
  auto dom = open();
  REQUIRE(dom);
  CHECK(dom->describe().find("CMA") == std::string::npos);
}
