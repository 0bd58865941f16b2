// The verbs provider's device-free parts: address, hello and rdma_cm request encodings, GID
// ranking, PCIe distance on a fake sysfs tree, send-queue credit accounting,
// op_options on work requests (unsignaled, fence) and what a CQE retires,
// receives (their bound, peer ids, truncation, ending when the queue pair
// fails) and the options read from the environment.
#include <doctest/doctest.h>

#include <fabrix/verbs.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

namespace vd = fabrix::verbs::detail;
using fabrix::status;

namespace {

vd::peer_address sample_address() {
  vd::peer_address a;
  a.link_layer = 2;
  a.mtu = 3;
  a.nonce = 0x1122334455667788ull;
  for (std::size_t i = 0; i < 16; ++i) a.secret[i] = static_cast<std::uint8_t>(i * 7);
  a.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1};
  a.lid = 0;
  a.ud_qpn = 0x123456;
  a.qkey = vd::ud_qkey;
  a.flush_addr = 0x7f0000001000ull;
  a.flush_rkey = 0xabcdef01u;
  return a;
}

vd::gid_entry gid(std::uint32_t index, vd::gid_kind kind, std::array<std::uint8_t, 16> raw) {
  return vd::gid_entry{index, kind, raw};
}
constexpr std::array<std::uint8_t, 16> v4{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
constexpr std::array<std::uint8_t, 16> ll{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0xff, 0xfe, 4, 5, 6};
constexpr std::array<std::uint8_t, 16> global6{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
constexpr std::array<std::uint8_t, 16> zero{};

}  // namespace

TEST_CASE("verbs address: round trip, every truncation, trailing bytes, bad fields") {
  const auto a = sample_address();
  const auto blob = vd::encode_address(a);
  REQUIRE(blob.size() == vd::address_size);
  auto back = vd::parse_address(blob);
  REQUIRE(back.has_value());
  CHECK(back->nonce == a.nonce);
  CHECK(back->secret == a.secret);
  CHECK(back->gid == a.gid);
  CHECK(back->ud_qpn == a.ud_qpn);
  CHECK(back->mtu == a.mtu);
  CHECK(back->flush_addr == a.flush_addr);
  CHECK(back->flush_rkey == a.flush_rkey);
  CHECK(vd::encode_address(*back) == blob);
  for (std::size_t n = 0; n < blob.size(); ++n)
    CHECK(vd::parse_address(std::span(blob).first(n)).code() == status::invalid_argument);
  auto longer = blob;
  longer.push_back(std::byte{0});
  CHECK(vd::parse_address(longer).code() == status::invalid_argument);
  auto bad = blob;
  bad[0] = std::byte{'X'};
  CHECK(vd::parse_address(bad).code() == status::invalid_argument);
  bad = blob;
  bad[4] = std::byte{1};  // version 1 (76 bytes, no rdma_cm fields) is refused
  CHECK(vd::parse_address(bad).code() == status::invalid_argument);
  bad[4] = std::byte{3};
  CHECK(vd::parse_address(bad).code() == status::invalid_argument);
  auto field = a;
  field.mtu = 6;
  CHECK(vd::parse_address(vd::encode_address(field)).code() == status::invalid_argument);
  field = a;
  field.link_layer = 0;
  CHECK(vd::parse_address(vd::encode_address(field)).code() == status::invalid_argument);
  field = a;
  field.ud_qpn = 0x1000000;  // QPNs are 24-bit
  CHECK(vd::parse_address(vd::encode_address(field)).code() == status::invalid_argument);
  std::mt19937 rng(5);
  for (int i = 0; i < 5000; ++i) {
    std::vector<std::byte> junk(rng() % 120);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    CHECK(vd::parse_address(junk).code() == status::invalid_argument);
  }
}

TEST_CASE("verbs address: rdma_cm listener fields round trip; inconsistent ones are refused") {
  auto a = sample_address();
  a.connect = 1;
  a.cm_family = 4;
  a.cm_port = 4791;
  a.cm_ip = {10, 77, 0, 1};
  const auto blob = vd::encode_address(a);
  auto back = vd::parse_address(blob);
  REQUIRE(back.has_value());
  CHECK(back->connect == 1);
  CHECK(back->cm_family == 4);
  CHECK(back->cm_port == 4791);
  CHECK(back->cm_ip == a.cm_ip);
  CHECK(vd::encode_address(*back) == blob);
  const auto ss = vd::cm_peer_sockaddr(*back);
  CHECK(vd::sockaddr_text(reinterpret_cast<const sockaddr*>(&ss)) == "10.77.0.1:4791");
  auto six = a;
  six.cm_family = 6;
  six.cm_ip = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
  REQUIRE(vd::parse_address(vd::encode_address(six)).has_value());
  const auto ss6 = vd::cm_peer_sockaddr(six);
  CHECK(vd::sockaddr_text(reinterpret_cast<const sockaddr*>(&ss6)) == "[2001:db8::9]:4791");
  auto f = a;
  f.cm_port = 0;
  CHECK(vd::parse_address(vd::encode_address(f)).code() == status::invalid_argument);
  f = a;
  f.cm_family = 5;
  CHECK(vd::parse_address(vd::encode_address(f)).code() == status::invalid_argument);
  f = a;
  f.cm_ip[9] = 1;  // bytes past an IPv4 address
  CHECK(vd::parse_address(vd::encode_address(f)).code() == status::invalid_argument);
  f = a;
  f.connect = 2;
  CHECK(vd::parse_address(vd::encode_address(f)).code() == status::invalid_argument);
  f = sample_address();  // bootstrap, but with a port
  f.cm_port = 1;
  CHECK(vd::parse_address(vd::encode_address(f)).code() == status::invalid_argument);
}

TEST_CASE("verbs rdma_cm request: round trip, padding ignored, refusals") {
  std::vector<std::byte> buf(56);  // the transport pads private data with zeros
  vd::encode_cm_request(vd::cm_request{1, 2, 3}, buf.data());
  auto q = vd::parse_cm_request(buf);
  REQUIRE(q.has_value());
  CHECK(q->from == 1);
  CHECK(q->to == 2);
  CHECK(q->seq == 3);
  for (std::size_t n = 0; n < vd::cm_request_size; ++n) CHECK(!vd::parse_cm_request(std::span(buf).first(n)));
  auto bad = buf;
  bad[4] = std::byte{2};  // version
  CHECK(!vd::parse_cm_request(bad));
  bad = buf;
  bad[6] = std::byte{1};  // reserved
  CHECK(!vd::parse_cm_request(bad));
  bad = buf;
  bad[0] = std::byte{'Y'};
  CHECK(!vd::parse_cm_request(bad));
}

namespace {

// Stands in for the NIC and the GPU backend: which calls succeed is set per
// case; records what was called.
struct fake_device_ops {
  bool can_export = true, dmabuf_reg_ok = true, peer_loaded = true, peer_reg_ok = true;
  int dmabuf_errno = EOPNOTSUPP, peer_errno = EFAULT;
  ibv_mr dmabuf_mr{}, plain_mr{};
  int exported = 0, closed = 0, reg_dmabuf_calls = 0, reg_mr_calls = 0;
  std::uint64_t seen_offset = 0, seen_iova = 0;

  int export_dmabuf(const void*, std::size_t, std::uint64_t* off, std::string* why) {
    if (!can_export) {
      *why = "cuMemGetHandleForAddressRange: not supported";
      return -1;
    }
    ++exported;
    *off = 123;
    return 42;
  }
  ibv_mr* reg_dmabuf(std::uint64_t off, std::size_t, std::uint64_t iova, int fd, int) {
    ++reg_dmabuf_calls;
    seen_offset = off;
    seen_iova = iova;
    CHECK(fd == 42);
    errno = dmabuf_errno;
    return dmabuf_reg_ok ? &dmabuf_mr : nullptr;
  }
  void close(int fd) {
    CHECK(fd == 42);
    ++closed;
  }
  bool peer_memory(const void*) const { return peer_loaded; }
  ibv_mr* reg_mr(void*, std::size_t, int) {
    ++reg_mr_calls;
    errno = peer_errno;
    return peer_reg_ok ? &plain_mr : nullptr;
  }
};

}  // namespace

TEST_CASE("verbs cuda_device registration: dma-buf first, then peer memory, else a clear unsupported") {
  std::byte fake_device[64];
  SUBCASE("dma-buf works: used, at the pointer's address, and the fd is closed") {
    fake_device_ops ops;
    auto r = vd::register_device_memory(ops, fake_device, sizeof fake_device, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(r.has_value());
    CHECK(r->how == fabrix::verbs::gpu_registration::dmabuf);
    CHECK(r->mr == &ops.dmabuf_mr);
    CHECK(ops.seen_offset == 123);
    CHECK(ops.seen_iova == reinterpret_cast<std::uintptr_t>(fake_device));
    CHECK(ops.closed == 1);
    CHECK(ops.reg_mr_calls == 0);
  }
  SUBCASE("the NIC refuses the dma-buf: peer memory, and the fd is still closed") {
    fake_device_ops ops;
    ops.dmabuf_reg_ok = false;
    auto r = vd::register_device_memory(ops, fake_device, sizeof fake_device, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(r.has_value());
    CHECK(r->how == fabrix::verbs::gpu_registration::peer_memory);
    CHECK(r->mr == &ops.plain_mr);
    CHECK(ops.closed == 1);
  }
  SUBCASE("no dma-buf export: peer memory without any fd") {
    fake_device_ops ops;
    ops.can_export = false;
    auto r = vd::register_device_memory(ops, fake_device, sizeof fake_device, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(r.has_value());
    CHECK(r->how == fabrix::verbs::gpu_registration::peer_memory);
    CHECK(ops.reg_dmabuf_calls == 0);
    CHECK(ops.closed == 0);
  }
  SUBCASE("neither: unsupported, naming why each way failed; no peer registration without the module") {
    fake_device_ops ops;
    ops.dmabuf_reg_ok = false;
    ops.peer_loaded = false;
    auto r = vd::register_device_memory(ops, fake_device, sizeof fake_device, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(!r.has_value());
    CHECK(r.error().code == status::unsupported);
    CHECK(r.error().message.find("ibv_reg_dmabuf_mr: Operation not supported") != std::string::npos);
    CHECK(r.error().message.find("nvidia_peermem") != std::string::npos);
    CHECK(ops.reg_mr_calls == 0);
    CHECK(ops.closed == 1);
  }
  SUBCASE("both fail at the NIC: unsupported with both errors") {
    fake_device_ops ops;
    ops.can_export = false;
    ops.peer_reg_ok = false;
    auto r = vd::register_device_memory(ops, fake_device, sizeof fake_device, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(!r.has_value());
    CHECK(r.error().code == status::unsupported);
    CHECK(r.error().message.find("cuMemGetHandleForAddressRange: not supported") != std::string::npos);
    CHECK(r.error().message.find("ibv_reg_mr on device memory: Bad address") != std::string::npos);
  }
}

TEST_CASE("verbs hello: round trip and refusals") {
  vd::hello h{true, true, 1, 2, 3, 0xabcdef, 0x123};
  std::vector<std::byte> buf(vd::hello_size);
  vd::encode_hello(h, buf.data());
  auto back = vd::parse_hello(buf);
  REQUIRE(back.has_value());
  CHECK(back->has_yours);
  CHECK(back->is_reply);
  CHECK(back->from == 1);
  CHECK(back->to == 2);
  CHECK(back->seq == 3);
  CHECK(back->rc_qpn == 0xabcdef);
  CHECK(back->psn == 0x123);
  for (std::size_t n = 0; n < buf.size(); ++n) CHECK(!vd::parse_hello(std::span(buf).first(n)));
  auto bad = buf;
  bad[6] = std::byte{4};  // unknown flag
  CHECK(!vd::parse_hello(bad));
  h.rc_qpn = 0;
  vd::encode_hello(h, buf.data());
  CHECK(!vd::parse_hello(buf));
  h.rc_qpn = 5;
  h.psn = 0x1000000;
  vd::encode_hello(h, buf.data());
  CHECK(!vd::parse_hello(buf));
}

TEST_CASE("verbs GID choice: RoCE v2 IPv4, then v2 IPv6, then v1, then IB; zero entries never") {
  using K = vd::gid_kind;
  {
    const vd::gid_entry t[] = {gid(0, K::roce_v1, ll), gid(1, K::roce_v2, ll), gid(2, K::roce_v1, v4),
                               gid(3, K::roce_v2, v4)};
    CHECK(vd::choose_gid(t) == 3);
  }
  {
    const vd::gid_entry t[] = {gid(0, K::roce_v2, ll), gid(1, K::roce_v2, global6), gid(2, K::roce_v1, v4)};
    CHECK(vd::choose_gid(t) == 1);  // a routable v2 address beats link-local
  }
  {
    const vd::gid_entry t[] = {gid(0, K::roce_v1, ll), gid(1, K::roce_v2, ll)};
    CHECK(vd::choose_gid(t) == 1);
  }
  {
    const vd::gid_entry t[] = {gid(4, K::ib, global6), gid(0, K::roce_v1, ll)};
    CHECK(vd::choose_gid(t) == 1);
  }
  {
    const vd::gid_entry t[] = {gid(0, K::ib, zero), gid(1, K::roce_v2, zero)};
    CHECK(!vd::choose_gid(t).has_value());
    CHECK(!vd::choose_gid({}).has_value());
  }
  {
    const vd::gid_entry t[] = {gid(7, K::roce_v2, v4), gid(2, K::roce_v2, v4)};
    CHECK(vd::choose_gid(t) == 1);  // ties: lowest GID index
  }
  CHECK(vd::parse_sysfs_gid_type("RoCE v2\n", true) == K::roce_v2);
  CHECK(vd::parse_sysfs_gid_type("IB/RoCE v1\n", true) == K::roce_v1);
  CHECK(vd::parse_sysfs_gid_type("IB/RoCE v1", false) == K::ib);
  CHECK(!vd::parse_sysfs_gid_type("RoCE v3", true));
  CHECK(vd::gid_text(v4) == "10.0.0.1");
  CHECK(vd::gid_text(ll) == "fe80:0000:0000:0000:0102:03ff:fe04:0506");
}

TEST_CASE("verbs device spec: name, name:port, pci:") {
  auto s = vd::parse_device_spec("mlx5_0:1");
  CHECK(s.name == "mlx5_0");
  CHECK(s.port == 1);
  s = vd::parse_device_spec("rxe0");
  CHECK(s.name == "rxe0");
  CHECK(s.port == 0);
  s = vd::parse_device_spec("pci:0000:3b:00.0");
  CHECK(s.name.empty());
  CHECK(s.near_pci == "0000:3b:00.0");
}

TEST_CASE("verbs PCIe distance on a fake sysfs tree") {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/fabrix-sysfs-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const fs::path root = tmpl;
  // Socket 0: switch 0000:00:01.0 -> 0000:01:00.0 (upstream) -> two ports,
  // one with NIC mlx5_0 and one with GPU 0000:04:00.0; NIC mlx5_1 on another
  // root port; socket 1 holds mlx5_2.
  const fs::path dev = root / "devices";
  const fs::path sw = dev / "pci0000:00/0000:00:01.0/0000:01:00.0";
  fs::create_directories(sw / "0000:02:00.0/0000:03:00.0/infiniband/mlx5_0");
  fs::create_directories(sw / "0000:02:01.0/0000:04:00.0");
  fs::create_directories(dev / "pci0000:00/0000:00:02.0/0000:05:00.0");
  fs::create_directories(dev / "pci0000:80/0000:80:01.0/0000:81:00.0");
  fs::create_directories(dev / "virtual/net/eth0");
  fs::create_directories(root / "class/infiniband");
  fs::create_directories(root / "bus/pci/devices");
  auto nic = [&](const char* name, const fs::path& where) {
    fs::create_directories(root / "class/infiniband" / name);
    fs::create_directory_symlink(where, root / "class/infiniband" / name / "device");
  };
  nic("mlx5_0", sw / "0000:02:00.0/0000:03:00.0");
  nic("mlx5_1", dev / "pci0000:00/0000:00:02.0/0000:05:00.0");
  nic("mlx5_2", dev / "pci0000:80/0000:80:01.0/0000:81:00.0");
  nic("rxe0", dev / "virtual/net/eth0");
  fs::create_directory_symlink(sw / "0000:02:01.0/0000:04:00.0", root / "bus/pci/devices/0000:04:00.0");

  const std::string r = root.string();
  CHECK(vd::device_distance(r, "mlx5_0", "0000:04:00.0") == 4);              // up 2 bridges, down 2, under one switch
  CHECK(vd::device_distance(r, "mlx5_1", "0000:04:00.0") == 6);              // through the root complex
  CHECK(vd::device_distance(r, "mlx5_2", "0000:04:00.0") == vd::far_apart);  // the other socket
  CHECK(vd::device_distance(r, "rxe0", "0000:04:00.0") == vd::far_apart);    // not on PCI
  CHECK(vd::device_distance(r, "nosuch", "0000:04:00.0") == vd::far_apart);
  CHECK(vd::device_distance(r, "mlx5_0", "0000:ff:00.0") == vd::far_apart);
  const auto chain = vd::pci_chain("/sys/devices/pci0000:00/0000:00:01.0/0000:3b:00.0/infiniband/mlx5_0");
  REQUIRE(chain.size() == 3);
  CHECK(chain[0] == "pci0000:00");
  CHECK(chain[2] == "0000:3b:00.0");
  CHECK(vd::pci_chain("/sys/devices/virtual/net/lo").empty());
  fs::remove_all(root);
}

TEST_CASE("verbs send ring: credits never exceed the queue, signaled completions retire in order") {
  vd::send_ring ring(8);
  CHECK(ring.room() == 8);
  // Stage and commit a chain of 5: only the last (and every capacity/4-th) is signaled.
  for (std::uint32_t i = 0; i < 5; ++i) ring.staged(i) = {100 + i, 10, 0, fabrix::opcode::write, 0};
  CHECK(ring.signal_point(5) == 5);  // all want a completion
  CHECK(ring.must_signal(4, 5));
  CHECK(!ring.must_signal(0, 5));
  CHECK(ring.must_signal(1, 5));  // seq 1: (1 + 1) % 2 == 0 with capacity/4 == 2
  ring.commit(5);
  CHECK(ring.room() == 3);
  CHECK(ring.in_flight() == 5);
  // A signaled completion for seq 2 retires 0..2, in order.
  std::vector<std::uint64_t> tokens;
  std::vector<bool> lasts;
  CHECK(ring.retire_through(2, [&](const vd::sq_entry& e, bool last) {
    tokens.push_back(e.token);
    lasts.push_back(last);
  }) == 3);
  CHECK(tokens == std::vector<std::uint64_t>{100, 101, 102});
  CHECK(lasts == std::vector<bool>{false, false, true});
  // Stale, repeated or not-yet-posted sequence numbers retire nothing.
  CHECK(ring.retire_through(2, [](const vd::sq_entry&, bool) {}) == 0);
  CHECK(ring.retire_through(9, [](const vd::sq_entry&, bool) {}) == 0);
  CHECK(ring.room() == 6);
  // Fill to the brim across the wrap: then no room at all.
  for (std::uint32_t i = 0; i < ring.room(); ++i) ring.staged(i) = {200 + i, 1, 0, fabrix::opcode::read, 0};
  ring.commit(ring.room());
  CHECK(ring.room() == 0);
  tokens.clear();
  CHECK(ring.retire_through(ring.next_seq() - 1, [&](const vd::sq_entry& e, bool) { tokens.push_back(e.token); }) == 8);
  CHECK(tokens == std::vector<std::uint64_t>{103, 104, 200, 201, 202, 203, 204, 205});
  CHECK(ring.empty());

  vd::cq_credits credits(10);
  credits.take(10);
  CHECK(credits.available() == 0);
  credits.give(4);
  CHECK(credits.available() == 4);
  credits.give(100);  // never above the total
  CHECK(credits.available() == 10);
}

TEST_CASE("verbs options: what each work request carries, which are signaled, what a CQE retires") {
  vd::domain_state d(fabrix::verbs::options{}, /*max_outstanding=*/16, /*max_recvs=*/4);
  vd::peer_state p(16);  // signal_every 4
  p.dom = &d;
  p.connected = true;
  ibv_qp fake_qp{};
  fake_qp.qp_num = 77;
  p.qp = &fake_qp;
  d.by_qpn[77] = &p;
  REQUIRE(vd::take_slot(d, p));
  std::vector<std::byte> msg(64);
  ibv_mr fake_mr{};
  fake_mr.lkey = 0x1234;
  fabrix::local_slice l;
  l.address = msg.data();
  l.length = msg.size();
  l.descriptor = &fake_mr;
  l.owner = 1;  // a slice of some domain (below the core's checks)
  ibv_send_wr wr{};
  ibv_sge sge[1];
  vd::sq_entry e;
  // options_of once per operation: the queue pair's defaults, the
  // operation's own bits; fence is the work request's IBV_SEND_FENCE.
  using fabrix::op_options;
  CHECK(vd::build(p, fabrix::op::send(l, 1), wr, sge, e) == status::ok);
  CHECK(!e.unsignaled);
  CHECK((wr.send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED)) == 0);
  CHECK(vd::build(p, fabrix::op::send(l, 2, op_options::unsignaled | op_options::fence), wr, sge, e) == status::ok);
  CHECK(e.unsignaled);
  CHECK((wr.send_flags & IBV_SEND_FENCE) != 0);
  p.defaults = op_options::unsignaled | op_options::delivered;
  CHECK(vd::build(p, fabrix::op::send(l, 3), wr, sge, e) == status::ok);
  CHECK(e.unsignaled);
  CHECK((wr.send_flags & IBV_SEND_FENCE) == 0);
  auto awaited = fabrix::op::send(l, 4);
  awaited.flags = fabrix::detail::flag_awaited;
  CHECK(vd::build(p, awaited, wr, sge, e) == status::ok);
  CHECK(!e.unsignaled);  // awaited operations stay signaled
  p.defaults = op_options::none;

  // Signal points: the last request that wants a completion, plus every
  // 4th by seq; unsignaled ones at the chain's end wait for a later one.
  auto stage = [&](std::uint32_t i, std::uint64_t token, bool unsignaled) {
    p.ring.staged(i) = {token, 8, 0, fabrix::opcode::write, 0};
    p.ring.staged(i).unsignaled = unsignaled;
  };
  stage(0, 10, true);
  stage(1, 11, false);
  stage(2, 12, true);
  CHECK(p.ring.signal_point(3) == 2);
  CHECK(!p.ring.must_signal(0, 2));
  CHECK(p.ring.must_signal(1, 2));
  CHECK(!p.ring.must_signal(2, 2));
  stage(3, 13, true);
  CHECK(p.ring.must_signal(3, 2));  // seq 3: every 4th
  stage(1, 11, true);
  CHECK(p.ring.signal_point(3) == 0);
  stage(1, 11, false);
  p.ring.note_signaled(1);
  p.ring.commit(3);
  d.credits.take(3);
  CHECK(p.ring.cqe_due());

  // The signaled CQE retires 10 (counted, no completion) and 11
  // (completed); 12 is still in flight, waiting for a later signaled one.
  fabrix::completion c[8];
  vd::srq_refill refill(d);  // no SRQ completion here: it stays empty
  ibv_wc wc{};
  wc.qp_num = 77;
  wc.status = IBV_WC_SUCCESS;
  wc.wr_id = vd::rc_wr_id(p.slot, 1);
  vd::process(d, wc, refill);
  REQUIRE(d.ring.drain(c) == 1);
  CHECK(c[0].token == 11);
  CHECK(p.finished == 1);
  CHECK(d.credits.available() == 15);
  CHECK(!p.ring.cqe_due());  // 12 alone: a liveness probe may go and retire it
  CHECK(p.ring.in_flight() == 1);

  // 13 (unsignaled) fails with its own error CQE: 12 retires fine before it
  // (counted), 13 completes with its token and error and is counted too.
  stage(0, 13, true);
  p.ring.commit(1);
  stage(0, 14, true);
  stage(1, 15, false);
  p.ring.note_signaled(1);
  p.ring.commit(2);
  d.credits.take(3);
  wc.wr_id = vd::rc_wr_id(p.slot, 3);
  wc.status = IBV_WC_REM_ACCESS_ERR;
  vd::process(d, wc, refill);
  CHECK(p.failed);
  REQUIRE(d.ring.drain(c) == 1);
  CHECK(c[0].token == 13);
  CHECK(c[0].status != status::ok);
  CHECK(c[0].native_code == IBV_WC_REM_ACCESS_ERR);
  CHECK(p.finished == 3);
  // What follows is flushed, one CQE each, signaled or not: both complete
  // with their errors; the unsignaled one is counted.
  for (std::uint64_t seq : {4, 5}) {
    wc.wr_id = vd::rc_wr_id(p.slot, seq);
    wc.status = IBV_WC_WR_FLUSH_ERR;
    vd::process(d, wc, refill);
  }
  REQUIRE(d.ring.drain(c) == 2);
  CHECK(c[0].token == 14);
  CHECK(c[0].status == status::canceled);
  CHECK(c[1].token == 15);
  CHECK(c[1].status == status::canceled);
  CHECK(p.finished == 4);
  CHECK(p.ring.empty());
  CHECK(d.credits.available() == 16);

  // The wr_id names the slot: a CQE of a queue pair that left its slot (or
  // of another queue pair in it now), or of a seq not in flight, retires
  // nothing.
  stage(0, 16, false);
  p.ring.commit(1);
  d.credits.take(1);
  wc.status = IBV_WC_SUCCESS;
  wc.wr_id = vd::rc_wr_id(p.slot + 1, 6);
  vd::process(d, wc, refill);
  wc.wr_id = vd::rc_wr_id(p.slot, 7);
  vd::process(d, wc, refill);
  wc.wr_id = vd::rc_wr_id(p.slot, 6);
  wc.qp_num = 78;
  vd::process(d, wc, refill);
  CHECK(p.ring.in_flight() == 1);
  wc.qp_num = 77;
  vd::process(d, wc, refill);
  CHECK(p.ring.empty());
  REQUIRE(d.ring.drain(c) == 1);
  CHECK(c[0].token == 16);
  vd::forget_peer(d, p);
  CHECK(d.slots[p.slot] == nullptr);
  vd::peer_state q(16);
  REQUIRE(vd::take_slot(d, q));
  CHECK(q.slot == p.slot);  // a free slot is reused
}

TEST_CASE("verbs send ring: a wr_id's 32 seq bits name the in-flight seq, or none") {
  vd::send_ring ring(8);
  ring.commit(6);
  CHECK(ring.retire_through(ring.seq_from(2), [](const vd::sq_entry&, bool) {}) == 3);
  CHECK(ring.seq_from(3) == 3);
  CHECK(ring.seq_from(5) == 5);
  CHECK(ring.seq_from(2) >= ring.next_seq());  // retired: stale
  CHECK(ring.seq_from(0xffffffffu) >= ring.next_seq());
  CHECK(vd::slot_of(vd::rc_wr_id(0xabcdef, (std::uint64_t{7} << 32) | 5)) == 0xabcdef);
  CHECK(vd::seq_bits_of(vd::rc_wr_id(0xabcdef, (std::uint64_t{7} << 32) | 5)) == 5);
  CHECK(vd::kind_of(vd::rc_wr_id(0xffffff, ~std::uint64_t{0})) == vd::wr_kind::rc_send);
}

TEST_CASE("verbs receives: the domain's bound, peer ids, truncation, and a failed queue pair ending them") {
  // Domain and queue pair state without a device: what post_recv, message
  // delivery and send completions do to it (no verbs call on these paths).
  vd::domain_state d(fabrix::verbs::options{}, /*max_outstanding=*/16, /*max_recvs=*/4);
  vd::peer_state p(8);
  p.dom = &d;
  p.peer_id = 3;
  p.connected = true;
  p.recv_capacity = 4;
  p.recvs = std::make_unique<vd::recv_wanted[]>(4);
  ibv_qp fake_qp{};
  fake_qp.qp_num = 77;
  p.qp = &fake_qp;
  d.by_qpn[77] = &p;
  d.peers.push_back(&p);
  REQUIRE(vd::take_slot(d, p));
  std::vector<std::byte> in(4 * 16);
  auto slice = [&](std::size_t i) {
    fabrix::local_slice s;
    s.address = in.data() + i * 16;
    s.length = 16;
    s.owner = 1;  // a slice of some domain (below the core's checks)
    return s;
  };
  for (std::uint64_t i = 0; i < 4; ++i) CHECK(vd::post_recv(p, fabrix::op::recv(slice(i), 10 + i)) == status::ok);
  CHECK(vd::post_recv(p, fabrix::op::recv(slice(0), 14)) == status::again);  // max_posted_recvs
  CHECK(d.posted_recvs == 4);
  CHECK(d.credits.available() == 16);  // receives take no CQ credit

  std::vector<std::byte> msg(100);
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::byte>(i + 1);
  vd::deliver_message(p, msg.data(), 10);
  vd::deliver_message(p, msg.data(), 100);  // longer than the 16-byte buffer
  fabrix::completion c[8];
  REQUIRE(d.ring.drain(c) == 2);
  CHECK(c[0].token == 10);
  CHECK(c[0].status == status::ok);
  CHECK(c[0].bytes == 10);
  CHECK(c[0].peer == 3);
  CHECK(c[1].token == 11);
  CHECK(c[1].status == status::truncated);
  CHECK(c[1].bytes == 16);  // the buffer's length, holding the message's first 16 bytes
  CHECK(std::memcmp(in.data() + 16, msg.data(), 16) == 0);
  CHECK(c[1].peer == 3);
  CHECK(d.posted_recvs == 2);

  // A user write, then a liveness probe behind it; the probe fails (a dead
  // peer): the write completes fine, the probe silently, the queue pair
  // fails and its two waiting receives end with peer_unreachable.
  p.ring.staged(0) = {50, 8, 0, fabrix::opcode::write, 0};
  p.ring.commit(1);
  d.credits.take(1);
  p.ring.staged(0) = {};
  p.ring.staged(0).internal = true;
  p.ring.commit(1);
  ++d.probes_in_flight;
  vd::srq_refill refill(d);  // no SRQ completion here: it stays empty
  ibv_wc wc{};
  wc.wr_id = vd::rc_wr_id(p.slot, 1);
  wc.status = IBV_WC_RETRY_EXC_ERR;
  wc.qp_num = 77;
  vd::process(d, wc, refill);
  CHECK(p.failed);
  CHECK(d.credits.available() == 16);
  CHECK(d.probes_in_flight == 0);
  CHECK(p.ring.empty());
  REQUIRE(d.ring.drain(c) == 3);
  CHECK(c[0].token == 50);
  CHECK(c[0].status == status::ok);
  for (int i = 1; i < 3; ++i) {
    CHECK(c[i].op == fabrix::opcode::recv);
    CHECK(c[i].token == static_cast<std::uint64_t>(11 + i));
    CHECK(c[i].status == status::peer_unreachable);
    CHECK(c[i].peer == 3);
  }
  CHECK(d.posted_recvs == 0);
  std::size_t posted = 0;
  const auto r = fabrix::op::recv(slice(0), 20);
  CHECK(vd::post_ops(p, std::span<const fabrix::operation>(&r, 1), posted) == status::peer_unreachable);
}

TEST_CASE("verbs options: environment overrides and range checks") {
  ::setenv("FABRIX_VERBS_TIMEOUT", "12", 1);
  ::setenv("FABRIX_VERBS_GID_INDEX", "3", 1);
  ::setenv("FABRIX_VERBS_DEVICE", "mlx5_1:2", 1);
  auto o = fabrix::verbs::options_from_env();
  REQUIRE(o.has_value());
  CHECK(o->timeout == 12);
  CHECK(o->gid_index == 3);
  CHECK(o->device == "mlx5_1:2");
  CHECK(o->retry_cnt == 7);
  ::setenv("FABRIX_VERBS_RETRY_CNT", "8", 1);
  auto bad = fabrix::verbs::options_from_env();
  REQUIRE(!bad.has_value());
  CHECK(bad.error().code == status::invalid_argument);
  CHECK(bad.error().message.find("FABRIX_VERBS_RETRY_CNT") != std::string::npos);
  ::setenv("FABRIX_VERBS_RETRY_CNT", "x", 1);
  CHECK(!fabrix::verbs::options_from_env().has_value());
  for (const char* v :
       {"FABRIX_VERBS_TIMEOUT", "FABRIX_VERBS_GID_INDEX", "FABRIX_VERBS_DEVICE", "FABRIX_VERBS_RETRY_CNT"})
    ::unsetenv(v);
  CHECK(fabrix::verbs::options_from_env()->connect == fabrix::verbs::connect_method::bootstrap);
  ::setenv("FABRIX_VERBS_CONNECT", "rdma_cm", 1);
  CHECK(fabrix::verbs::options_from_env()->connect == fabrix::verbs::connect_method::rdma_cm);
  ::setenv("FABRIX_VERBS_CONNECT", "tcp", 1);
  auto method = fabrix::verbs::options_from_env();
  REQUIRE(!method.has_value());
  CHECK(method.error().message.find("FABRIX_VERBS_CONNECT") != std::string::npos);
  ::unsetenv("FABRIX_VERBS_CONNECT");
  CHECK(fabrix::verbs::options_from_env()->probe_ms == 1000);
  ::setenv("FABRIX_VERBS_PROBE_MS", "0", 1);  // probes off
  CHECK(fabrix::verbs::options_from_env()->probe_ms == 0);
  ::setenv("FABRIX_VERBS_PROBE_MS", "-1", 1);
  CHECK(!fabrix::verbs::options_from_env().has_value());
  ::unsetenv("FABRIX_VERBS_PROBE_MS");
}

TEST_CASE("verbs on a host without an RDMA device: a clear unsupported, and open(auto) falls back") {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  if (n != 0) return;  // a device is present: covered by the conformance suite
  auto d = fabrix::verbs::domain::create();
  REQUIRE(!d.has_value());
  CHECK(d.error().code == status::unsupported);
  CHECK(d.error().message.find("no RDMA device") != std::string::npos);
  CHECK(fabrix::registered_providers().front() == "verbs");
}
