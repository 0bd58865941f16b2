// fabrix::routed: one domain over two providers, each peer reached over the
// route its node asks for. Run on two nodes, rank r on node r % 2: simulated
// on one host by FABRIX_TEST_SPLIT_NODES=2 (meson.build), or two network
// namespaces (tests/nodes). So on four ranks each has a node-mate and two
// peers on the other node. Every rank writes its own pattern into every
// peer's slot, through the remote_buffer and through an imported key, reads
// it back and flushes; each queue pair's route is asserted from describe(),
// and each peer finds every byte in place. The route is the run's
// (FABRIX_TEST_TRANSPORT): "node=ofi:shm net=ucx:tcp", none (the default
// routes, what open("routed") opens), or with rails
// (tests/nodes: "net=ofi:tcp;ofi_rxm@fxr0,fxr1", FABRIX_STRIPE_MIN below
// the slot so that the writes and reads are striped). Also: the region's
// key carries every provider domain's key, altered key bytes are refused,
// peers whose routes differ do not connect, a static routed<Ps...> and a
// routed<> connect to each other, routed<Ps...> opens only Ps, and route
// texts parse or are refused.
#include "providers.hpp"

#include <fabrix/ofi.hpp>
#include <fabrix/routed.hpp>
#include <fabrix/ucx.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using fabrix::access;
using fabrix::status;

namespace {
constexpr std::size_t slot_bytes = 64 * 1024;
// This run's routes: FABRIX_TEST_TRANSPORT, else the default ones: node =
// ucx; net = the best network provider that opens here (verbs on a host
// with an RDMA device, where this program has it; else ucx).
std::string run_routes() {
  const char* text = std::getenv("FABRIX_TEST_TRANSPORT");
  if (text != nullptr && *text != '\0') return text;
  return fabrix::open("verbs") ? "node=ucx net=verbs" : "node=ucx net=ucx";
}
std::uint64_t seed_of(int writer, int target) { return 7000 + static_cast<std::uint64_t>(writer * 16 + target); }
}  // namespace

TEST_CASE_TEMPLATE("conformance: routed: each peer over its node's route, every byte checked", P, FX_PROVIDERS) {
  const char* split = std::getenv("FABRIX_TEST_SPLIT_NODES");
  const bool two_nodes =
      (split != nullptr && std::string(split) == "2") || fxt::test_nodes::from_env().names.size() == 2;
  REQUIRE_MESSAGE(two_nodes, "run on two nodes: FABRIX_TEST_SPLIT_NODES=2, or FABRIX_TEST_NODES (tests/nodes)");
  fxt::with_ranks<P>(4, [](fxt::rank_env<P>& env) {
    const int n = env.size;
    std::vector<std::byte> target(slot_bytes * static_cast<std::size_t>(n)), src(slot_bytes), back(slot_bytes);
    auto mt = env.reg(target);
    auto ms = env.reg(src, access::local);
    auto mb = env.reg(back, access::local);
    const auto all = env.share(mt);

    // Every provider domain registered the memory: one entry each, the
    // node route's first, then the net route's rails (none more where the
    // net route is the node route's domain).
    const auto routes = fxt::must(fabrix::route_config::parse(run_routes()), "the route");
    const auto& node = *routes[fabrix::route_class::node];
    const auto& net = *routes[fabrix::route_class::net];
    std::vector<fabrix::provider_id> entries(std::max<std::size_t>(node.devices.size(), 1),
                                             fabrix::provider_id_of(node.provider));
    if (!(net == node))
      entries.resize(entries.size() + std::max<std::size_t>(net.devices.size(), 1),
                     fabrix::provider_id_of(net.provider));
    fabrix::remote_buffer sub;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      FX_CHECK(fabrix::detail::routed_sub_buffer(mt.remote(), static_cast<std::uint8_t>(i), sub));
      FX_CHECK(sub.provider == entries[i]);
    }
    FX_CHECK(!fabrix::detail::routed_sub_buffer(mt.remote(), static_cast<std::uint8_t>(entries.size()), sub));

    std::uint64_t token = 1;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == env.rank) continue;
      auto& qp = env.qps[static_cast<std::size_t>(peer)];
      const bool mate = peer % 2 == env.rank % 2;
      const std::string route = qp.describe();
      const std::string want =
          "host memory: " + (mate ? node.text() + " (peer on this node" : net.text() + " (peer on another node");
      if (route.rfind(want, 0) != 0)
        fxt::rank_fail("the peer's route", __FILE__, __LINE__,
                       route + " / " + want + " rank " + std::to_string(env.rank) + " peer " + std::to_string(peer) +
                           " at " + fabrix::detail::node_description());

      const auto dst =
          all[static_cast<std::size_t>(peer)].slice(slot_bytes * static_cast<std::size_t>(env.rank), slot_bytes);
      fxt::fill(src.data(), slot_bytes, seed_of(env.rank, peer));
      env.complete_ok(qp.write(ms.slice(0, slot_bytes), dst, token), token);
      ++token;
      env.complete_ok(qp.read(mb.slice(0, slot_bytes), dst, token), token);
      ++token;
      FX_CHECK(fxt::first_mismatch(back.data(), slot_bytes, seed_of(env.rank, peer)) == slot_bytes);

      // The same through an imported key.
      auto key = fxt::must(qp.import(all[static_cast<std::size_t>(peer)]), "import");
      std::memset(back.data(), 0, slot_bytes);
      env.complete_ok(qp.read(mb.slice(0, slot_bytes),
                              key.slice(slot_bytes * static_cast<std::size_t>(env.rank), slot_bytes), token),
                      token);
      ++token;
      FX_CHECK(fxt::first_mismatch(back.data(), slot_bytes, seed_of(env.rank, peer)) == slot_bytes);
      FX_CHECK_STATUS(qp.release(key), status::ok);

      // Key bytes altered after sealing: refused, nothing sent.
      fabrix::remote_buffer forged = all[static_cast<std::size_t>(peer)];
      forged.key[forged.key_size - 1] ^= std::byte{1};
      FX_CHECK(!qp.import(forged).has_value());
      FX_CHECK_STATUS(qp.write(ms.slice(0, 8), forged.slice(0, 8), token), status::invalid_argument);

      env.complete_ok(qp.flush(token), token);
      ++token;
    }
    env.sync(mt, all, 1);  // serves the peers' traffic until every rank is done
    for (int writer = 0; writer < n; ++writer) {
      if (writer == env.rank) continue;
      const std::byte* slot = target.data() + slot_bytes * static_cast<std::size_t>(writer);
      FX_CHECK(fxt::first_mismatch(slot, slot_bytes, seed_of(writer, env.rank)) == slot_bytes);
    }
    env.sync(mt, all, 2);
  });
}

TEST_CASE("conformance: routed: peers whose routes differ do not connect") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    fabrix::domain_options o;
    o.transport = rank == 0 ? "node=ucx:tcp net=ucx:tcp" : "node=ofi:shm net=ofi:shm";
    auto dom = fxt::must(fabrix::domain<fabrix::routed<>>::create(o), "routed domain");
    const auto blobs = fxt::must(boot.allgather(fxt::must(dom.address(), "address")), "allgather");
    auto qp = dom.connect(blobs[static_cast<std::size_t>(1 - rank)]);
    FX_CHECK(!qp.has_value());
    FX_CHECK(qp.error().code == status::invalid_argument);
    FX_CHECK(qp.error().message.find("FABRIX_ROUTE") != std::string::npos);
    // Not a routed blob at all.
    FX_CHECK(!dom.connect(std::span<const std::byte>(blobs[0].data(), 10)).has_value());
    FX_CHECK(boot.barrier().has_value());
  });
}

namespace {
// One side of "a routed domain and one provider's domain": connects to the
// other side, writes its pattern into the other's memory by the other's
// remote_buffer and through an imported key, flushes, and checks what the
// other wrote into its own, serving the other's traffic meanwhile.
template <class P>
void reach_the_other(int rank, fabrix::bootstrap& boot, fabrix::domain<P> dom, fabrix::provider_id theirs) {
  constexpr std::size_t n = 4096;
  const auto blobs = fxt::must(boot.allgather(fxt::must(dom.address(), "address")), "allgather");
  auto qp = fxt::must(dom.connect(blobs[static_cast<std::size_t>(1 - rank)]), "connect to the other kind of domain");
  std::vector<std::byte> src(n), dst(2 * n), note(8);
  fxt::fill(src.data(), n, seed_of(rank, 1 - rank));
  auto ms = fxt::must(dom.register_memory(src, access::local), "register");
  auto md = fxt::must(dom.register_memory(dst, access::all_remote), "register");
  auto mn = fxt::must(dom.register_memory(note, access::all_remote), "register");
  const auto all = fxt::must(fabrix::exchange(boot, md.remote()), "exchange");
  const auto notes = fxt::must(fabrix::exchange(boot, mn.remote()), "exchange");
  const fabrix::remote_buffer& other = all[static_cast<std::size_t>(1 - rank)];
  FX_CHECK(other.provider == theirs);
  auto key = fxt::must(qp.import(other), "import the other's buffer");
  FX_CHECK_STATUS(qp.write(ms.slice(0, n), other.slice(0, n), 1), status::ok);
  FX_CHECK_STATUS(qp.write(ms.slice(0, n), key.slice(n, n), 2), status::ok);
  FX_CHECK_STATUS(qp.write(ms.slice(0, 8), other.slice(2 * n - 4, 8), 3), status::out_of_range);
  FX_CHECK_STATUS(qp.flush(4), status::ok);
  FX_CHECK_STATUS(qp.write_with_imm(mn.slice(0, 0), notes[static_cast<std::size_t>(1 - rank)].slice(0, 0), 77, 5),
                  status::ok);
  // Serves the other's traffic until our four operations completed and the
  // other's notification (after its writes) came.
  int mine = 0;
  bool noted = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  fabrix::completion c[16];
  while ((mine < 4 || !noted) && std::chrono::steady_clock::now() < deadline) {
    const std::size_t got = dom.poll(c);
    for (std::size_t i = 0; i < got; ++i) {
      FX_CHECK_STATUS(c[i].status, status::ok);
      if (c[i].op == fabrix::opcode::remote_write_imm)
        noted = noted || c[i].imm == 77;
      else
        ++mine;
    }
  }
  FX_CHECK(mine == 4);
  FX_CHECK(noted);
  FX_CHECK(fxt::first_mismatch(dst.data(), n, seed_of(1 - rank, rank)) == n);
  FX_CHECK(fxt::first_mismatch(dst.data() + n, n, seed_of(1 - rank, rank)) == n);
  FX_CHECK_STATUS(qp.release(key), status::ok);
  FX_CHECK(boot.barrier().has_value());
}
}  // namespace

// A program on the routed domain (open("auto")) and one on a provider of
// its own (here fabrix::ucx, by its static type, with the transport of the
// route's net route) reach each other both ways: the plain one through the
// routed domain's provider domain of its provider, the routed one adopting
// the plain one's remote_buffers. Rank 1 is on the other node.
TEST_CASE("conformance: routed: a routed domain and one provider's domain reach each other") {
  const auto routes = fxt::must(fabrix::route_config::parse(run_routes()), "the route");
  const auto& net = *routes[fabrix::route_class::net];
  if (net.provider != "ucx" || !net.devices.empty()) return;  // what this program's plain side is
  fxt::run_ranks(2, [&net](int rank, fabrix::bootstrap& boot) {
    if (rank == 0) {
      reach_the_other(rank, boot, fxt::must(fabrix::domain<fabrix::routed<>>::create(fxt::test_options()), "routed"),
                      fabrix::provider_id_of("ucx"));
    } else {
      fabrix::domain_options o;
      o.transport = net.transport;
      reach_the_other(rank, boot, fxt::must(fabrix::ucx::domain::create(o), "ucx"), fabrix::routed<>::id);
    }
  });
}

// A static routed<Ps...> (the suite's static provider: routed<ucx, ofi>,
// verbs first where built)
// and a routed<> (open("auto")'s) are one provider on the wire: with the
// same routes they connect, and each writes into the other's memory by its
// remote_buffer and through an imported key. Rank 1 is on the other node.
TEST_CASE("conformance: routed: routed<Ps...> and routed<> reach each other") {
  fxt::run_ranks(2, [](int rank, fabrix::bootstrap& boot) {
    if (rank == 0)
      reach_the_other(rank, boot, fxt::open_static(), fabrix::routed<>::id);
    else
      reach_the_other(rank, boot, fxt::must(fabrix::domain<fabrix::routed<>>::create(fxt::test_options()), "routed"),
                      fabrix::routed<>::id);
  });
}

// routed<Ps...> opens providers of Ps only: its default routes pick among
// them (routed<ofi>: node=ofi:shm, net=ofi with its default transport, two
// provider domains, each registering host memory), and a route naming
// another is refused with the providers it has.
TEST_CASE("conformance: routed: routed<Ps...> routes over Ps only") {
  using ofi_only = fabrix::routed<fabrix::ofi::provider>;
  fabrix::domain_options o;
  o.transport = "net=ucx:tcp";
  auto refused = fabrix::domain<ofi_only>::create(o);
  REQUIRE(!refused.has_value());
  CHECK(refused.error().code == status::unsupported);
  CHECK(refused.error().message.find("net=ucx:tcp") != std::string::npos);
  CHECK(refused.error().message.find("not one of this routed domain's (ofi)") != std::string::npos);

  auto dom = fabrix::domain<ofi_only>::create({});
  REQUIRE_MESSAGE(dom.has_value(), (dom ? "" : dom.error().describe()));
  std::vector<std::byte> mem(4096);
  auto mr = dom->register_memory(mem, access::all_remote);
  REQUIRE_MESSAGE(mr.has_value(), (mr ? "" : mr.error().describe()));
  CHECK(mr->remote().provider == fabrix::routed<>::id);
  fabrix::remote_buffer sub;
  for (std::uint8_t i = 0; i < 2; ++i) {
    REQUIRE(fabrix::detail::routed_sub_buffer(mr->remote(), i, sub));
    CHECK(sub.provider == fabrix::provider_id_of("ofi"));
  }
  CHECK(!fabrix::detail::routed_sub_buffer(mr->remote(), 2, sub));
  const std::string d = dom->describe();
  CHECK_MESSAGE(d.find("node=") != std::string::npos, d);
  CHECK_MESSAGE(d.find("net=") != std::string::npos, d);
}

TEST_CASE("conformance: routed: route texts") {
  auto c = fabrix::route_config::parse("node=ofi:shm  net=ucx:tcp gpu=cuda_ipc");
  REQUIRE(c.has_value());
  CHECK((*c)[fabrix::route_class::node]->provider == "ofi");
  CHECK((*c)[fabrix::route_class::node]->transport == "shm");
  CHECK((*c)[fabrix::route_class::net]->text() == "ucx:tcp");
  CHECK((*c)[fabrix::route_class::gpu]->text() == "cuda_ipc");
  CHECK(c->text() == "node=ofi:shm net=ucx:tcp gpu=cuda_ipc");
  CHECK(fabrix::route_config::parse("net=ofi:tcp;ofi_rxm")->text() == "net=ofi:tcp;ofi_rxm");
  auto staged = fabrix::route_config::parse("staged=ucx+staged:tcp net=ucx:tcp");
  REQUIRE(staged.has_value());
  CHECK((*staged)[fabrix::route_class::staged]->provider == "ucx+staged");
  CHECK(staged->text() == "net=ucx:tcp staged=ucx+staged:tcp");
  for (const char* bad : {"node", "disk=ucx", "node=ucx node=ofi", "node=", "node=:tcp", "gpu=cuda_ipc", "node=routed",
                          "node=auto", "net=ucx staged=ucx+staged@eth0,eth1", "staged=ucx+staged"}) {
    auto r = fabrix::route_config::parse(bad);
    CHECK_MESSAGE(!r.has_value(), bad);
    if (!r) CHECK(r.error().code == status::invalid_argument);
  }
  CHECK(!fabrix::route_config::parse("node=ucx:" + std::string(256, 't')).has_value());  // the blob's u8 length
  fabrix::domain_options o;
  o.transport = "node=no_such_provider";
  auto d = fabrix::domain<fabrix::routed<>>::create(o);
  REQUIRE(!d.has_value());
  CHECK(d.error().message.find("node=no_such_provider") != std::string::npos);
}
