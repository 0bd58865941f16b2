// The libfabric provider's pure parts: key bytes and address blobs from
// peers (every truncation and corruption refused), the errno mapping, and
// the mechanisms behind op_options on a bare domain_state.
#include <doctest/doctest.h>

#include <fabrix/ofi.hpp>

#include "fake_sysfs.hpp"
#include "slot_round_trip.hpp"
#include "write_between.hpp"

#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace od = fabrix::ofi::detail;
using fabrix::status;

TEST_CASE("ofi key bytes: round trip (key, addressing, slot), every truncation, bad version and flags") {
  for (const bool virt : {false, true}) {
    const od::remote_key k{0x0102030405060708ull, virt, 0x0a0b0c0du};
    std::array<std::byte, od::key_blob_size> blob{};
    od::encode_key(k, blob);
    const auto back = od::decode_key(blob);
    REQUIRE(back.has_value());
    CHECK(back->key == k.key);
    CHECK(back->virt_addr == virt);
    CHECK(back->slot == k.slot);  // the region's entry in its domain's key table
    CHECK(back->target(0x10000, 16) == (virt ? 0x10010u : 16u));
    for (std::size_t n = 0; n < blob.size(); ++n) CHECK_FALSE(od::decode_key(std::span(blob).first(n)).has_value());
    std::array<std::byte, od::key_blob_size + 1> longer{};
    std::memcpy(longer.data(), blob.data(), blob.size());
    CHECK_FALSE(od::decode_key(longer).has_value());
    auto bad = blob;
    bad[0] = std::byte{1};  // another version (1: before the key-table slot)
    CHECK_FALSE(od::decode_key(bad).has_value());
    bad = blob;
    bad[1] = std::byte{0x80};  // unknown flag
    CHECK_FALSE(od::decode_key(bad).has_value());
  }
}

TEST_CASE("ofi address: round trip, every truncation, trailing bytes, bad magic and version") {
  std::vector<std::byte> name(16);
  for (std::size_t i = 0; i < name.size(); ++i) name[i] = static_cast<std::byte>(i + 1);
  od::peer_address a{0xabcdef, {77, 4242, 999}, {}, name};
  a.secret[5] = 3;
  const auto blob = od::encode_address(a);
  auto back = od::parse_address(blob);
  REQUIRE(back.has_value());
  CHECK(back->nonce == 0xabcdef);
  CHECK(back->process.node == 77);
  CHECK(back->process.pid == 4242);
  CHECK(back->process.start_time == 999);
  CHECK(back->secret == a.secret);
  REQUIRE(back->native.size() == name.size());
  CHECK(std::memcmp(back->native.data(), name.data(), name.size()) == 0);
  for (std::size_t n = 0; n < blob.size(); ++n)
    CHECK(od::parse_address(std::span(blob).first(n)).error().code == status::invalid_argument);
  auto longer = blob;
  longer.push_back(std::byte{0});
  CHECK_FALSE(od::parse_address(longer).has_value());
  auto bad = blob;
  bad[0] = std::byte{'X'};
  CHECK_FALSE(od::parse_address(bad).has_value());
  bad = blob;
  bad[4] = std::byte{9};  // version
  CHECK_FALSE(od::parse_address(bad).has_value());
  const od::peer_address empty{1, {}, {}, {}};
  CHECK_FALSE(od::parse_address(od::encode_address(empty)).has_value());
}

TEST_CASE("ofi status: libfabric error numbers map to fabrix statuses, either sign") {
  CHECK(od::to_status(0) == status::ok);
  CHECK(od::to_status(-FI_EAGAIN) == status::again);
  CHECK(od::to_status(FI_EAGAIN) == status::again);
  CHECK(od::to_status(-FI_ECONNRESET) == status::peer_unreachable);
  CHECK(od::to_status(FI_ETRUNC) == status::truncated);
  CHECK(od::to_status(FI_ECANCELED) == status::canceled);
  CHECK(od::to_status(-FI_EACCES) == status::access_denied);
  CHECK(od::to_status(-FI_ENOSYS) == status::unsupported);
  CHECK(od::to_status(-FI_EOTHER) == status::provider_error);
  const auto e = od::fail(-FI_ENOMEM, "fi_thing");
  CHECK(e.value.code == status::no_memory);
  CHECK(e.value.native_code == -FI_ENOMEM);
  CHECK(e.value.provider == "ofi");
  CHECK(e.value.message.find("fi_thing") == 0);
}

TEST_CASE("ofi status: a verbs error entry (EIO) is read by its ibv_wc_status, as the verbs provider reads it") {
  CHECK(od::prov_errno_kind_of("verbs;ofi_rxm") == od::prov_errno_kind::ibv_wc_status);
  CHECK(od::prov_errno_kind_of("tcp;ofi_rxm") == od::prov_errno_kind::errno_value);
  CHECK(od::ibv_status_to_status(10) == status::access_denied);  // REM_ACCESS_ERR: a key the target refused
  CHECK(od::ibv_status_to_status(4) == status::access_denied);   // LOC_PROT_ERR
  CHECK(od::ibv_status_to_status(9) == status::invalid_argument);
  CHECK(od::ibv_status_to_status(1) == status::truncated);
  CHECK(od::ibv_status_to_status(21) == status::provider_error);  // GENERAL_ERR
  CHECK(od::ibv_status_means_peer_loss(12));                      // RETRY_EXC_ERR
  CHECK_FALSE(od::ibv_status_means_peer_loss(10));
}

TEST_CASE("ofi domain: opens on shm, describes itself, refuses cuda_device memory") {
  fabrix::domain_options opts;
  opts.transport = "shm";
  auto dom = fabrix::ofi::domain::create(opts);
  REQUIRE_MESSAGE(dom.has_value(), (dom ? "" : dom.error().describe()));
  CHECK(dom->describe().find("provider shm") != std::string::npos);
  CHECK(dom->caps().gpu == fabrix::gpu_path::none);
  std::vector<std::byte> buf(64);
  auto r =
      dom->register_memory(buf.data(), buf.size(), {fabrix::memory_kind::cuda_device, 0}, fabrix::access::remote_write);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == status::unsupported);
  opts.transport = "no-such-provider";
  auto bad = fabrix::ofi::domain::create(opts);
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().provider == "ofi");
}

// The mechanisms behind op_options (post.hpp), on a domain_state with no
// libfabric objects: nothing here reaches libfabric.
namespace {
struct bare_peer {
  od::domain_state d{8, 4};
  od::peer_state p;
  bare_peer() {
    p.dom = &d;
    d.peers.push_back(&p);
  }
  // A posted write with `token`, as start() leaves it.
  od::op_slot* posted(std::uint64_t token, bool unsignaled) {
    od::op_slot* op = od::take_slot(d, false);
    REQUIRE(op != nullptr);
    op->peer = &p;
    op->c.token = token;
    op->c.op = fabrix::opcode::write;
    op->unsignaled = unsignaled;
    op->st = od::slot_state::posted;
    op->counted = true;
    ++p.inflight;
    return op;
  }
};
}  // namespace

TEST_CASE("ofi unsignaled: success is counted with no completion; failure is counted and completes with its token") {
  bare_peer b;
  od::finish(b.d, b.posted(1, true), status::ok);
  CHECK(b.d.ring.empty());
  CHECK(b.p.finished == 1);
  CHECK(b.p.inflight == 0);
  CHECK(b.d.ops_in_use == 0);  // the slot is free again
  od::finish(b.d, b.posted(2, true), status::access_denied, -FI_EACCES);
  CHECK(b.p.finished == 2);
  REQUIRE(b.d.ring.size() == 1);
  fabrix::completion c[2];
  REQUIRE(b.d.ring.drain(c) == 1);
  CHECK(c[0].token == 2);
  CHECK(c[0].status == status::access_denied);
  od::finish(b.d, b.posted(3, false), status::ok);  // signaled: a completion, not counted
  CHECK(b.p.finished == 2);
  CHECK(b.d.ring.size() == 1);
}

TEST_CASE("ofi unsignaled: a peer that fails counts its in-flight unsignaled operations and completes them") {
  bare_peer b;
  (void)b.posted(1, true);
  (void)b.posted(2, false);
  od::fail_peer(b.d, b.p, FI_ECONNRESET, status::peer_unreachable);
  CHECK(b.p.finished == 1);
  fabrix::completion c[4];
  REQUIRE(b.d.ring.drain(c) == 2);
  for (int i = 0; i < 2; ++i) CHECK(c[i].status == status::peer_unreachable);
}

TEST_CASE("ofi fence: a fenced operation parks while anything earlier is in flight, and what follows queues behind") {
  bare_peer b;
  od::op_slot* earlier = b.posted(1, false);
  od::op_slot* fenced = od::take_slot(b.d, false);
  REQUIRE(fenced != nullptr);
  fenced->peer = &b.p;
  fenced->c.op = fabrix::opcode::write;
  fenced->c.bytes = 8;
  fenced->fenced = true;
  CHECK(od::needs_quiet(*fenced));
  CHECK(od::post_slot(b.p, fenced) == status::ok);
  CHECK(b.p.parked.head == fenced);
  od::op_slot* later = od::take_slot(b.d, false);
  REQUIRE(later != nullptr);
  later->peer = &b.p;
  later->c.op = fabrix::opcode::write;
  later->c.bytes = 0;  // would complete at once, were it not behind the fence
  CHECK(od::post_slot(b.p, later) == status::ok);
  CHECK(b.p.parked.head == fenced);
  CHECK(b.p.parked.tail == later);
  REQUIRE(b.d.busy.size() == 1);  // progress() drains only busy peers; listed once
  CHECK(b.d.busy[0] == &b.p);
  CHECK(b.p.busy);
  od::drain(b.d, b.p);  // still in flight: nothing moves
  CHECK(b.p.parked.head == fenced);
  od::finish(b.d, earlier, status::ok);
  CHECK(b.p.inflight == 0);
}

TEST_CASE("ofi stale key: an operation held for its verdict counts as in flight, so a flush waits for it") {
  bare_peer b;
  od::op_slot* op = od::take_slot(b.d, false);
  REQUIRE(op != nullptr);
  op->peer = &b.p;
  op->c.op = fabrix::opcode::write;
  op->unsignaled = true;
  od::hold_stale(b.d, op);
  CHECK(b.p.inflight == 1);
  od::op_slot* flush = od::take_slot(b.d, false);
  REQUIRE(flush != nullptr);
  flush->peer = &b.p;
  flush->c.op = fabrix::opcode::flush;
  CHECK(od::post_slot(b.p, flush) == status::ok);
  CHECK(b.p.parked.head == flush);
  od::resolve_stale(b.d, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  CHECK(b.p.inflight == 0);
  CHECK(b.p.finished == 1);
  od::drain(b.d, b.p);  // the flush completes now (nothing to post)
  fabrix::completion c[4];
  REQUIRE(b.d.ring.drain(c) == 2);
  CHECK(c[0].status == status::stale_key);
  CHECK(c[1].op == fabrix::opcode::flush);
  CHECK(c[1].status == status::ok);
}

TEST_CASE("ofi op slot: going back resets every field but the iovec scratch") {
  using od::op_slot;
  int target = 0;
  slot_round_trip<op_slot>(
      [&](op_slot& op) {
        op.ctx.internal[0] = &target;
        op.c.token = 77;
        op.c.status = status::access_denied;
        op.st = od::slot_state::posted;
        op.counted = op.unsignaled = op.fenced = true;
        op.posted_epoch = 9;
        op.due = std::chrono::steady_clock::now();
        op.iov_count = 2;
        op.raddr = 0x1000;
        op.rkey = 5;
        op.iov[1] = iovec{&target, 4};
        op.desc[1] = &target;
      },
      [&](const op_slot& op) {
        CHECK(op.ctx.internal[0] == nullptr);
        CHECK(op.c.token == 0);
        CHECK(op.c.status == status::ok);
        CHECK(op.st == od::slot_state::free);
        CHECK_FALSE(op.counted);
        CHECK_FALSE(op.unsignaled);
        CHECK_FALSE(op.fenced);
        CHECK(op.posted_epoch == 0);
        CHECK(op.due == std::chrono::steady_clock::time_point{});
        CHECK(op.iov_count == 0);
        CHECK(op.raddr == 0);
        CHECK(op.rkey == 0);
        CHECK(op.next == nullptr);
        CHECK(op.iov[1].iov_base == &target);  // scratch: fill_slot writes it before it is read
      });
}

TEST_CASE("ofi native(): the domain's fabric, domain, endpoint, CQ and AV, the queue pair's peer address, the MR") {
  fabrix::domain_options opts;
  opts.transport = "tcp;ofi_rxm";
  auto dom = fabrix::ofi::domain::create(opts);
  REQUIRE_MESSAGE(dom.has_value(), (dom ? "" : dom.error().describe()));
  const fabrix::ofi::native_domain d = dom->native();
  REQUIRE(d.fabric != nullptr);
  REQUIRE(d.domain != nullptr);
  REQUIRE(d.ep != nullptr);
  REQUIRE(d.cq != nullptr);
  REQUIRE(d.av != nullptr);
  // The endpoint is the one whose name the domain's address carries.
  std::array<char, 256> name{};
  std::size_t len = name.size();
  REQUIRE(fi_getname(&d.ep->fid, name.data(), &len) == 0);
  CHECK(len > 0);
  auto qp = dom->connect(dom->address().value());
  REQUIRE(qp.has_value());
  CHECK(qp->native().ep == d.ep);
  CHECK(qp->native().peer != FI_ADDR_UNSPEC);
  // The address vector maps the queue pair's peer back to that same name.
  std::array<char, 256> back{};
  std::size_t back_len = back.size();
  REQUIRE(fi_av_lookup(d.av, qp->native().peer, back.data(), &back_len) == 0);
  CHECK(back_len == len);
  CHECK(std::memcmp(back.data(), name.data(), len) == 0);
  std::vector<std::byte> buf(4096);
  auto mr = dom->register_memory(buf.data(), buf.size(), {}, fabrix::access::remote_write);
  REQUIRE(mr.has_value());
  if (fid_mr* native_mr = mr->native().mr) CHECK(fi_mr_desc(native_mr) == mr->slice(0, 1).descriptor);
}

TEST_CASE("ofi device pci:<bus id>: the offered domain named after the network device closest to that function") {
  fxt::fake_sysfs sys;
  sys.interface("lo", sys.near);
  sys.interface("eth0", sys.far);
  fabrix::domain_options o;
  o.transport = "tcp;ofi_rxm";
  o.device = std::string("pci:") + fxt::fake_sysfs::gpu;
  auto a = fabrix::ofi::domain::create(o);
  auto b = fabrix::ofi::domain::create(o);
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.error().describe()));
  REQUIRE(b.has_value());
  CHECK(fabrix::detail::provider_impl(*a).domain_name() == "lo");
  // It reports the function of that device, also through any_provider.
  CHECK(a->device_pci() == std::optional<std::string>("0000:04:00.0"));
  CHECK(fabrix::open("ofi", o).value().device_pci() == std::optional<std::string>("0000:04:00.0"));
  fabrix::domain_options shm;
  shm.transport = "shm";
  CHECK_FALSE(fabrix::ofi::domain::create(shm).value().device_pci().has_value());
  fxt::check_write_between(*a, *b);
  // The only device on PCI is no domain libfabric offers: refused, naming it.
  fxt::fake_sysfs other("none");
  other.interface("fxnone0", other.near);
  auto none = fabrix::ofi::domain::create(o);
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code == status::invalid_argument);
  CHECK(none.error().message.find("fxnone0") != std::string::npos);
}
