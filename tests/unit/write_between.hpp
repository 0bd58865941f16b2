// One 4 KiB write from domain `a` to domain `b` over a new queue pair,
// polling both (over tcp the target's progress moves the bytes), checked:
// the write completes ok within 10 s and every byte arrived.
#pragma once

#include <doctest/doctest.h>
#include <fabrix/fabrix.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

namespace fxt {

template <class Domain>
void check_write_between(Domain& a, Domain& b) {
  std::vector<std::byte> src(4096), dst(4096);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
  auto ms = a.register_memory(src, fabrix::access::local);
  auto md = b.register_memory(dst, fabrix::access::remote_write);
  REQUIRE(ms);
  REQUIRE(md);
  auto qp = a.connect(b.address().value());
  REQUIRE(qp);
  REQUIRE(qp->write(ms->slice(0, 4096), md->remote().whole(), 1) == fabrix::status::ok);
  fabrix::completion c[4];
  fabrix::status got = fabrix::status::timed_out;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       got == fabrix::status::timed_out && std::chrono::steady_clock::now() < until;) {
    (void)b.poll(c);
    for (std::size_t i = 0, n = a.poll(c); i < n; ++i)
      if (c[i].token == 1) got = c[i].status;
  }
  CHECK(got == fabrix::status::ok);
  CHECK(dst == src);
}

}  // namespace fxt
