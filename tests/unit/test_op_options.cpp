// The core's part of completion levels, fences and unsignaled operations
// (issue: core contract v2): which options an operation may take, how a
// queue pair's defaults reach the provider, and that fence() marks exactly
// the next operation. Providers keep the promises; the conformance suite
// checks those.
#include <doctest/doctest.h>

#include "fake_provider.hpp"

#include <array>

using fabrix::op_options;
using fabrix::opcode;
using fabrix::status;

namespace {

struct options_fixture : fake::pair_fixture {
  op_options last() { return fabrix::detail::provider_impl(qp).last_options(); }
  std::size_t drain() {
    fabrix::completion c[64];
    return a.poll(c);
  }
};

}  // namespace

TEST_CASE("options: recv and flush cannot be unsignaled; unknown bits and a fenced recv are refused") {
  options_fixture f;
  const auto rb = f.md.remote();
  CHECK(f.qp.post(fabrix::op::flush(1)) == status::ok);
  auto flush = fabrix::op::flush(2);
  flush.options = op_options::unsignaled;
  CHECK(f.qp.post(flush) == status::invalid_argument);
  auto recv = fabrix::op::recv(f.ms.slice(0, 8), 3);
  recv.options = op_options::unsignaled;
  CHECK(f.qp.post(recv) == status::invalid_argument);
  recv.options = op_options::fence;
  CHECK(f.qp.post(recv) == status::invalid_argument);
  auto odd = fabrix::op::write(f.ms.slice(0, 8), rb.slice(0, 8), 4);
  odd.options = static_cast<op_options>(0x80);
  CHECK(f.qp.post(odd) == status::invalid_argument);
  CHECK(f.drain() == 1);  // the first flush only
}

TEST_CASE("options: unsignaled operations give no completion and are counted; signaled ones still complete") {
  options_fixture f;
  const auto rb = f.md.remote();
  for (int i = 0; i < 8; ++i) f.src[i] = std::byte(i + 1);
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(0, 8), 1, op_options::unsignaled) == status::ok);
  CHECK(f.qp.finished() == 1);
  CHECK(f.dst[7] == std::byte(8));
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(8, 8), 2) == status::ok);
  CHECK(f.qp.flush(3) == status::ok);
  fabrix::completion c[8];
  REQUIRE(f.a.poll(c) == 2);
  CHECK(c[0].token == 2);
  CHECK(c[1].token == 3);
  CHECK(f.qp.finished() == 1);
}

TEST_CASE("options: a queue pair's defaults apply where they fit, never to awaited operations") {
  options_fixture f;
  const auto rb = f.md.remote();
  f.qp.set_default_options(op_options::unsignaled | op_options::delivered | op_options::fence);
  CHECK(f.qp.default_options() == (op_options::unsignaled | op_options::delivered));  // fence is never a default
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(0, 8), 1) == status::ok);
  CHECK(f.last() == (op_options::unsignaled | op_options::delivered));
  CHECK(f.qp.read(f.ms.slice(0, 8), rb.slice(0, 8), 2) == status::ok);
  CHECK(f.last() == op_options::unsignaled);  // reads have no delivery level of their own
  CHECK(f.qp.flush(3) == status::ok);
  CHECK(f.last() == op_options::none);  // flushes stay signaled
  CHECK(f.qp.recv(f.ms.slice(0, 8), 4) == status::ok);
  CHECK(f.last() == op_options::none);
  CHECK(f.qp.finished() == 2);
  // An awaited write is signaled whatever the defaults: it resumes its coroutine.
  auto t = [&]() -> fabrix::task<status> { co_return (co_await f.qp.write(f.ms.slice(0, 8), rb.slice(8, 8))).status; };
  CHECK(fabrix::sync_wait(f.a, t()) == status::ok);
  CHECK(f.last() == op_options::delivered);
  CHECK(f.qp.finished() == 2);
  f.qp.set_default_options(op_options::none);
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(0, 8), 5) == status::ok);
  CHECK(f.last() == op_options::none);
}

TEST_CASE("options: fence() marks the next operation that is not a recv, once") {
  options_fixture f;
  const auto rb = f.md.remote();
  f.qp.fence();
  f.qp.fence();
  CHECK(f.qp.recv(f.ms.slice(0, 8), 1) == status::ok);
  CHECK(f.last() == op_options::none);
  // A refused operation leaves the fence pending.
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(252, 8), 2) == status::out_of_range);
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(0, 8), 3) == status::ok);
  CHECK(f.last() == op_options::fence);
  CHECK(f.qp.write(f.ms.slice(0, 8), rb.slice(0, 8), 4) == status::ok);
  CHECK(f.last() == op_options::none);

  // In a batch: recvs ahead of it go as they are, the first other operation
  // is fenced, the rest are not.
  f.qp.fence();
  std::array<fabrix::operation, 3> ops{fabrix::op::recv(f.ms.slice(0, 8), 5),
                                       fabrix::op::write(f.ms.slice(0, 8), rb.slice(0, 8), 6),
                                       fabrix::op::read(f.ms.slice(8, 8), rb.slice(8, 8), 7)};
  const auto r = f.qp.post(ops);
  CHECK(r.status == status::ok);
  CHECK(r.posted == 3);
  CHECK(f.last() == op_options::none);  // the read
  f.qp.fence();
  CHECK(f.qp.post(std::span<const fabrix::operation>(ops).subspan(1, 1)).posted == 1);
  CHECK(f.last() == op_options::fence);
}

TEST_CASE("options: through any_provider, defaults and the counter reach the provider") {
  // Registered under its name so fabrix::open finds it.
  static const bool registered = fabrix::detail::register_provider<fake::provider>(10);
  CHECK(registered);
  auto a = fabrix::open("fake").value();
  auto b = fabrix::open("fake").value();
  auto qp = a.connect(b.address().value()).value();
  std::vector<std::byte> src(64), dst(64);
  auto ms = a.register_memory(src, fabrix::access::local).value();
  auto md = b.register_memory(dst, fabrix::access::all_remote).value();
  const auto rb = md.remote();
  qp.set_default_options(op_options::unsignaled);
  src[0] = std::byte{42};
  CHECK(qp.write(ms.slice(0, 8), rb.slice(0, 8), 1) == status::ok);
  CHECK(qp.finished() == 1);
  CHECK(dst[0] == std::byte{42});
  fabrix::completion c[4];
  CHECK(a.poll(c) == 0);
}
