// Ranks on simulated nodes see the nodes they are on: four ranks over the
// nodes of FABRIX_TEST_NODES (the conformance harness places rank r on node
// r % k) exchange their node identity (process_identity.hpp, what the
// providers put in their address blobs), host name and network namespace
// through the bootstrap; each rank checks that ranks of one node agree and
// ranks of different nodes differ in all three. Exit 77 when
// FABRIX_TEST_NODES is not set (tests/nodes/run.sh sets it).
#include "../conformance/harness.hpp"

#include <fabrix/detail/process_identity.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}
std::string text_of(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// "node|host|netns" -> its three parts.
std::vector<std::string> parts_of(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == '|')
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

}  // namespace

TEST_CASE("ranks on simulated nodes: one node per namespace, each with its own identity, host name and stack") {
  const auto nodes = fxt::test_nodes::from_env();
  REQUIRE(nodes.names.size() >= 2);
  const int n = 4;
  fxt::run_ranks(n, [&](int rank, fabrix::bootstrap& boot) {
    char host[256] = {};
    FX_CHECK(::gethostname(host, sizeof(host) - 1) == 0);
    const std::string me = std::to_string(fabrix::detail::self_identity().node) + "|" + host + "|" +
                           fabrix::detail::namespace_of("/proc/self/ns/net");
    std::fprintf(stderr, "rank %d: node %s (%s)\n", rank, me.c_str(), fabrix::detail::node_description().c_str());
    FX_CHECK(std::string(host) == nodes.names[nodes.of(rank)]);
    const auto all = fxt::must(boot.allgather(bytes_of(me)), "allgather");
    FX_CHECK(static_cast<int>(all.size()) == n);
    const auto mine = parts_of(me);
    for (int r = 0; r < n; ++r) {
      const std::string them = text_of(all[r]);
      const auto theirs = parts_of(them);
      FX_CHECK(theirs.size() == 3);
      if (nodes.of(r) == nodes.of(rank)) {
        if (them != me) fxt::rank_fail("same node, same identity", __FILE__, __LINE__, them + " vs " + me);
        continue;
      }
      for (std::size_t i = 0; i < 3; ++i)
        if (theirs[i] == mine[i])
          fxt::rank_fail("other node, other identity, host name and namespace", __FILE__, __LINE__,
                         "rank " + std::to_string(r) + " shares '" + mine[i] + "' with this rank");
    }
  });
}

int main(int argc, char** argv) {
  const char* nodes = std::getenv("FABRIX_TEST_NODES");
  if (!nodes || !*nodes) {
    std::puts("skipped: FABRIX_TEST_NODES is not set (tests/nodes/run.sh runs this on simulated nodes)");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
