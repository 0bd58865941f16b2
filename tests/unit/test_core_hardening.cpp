// The core's answers to what outside testing broke (issue: hardening):
// registrations checked against the process's mappings (item 3), wait()
// clamping huge timeouts (item 10), queue pairs and regions that outlive
// their domain (item 14), and peer ids for completions (item 16).
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "fake_provider.hpp"

using fabrix::status;

namespace {

using fake_domain = fabrix::domain<fake::provider>;

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

// `pages` pages mapped with `prot`; unmapped when it goes.
struct mapping {
  mapping(std::size_t pages, int prot) : len(pages * page_size()) {
    addr = ::mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(addr != MAP_FAILED);
  }
  ~mapping() { ::munmap(addr, len); }
  std::byte* bytes() const { return static_cast<std::byte*>(addr); }
  void* addr;
  std::size_t len;
};

bool message_has(const fabrix::error& e, const std::string& part) { return e.message.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("register_memory asks a provider that knows other memory kinds before the mapping check") {
  // Mapped without access, as CUDA maps device memory into the process.
  mapping device(2, PROT_NONE);
  fake::checking_domain_impl::device_begin = device.bytes();
  fake::checking_domain_impl::device_end = device.bytes() + device.len;
  std::vector<std::byte> host(64);

  auto check = [&](auto& d) {
    auto r = d.register_memory(device.bytes(), 4096, {}, fabrix::access::local);
    REQUIRE_FALSE(r);
    CHECK(r.code() == status::invalid_argument);  // the provider's answer, not "not readable"
    CHECK(message_has(r.error(), "device memory"));
    CHECK(d.register_memory(host, fabrix::access::remote_write));  // host memory still passes both checks
  };
  auto d = fabrix::domain<fake::checking_provider>::create().value();
  check(d);
  static const bool once = fabrix::detail::register_provider<fake::checking_provider>(5);
  (void)once;
  auto any = fabrix::open("fake_check").value();  // any_provider forwards the check
  check(any);

  // Without the check, the core alone says what it sees.
  auto plain = fake_domain::create().value();
  auto r = plain.register_memory(device.bytes(), 4096, {}, fabrix::access::local);
  REQUIRE_FALSE(r);
  CHECK(r.code() == status::access_denied);
  CHECK(message_has(r.error(), "not readable"));
  fake::checking_domain_impl::device_begin = fake::checking_domain_impl::device_end = nullptr;
}

TEST_CASE("hardening: register_memory refuses ranges that are not mapped, overflow, or are read-only for writers") {
  auto d = fake_domain::create().value();

  SUBCASE("an address nothing is mapped at") {
    auto r = d.register_memory(reinterpret_cast<void*>(0x1000), 4096, {}, fabrix::access::remote_write);
    REQUIRE_FALSE(r);
    CHECK(r.code() == status::invalid_argument);
    CHECK(message_has(r.error(), "not mapped"));
  }
  SUBCASE("64 TiB from a real buffer") {
    std::vector<std::byte> buf(64);
    auto r = d.register_memory(buf.data(), std::size_t{64} << 40, {}, fabrix::access::remote_write);
    REQUIRE_FALSE(r);
    // A hole, or (under ASan, whose shadow regions lie there) a PROT_NONE mapping.
    CHECK((r.code() == status::invalid_argument || r.code() == status::access_denied));
    CHECK((message_has(r.error(), "not mapped") || message_has(r.error(), "not readable")));
  }
  SUBCASE("SIZE_MAX bytes overflow the address space") {
    std::vector<std::byte> buf(64);
    auto r = d.register_memory(buf.data(), std::numeric_limits<std::size_t>::max(), {}, fabrix::access::local);
    REQUIRE_FALSE(r);
    CHECK(r.code() == status::invalid_argument);
    CHECK(message_has(r.error(), "overflows"));
  }
  SUBCASE("a range running past the end of its mapping into a hole") {
    mapping m(3, PROT_READ | PROT_WRITE);
    REQUIRE(::munmap(m.bytes() + 2 * page_size(), page_size()) == 0);  // a hole after two pages
    auto r = d.register_memory(m.bytes(), 3 * page_size(), {}, fabrix::access::remote_write);
    REQUIRE_FALSE(r);
    CHECK(r.code() == status::invalid_argument);
    CHECK(d.register_memory(m.bytes(), 2 * page_size(), {}, fabrix::access::remote_write));
    m.len = 2 * page_size();
  }
  SUBCASE("PROT_READ memory asked for remote_write or remote_atomic") {
    mapping m(1, PROT_READ);
    for (fabrix::access a : {fabrix::access::remote_write, fabrix::access::remote_atomic, fabrix::access::all_remote}) {
      auto r = d.register_memory(m.addr, m.len, {}, a);
      REQUIRE_FALSE(r);
      CHECK(r.code() == status::access_denied);
      CHECK(message_has(r.error(), "read-only"));
    }
    // Reading from it (a send source, a table peers read) stays allowed.
    CHECK(d.register_memory(m.addr, m.len, {}, fabrix::access::local));
    CHECK(d.register_memory(m.addr, m.len, {}, fabrix::access::remote_read));
  }
  SUBCASE("PROT_NONE memory") {
    mapping m(1, PROT_NONE);
    auto r = d.register_memory(m.addr, m.len, {}, fabrix::access::local);
    REQUIRE_FALSE(r);
    CHECK(r.code() == status::access_denied);
    CHECK(message_has(r.error(), "not readable"));
  }
  SUBCASE("a range over two adjacent writable mappings is accepted") {
    mapping m(2, PROT_READ | PROT_WRITE);
    // A shared page over the second one: two lines of /proc/self/maps.
    REQUIRE(::mmap(m.bytes() + page_size(), page_size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0) != MAP_FAILED);
    CHECK(d.register_memory(m.addr, m.len, {}, fabrix::access::all_remote));
  }
}

TEST_CASE("hardening: wait() clamps huge timeouts instead of overflowing") {
  auto d = fake_domain::create().value();
  using std::chrono::milliseconds;
  (void)d.wait(milliseconds::max());
  CHECK(fabrix::detail::provider_impl(d).last_wait() == fake_domain::max_wait);
  (void)d.wait(std::chrono::duration_cast<milliseconds>(std::chrono::hours(24 * 365 * 1000)));
  CHECK(fabrix::detail::provider_impl(d).last_wait() == fake_domain::max_wait);
  (void)d.wait(milliseconds(-5));
  CHECK(fabrix::detail::provider_impl(d).last_wait() == milliseconds(0));
  (void)d.wait(milliseconds(250));
  CHECK(fabrix::detail::provider_impl(d).last_wait() == milliseconds(250));
}

TEST_CASE("hardening: queue pairs and regions that outlive their domain are refused, not crashed") {
  std::vector<std::byte> src(64), dst(64);
  auto b = fake_domain::create().value();
  auto mdst = b.register_memory(dst, fabrix::access::all_remote).value();
  std::optional<fake_domain> a = fake_domain::create().value();
  auto qp = a->connect(b.address().value()).value();
  auto msrc = a->register_memory(src, fabrix::access::local).value();
  REQUIRE(qp.write(msrc.whole(), mdst.remote().slice(0, 64), 1) == status::ok);

  a.reset();  // the domain goes first; its queue pair and region are still here
  CHECK(qp.write(msrc.whole(), mdst.remote().slice(0, 64), 2) == status::invalid_argument);
  fabrix::operation ops[] = {fabrix::op::write(msrc.whole(), mdst.remote().slice(0, 64), 3)};
  const auto batch = qp.post(ops);
  CHECK(batch.status == status::invalid_argument);
  CHECK(batch.posted == 0);
  // A moved-from queue pair refuses too.
  auto moved = std::move(qp);
  CHECK(qp.flush(4) == status::invalid_argument);  // NOLINT(bugprone-use-after-move): the point
  CHECK(moved.flush(5) == status::invalid_argument);
}

TEST_CASE("hardening: queue pairs get peer ids, in connect order or as given") {
  auto a = fake_domain::create().value();
  auto b = fake_domain::create().value();
  const auto addr = b.address().value();
  auto q0 = a.connect(addr).value();
  auto q1 = a.connect(addr).value();
  auto q7 = a.connect(addr, 7).value();
  auto q3 = a.connect(addr).value();
  CHECK(q0.peer_id() == 0);
  CHECK(q1.peer_id() == 1);
  CHECK(q7.peer_id() == 7);
  CHECK(q3.peer_id() == 3);  // the number of queue pairs made before
}
