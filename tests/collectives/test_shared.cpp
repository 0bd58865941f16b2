// A communicator sharing its domain with other code through a
// completion_router: the application's own writes and notifications, posted
// around and during collectives on 3 ranks, all reach the application
// (every byte, token and immediate checked) and the collectives' results
// stay right; two communicators on one domain with different tags both
// work; a tag already taken is refused on every rank.
#include "common.hpp"

#include <fabrix/completion_router.hpp>
#include <fabrix/connect.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace {

constexpr std::size_t piece = 256;  // bytes of one application write
constexpr int writes_per_round = 4;
constexpr int rounds = 3;

// The application's side of the domain: its own queue pairs, a registered
// region written by the left neighbour, and what its polls returned.
struct application {
  std::vector<fabrix::queue_pair<fxc::P>> qps;
  std::vector<std::byte> source, target;
  std::optional<fabrix::memory_region<fxc::P>> source_mr, target_mr;
  std::vector<fabrix::remote_buffer> targets;  // every rank's target region
  std::set<std::uint64_t> tokens;              // local completions seen
  std::set<std::uint32_t> imms;                // notifications seen

  static std::uint64_t seed(int from, int write) { return static_cast<std::uint64_t>(from) * 1000 + write; }

  // Write `w` to the right neighbour: piece w of its target, immediate
  // 0x100 + w (below 1 << 28: not a communicator's), token w + 1.
  void post(int rank, int size, int w) {
    const int right = (rank + 1) % size;
    const std::size_t at = static_cast<std::size_t>(w) * piece;
    fxt::fill(source.data() + at, piece, seed(rank, w));
    FX_CHECK_STATUS(qps[static_cast<std::size_t>(right)].write_with_imm(
                        source_mr->slice(at, piece), targets[static_cast<std::size_t>(right)].slice(at, piece),
                        0x100u + static_cast<std::uint32_t>(w), static_cast<std::uint64_t>(w) + 1),
                    fabrix::status::ok);
  }

  // Polls the router's default lane until every write up to `upto` has
  // completed here and landed from the left neighbour.
  void collect(fabrix::completion_router<fxc::P>& router, int upto) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::array<fabrix::completion, 16> buf;
    while ((tokens.size() < static_cast<std::size_t>(upto) || imms.size() < static_cast<std::size_t>(upto)) &&
           std::chrono::steady_clock::now() < until) {
      const std::size_t n = router.poll(buf);
      for (std::size_t i = 0; i < n; ++i) {
        const fabrix::completion& c = buf[i];
        FX_CHECK(c.status == fabrix::status::ok);
        if (c.op == fabrix::opcode::remote_write_imm) {
          FX_CHECK(c.imm >= 0x100u && c.imm < 0x100u + rounds * writes_per_round);
          FX_CHECK(c.bytes == piece);
          FX_CHECK(imms.insert(c.imm).second);
        } else {
          FX_CHECK(c.op == fabrix::opcode::write_with_imm);
          FX_CHECK(c.token >= 1 && c.token <= rounds * writes_per_round);
          FX_CHECK(tokens.insert(c.token).second);
        }
      }
    }
    FX_CHECK(tokens.size() == static_cast<std::size_t>(upto));
    FX_CHECK(imms.size() == static_cast<std::size_t>(upto));
  }
};

void allreduce_checked(fxc::comm_t& comm, int size, std::size_t count, std::uint64_t salt) {
  std::vector<std::int64_t> x(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = fxc::value<std::int64_t>(comm.rank(), i, salt);
  fxc::check_ok(fabrix::coll::allreduce(comm, std::span<std::int64_t>(x), fxc::reduce_op::sum), "allreduce");
  for (std::size_t i = 0; i < count; ++i)
    if (x[i] != fxc::reference<std::int64_t>(size, i, fxc::reduce_op::sum, salt)) {
      FX_CHECK(x[i] == fxc::reference<std::int64_t>(size, i, fxc::reduce_op::sum, salt));
      return;
    }
}

}  // namespace

TEST_CASE("collectives: a communicator shares its domain with the application through a completion_router") {
  fxt::run_ranks(3, [](int rank, fabrix::bootstrap& boot) {
    const int size = boot.size();
    auto dom = fxt::open_static();
    fabrix::completion_router<fxc::P> router(dom);

    application app;
    app.qps = fxt::must(fabrix::connect_all(dom, boot), "connect_all (application)");
    const std::size_t bytes = piece * rounds * writes_per_round;
    app.source.resize(bytes);
    app.target.assign(bytes, std::byte{0});
    app.source_mr.emplace(fxt::must(dom.register_memory(app.source, fabrix::access::local), "register source"));
    app.target_mr.emplace(fxt::must(dom.register_memory(app.target, fabrix::access::remote_write), "register target"));
    app.targets = fxt::must(fabrix::exchange(boot, app.target_mr->remote()), "exchange");

    auto o = fxc::small_chunks();
    o.tag = 3;
    auto comm = fxt::must(fxc::comm_t::create(router, boot, o), "communicator::create(router)");

    // The tag is taken on every rank's router: refused everywhere, at once.
    auto again = fxc::comm_t::create(router, boot, o);
    FX_CHECK(!again);
    FX_CHECK(again.code() == fabrix::status::invalid_argument);

    // A second communicator on the same domain, another tag.
    auto o2 = fxc::small_chunks();
    o2.tag = 4;
    auto second = fxt::must(fxc::comm_t::create(router, boot, o2), "second communicator");

    for (int round = 0; round < rounds; ++round) {
      for (int w = 0; w < writes_per_round; ++w) app.post(rank, size, round * writes_per_round + w);
      // The neighbours' writes land while these run: the communicators
      // must leave them, and their own completions, to the application.
      allreduce_checked(comm, size, 5000, static_cast<std::uint64_t>(round));
      allreduce_checked(second, size, 700, 100 + static_cast<std::uint64_t>(round));
      fxc::check_ok(comm.barrier(), "barrier");
    }
    app.collect(router, rounds * writes_per_round);

    const int left = (rank + size - 1) % size;
    for (int w = 0; w < rounds * writes_per_round; ++w) {
      const std::size_t at = static_cast<std::size_t>(w) * piece;
      FX_CHECK(fxt::first_mismatch(app.target.data() + at, piece, application::seed(left, w)) == piece);
    }
    FX_CHECK(router.pending(fabrix::completion_router<fxc::P>::default_lane) == 0);
    (void)boot.barrier();
  });
}
