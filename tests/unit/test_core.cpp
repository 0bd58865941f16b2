// The core templates over an in-process provider: validation, completion
// routing, awaitables, batches and any_provider.
#include <doctest/doctest.h>

#include "fake_provider.hpp"

#include <algorithm>

using fabrix::completion;
using fabrix::opcode;
using fabrix::status;

namespace {

// allocate_memory is optional: a provider without it has no domain<P>::allocate_memory.
static_assert(!fabrix::allocates_memory<fake::provider>);

using fake::pair_fixture;

}  // namespace

TEST_CASE("core: register_memory refuses empty buffers and unknown access bits") {
  auto d = fabrix::domain<fake::provider>::create().value();
  std::vector<std::byte> buf(16);
  CHECK(d.register_memory(nullptr, 16, {}, fabrix::access::local).code() == status::invalid_argument);
  CHECK(d.register_memory(buf.data(), 0, {}, fabrix::access::local).code() == status::invalid_argument);
  CHECK(d.register_memory(buf.data(), 16, {}, static_cast<fabrix::access>(1u << 9)).code() == status::invalid_argument);
  auto mr = d.register_memory(buf, fabrix::access::remote_read).value();
  CHECK(mr.size() == 16);
  CHECK(mr.data() == buf.data());
  CHECK(mr.slice(8, 8).valid());
  CHECK(mr.slice(8, 8).owner == mr.remote().owner);  // ownership fixed at slice() time
  CHECK(mr.remote().owner != 0);
  CHECK(mr.slice(8, 8).address == buf.data() + 8);
  CHECK_FALSE(mr.slice(9, 8).valid());
  CHECK(mr.slice(9, 8).owner == 0);
  CHECK_FALSE(mr.slice(~std::uint64_t{0}, 2).valid());
}

TEST_CASE("core: write, read and write_with_imm route completions to both sides") {
  pair_fixture f;
  for (std::size_t i = 0; i < f.src.size(); ++i) f.src[i] = static_cast<std::byte>(i);
  REQUIRE(f.qp.write(f.ms.slice(0, 100), f.md.remote().slice(10, 100), 7) == status::ok);
  REQUIRE(f.qp.write_with_imm(f.ms.slice(100, 4), f.md.remote().slice(0, 4), 0xabcd, 8) == status::ok);
  completion c[8];
  REQUIRE(f.a.poll(c) == 2);
  CHECK(c[0].token == 7);
  CHECK(c[0].bytes == 100);
  CHECK(c[1].token == 8);
  CHECK(c[1].op == opcode::write_with_imm);
  REQUIRE(f.b.poll(c) == 1);
  CHECK(c[0].op == opcode::remote_write_imm);
  CHECK(c[0].imm == 0xabcd);
  CHECK(c[0].bytes == 4);
  CHECK(std::memcmp(f.dst.data() + 10, f.src.data(), 100) == 0);
  CHECK(std::memcmp(f.dst.data(), f.src.data() + 100, 4) == 0);
}

TEST_CASE("core: validation refuses before the provider sees anything") {
  pair_fixture f;
  const auto& rb = f.md.remote();
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(250, 8), 1) == status::out_of_range);
  CHECK(f.qp.write(f.ms.slice(250, 8), rb.slice(0, 8), 1) == status::out_of_range);
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(0, 9), 1) == status::invalid_argument);
  CHECK(f.qp.write(f.ms.slice(0, 8), fabrix::remote_slice{}, 1) == status::invalid_argument);
  CHECK(f.qp.fetch_add(f.ms.slice(0, 8), rb.slice(4, 8), 1, 1) == status::invalid_argument);
  CHECK(f.qp.fetch_add(f.ms.slice(0, 4), rb.slice(0, 4), 1, 1) == status::invalid_argument);
  const fabrix::local_slice five[] = {f.ms.slice(0, 1), f.ms.slice(1, 1), f.ms.slice(2, 1), f.ms.slice(3, 1),
                                      f.ms.slice(4, 1)};
  CHECK(f.qp.write(five, rb.slice(0, 5), 1) == status::invalid_argument);  // max_sge is 4
  CHECK(f.qp.write(std::span(five).first(4), rb.slice(0, 4), 1) == status::ok);
  // Rights of the target region.
  auto ro = f.b.register_memory(f.dst.data(), 64, {}, fabrix::access::remote_read).value();
  CHECK(f.qp.write(f.ms.slice(0, 8), ro.remote().slice(0, 8), 1) == status::access_denied);
  CHECK(f.qp.compare_swap(f.ms.slice(0, 8), ro.remote().slice(0, 8), 0, 1, 1) == status::access_denied);
  CHECK(f.qp.read(f.ms.slice(0, 8), ro.remote().slice(0, 8), 1) == status::ok);
  // A local slice of another domain's region.
  CHECK(f.qp.write(f.md.slice(0, 8), rb.slice(8, 8), 1) == status::invalid_argument);
  // Another provider's buffer.
  fabrix::remote_buffer other = rb;
  other.provider = fabrix::provider_id::ucx;
  CHECK(f.qp.write(f.ms.slice(0, 8), other.slice(0, 8), 1) == status::invalid_argument);
  completion c[8];
  CHECK(f.a.poll(c) == 2);  // only the two operations that were valid
}

TEST_CASE("core: a batch is validated whole before anything is posted") {
  pair_fixture f;
  const fabrix::operation ops[] = {fabrix::op::write(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 1),
                                   fabrix::op::write(f.ms.slice(0, 8), f.md.remote().slice(300, 8), 2),
                                   fabrix::op::flush(3)};
  const auto r = f.qp.post(ops);
  CHECK(r.status == status::out_of_range);
  CHECK(r.posted == 1);
  completion c[4];
  CHECK(f.a.poll(c) == 0);
  const auto ok = f.qp.post(std::span(ops).first(1));
  CHECK(ok.status == status::ok);
  CHECK(ok.posted == 1);
}

TEST_CASE("core: through any_provider, what the provider lacks is unsupported at run time") {
  static const bool once = fabrix::detail::register_provider<fake::provider>(10);
  CHECK(once);
  fabrix::domain_options limited;
  limited.device = "limited";
  auto a = fabrix::open("fake", limited).value();
  auto b = fabrix::open("fake", limited).value();
  CHECK_FALSE(a.caps().atomics);
  CHECK_FALSE(a.caps().send_recv);
  auto qp = a.connect(b.address().value()).value();
  std::vector<std::byte> buf(16);
  auto mr = a.register_memory(buf, fabrix::access::all_remote).value();
  auto rb = b.register_memory(buf, fabrix::access::all_remote).value();
  // (With a static provider whose caps lack them these calls do not compile.)
  CHECK(qp.fetch_add(mr.slice(0, 8), rb.remote().slice(8, 8), 1, 1) == status::unsupported);
  CHECK(qp.compare_swap(mr.slice(0, 8), rb.remote().slice(8, 8), 0, 1, 1) == status::unsupported);
  CHECK(qp.send(mr.slice(0, 8), 1) == status::unsupported);
  CHECK(qp.write(mr.slice(0, 8), rb.remote().slice(8, 8), 1) == status::ok);
}

namespace {
template <class P>
fabrix::task<int> copy_and_add(fabrix::queue_pair<P>& qp, fabrix::memory_region<P>& ms,
                               const fabrix::remote_buffer& rb) {
  const completion w = co_await qp.write(ms.slice(0, 16), rb.slice(0, 16));
  CHECK(w.status == status::ok);
  CHECK(w.token == 0);  // awaited completions carry no user token
  const completion f = co_await qp.fetch_add(ms.slice(32, 8), rb.slice(64, 8), 5);
  CHECK(f.status == status::ok);
  const completion bad = co_await qp.write(ms.slice(0, 16), rb.slice(250, 16));
  CHECK(bad.status == status::out_of_range);
  std::uint64_t old;
  std::memcpy(&old, ms.data() + 32, 8);
  co_return static_cast<int>(old);
}
}  // namespace

TEST_CASE("core: awaitables resume from poll and sync_wait returns the task's value") {
  pair_fixture f;
  std::uint64_t start = 37;
  std::memcpy(f.dst.data() + 64, &start, 8);
  f.src[0] = std::byte{0x5a};
  CHECK(fabrix::sync_wait(f.a, copy_and_add(f.qp, f.ms, f.md.remote())) == 37);
  CHECK(f.dst[0] == std::byte{0x5a});
  std::uint64_t now;
  std::memcpy(&now, f.dst.data() + 64, 8);
  CHECK(now == 42);
}

TEST_CASE("core: any_provider opens registered providers by name and picks the best for auto") {
  static const bool once = fabrix::detail::register_provider<fake::provider>(10);
  CHECK(once);
  auto names = fabrix::registered_providers();
  CHECK(std::find(names.begin(), names.end(), "fake") != names.end());
  auto d = fabrix::open("fake");
  REQUIRE(d.has_value());
  CHECK(d->describe() == "fake");
  auto missing = fabrix::open("nonexistent");
  CHECK(missing.code() == status::unsupported);
  fabrix::domain_options refuse;
  refuse.transport = "refuse";
  CHECK(fabrix::open("fake", refuse).code() == status::unsupported);

  // The same generic code works over any_provider. This program has
  // fabrix::routed (fabrix.hpp, through another file), but its default
  // routes open one provider domain here ("fake"), so "auto" is that one.
  auto e = fabrix::open("auto").value();
  CHECK(e.describe() == "fake");
  std::vector<std::byte> a(64), b(64);
  auto ma = d->register_memory(a, fabrix::access::local).value();
  auto mb = e.register_memory(b, fabrix::access::all_remote).value();
  auto qp = d->connect(e.address().value()).value();
  a[3] = std::byte{9};
  CHECK(qp.write(ma.slice(0, 8), mb.remote().slice(8, 8), 1) == status::ok);
  CHECK(qp.write(ma.slice(0, 8), mb.remote().slice(60, 8), 1) == status::out_of_range);
  completion c[2];
  CHECK(d->poll(c) == 1);
  CHECK(b[11] == std::byte{9});
}

TEST_CASE("core: any_provider forwards allocate_memory, and says unsupported where the provider does not allocate") {
  static const bool once = fabrix::detail::register_provider<fake::provider>(10) &&
                           fabrix::detail::register_provider<fake::allocating_provider>(5);
  CHECK(once);
  static_assert(fabrix::allocates_memory<fabrix::any_provider>);

  // A provider that allocates: the regions come from it, sized as asked,
  // and bytes written and read through them land where data() says.
  auto a = fabrix::open("fake_alloc").value();
  auto b = fabrix::open("fake_alloc").value();
  auto src = a.allocate_memory(64, fabrix::access::local);
  auto dst = b.allocate_memory(128, fabrix::access::all_remote);
  REQUIRE(src.has_value());
  REQUIRE(dst.has_value());
  REQUIRE(src->size() == 64);
  REQUIRE(dst->size() == 128);
  REQUIRE(src->data() != nullptr);
  for (std::size_t i = 0; i < 64; ++i) src->data()[i] = static_cast<std::byte>(i * 7 + 1);
  auto qp = a.connect(b.address().value()).value();
  CHECK(qp.write(src->slice(0, 64), dst->remote().slice(32, 64), 1) == status::ok);
  completion c[4];
  REQUIRE(a.poll(c) == 1);
  CHECK(c[0].status == status::ok);
  for (std::size_t i = 0; i < 128; ++i) {
    const auto want = i >= 32 && i < 96 ? static_cast<std::byte>((i - 32) * 7 + 1) : std::byte{0};
    CHECK(dst->data()[i] == want);
  }
  dst->data()[100] = std::byte{0x5a};
  CHECK(qp.read(src->slice(8, 4), dst->remote().slice(98, 4), 2) == status::ok);
  REQUIRE(a.poll(c) == 1);
  CHECK(c[0].op == opcode::read);
  CHECK(src->data()[8] == std::byte{0});
  CHECK(src->data()[10] == std::byte{0x5a});
  CHECK(src->data()[12] == static_cast<std::byte>(12 * 7 + 1));  // past the read: untouched
  // The core's argument checks still come first.
  CHECK(a.allocate_memory(0, fabrix::access::local).code() == status::invalid_argument);

  // A provider that does not allocate: unsupported, with a message that
  // names the provider and what to do instead.
  auto f = fabrix::open("fake").value();
  auto none = f.allocate_memory(64, fabrix::access::all_remote);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.code() == status::unsupported);
  CHECK(none.error().provider == "fake");
  CHECK(none.error().message.find("does not allocate memory") != std::string::npos);
  CHECK(none.error().describe().find("register_memory") != std::string::npos);
}

namespace {
// Two names with one wire number (provider_id_of hashes names into 16 bits;
// found by counting up): a program cannot register both.
struct clash_a_domain : fake::extended_domain<clash_a_domain> {
  static constexpr std::string_view name = "fake_clash_1549";
  explicit clash_a_domain(domain_impl d) : extended_domain(std::move(d)) {}
};
struct clash_b_domain : fake::extended_domain<clash_b_domain> {
  static constexpr std::string_view name = "fake_clash_2904";
  explicit clash_b_domain(domain_impl d) : extended_domain(std::move(d)) {}
};
static_assert(fabrix::provider_id_of(clash_a_domain::name) == fabrix::provider_id_of(clash_b_domain::name));
}  // namespace

TEST_CASE("core: a provider whose name's wire number another provider holds is refused, and open() says why") {
  static const bool first = fabrix::detail::register_provider<fake::provider_of<clash_a_domain>>(1);
  static const bool second = fabrix::detail::register_provider<fake::provider_of<clash_b_domain>>(1);
  CHECK(first);
  CHECK_FALSE(second);
  CHECK(fabrix::open("fake_clash_1549").has_value());
  auto refused = fabrix::open("fake_clash_2904");
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.code() == status::invalid_argument);
  CHECK(refused.error().message.find("fake_clash_1549") != std::string::npos);
  const auto names = fabrix::registered_providers();
  CHECK(std::find(names.begin(), names.end(), "fake_clash_2904") == names.end());
}
