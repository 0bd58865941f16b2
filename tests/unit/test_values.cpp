// Value types: status, error, result, completion_ring, slot_pool.
#include <doctest/doctest.h>

#include <fabrix/detail/completion_ring.hpp>
#include <fabrix/detail/slot_pool.hpp>
#include <fabrix/fabrix.hpp>

#include <set>
#include <string>

using fabrix::status;

TEST_CASE("status: names and error classes") {
  std::set<std::string_view> names;
  for (int s = 0; s <= static_cast<int>(status::provider_error); ++s)
    names.insert(fabrix::to_string(static_cast<status>(s)));
  CHECK(names.size() == static_cast<std::size_t>(status::provider_error) + 1);  // all distinct
  CHECK(names.count("unknown") == 0);
  CHECK_FALSE(fabrix::is_error(status::ok));
  CHECK_FALSE(fabrix::is_error(status::again));
  CHECK_FALSE(fabrix::is_error(status::in_progress));
  CHECK(fabrix::is_error(status::access_denied));
  CHECK(fabrix::is_error(status::provider_error));
}

TEST_CASE("result: value, error and code") {
  fabrix::result<int> good = 5;
  CHECK(good.has_value());
  CHECK(*good == 5);
  CHECK(good.code() == status::ok);
  fabrix::result<int> bad = fabrix::unexpected(status::timed_out, "too slow", "bootstrap", 110);
  CHECK_FALSE(bad);
  CHECK(bad.code() == status::timed_out);
  CHECK(bad.error().native_code == 110);
  CHECK(bad.error().describe() == "bootstrap: too slow (timed_out, native 110)");
  fabrix::result<void> v;
  CHECK(v.has_value());
  fabrix::result<void> vf = fabrix::unexpected(status::unsupported, "no");
  CHECK(vf.code() == status::unsupported);
  CHECK(vf.error().describe() == "no (unsupported)");
}

TEST_CASE("completion_ring: FIFO order across growth") {
  fabrix::detail::completion_ring ring(16);
  for (std::uint64_t i = 0; i < 10; ++i) ring.push({.token = i});
  fabrix::completion out[4];
  REQUIRE(ring.drain(out) == 4);
  for (std::uint64_t i = 0; i < 4; ++i) CHECK(out[i].token == i);
  for (std::uint64_t i = 10; i < 100; ++i) ring.push({.token = i});  // wraps and grows
  CHECK(ring.size() == 96);
  std::uint64_t expect = 4;
  while (!ring.empty()) {
    const std::size_t n = ring.drain(out);
    for (std::size_t k = 0; k < n; ++k) CHECK(out[k].token == expect++);
  }
  CHECK(expect == 100);
}

namespace {
struct slot {
  int value = 0;
  slot* next_free = nullptr;
};
}  // namespace

TEST_CASE("slot_pool: exhaustion is back-pressure, slots come back reset") {
  fabrix::detail::slot_pool<slot> pool(3);
  slot* a = pool.take();
  slot* b = pool.take();
  slot* c = pool.take();
  REQUIRE((a && b && c));
  CHECK(pool.take() == nullptr);
  CHECK(pool.in_use() == 3);
  b->value = 7;
  pool.give_back(b);
  slot* again = pool.take();
  CHECK(again == b);
  CHECK(again->value == 0);
}

namespace {
// A slot with scratch that every use writes before reading: recycle() resets
// the rest only.
struct scratch_slot {
  int value = 0;
  int scratch = 0;
  int recycled = 0;
  scratch_slot* next_free = nullptr;
  void recycle() noexcept {
    value = 0;
    ++recycled;
  }
};
}  // namespace

TEST_CASE("slot_pool: a slot with recycle() is reset by it, its scratch kept") {
  fabrix::detail::slot_pool<scratch_slot> pool(2);
  scratch_slot* a = pool.take();
  REQUIRE(a != nullptr);
  a->value = 7;
  a->scratch = 42;
  pool.give_back(a);
  CHECK(pool.in_use() == 0);
  scratch_slot* again = pool.take();
  REQUIRE(again == a);
  CHECK(again->value == 0);
  CHECK(again->scratch == 42);
  CHECK(again->recycled == 1);
  CHECK(again->next_free == nullptr);
  scratch_slot* b = pool.take();
  CHECK(b != nullptr);
  CHECK(b != a);
  CHECK(pool.take() == nullptr);
}
