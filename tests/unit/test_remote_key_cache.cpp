// The provider kit's remote key cache (fabrix/detail/remote_key_cache.hpp):
// the one policy every provider's remote_buffer path uses.
#include <doctest/doctest.h>

#include <fabrix/detail/remote_key_cache.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

std::vector<int> destroyed_keys;
void destroy_key(int k) { destroyed_keys.push_back(k); }
using test_cache = fabrix::detail::remote_key_cache<int, &destroy_key>;

fabrix::remote_buffer region_number(std::uint64_t i) {
  fabrix::remote_buffer rb;
  rb.owner = 42;
  rb.address = 4096 * (i + 1);
  rb.length = 64;
  rb.seal = i * 7919;
  return rb;
}

}  // namespace

TEST_CASE("remote key cache: bounded, least recently used first, never a held key") {
  destroyed_keys.clear();
  {
    test_cache cache;
    const std::size_t cap = test_cache::capacity;
    std::vector<test_cache::entry*> first;
    for (std::size_t i = 0; i < cap; ++i) {
      REQUIRE(cache.find(region_number(i)) == nullptr);
      first.push_back(cache.add(region_number(i), static_cast<int>(i)));
    }
    CHECK(cache.size() == cap);
    CHECK(destroyed_keys.empty());
    // Region 0 is used again and region 1 is held by an operation: the next
    // add evicts region 2, the least recently used entry nobody holds.
    CHECK(cache.find(region_number(0)) == first[0]);
    test_cache::hold(first[1]);
    cache.add(region_number(cap), static_cast<int>(cap));
    CHECK(cache.size() == cap);
    REQUIRE(destroyed_keys == std::vector<int>{2});
    CHECK(cache.find(region_number(2)) == nullptr);
    CHECK(cache.find(region_number(1)) == first[1]);  // held entries keep their address
    CHECK(first[1]->key == 1);
    // A peer handing out ever new regions: the cache stays at its bound.
    for (std::size_t i = cap + 1; i < 10 * cap; ++i) cache.add(region_number(i), static_cast<int>(i));
    CHECK(cache.size() == cap);
    CHECK(cache.find(region_number(1)) == first[1]);  // still held: never destroyed
    CHECK(std::find(destroyed_keys.begin(), destroyed_keys.end(), 1) == destroyed_keys.end());
    // Released, it is an ordinary entry again.
    test_cache::release(first[1]);
    for (std::size_t i = 10 * cap; i < 12 * cap; ++i) cache.add(region_number(i), static_cast<int>(i));
    CHECK(std::find(destroyed_keys.begin(), destroyed_keys.end(), 1) != destroyed_keys.end());
  }
  // Every key was destroyed exactly once: by eviction or with the cache.
  std::sort(destroyed_keys.begin(), destroyed_keys.end());
  CHECK(destroyed_keys.size() == 12 * test_cache::capacity);
  CHECK(std::adjacent_find(destroyed_keys.begin(), destroyed_keys.end()) == destroyed_keys.end());
}

TEST_CASE("remote key cache: all held, it grows, then shrinks back; drain hands every key over") {
  destroyed_keys.clear();
  test_cache cache;
  const std::size_t cap = test_cache::capacity;
  std::vector<test_cache::entry*> held;
  for (std::size_t i = 0; i < cap + 3; ++i) {
    held.push_back(cache.add(region_number(i), static_cast<int>(i)));
    test_cache::hold(held.back());
  }
  CHECK(cache.size() == cap + 3);  // nothing could go
  CHECK(destroyed_keys.empty());
  for (auto* e : held) test_cache::release(e);
  cache.add(region_number(cap + 3), static_cast<int>(cap + 3));
  CHECK(cache.size() == cap + 3);  // one out, one in
  CHECK(destroyed_keys == std::vector<int>{0});
  std::vector<int> handed;
  cache.drain_to(handed);
  CHECK(cache.size() == 0);
  CHECK(handed.size() == cap + 3);
  CHECK(destroyed_keys.size() == 1);  // drained keys are the caller's to destroy
}

TEST_CASE("remote key cache: without a destroy function (keys copied at post time), the last hit first") {
  fabrix::detail::remote_key_cache<std::uint32_t> cache;
  const std::size_t cap = decltype(cache)::capacity;
  for (std::size_t i = 0; i < 3 * cap; ++i) {
    auto* e = cache.add(region_number(i), static_cast<std::uint32_t>(i));
    REQUIRE(cache.find(region_number(i)) == e);  // the last added is the last hit
    CHECK(e->key == i);
  }
  CHECK(cache.size() == cap);  // bounded: the oldest 2 * cap went
  CHECK(cache.find(region_number(0)) == nullptr);
  CHECK(cache.find(region_number(3 * cap - 1))->key == 3 * cap - 1);
  // A region dropped and used again is simply verified and added again.
  auto* again = cache.add(region_number(0), 7);
  CHECK(cache.find(region_number(0)) == again);
  CHECK(cache.size() == cap);
}

TEST_CASE("remote key cache: drop_if removes the named regions, held or not, and destroys their keys") {
  destroyed_keys.clear();
  test_cache cache;
  for (std::size_t i = 0; i < 6; ++i) cache.add(region_number(i), static_cast<int>(i));
  test_cache::hold(cache.find(region_number(2)));  // held: dropped all the same (the region is gone)
  auto* last_hit = cache.find(region_number(4));
  REQUIRE(last_hit != nullptr);
  cache.drop_if([](const test_cache::entry& e) { return e.key % 2 == 0; });
  CHECK(cache.size() == 3);
  std::sort(destroyed_keys.begin(), destroyed_keys.end());
  CHECK(destroyed_keys == std::vector<int>{0, 2, 4});
  // The last hit was dropped: a lookup of it misses instead of returning it.
  CHECK(cache.find(region_number(4)) == nullptr);
  CHECK(cache.find(region_number(2)) == nullptr);
  for (std::size_t i : {1, 3, 5}) CHECK(cache.find(region_number(i))->key == static_cast<int>(i));
  destroyed_keys.clear();
}
