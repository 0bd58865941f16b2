// The provider kit's periodic work (fabrix/detail/periodic.hpp): the clock
// read on one poll in 64 (and after wake()), tasks at most once per period.
#include <doctest/doctest.h>

#include <fabrix/detail/periodic.hpp>

#include <chrono>

using namespace std::chrono_literals;

TEST_CASE("poll_clock: one sample in 64 calls; wake() makes the next call sample") {
  fabrix::detail::poll_clock c;
  int samples = 0;
  for (int i = 0; i < 64 * 10; ++i) samples += c.sample().has_value() ? 1 : 0;
  CHECK(samples == 10);
  c.wake();
  const auto t = c.sample();
  REQUIRE(t.has_value());
  CHECK(*t <= std::chrono::steady_clock::now());
  CHECK_FALSE(c.sample().has_value());  // then one in 64 again
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
