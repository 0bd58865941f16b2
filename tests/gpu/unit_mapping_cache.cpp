// The importer's mapping cache, with a fake opener: which accesses open an
// allocation, which reuse a mapping, and when mappings are closed.
#include <doctest/doctest.h>
#include <fabrix/cuda/ipc/detail/mapping_cache.hpp>

#include <map>

using fabrix::status;
namespace ipc = fabrix::cuda::ipc;

namespace {

struct fake_opener {
  struct mapping {
    std::byte* base = nullptr;
    std::uint64_t buffer_id = 0;
  };
  std::map<std::uintptr_t, int>* open_now;  // mapping base -> open count
  int* opened;
  int* closed;
  bool fail = false;
  std::uintptr_t next = 0x1000;

  fabrix::result<mapping> open(std::uint64_t, const ipc::ipc_handle& h) {
    if (fail) return fabrix::unexpected(status::invalid_argument, "fake: cannot open");
    ++*opened;
    next += 0x1000;
    ++(*open_now)[next];
    return mapping{reinterpret_cast<std::byte*>(next), h.buffer_id};
  }
  void close(mapping& m) {
    ++*closed;
    REQUIRE(--(*open_now)[reinterpret_cast<std::uintptr_t>(m.base)] == 0);
  }
};

ipc::ipc_handle handle(std::uint64_t buffer_id, std::uint8_t byte = 1) {
  ipc::ipc_handle h;
  h.kind = ipc::handle_kind::legacy;
  h.buffer_id = buffer_id;
  h.allocation_size = 1 << 20;
  h.handle_size = ipc::legacy_handle_size;
  h.handle.fill(std::byte{byte});
  return h;
}

struct fixture {
  std::map<std::uintptr_t, int> open_now;
  int opened = 0, closed = 0;
  ipc::mapping_cache<fake_opener> cache{fake_opener{&open_now, &opened, &closed}, 8};
};

}  // namespace

TEST_CASE_FIXTURE(fixture, "mapping cache: one open per allocation, however many regions and accesses") {
  auto a = cache.acquire(1, 10, handle(5));
  auto b = cache.acquire(1, 10, handle(5));
  auto c = cache.acquire(1, 11, handle(5));  // a second region of the same allocation
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  REQUIRE(c.has_value());
  CHECK(*a == *b);
  CHECK(*a == *c);
  CHECK(opened == 1);
  CHECK(cache.size() == 1);
}

TEST_CASE_FIXTURE(fixture, "mapping cache: a freed-and-reused address (new buffer id) is opened afresh, not stale") {
  auto old_alloc = cache.acquire(1, 10, handle(5));
  auto new_alloc = cache.acquire(1, 12, handle(6));  // same address in the exporter, new buffer id
  REQUIRE(old_alloc.has_value());
  REQUIRE(new_alloc.has_value());
  CHECK(*old_alloc != *new_alloc);
  CHECK(opened == 2);
  // Same buffer id but different handle bytes is another allocation too.
  auto other = cache.acquire(1, 13, handle(6, 2));
  REQUIRE(other.has_value());
  CHECK(opened == 3);
  // And the same handle from another exporting domain.
  auto foreign = cache.acquire(2, 10, handle(5));
  REQUIRE(foreign.has_value());
  CHECK(opened == 4);
  CHECK(*foreign != *old_alloc);
}

TEST_CASE_FIXTURE(fixture, "mapping cache: releasing the last region of an allocation closes it") {
  REQUIRE(cache.acquire(1, 10, handle(5)).has_value());
  REQUIRE(cache.acquire(1, 11, handle(5)).has_value());
  cache.release_epoch(1, 10);
  CHECK(closed == 0);
  CHECK(cache.size() == 1);
  cache.release_epoch(2, 11);  // another owner's epoch 11 is not ours
  CHECK(closed == 0);
  cache.release_epoch(1, 11);
  CHECK(closed == 1);
  CHECK(cache.size() == 0);
  // Using the region again opens the allocation again (the real opener fails
  // if the exporter has freed it meanwhile).
  REQUIRE(cache.acquire(1, 11, handle(5)).has_value());
  CHECK(opened == 2);
}

TEST_CASE_FIXTURE(fixture, "mapping cache: a peer going away closes all of its allocations and only those") {
  REQUIRE(cache.acquire(1, 10, handle(5)).has_value());
  REQUIRE(cache.acquire(1, 11, handle(6)).has_value());
  REQUIRE(cache.acquire(2, 10, handle(5)).has_value());
  CHECK(cache.holds(1));
  cache.release_owner(1);
  CHECK(closed == 2);
  CHECK_FALSE(cache.holds(1));
  CHECK(cache.holds(2));
  cache.clear();
  CHECK(closed == 3);
  for (auto& [base, count] : open_now) CHECK(count == 0);
}

TEST_CASE_FIXTURE(fixture, "mapping cache: a failed open caches nothing; a full cache refuses with no_memory") {
  cache.opener().fail = true;
  auto r = cache.acquire(1, 10, handle(5));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.code() == status::invalid_argument);
  CHECK(cache.size() == 0);
  cache.opener().fail = false;
  for (std::uint64_t id = 0; id < 8; ++id) REQUIRE(cache.acquire(1, id, handle(100 + id)).has_value());
  auto full = cache.acquire(1, 99, handle(999));
  REQUIRE_FALSE(full.has_value());
  CHECK(full.code() == fabrix::status::no_memory);
  CHECK(cache.acquire(1, 99, handle(100)).has_value());  // a known allocation is still served
}

TEST_CASE("mapping cache: destruction closes what is open") {
  std::map<std::uintptr_t, int> open_now;
  int opened = 0, closed = 0;
  {
    ipc::mapping_cache<fake_opener> cache{fake_opener{&open_now, &opened, &closed}};
    REQUIRE(cache.acquire(1, 1, handle(1)).has_value());
    REQUIRE(cache.acquire(1, 2, handle(2)).has_value());
  }
  CHECK(closed == 2);
}
