// The core's part of imported remote keys (queue_pair::import, remote_key):
// what import checks once, what each operation on a key slice still
// checks (range, rights, importer), release, and the provider kit's import
// table (index + generation: a released entry is never reached again).
// Providers resolve their own keys; the conformance suite moves bytes
// through imported keys on each of them.
#include <doctest/doctest.h>

#include "fake_provider.hpp"

#include <cstring>
#include <numeric>

using fabrix::access;
using fabrix::status;

TEST_CASE("remote_key: writes, reads and atomics through an imported key move the bytes") {
  fake::pair_fixture f;
  auto key = f.qp.import(f.md.remote());
  REQUIRE(key);
  CHECK(key->imported());
  CHECK(key->length == f.dst.size());
  CHECK(key->importer == f.qp.import_id());
  CHECK(fabrix::detail::provider_impl(f.qp).imported() == 1);

  std::iota(reinterpret_cast<unsigned char*>(f.src.data()), reinterpret_cast<unsigned char*>(f.src.data()) + 64, 1);
  REQUIRE(f.qp.write(f.ms.slice(0, 64), key->slice(32, 64), 1) == status::ok);
  CHECK(std::memcmp(f.dst.data() + 32, f.src.data(), 64) == 0);

  std::memset(f.src.data(), 0, 64);
  REQUIRE(f.qp.read(f.ms.slice(0, 16), key->slice(40, 16), 2) == status::ok);
  CHECK(std::memcmp(f.src.data(), f.dst.data() + 40, 16) == 0);

  std::uint64_t start = 5;
  std::memcpy(f.dst.data() + 128, &start, 8);
  REQUIRE(f.qp.fetch_add(f.ms.slice(64, 8), key->slice(128, 8), 7, 3) == status::ok);
  std::uint64_t now = 0, old = 0;
  std::memcpy(&now, f.dst.data() + 128, 8);
  std::memcpy(&old, f.src.data() + 64, 8);
  CHECK(now == 12);
  CHECK(old == 5);

  // Batches mix imported keys and remote_buffers.
  const auto rb = f.md.remote();
  const fabrix::operation ops[] = {fabrix::op::write(f.ms.slice(0, 8), key->slice(0, 8), 4),
                                   fabrix::op::write(f.ms.slice(8, 8), rb.slice(8, 8), 5)};
  const auto r = f.qp.post(ops);
  CHECK(r.status == status::ok);
  CHECK(r.posted == 2);
  CHECK(std::memcmp(f.dst.data(), f.src.data(), 16) == 0);
}

TEST_CASE("remote_key: each operation still checks range, rights and alignment") {
  fake::pair_fixture f;
  auto key = f.qp.import(f.md.remote());
  REQUIRE(key);
  CHECK(f.qp.write(f.ms.slice(0, 8), key->slice(f.dst.size() - 4, 8), 1) == status::out_of_range);
  CHECK(f.qp.write(f.ms.slice(0, 8), key->slice(~0ull - 2, 8), 1) == status::out_of_range);
  CHECK(f.qp.write(f.ms.slice(0, 8), key->slice(0, 16), 1) == status::invalid_argument);        // lengths differ
  CHECK(f.qp.fetch_add(f.ms.slice(0, 8), key->slice(4, 8), 1, 1) == status::invalid_argument);  // unaligned

  std::vector<std::byte> ro(64);
  auto mro = f.b.register_memory(ro, access::remote_read).value();
  auto rokey = f.qp.import(mro.remote());
  REQUIRE(rokey);
  CHECK(rokey->rights == access::remote_read);
  CHECK(f.qp.write(f.ms.slice(0, 8), rokey->slice(0, 8), 1) == status::access_denied);
  CHECK(f.qp.fetch_add(f.ms.slice(0, 8), rokey->slice(0, 8), 1, 1) == status::access_denied);
  CHECK(f.qp.read(f.ms.slice(0, 8), rokey->slice(0, 8), 1) == status::ok);

  // A slice naming both a buffer and a key is ambiguous.
  auto both = key->slice(0, 8);
  const auto rb = f.md.remote();
  both.buffer = &rb;
  CHECK(f.qp.write(f.ms.slice(0, 8), both, 1) == status::invalid_argument);
}

TEST_CASE("remote_key: valid only on the queue pair that imported it, until released") {
  fake::pair_fixture f;
  auto other = f.a.connect(f.b.address().value()).value();
  auto key = f.qp.import(f.md.remote());
  REQUIRE(key);
  CHECK(key->importer != other.import_id());
  CHECK(other.write(f.ms.slice(0, 8), key->slice(0, 8), 1) == status::invalid_argument);
  CHECK(other.release(*key) == status::invalid_argument);

  CHECK(f.qp.release(*key) == status::ok);
  CHECK(fabrix::detail::provider_impl(f.qp).imported() == 0);
  CHECK(f.qp.write(f.ms.slice(0, 8), key->slice(0, 8), 1) == status::invalid_argument);
  CHECK(f.qp.release(*key) == status::invalid_argument);  // twice

  // The freed entry is reused under a new generation; the old key stays dead.
  auto again = f.qp.import(f.md.remote());
  REQUIRE(again);
  CHECK(again->ref.index == key->ref.index);
  CHECK(again->ref.generation != key->ref.generation);
  CHECK(f.qp.write(f.ms.slice(0, 8), key->slice(0, 8), 1) == status::invalid_argument);
  CHECK(f.qp.write(f.ms.slice(0, 8), again->slice(0, 8), 2) == status::ok);

  // A forged key (never issued) and a default one name nothing.
  fabrix::remote_key forged = *again;
  forged.ref.index += 5;
  CHECK(f.qp.write(f.ms.slice(0, 8), forged.slice(0, 8), 3) == status::invalid_argument);
  forged = *again;
  forged.length = ~0ull;  // a wider range does not reach past the provider's
  forged.ref.generation += 1;
  CHECK(f.qp.write(f.ms.slice(0, 8), forged.slice(1000, 8), 3) == status::invalid_argument);
  CHECK(f.qp.write(f.ms.slice(0, 8), fabrix::remote_key{}.slice(0, 8), 4) == status::invalid_argument);
}

TEST_CASE("remote_key: import refuses another peer's or provider's buffer and a closed queue pair") {
  fake::pair_fixture f;
  std::vector<std::byte> mine(64);
  auto own = f.a.register_memory(mine, access::all_remote).value();
  auto r = f.qp.import(own.remote());  // made by this side, not the peer
  REQUIRE(!r);
  CHECK(r.error().code == status::invalid_argument);

  auto foreign = f.md.remote();
  foreign.provider = fabrix::provider_id::ucx;
  r = f.qp.import(foreign);
  REQUIRE(!r);
  CHECK(r.error().code == status::invalid_argument);

  auto moved = std::move(f.qp);
  r = f.qp.import(f.md.remote());  // NOLINT(bugprone-use-after-move): the moved-from queue pair refuses
  REQUIRE(!r);
  CHECK(r.error().code == status::invalid_argument);
  CHECK(moved.import(f.md.remote()));
}

TEST_CASE("import_table: index and generation, reuse, capacity") {
  fabrix::detail::import_table<int> t;
  auto a = t.add(1);
  auto b = t.add(2);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*t.find(*a) == 1);
  CHECK(*t.find(*b) == 2);
  CHECK(t.find(fabrix::import_ref{}) == nullptr);  // generation 0 is never issued
  CHECK(t.release(*a) == 1);
  CHECK(t.find(*a) == nullptr);
  CHECK(!t.release(*a));
  auto c = t.add(3);
  REQUIRE(c);
  CHECK(c->index == a->index);
  CHECK(t.find(*a) == nullptr);
  CHECK(*t.find(*c) == 3);
  CHECK(t.size() == 2);
  int seen = 0;
  t.for_each([&](int& v) { seen += v; });
  CHECK(seen == 5);

  fabrix::detail::import_table<char> full;
  std::size_t added = 0;
  while (full.add('x')) ++added;
  CHECK(added == fabrix::detail::import_table<char>::capacity);
}
