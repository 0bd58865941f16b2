// The UCX provider's pure parts: address blobs, the notification handler's
// checks of peer bytes, the target's check of checked requests, transport
// classification, the liveness probe, the FIFO workaround's configuration.
// (The rkey cache's policy is the kit's: test_remote_key_cache.cpp.)
#include <doctest/doctest.h>

#include <fabrix/ucx.hpp>

#include "fake_sysfs.hpp"
#include "slot_round_trip.hpp"
#include "write_between.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
  CHECK(back->native.size() == worker.size());
  CHECK(std::memcmp(back->native.data(), worker.data(), worker.size()) == 0);
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

TEST_CASE("ucx transports: only InfiniBand/RoCE-only lists do RMA in hardware; everything else is checked") {
  CHECK(ud::hardware_rma_only("rc_verbs,ud_verbs"));
  CHECK(ud::hardware_rma_only("rc_mlx5,dc_mlx5,ud_mlx5"));
  CHECK(ud::hardware_rma_only("rc"));
  CHECK_FALSE(ud::hardware_rma_only(""));
  CHECK_FALSE(ud::hardware_rma_only("all"));
  CHECK_FALSE(ud::hardware_rma_only("tcp"));
  CHECK_FALSE(ud::hardware_rma_only("sysv,posix,cma"));
  CHECK_FALSE(ud::hardware_rma_only("rc_verbs,tcp"));
  CHECK_FALSE(ud::hardware_rma_only("ud_verbs"));  // UCX would emulate RMA over ud
  CHECK_FALSE(ud::hardware_rma_only("^tcp"));
}

TEST_CASE("ucx direct registration: UCX_IB_REG_METHODS=direct only around ucp_init, and a user's value stands") {
  ::unsetenv("UCX_IB_REG_METHODS");
  {
    const ud::direct_registration_scope off(false);
    CHECK_FALSE(off.active());
    CHECK(std::getenv("UCX_IB_REG_METHODS") == nullptr);
  }
  {
    const ud::direct_registration_scope on(true);
    CHECK(on.active());
    REQUIRE(std::getenv("UCX_IB_REG_METHODS") != nullptr);
    CHECK(std::string(std::getenv("UCX_IB_REG_METHODS")) == "direct");
  }
  CHECK(std::getenv("UCX_IB_REG_METHODS") == nullptr);  // restored: other UCX users keep their cache
  ::setenv("UCX_IB_REG_METHODS", "rcache,direct", 1);
  {
    const ud::direct_registration_scope user(true);
    CHECK_FALSE(user.active());
    CHECK(std::string(std::getenv("UCX_IB_REG_METHODS")) == "rcache,direct");
  }
  CHECK(std::string(std::getenv("UCX_IB_REG_METHODS")) == "rcache,direct");
  ::unsetenv("UCX_IB_REG_METHODS");
}

namespace {
// A domain state named `nonce`, with `p` as its queue pair to the peer
// whose domain is `peer_nonce` (what the checked-request handlers look up).
void link_peer(ud::domain_state& d, ud::peer_state& p, std::uint64_t nonce, std::uint64_t peer_nonce) {
  d.nonce = nonce;
  p.dom = &d;
  p.recv_tag = peer_nonce;
  d.add_peer(&p);
}
}  // namespace

TEST_CASE("ucx checked requests: the target touches only live regions, in bounds, with the right") {
  ud::domain_state d(16);
  ud::peer_state from;
  link_peer(d, from, 0x1111, 0x2222);
  alignas(8) std::byte mem[64] = {};
  const auto base = reinterpret_cast<std::uintptr_t>(mem);
  d.regions[7] = ud::region_entry{base, 64, fabrix::access::remote_write | fabrix::access::remote_atomic};
  std::byte data[16];
  std::memset(data, 0xab, sizeof data);

  auto request = [&](ud::rma_kind kind, std::uint64_t epoch, std::uintptr_t addr, std::uint64_t len) {
    ud::rma_header h;
    h.kind = kind;
    h.sender = 0x2222;
    h.epoch = epoch;
    h.address = addr;
    h.length = len;
    h.operand = 5;
    h.index = 3;
    h.seq = 9;
    return h;
  };
  // Each answered request queues one reply carrying the check's status.
  auto answer = [&](const ud::rma_header& h, const void* payload, std::size_t n) {
    REQUIRE(ud::on_rma(&d, &h, sizeof h, const_cast<void*>(payload), n, nullptr) == UCS_OK);
    ud::reply_slot* r = d.replies_head;
    REQUIRE(r != nullptr);
    d.replies_head = r->next;
    if (!d.replies_head) d.replies_tail = nullptr;
    CHECK(r->to == &from);
    CHECK(r->h.index == 3);
    CHECK(r->h.seq == 9);
    CHECK(r->h.sender == 0x1111);
    const auto s = static_cast<status>(r->h.result);
    const std::uint64_t value = r->h.value;
    d.give_back_reply(r);
    return std::pair{s, value};
  };

  CHECK(answer(request(ud::rma_kind::write, 8, base, 16), data, 16).first == status::stale_key);  // no such region
  CHECK(answer(request(ud::rma_kind::write, 7, base + 56, 16), data, 16).first == status::out_of_range);
  CHECK(answer(request(ud::rma_kind::write, 7, base - 8, 16), data, 16).first == status::out_of_range);
  CHECK(answer(request(ud::rma_kind::write, 7, base, 16), data, 8).first == status::invalid_argument);  // short
  CHECK(answer(request(ud::rma_kind::read, 7, base, 16), nullptr, 0).first == status::access_denied);
  for (std::byte b : mem) CHECK(b == std::byte{0});  // not one byte changed so far

  CHECK(answer(request(ud::rma_kind::write, 7, base + 8, 16), data, 16).first == status::ok);
  CHECK(mem[8] == std::byte{0xab});
  CHECK(mem[24] == std::byte{0});
  auto add = answer(request(ud::rma_kind::fetch_add, 7, base + 32, 8), nullptr, 0);
  CHECK(add.first == status::ok);
  CHECK(add.second == 0);
  CHECK(answer(request(ud::rma_kind::fetch_add, 7, base + 33, 8), nullptr, 0).first == status::invalid_argument);

  d.regions.erase(7);  // deregistered: its epoch grants nothing any more
  CHECK(answer(request(ud::rma_kind::write, 7, base + 40, 16), data, 16).first == status::stale_key);
  CHECK(mem[40] == std::byte{0});

  // Malformed, or from a domain without a queue pair here: dropped, counted.
  auto foreign = request(ud::rma_kind::write, 7, base, 16);
  foreign.sender = 0x3333;
  CHECK(ud::on_rma(&d, &foreign, sizeof foreign, data, 16, nullptr) == UCS_OK);
  CHECK(ud::on_rma(&d, data, 8, data, 16, nullptr) == UCS_OK);
  CHECK(d.replies_head == nullptr);
  CHECK(d.dropped_requests == 2);

  // A domain with no queue pair here whose request proves it holds this
  // domain's address blob, and comes with an endpoint to answer on: served,
  // answered there. The same without the endpoint, or with a proof made with
  // another secret or for another sender: dropped, not one byte changed.
  d.secret.fill(0x5a);
  d.regions[9] = ud::region_entry{base, 64, fabrix::access::remote_write};
  auto stranger = request(ud::rma_kind::write, 9, base + 48, 16);
  stranger.sender = 0x3333;
  stranger.proof = ud::sender_proof(d.secret, 0x3333);
  const auto fake_ep = reinterpret_cast<ucp_ep_h>(std::uintptr_t{0x1000});
  ucp_am_recv_param_t with_ep{};
  with_ep.recv_attr = UCP_AM_RECV_ATTR_FIELD_REPLY_EP;
  with_ep.reply_ep = fake_ep;
  ucp_am_recv_param_t without_ep{};
  auto wrong_secret = stranger;
  fabrix::detail::seal_key other{};
  other.fill(0x5b);
  wrong_secret.proof = ud::sender_proof(other, 0x3333);
  auto wrong_sender = stranger;
  wrong_sender.proof = ud::sender_proof(d.secret, 0x4444);
  CHECK(ud::on_rma(&d, &stranger, sizeof stranger, data, 16, &without_ep) == UCS_OK);
  CHECK(ud::on_rma(&d, &wrong_secret, sizeof wrong_secret, data, 16, &with_ep) == UCS_OK);
  CHECK(ud::on_rma(&d, &wrong_sender, sizeof wrong_sender, data, 16, &with_ep) == UCS_OK);
  CHECK(d.replies_head == nullptr);
  CHECK(d.dropped_requests == 5);
  CHECK(mem[48] == std::byte{0});
  REQUIRE(ud::on_rma(&d, &stranger, sizeof stranger, data, 16, &with_ep) == UCS_OK);
  ud::reply_slot* r = d.replies_head;
  REQUIRE(r != nullptr);
  CHECK(r->to == nullptr);
  CHECK(r->reply_ep == fake_ep);
  CHECK(static_cast<status>(r->h.result) == status::ok);
  CHECK(mem[48] == std::byte{0xab});
  CHECK(mem[63] == std::byte{0xab});
  d.replies_head = d.replies_tail = nullptr;
  d.give_back_reply(r);
  CHECK(r->reply_ep == nullptr);
  d.remove_peer(&from);
}

TEST_CASE("ucx checked requests: answers without bytes to one peer go as one batch, settled one by one") {
  // Target: five requests from one peer: two writes (one out of range), a
  // fetch_add, a read, a write. The read's answer carries bytes: it goes
  // alone and ends the batch before it.
  ud::domain_state target(16);
  ud::peer_state from;
  link_peer(target, from, 0x1111, 0x2222);
  alignas(8) std::byte mem[64] = {};
  const auto base = reinterpret_cast<std::uintptr_t>(mem);
  target.regions[7] = ud::region_entry{
      base, 64, fabrix::access::remote_write | fabrix::access::remote_read | fabrix::access::remote_atomic};
  std::byte data[8];
  std::memset(data, 0xcd, sizeof data);
  auto request = [&](std::uint32_t index, ud::rma_kind kind, std::uintptr_t addr) {
    ud::rma_header h;
    h.kind = kind;
    h.sender = 0x2222;
    h.epoch = 7;
    h.address = addr;
    h.length = 8;
    h.operand = 1;
    h.index = index;
    h.seq = 100 + index;
    const bool payload = kind == ud::rma_kind::write;
    REQUIRE(ud::on_rma(&target, &h, sizeof h, payload ? data : nullptr, payload ? 8 : 0, nullptr) == UCS_OK);
  };
  request(0, ud::rma_kind::write, base);
  request(1, ud::rma_kind::write, base + 60);  // out of range
  request(2, ud::rma_kind::fetch_add, base + 8);
  request(3, ud::rma_kind::read, base);
  request(4, ud::rma_kind::write, base + 16);
  auto pop = [&] {
    ud::reply_slot* r = target.replies_head;
    REQUIRE(r != nullptr);
    target.replies_head = r->next;
    if (!target.replies_head) target.replies_tail = nullptr;
    ud::fold_replies(target, r);
    return r;
  };
  ud::reply_slot* batch = pop();
  CHECK(batch->h.magic == ud::replies_magic);
  REQUIRE(batch->h.index == 3);
  REQUIRE(batch->data.size() == 3 * sizeof(ud::rma_reply_entry));
  ud::rma_reply_entry e[3];
  std::memcpy(e, batch->data.data(), sizeof e);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK(e[i].index == i);
    CHECK(e[i].seq == 100 + i);
  }
  CHECK(static_cast<status>(e[0].result) == status::ok);
  CHECK(static_cast<status>(e[1].result) == status::out_of_range);
  CHECK(static_cast<status>(e[2].result) == status::ok);
  ud::reply_slot* read = pop();
  CHECK(read->h.magic == ud::reply_magic);
  CHECK(read->data.size() == 8);
  ud::reply_slot* last = pop();
  CHECK(last->h.magic == ud::reply_magic);  // a run of one stays as it is
  CHECK(last->h.index == 4);
  CHECK(target.replies_head == nullptr);

  // Initiator: the batch settles ops 0-2, each with its own status and value.
  ud::domain_state init(16);
  ud::peer_state to;
  link_peer(init, to, 0x2222, 0x1111);
  std::uint64_t old_value = 99;
  ud::op_slot* ops = init.ops.begin();
  auto arm = [&](std::uint32_t i, ud::rma_kind kind) {
    ops[i].in_use = true;
    ops[i].seq = 100 + i;
    ops[i].awaiting_reply = true;
    ops[i].peer = &to;
    ops[i].pending = 2;  // the reply and one more: settling does not complete the op here
    ops[i].rma.kind = kind;
    ops[i].remote_status = status::ok;
  };
  arm(0, ud::rma_kind::write);
  arm(1, ud::rma_kind::write);
  arm(2, ud::rma_kind::fetch_add);
  ops[2].nlocal = 1;
  ops[2].local[0].buffer = &old_value;
  ops[2].local[0].length = 8;
  CHECK(ud::on_rma_reply(&init, &batch->h, sizeof batch->h, batch->data.data(), batch->data.size(), nullptr) == UCS_OK);
  for (std::uint32_t i = 0; i < 3; ++i) {
    CHECK_FALSE(ops[i].awaiting_reply);
    CHECK(ops[i].pending == 1);
  }
  CHECK(ops[0].remote_status == status::ok);
  CHECK(ops[1].remote_status == status::out_of_range);
  CHECK(old_value == 0);  // the word's value before the add
  CHECK(init.dropped_requests == 0);

  // Malformed batches are dropped whole and counted; an entry that names no
  // op waiting for it (answered already, wrong seq) is dropped alone.
  arm(5, ud::rma_kind::write);
  ud::rma_reply_header h = batch->h;
  CHECK(ud::on_rma_reply(&init, &h, sizeof h, batch->data.data(), batch->data.size() - 1, nullptr) == UCS_OK);
  h.index = static_cast<std::uint32_t>(ud::max_batched_replies + 1);
  std::vector<std::byte> many((ud::max_batched_replies + 1) * sizeof(ud::rma_reply_entry));
  CHECK(ud::on_rma_reply(&init, &h, sizeof h, many.data(), many.size(), nullptr) == UCS_OK);
  CHECK(init.dropped_requests == 2);
  ud::rma_reply_entry mixed[2];
  mixed[0] = e[0];  // op 0 was answered already
  mixed[1].index = 5;
  mixed[1].seq = 105;
  h.index = 2;
  CHECK(ud::on_rma_reply(&init, &h, sizeof h, mixed, sizeof mixed, nullptr) == UCS_OK);
  CHECK(init.dropped_requests == 3);
  CHECK_FALSE(ops[5].awaiting_reply);
  for (std::uint32_t i : {0u, 1u, 2u, 5u}) ops[i].in_use = false;
  for (ud::reply_slot* r : {batch, read, last}) target.give_back_reply(r);
  init.remove_peer(&to);
  target.remove_peer(&from);
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

TEST_CASE("ucx fifo workaround: older UCX releases the FIFO after every message, unless the user chose") {
  ::unsetenv("UCX_SYSV_FIFO_RELEASE_FACTOR");
  ::setenv("UCX_POSIX_FIFO_RELEASE_FACTOR", "0.5", 1);
  ud::release_fifo_every_message();
  const char* sysv = std::getenv("UCX_SYSV_FIFO_RELEASE_FACTOR");
  if (ud::fifo_release_is_racy()) {
    REQUIRE(sysv != nullptr);
    CHECK(std::string(sysv) == "0.01");
  } else {
    CHECK(sysv == nullptr);
  }
  CHECK(std::string(std::getenv("UCX_POSIX_FIFO_RELEASE_FACTOR")) == "0.5");  // the user's value stands
  ::unsetenv("UCX_SYSV_FIFO_RELEASE_FACTOR");
  ::unsetenv("UCX_POSIX_FIFO_RELEASE_FACTOR");
}

TEST_CASE("ucx allocate_memory: registered host memory of the asked size; empty length and unknown rights refused") {
  static_assert(fabrix::allocates_memory<fabrix::ucx::provider>);
  auto dom = fabrix::ucx::domain::create();
  REQUIRE(dom);
  auto empty = dom->allocate_memory(0, fabrix::access::remote_write);
  REQUIRE(!empty);
  CHECK(empty.code() == status::invalid_argument);
  auto unknown = dom->allocate_memory(64, static_cast<fabrix::access>(1u << 9));
  REQUIRE(!unknown);
  CHECK(unknown.code() == status::invalid_argument);
  const std::size_t len = (std::size_t{1} << 20) + 3;
  auto mr = dom->allocate_memory(len, fabrix::access::all_remote);
  REQUIRE(mr);
  REQUIRE(mr->data() != nullptr);
  CHECK(mr->size() == len);
  CHECK(mr->location().kind == fabrix::memory_kind::host);
  CHECK(mr->rights() == fabrix::access::all_remote);
  CHECK(mr->remote().provider == fabrix::provider_id::ucx);
  std::memset(mr->data(), 0xa5, len);  // all of it is ours to write
  CHECK(std::all_of(mr->data(), mr->data() + len, [](std::byte b) { return b == std::byte{0xa5}; }));
}

TEST_CASE("ucx allocated shared memory: a peer on this node reaches it directly, without the target polling") {
  fabrix::domain_options o;
  o.transport = "sysv,posix";
  auto created = fabrix::ucx::domain::create(o);
  auto initiator = fabrix::ucx::domain::create(o);
  REQUIRE(created);
  REQUIRE(initiator);
  std::optional<fabrix::ucx::domain> target(std::move(*created));
  auto allocated = target->allocate_memory(4096, fabrix::access::all_remote);
  REQUIRE(allocated);
  std::optional<fabrix::memory_region<fabrix::ucx::provider>> region(std::move(*allocated));
  std::memset(region->data(), 0, 4096);
  std::vector<std::byte> src(64);
  auto ms = initiator->register_memory(src, fabrix::access::local);
  REQUIRE(ms);
  auto qp = initiator->connect(target->address().value());
  REQUIRE(qp);
  // Only the initiator polls: a checked request would never be answered.
  auto finish = [&](std::uint64_t token) {
    fabrix::completion c[4];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < until) {
      const std::size_t n = initiator->poll(c);
      for (std::size_t i = 0; i < n; ++i)
        if (c[i].token == token) return c[i].status;
    }
    return status::timed_out;
  };
  std::memset(src.data(), 0x5a, 64);
  const fabrix::remote_buffer rb = region->remote();
  REQUIRE(qp->write(ms->slice(0, 64), rb.slice(64, 64), 1) == status::ok);
  CHECK(finish(1) == status::ok);
  CHECK(region->data()[64] == std::byte{0x5a});
  CHECK(region->data()[127] == std::byte{0x5a});
  CHECK(region->data()[128] == std::byte{0});
  REQUIRE(qp->fetch_add(ms->slice(0, 8), rb.slice(0, 8), 3, 2) == status::ok);
  CHECK(finish(2) == status::ok);
  std::uint64_t old = 1, now = 0;
  std::memcpy(&old, src.data(), 8);
  std::memcpy(&now, region->data(), 8);
  CHECK(old == 0);
  CHECK(now == 3);
  // Deregistered: the segment lives on only where it is still mapped (the
  // orphaned segment), but the target's key table says the region is gone,
  // so every operation through the old key completes stale_key and changes
  // nothing, here or there.
  region.reset();
  REQUIRE(qp->write(ms->slice(0, 64), rb.slice(0, 64), 3) == status::ok);
  CHECK(finish(3) == status::stale_key);
  std::memset(src.data(), 0x11, 64);
  REQUIRE(qp->read(ms->slice(0, 64), rb.slice(0, 64), 4) == status::ok);
  CHECK(finish(4) == status::stale_key);
  REQUIRE(qp->fetch_add(ms->slice(0, 8), rb.slice(0, 8), 1, 5) == status::ok);
  CHECK(finish(5) == status::stale_key);
  REQUIRE(qp->write_with_imm(ms->slice(0, 8), rb.slice(0, 8), 9, 6) == status::ok);
  CHECK(finish(6) == status::stale_key);
  CHECK(std::all_of(src.begin(), src.end(), [](std::byte b) { return b == std::byte{0x11}; }));
  // A new region may take the old one's slot; the old key stays refused, and
  // the new region is untouched.
  auto allocated_again = target->allocate_memory(4096, fabrix::access::all_remote);
  REQUIRE(allocated_again);
  std::optional<fabrix::memory_region<fabrix::ucx::provider>> again(std::move(*allocated_again));
  std::memset(again->data(), 0, 4096);
  REQUIRE(qp->write(ms->slice(0, 64), rb.slice(0, 64), 7) == status::ok);
  CHECK(finish(7) == status::stale_key);
  CHECK(std::all_of(again->data(), again->data() + 4096, [](std::byte b) { return b == std::byte{0}; }));
  REQUIRE(qp->write(ms->slice(0, 64), again->remote().slice(0, 64), 8) == status::ok);
  CHECK(finish(8) == status::ok);
  CHECK(again->data()[0] == std::byte{0x11});
  // The target's domain closes (its regions first): the peer is gone, not
  // its key.
  const fabrix::remote_buffer rb2 = again->remote();
  again.reset();
  target.reset();
  const status st = qp->write(ms->slice(0, 64), rb2.slice(0, 64), 9);
  if (st == status::ok) {
    CHECK(finish(9) == status::peer_unreachable);
  } else {
    CHECK(st == status::peer_unreachable);
  }
}

namespace {
// Two domains of this process over sysv,posix: `target` polls only when told.
struct two_domains {
  std::optional<fabrix::ucx::domain> target, initiator;
  std::optional<fabrix::queue_pair<fabrix::ucx::provider>> qp, back;  // back: answers checked requests
  std::vector<fabrix::completion> seen;                               // the initiator's completions

  two_domains() {
    fabrix::domain_options o;
    o.transport = "sysv,posix";
    auto t = fabrix::ucx::domain::create(o);
    auto i = fabrix::ucx::domain::create(o);
    REQUIRE(t);
    REQUIRE(i);
    target.emplace(std::move(*t));
    initiator.emplace(std::move(*i));
    auto q = initiator->connect(target->address().value());
    auto b = target->connect(initiator->address().value());
    REQUIRE(q);
    REQUIRE(b);
    qp.emplace(std::move(*q));
    back.emplace(std::move(*b));
  }
  // Polls the initiator (and the target when `both`) for about `ms`.
  void poll_for(int ms, bool both) {
    fabrix::completion c[8];
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      const std::size_t n = initiator->poll(c);
      seen.insert(seen.end(), c, c + n);
      if (both) (void)target->poll(c);  // the target side receives nothing with a token here
    }
  }
  bool completed(std::uint64_t token) const {
    return std::any_of(seen.begin(), seen.end(), [&](const fabrix::completion& c) { return c.token == token; });
  }
};
}  // namespace

TEST_CASE("ucx unsignaled: a direct op takes no slot and counts at once; a refused one completes with its error") {
  two_domains t;
  auto allocated = t.target->allocate_memory(4096, fabrix::access::all_remote);
  REQUIRE(allocated);
  std::optional<fabrix::memory_region<fabrix::ucx::provider>> region(std::move(*allocated));
  std::memset(region->data(), 0, 4096);
  std::vector<std::byte> src(64, std::byte{0x7e});
  auto ms = t.initiator->register_memory(src, fabrix::access::local);
  REQUIRE(ms);
  const fabrix::remote_buffer rb = region->remote();
  // Done and counted inside post(): nobody polled.
  REQUIRE(t.qp->write(ms->slice(0, 64), rb.slice(0, 64), 1, fabrix::op_options::unsignaled) == status::ok);
  CHECK(t.qp->finished() == 1);
  CHECK(region->data()[63] == std::byte{0x7e});
  t.qp->set_default_options(fabrix::op_options::unsignaled);
  REQUIRE(t.qp->fetch_add(ms->slice(0, 8), rb.slice(128, 8), 5, 2) == status::ok);
  CHECK(t.qp->finished() == 2);
  t.qp->set_default_options(fabrix::op_options::none);
  t.poll_for(30, false);
  CHECK(t.seen.empty());
  // Refused (the region is gone): an error completion with its token, and
  // counted too.
  region.reset();
  REQUIRE(t.qp->write(ms->slice(0, 64), rb.slice(0, 64), 3, fabrix::op_options::unsignaled) == status::ok);
  t.poll_for(30, false);
  REQUIRE(t.seen.size() == 1);
  CHECK(t.seen[0].token == 3);
  CHECK(t.seen[0].status == status::stale_key);
  CHECK(t.qp->finished() == 3);
}

TEST_CASE("ucx direct fast path: imported keys, 0 to 40 bytes at odd offsets, exact bytes, then stale and fenced") {
  // post_direct_fast (post.hpp) copies up to 16 bytes inline in pieces that
  // overlap: every size around those pieces, with the bytes beside each
  // range checked untouched, both ways.
  two_domains t;
  auto allocated = t.target->allocate_memory(4096, fabrix::access::all_remote);
  REQUIRE(allocated);
  std::optional<fabrix::memory_region<fabrix::ucx::provider>> region(std::move(*allocated));
  std::byte* shared = region->data();
  std::vector<std::byte> src(128), back(128);
  auto ms = t.initiator->register_memory(src, fabrix::access::local);
  auto mb = t.initiator->register_memory(back, fabrix::access::local);
  REQUIRE(ms);
  REQUIRE(mb);
  auto key = t.qp->import(region->remote());
  REQUIRE(key);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
  std::uint64_t token = 100, unsignaled = 0;
  for (std::size_t n = 0; n <= 40; ++n) {
    const std::size_t loff = n % 5 + 1, roff = 64 * n + n % 3 + 1;
    std::memset(shared + roff - 1, 0, n + 2);
    const auto opts = n % 2 ? fabrix::op_options::unsignaled : fabrix::op_options::none;
    REQUIRE(t.qp->write(ms->slice(loff, n), key->slice(roff, n), ++token, opts) == status::ok);
    CHECK(std::memcmp(shared + roff, src.data() + loff, n) == 0);  // done inside post()
    CHECK(shared[roff - 1] == std::byte{0});
    CHECK(shared[roff + n] == std::byte{0});
    std::memset(back.data(), 0xee, back.size());
    REQUIRE(t.qp->read(mb->slice(3, n), key->slice(roff, n), ++token, opts) == status::ok);
    CHECK(std::memcmp(back.data() + 3, src.data() + loff, n) == 0);
    CHECK(back[2] == std::byte{0xee});
    CHECK(back[3 + n] == std::byte{0xee});
    if (n % 2) unsignaled += 2;
  }
  CHECK(t.qp->finished() == unsignaled);
  t.poll_for(30, false);
  CHECK(t.seen.size() == 2 * 21);  // the signaled ones: n even, a write and a read each
  for (const auto& c : t.seen) CHECK(c.status == status::ok);
  // A fenced op leaves the fast path (nothing in flight: it goes at once).
  t.qp->fence();
  src[0] = std::byte{0x42};
  REQUIRE(t.qp->write(ms->slice(0, 8), key->slice(0, 8), 1) == status::ok);
  CHECK(shared[0] == std::byte{0x42});
  t.poll_for(30, false);
  CHECK(t.completed(1));
  // The region is gone: the fast path refuses, the general one completes
  // stale_key and writes nothing.
  region.reset();
  t.seen.clear();
  REQUIRE(t.qp->write(ms->slice(0, 8), key->slice(0, 8), 2, fabrix::op_options::unsignaled) == status::ok);
  REQUIRE(t.qp->read(mb->slice(0, 8), key->slice(0, 8), 3) == status::ok);
  t.poll_for(30, false);
  REQUIRE(t.seen.size() == 2);
  CHECK(t.seen[0].status == status::stale_key);
  CHECK(t.seen[1].status == status::stale_key);
}

TEST_CASE("ucx fence: the op after it, and all behind it, wait for the checked request before it") {
  two_domains t;
  // `user` is the user's memory: written by a checked request, answered only
  // when the target polls. `shared` is UCX's, mapped here: written at once.
  std::vector<std::byte> user(4096), src(64, std::byte{0x33});
  auto mu = t.target->register_memory(user, fabrix::access::all_remote);
  auto allocated = t.target->allocate_memory(4096, fabrix::access::all_remote);
  auto ms = t.initiator->register_memory(src, fabrix::access::local);
  REQUIRE(mu);
  REQUIRE(allocated);
  REQUIRE(ms);
  std::byte* shared = allocated->data();
  std::memset(shared, 0, 4096);
  const fabrix::remote_buffer ru = mu->remote(), rs = allocated->remote();
  // Without a fence the direct write does not wait.
  REQUIRE(t.qp->write(ms->slice(0, 64), ru.slice(0, 64), 1) == status::ok);
  REQUIRE(t.qp->write(ms->slice(0, 8), rs.slice(0, 8), 2) == status::ok);
  CHECK(shared[0] == std::byte{0x33});
  t.poll_for(50, true);
  REQUIRE(t.completed(1));
  REQUIRE(t.completed(2));
  // With one it waits for the reply, and so do the ops posted after it.
  REQUIRE(t.qp->write(ms->slice(0, 64), ru.slice(64, 64), 3) == status::ok);
  t.qp->fence();
  REQUIRE(t.qp->write(ms->slice(0, 8), rs.slice(64, 8), 4) == status::ok);
  REQUIRE(t.qp->write(ms->slice(0, 8), rs.slice(128, 8), 5, fabrix::op_options::unsignaled) == status::ok);
  t.poll_for(30, false);  // the target does not answer
  CHECK(shared[64] == std::byte{0});
  CHECK(shared[128] == std::byte{0});
  CHECK_FALSE(t.completed(4));
  CHECK(t.qp->finished() == 0);
  t.poll_for(100, true);
  CHECK(t.completed(3));
  CHECK(t.completed(4));
  CHECK(shared[64] == std::byte{0x33});
  CHECK(shared[128] == std::byte{0x33});
  CHECK(t.qp->finished() == 1);
  CHECK(user[64] == std::byte{0x33});
  // A fence with nothing in flight costs nothing: the op goes at once.
  t.qp->fence();
  REQUIRE(t.qp->write(ms->slice(0, 8), rs.slice(256, 8), 6) == status::ok);
  CHECK(shared[256] == std::byte{0x33});
  // After a native operation (a tagged send) the fenced op waits for an
  // endpoint flush, and the op behind it for the fenced one; a flush after
  // them completes after both.
  REQUIRE(t.qp->send(ms->slice(0, 8), 7) == status::ok);
  t.qp->fence();
  REQUIRE(t.qp->write(ms->slice(0, 8), rs.slice(320, 8), 8) == status::ok);
  REQUIRE(t.qp->write(ms->slice(0, 8), rs.slice(384, 8), 9, fabrix::op_options::unsignaled) == status::ok);
  REQUIRE(t.qp->flush(10) == status::ok);
  CHECK(shared[320] == std::byte{0});
  CHECK(shared[384] == std::byte{0});
  t.poll_for(100, true);
  CHECK(t.completed(7));
  CHECK(t.completed(8));
  CHECK(t.completed(10));
  CHECK(shared[320] == std::byte{0x33});
  CHECK(shared[384] == std::byte{0x33});
  CHECK(t.qp->finished() == 2);
  const auto at = [&](std::uint64_t token) {
    return std::find_if(t.seen.begin(), t.seen.end(), [&](const fabrix::completion& c) { return c.token == token; });
  };
  CHECK(at(8) < at(10));
}

TEST_CASE("ucx op slot: going back resets op_fields, keeps the iovec and header scratch") {
  using fabrix::ucx::detail::op_slot;
  int target = 0;
  slot_round_trip<op_slot>(
      [&](op_slot& op) {
        op.c.token = 77;
        op.in_use = op.checked = op.awaiting_reply = op.unsignaled = true;
        op.pending = 3;
        op.first_error = UCS_ERR_CANCELED;
        op.seq = 12;
        op.nlocal = 2;
        op.raddr = 0x1000;
        op.local[1] = ucp_dt_iov_t{&target, 4};
        op.header.imm = 9;
      },
      [&](const op_slot& op) {
        CHECK(op.c.token == 0);
        CHECK_FALSE(op.in_use);
        CHECK_FALSE(op.checked);
        CHECK_FALSE(op.awaiting_reply);
        CHECK_FALSE(op.unsignaled);
        CHECK(op.pending == 0);
        CHECK(op.first_error == UCS_OK);
        CHECK(op.seq == 0);
        CHECK(op.nlocal == 0);
        CHECK(op.raddr == 0);
        CHECK(op.next == nullptr);
        // Scratch: post_one / post_checked write it before it is read.
        CHECK(op.local[1].buffer == &target);
        CHECK(op.header.imm == 9);
      });
}

TEST_CASE("ucx native(): the domain's context and worker, the queue pair's endpoint, the region's memory handle") {
  fabrix::domain_options o;
  o.transport = "tcp";
  auto dom = fabrix::ucx::domain::create(o);
  REQUIRE(dom);
  const fabrix::ucx::native_domain d = dom->native();
  REQUIRE(d.context != nullptr);
  REQUIRE(d.worker != nullptr);
  ucp_context_attr_t ca{};
  ca.field_mask = UCP_ATTR_FIELD_THREAD_MODE;
  CHECK(ucp_context_query(d.context, &ca) == UCS_OK);
  ucp_worker_attr_t wa{};
  wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  CHECK(ucp_worker_query(d.worker, &wa) == UCS_OK);

  auto qp = dom->connect(dom->address().value());
  REQUIRE(qp);
  ucp_ep_h ep = qp->native().ep;
  REQUIRE(ep != nullptr);
  ucp_ep_attr_t ea{};
  ea.field_mask = UCP_EP_ATTR_FIELD_NAME;
  CHECK(ucp_ep_query(ep, &ea) == UCS_OK);

  std::vector<std::byte> buf(8192);
  auto mr = dom->register_memory(buf.data(), buf.size(), {}, fabrix::access::remote_write);
  REQUIRE(mr);
  ucp_mem_attr_t ma{};
  ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  REQUIRE(ucp_mem_query(mr->native().memh, &ma) == UCS_OK);
  CHECK(ma.address == buf.data());
  CHECK(ma.length >= buf.size());
}

TEST_CASE("ucx device pci:<bus id>: UCX_NET_DEVICES is the network device closest to that PCI function") {
  fxt::fake_sysfs sys;
  sys.interface("lo", sys.near);
  sys.interface("eth0", sys.far);
  fabrix::domain_options o;
  o.transport = "tcp";
  o.device = std::string("pci:") + fxt::fake_sysfs::gpu;
  auto a = fabrix::ucx::domain::create(o);
  auto b = fabrix::ucx::domain::create(o);
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.error().describe()));
  REQUIRE(b.has_value());
  CHECK_MESSAGE(
      a->describe().find("UCX_NET_DEVICES=lo (closest to PCI 0000:03:00.0: 4 PCIe hops)") != std::string::npos,
      a->describe());
  // It reports the function of the device it uses, also through any_provider.
  CHECK(a->device_pci() == std::optional<std::string>("0000:04:00.0"));
  CHECK(fabrix::open("ucx", o).value().device_pci() == std::optional<std::string>("0000:04:00.0"));
  fxt::check_write_between(*a, *b);
  // Named by the interface: the same; UCX's default (every device): none.
  o.device = "lo";
  CHECK(fabrix::ucx::domain::create(o).value().device_pci() == std::optional<std::string>("0000:04:00.0"));
  o.device = "lo,eth0";  // two functions
  CHECK_FALSE(fabrix::ucx::domain::create(o).value().device_pci().has_value());
  o.device.clear();
  CHECK_FALSE(fabrix::ucx::domain::create(o).value().device_pci().has_value());
  // A function that is not there: refused, naming it.
  o.device = "pci:0000:77:00.0";
  auto none = fabrix::ucx::domain::create(o);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code == status::invalid_argument);
  CHECK(none.error().message.find("0000:77:00.0") != std::string::npos);
}
