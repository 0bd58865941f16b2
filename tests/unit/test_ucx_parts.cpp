// The UCX provider's pure parts: address blobs, the notification handler's
// checks of peer bytes, transport classification and the liveness probe.
#include <doctest/doctest.h>

#include <fabrix/ucx.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>

namespace ud = fabrix::ucx::detail;
using fabrix::status;

TEST_CASE("ucx address: round trip, truncation, trailing bytes, bad magic") {
  std::vector<std::byte> worker(137);
  for (std::size_t i = 0; i < worker.size(); ++i) worker[i] = static_cast<std::byte>(i);
  ud::peer_address a{0x1234, {77, 4242, 999}, {}, worker};
  a.secret[3] = 9;
  const auto blob = ud::encode_address(a);
  auto back = ud::parse_address(blob);
  REQUIRE(back.has_value());
  CHECK(back->nonce == 0x1234);
  CHECK(back->process.node == 77);
  CHECK(back->process.pid == 4242);
  CHECK(back->process.start_time == 999);
  CHECK(back->secret == a.secret);
  CHECK(back->worker_address.size() == worker.size());
  CHECK(std::memcmp(back->worker_address.data(), worker.data(), worker.size()) == 0);
  for (std::size_t n = 0; n < blob.size(); ++n)
    CHECK(ud::parse_address(std::span(blob).first(n)).code() == status::invalid_argument);
  auto longer = blob;
  longer.push_back(std::byte{1});
  CHECK(ud::parse_address(longer).code() == status::invalid_argument);
  auto bad = blob;
  bad[0] = std::byte{'X'};
  CHECK(ud::parse_address(bad).code() == status::invalid_argument);
  bad = blob;
  bad[4] = std::byte{9};  // version
  CHECK(ud::parse_address(bad).code() == status::invalid_argument);
  std::mt19937 rng(3);
  for (int i = 0; i < 5000; ++i) {
    std::vector<std::byte> junk(rng() % 200);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    CHECK(ud::parse_address(junk).code() == status::invalid_argument);
  }
}

TEST_CASE("ucx notifications: malformed headers from peers are counted and dropped") {
  ud::domain_state d(16);
  ud::notify_header good{};
  good.imm = 7;
  good.bytes = 64;
  CHECK(ud::on_notify(&d, &good, sizeof(good), nullptr, 0, nullptr) == UCS_OK);
  std::byte junk[sizeof(good) + 1] = {};
  CHECK(ud::on_notify(&d, junk, sizeof(good), nullptr, 0, nullptr) == UCS_OK);       // wrong magic
  CHECK(ud::on_notify(&d, &good, sizeof(good) - 1, nullptr, 0, nullptr) == UCS_OK);  // short
  CHECK(ud::on_notify(&d, junk, sizeof(junk), nullptr, 0, nullptr) == UCS_OK);       // long
  CHECK(ud::on_notify(&d, nullptr, 0, nullptr, 0, nullptr) == UCS_OK);
  CHECK(d.dropped_notifications == 4);
  fabrix::completion c[4];
  REQUIRE(d.ring.drain(c) == 1);
  CHECK(c[0].op == fabrix::opcode::remote_write_imm);
  CHECK(c[0].imm == 7);
  CHECK(c[0].bytes == 64);
}

TEST_CASE("ucx transports: which UCX_TLS lists may use shared memory") {
  CHECK(ud::may_use_shared_memory(""));
  CHECK(ud::may_use_shared_memory("all"));
  CHECK(ud::may_use_shared_memory("sysv,posix,cma"));
  CHECK(ud::may_use_shared_memory("tcp,sm"));
  CHECK(ud::may_use_shared_memory("^tcp"));
  CHECK_FALSE(ud::may_use_shared_memory("tcp"));
  CHECK_FALSE(ud::may_use_shared_memory("tcp,self"));
  CHECK_FALSE(ud::may_use_shared_memory("rc_verbs,ud_verbs"));
  CHECK_FALSE(ud::may_use_shared_memory("^sm"));
}

TEST_CASE("ucx liveness: this process is alive; a reaped child, a zombie and a reused pid are not") {
  const ud::process_identity me = ud::self_identity();
  CHECK(me.pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(me.start_time != 0);
  CHECK(me.node != 0);
  CHECK_FALSE(ud::process_gone(me));
  ud::process_identity other_start = me;
  other_start.start_time += 1;  // same pid, different process
  CHECK(ud::process_gone(other_start));

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) std::_Exit(0);
  ud::process_identity zombie{me.node, static_cast<std::uint32_t>(child), 0};
  char state = 0;
  for (int i = 0; i < 1000 && (!ud::read_proc_stat(zombie.pid, state, zombie.start_time) || state != 'Z'); ++i)
    ::usleep(1000);
  CHECK(state == 'Z');
  CHECK(ud::process_gone(zombie));
  int st = 0;
  ::waitpid(child, &st, 0);
  CHECK(ud::process_gone(zombie));  // reaped: no /proc entry
}
