// The provider kit's periodic work (fabrix/detail/periodic.hpp): the clock
// read on one poll in 64 (and after wake()), tasks at most once per period.
#include <doctest/doctest.h>

#include <fabrix/detail/periodic.hpp>

#include <chrono>

using namespace std::chrono_literals;

TEST_CASE("poll_clock: one sample in 64 calls; wake() makes the next call sample") {
  fabrix::detail::poll_clock c;
  int samples = 0;
  std::chrono::steady_clock::time_point t{};
  for (int i = 0; i < 64 * 10; ++i) samples += c.sample(t) ? 1 : 0;
  CHECK(samples == 10);
  c.wake();
  t = {};
  REQUIRE(c.sample(t));
  CHECK(t > std::chrono::steady_clock::time_point{});
  CHECK(t <= std::chrono::steady_clock::now());
  const auto kept = t;
  CHECK_FALSE(c.sample(t));  // then one in 64 again, `t` untouched
  CHECK(t == kept);
}

TEST_CASE("schedule: due at once, then not before the period has passed") {
  fabrix::detail::schedule s;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(s.due(t0, 100ms));
  CHECK(s.next == t0 + 100ms);
  CHECK_FALSE(s.due(t0 + 99ms, 100ms));
  CHECK(s.due(t0 + 100ms, 100ms));
  CHECK(s.next == t0 + 200ms);
  CHECK_FALSE(s.due(t0 + 150ms, 100ms));
}
