// The collectives' pure logic, no transport and no GPU: the ring's
// element-count splitting (every element in exactly one chunk, forwarded
// chunks equal to the chunks they come from, uneven counts), a channel's
// credit window, the tag in tokens and notifications, and the device kernels' dispatch index and launch
// geometry (cuda/include/fabrix/cuda/collective_launch.hpp, which needs no
// CUDA).
#include <doctest/doctest.h>
#include <fabrix/collectives.hpp>
#include <fabrix/collectives/ring.hpp>
#include <fabrix/cuda/collective_launch.hpp>

#include <set>
#include <vector>

namespace coll = fabrix::coll;
namespace cl = fabrix::cuda::coll_launch;
using coll::detail::ring_schedule;

namespace {

ring_schedule make(int n, int rank, bool vector, std::size_t count, std::size_t lag, std::size_t chunk) {
  const std::size_t steps = vector ? 2 * static_cast<std::size_t>(n) - 2 : static_cast<std::size_t>(n) - 1;
  return ring_schedule(n, rank, vector ? 0 : 1, steps, lag, chunk, count,
                       vector ? ring_schedule::layout::vector : ring_schedule::layout::blocks, 1);
}

}  // namespace

TEST_CASE("ring: split() cuts any total into near-equal parts covering it exactly") {
  for (std::size_t total : {0u, 1u, 2u, 7u, 100u, 1001u}) {
    for (std::size_t parts : {1u, 2u, 3u, 4u, 7u}) {
      std::size_t next = 0;
      for (std::size_t i = 0; i < parts; ++i) {
        const auto [f, l] = coll::detail::split(total, parts, i);
        CHECK(f == next);
        CHECK(l - f <= total / parts + 1);
        CHECK(l - f >= total / parts);
        next = l;
      }
      CHECK(next == total);
    }
  }
}

TEST_CASE("ring: every element of every step is in exactly one chunk; forwarded chunks match") {
  for (int n : {2, 3, 4, 5}) {
    for (bool vector : {true, false}) {
      for (std::size_t count : {1u, 5u, 67u, 1001u, 4099u}) {
        for (std::size_t lag : {1u, 2u, 4u}) {
          const std::size_t chunk = 33;  // elements; 1-byte elements, so min_chunk clamps to chunk
          CAPTURE(n);
          CAPTURE(vector);
          CAPTURE(count);
          CAPTURE(lag);
          for (int rank = 0; rank < n; ++rank) {
            const ring_schedule s = make(n, rank, vector, count, lag, chunk);
            const ring_schedule right = make(n, (rank + 1) % n, vector, count, lag, chunk);
            const std::size_t span = vector ? count : count * static_cast<std::size_t>(n);
            // Per step: the ranges sent cover one segment per round.
            for (std::size_t g = 0; g < s.steps; ++g) {
              std::vector<int> hits(span, 0);
              for (std::size_t m = 0; m < s.total(); ++m) {
                if (s.step(m) != g) continue;
                const auto [f, l] = s.send_range(m);
                REQUIRE(f <= l);
                REQUIRE(l <= span);
                CHECK(l - f <= chunk);
                for (std::size_t i = f; i < l; ++i) ++hits[i];
                // The right neighbour receives message m as the same range.
                CHECK(right.recv_range(m) == s.send_range(m));
                // A later step forwards what arrived `lag` messages earlier.
                if (g > 0) CHECK(s.send_range(m) == s.recv_range(m - s.lag));
              }
              std::size_t covered = 0;
              for (int h : hits) {
                CHECK(h <= 1);
                covered += static_cast<std::size_t>(h);
              }
              // Each step moves one segment: 1/n of the vector, or one block.
              if (vector)
                CHECK(covered <= (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n) * s.rounds);
              else
                CHECK(covered == count);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("ring: an allreduce rank sends n-1 segments and reduces the last one: the vector once") {
  for (int n : {2, 3, 4}) {
    for (std::size_t count : {3u, 1001u}) {
      const ring_schedule s = make(n, 0, true, count, 2, 16);
      std::vector<int> hits(count, 0);
      // The segments rank 0 sends in the reduce-scatter steps (0..n-2) and the
      // one it completes from the last of them cover every element once.
      for (std::size_t m = 0; m < s.total(); ++m) {
        if (s.step(m) >= static_cast<std::size_t>(n) - 1) continue;
        const auto [f, l] = s.send_range(m);
        for (std::size_t i = f; i < l; ++i) ++hits[i];
      }
      for (std::size_t m = 0; m < s.total(); ++m) {
        if (s.step(m) != static_cast<std::size_t>(n) - 2) continue;
        const auto [f, l] = s.recv_range(m);
        for (std::size_t i = f; i < l; ++i) ++hits[i];
      }
      for (int h : hits) CHECK(h == 1);
    }
  }
}

TEST_CASE("channel: credit window, protocol checks and counter widening") {
  coll::detail::channel ch(4);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(ch.can_send());
    CHECK(ch.posted() == static_cast<std::uint32_t>(i));
  }
  CHECK_FALSE(ch.can_send());  // slots busy and no credit
  for (std::uint32_t s = 0; s < 4; ++s) ch.written(s);
  CHECK_FALSE(ch.can_send());  // still no credit
  ch.on_credit(1);
  CHECK(ch.can_send());
  ch.on_credit(9);  // more than was sent: ignored
  CHECK(ch.peer_consumed == 1);

  std::size_t bytes = 0;
  CHECK_FALSE(ch.next_landed(bytes));
  CHECK_FALSE(ch.on_data(4, 8, 264));    // chunk 4 while 0 is unconsumed: no credit for it
  CHECK_FALSE(ch.on_data(0, 265, 264));  // larger than a slot
  CHECK(ch.on_data(1, 16, 264));         // out of order is fine inside the window
  CHECK_FALSE(ch.next_landed(bytes));
  CHECK(ch.on_data(0, 8, 264));
  REQUIRE(ch.next_landed(bytes));
  CHECK(bytes == 8);
  ch.consume();
  CHECK(ch.owes_credit());
  CHECK_FALSE(ch.owes_credit(coll::detail::credits::in_batches));  // batched: 1 of 4 slots is under half
  REQUIRE(ch.next_landed(bytes));
  CHECK(bytes == 16);
  ch.consume();
  CHECK(ch.owes_credit());
  CHECK(ch.owes_credit(coll::detail::credits::in_batches));  // 2 of 4: half the slots
  ch.credited = ch.released;
  CHECK_FALSE(ch.owes_credit());
  CHECK_FALSE(ch.owes_credit(coll::detail::credits::in_batches));

  // A held slot (a forwarding write reads it) is credited only once released,
  // and chunks behind it wait for it (credits are cumulative).
  coll::detail::channel h(2);
  REQUIRE(h.on_data(0, 8, 264));
  REQUIRE(h.on_data(1, 8, 264));
  REQUIRE(h.next_landed(bytes));
  h.consume(true);
  CHECK(h.consumed == 1);
  CHECK(h.released == 0);
  CHECK_FALSE(h.owes_credit());
  REQUIRE(h.next_landed(bytes));
  h.consume();
  CHECK(h.released == 0);
  CHECK_FALSE(h.on_data(2, 8, 264));  // slot 0 is still held: no credit was given for chunk 2
  h.release(0);
  CHECK(h.released == 2);
  CHECK(h.owes_credit());
  CHECK(h.on_data(2, 8, 264));
  h.release(7);  // out of range: ignored

  // Across the 16-bit wrap of the notification counter.
  constexpr std::uint64_t wrap = std::uint64_t{1} << coll::detail::counter_bits;
  coll::detail::channel w(4);
  w.consumed = wrap - 1;
  w.released = w.consumed;
  CHECK(w.on_data(0, 8, 264));  // low bits 0 after 2^16 - 1 is chunk 2^16
  std::size_t b = 0;
  CHECK_FALSE(w.next_landed(b));
  CHECK(w.on_data(static_cast<std::uint32_t>((wrap - 1) & coll::detail::counter_mask), 4, 264));
  REQUIRE(w.next_landed(b));
  CHECK(b == 4);
}

TEST_CASE("tokens and notifications carry the communicator's tag; filter_of claims exactly them") {
  using namespace coll::detail;
  for (std::uint32_t tag = 1; tag <= max_tag; ++tag) {
    const std::uint64_t t = make_token(tag, token_kind::forward, 1023, 0xfffffffeu);
    CHECK(token_has_tag(t, tag));
    CHECK_FALSE(token_has_tag(t, tag == 1 ? 2 : 1));
    CHECK(token_kind_of(t) == token_kind::forward);
    CHECK(token_peer(t) == 1023);
    CHECK(token_slot(t) == 0xfffffffeu);
    const std::uint32_t imm = encode(tag, notify_kind::credit, 1023, (std::uint64_t{1} << 40) + 0x1234);
    const notification n = decode(imm);
    CHECK(n.tag == tag);
    CHECK(n.kind == notify_kind::credit);
    CHECK(n.source == 1023);
    CHECK(n.counter == 0x1234);

    const fabrix::completion_filter f = filter_of(tag);
    fabrix::completion mine{};
    mine.token = t;
    CHECK(f.claims(mine));
    fabrix::completion note{};
    note.op = fabrix::opcode::remote_write_imm;
    note.imm = imm;
    CHECK(f.claims(note));
    // What other code on a shared domain posts: small tokens, pointers,
    // immediates below 1 << 28.
    fabrix::completion app{};
    app.token = 0x00007fffdeadbeefull;
    CHECK_FALSE(f.claims(app));
    note.imm = (1u << 28) - 1;
    CHECK_FALSE(f.claims(note));
    // Two communicators with different tags never claim each other's.
    for (std::uint32_t other = 1; other <= max_tag; ++other) CHECK(f.meets(filter_of(other)) == (other == tag));
  }
}

TEST_CASE("device kernels: dispatch index covers every (type, op) once, in fabrix::coll's order") {
  std::set<int> seen;
  for (int t = 0; t < cl::type_count; ++t)
    for (int o = 0; o < cl::op_count; ++o) {
      const int i = cl::combine_index(t, o);
      CHECK(i >= 0);
      CHECK(i < cl::type_count * cl::op_count);
      seen.insert(i);
    }
  CHECK(seen.size() == static_cast<std::size_t>(cl::type_count * cl::op_count));
  CHECK(cl::combine_index(-1, 0) == -1);
  CHECK(cl::combine_index(cl::type_count, 0) == -1);
  CHECK(cl::combine_index(0, cl::op_count) == -1);
  CHECK(cl::combine_index(0, -1) == -1);
  CHECK(static_cast<int>(coll::element_type_of<std::int32_t>()) == 0);
  CHECK(static_cast<int>(coll::element_type_of<std::int64_t>()) == 1);
  CHECK(static_cast<int>(coll::element_type_of<float>()) == 2);
  CHECK(static_cast<int>(coll::element_type_of<double>()) == 3);
  CHECK(static_cast<int>(coll::reduce_op::sum) == 0);
  CHECK(static_cast<int>(coll::reduce_op::min) == 1);
  CHECK(static_cast<int>(coll::reduce_op::max) == 2);
  CHECK(coll::element_size(coll::element_type::i64) == 8);
  CHECK(coll::element_size(coll::element_type::f32) == 4);
}

TEST_CASE("device kernels: launch geometry covers every element") {
  CHECK(cl::launch_geometry(0).blocks == 0);
  CHECK(cl::launch_geometry(1).blocks == 1);
  CHECK(cl::launch_geometry(cl::threads_per_block).blocks == 1);
  CHECK(cl::launch_geometry(cl::threads_per_block + 1).blocks == 2);
  CHECK(cl::launch_geometry(std::size_t{1} << 40).blocks == cl::max_blocks);
  for (std::size_t n : {1u, 255u, 256u, 257u, 100000u, 1048576u, 1048577u, 123456789u}) {
    const cl::geometry g = cl::launch_geometry(n);
    CHECK(g.threads == cl::threads_per_block);
    CHECK(g.blocks >= 1);
    CHECK(g.blocks <= cl::max_blocks);
    const std::size_t threads = static_cast<std::size_t>(g.blocks) * g.threads;
    // Grid-stride: every element is reached, and no block is wholly idle.
    CHECK(threads * ((n + threads - 1) / threads) >= n);
    CHECK((static_cast<std::size_t>(g.blocks) - 1) * g.threads < n);
  }
}
