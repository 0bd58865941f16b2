// fabrix::routed over a provider made for this test ("fxfake"), in one
// process: two routed domains, each over two fake domains (a host route and
// a device route, the device memory being a memory kind registered here),
// so that one queue pair uses two routes without a GPU. Checks what needs
// two routes to one peer: operations go to the route of their remote
// memory kind, a flush after both is one flush per provider joined into one
// completion (not before both), a fence across routes is refused, a flush
// refused half-way completes nothing later, and forged key bytes are
// refused at import and at post. Then rails (a route over two fake
// devices): large writes and reads striped into one completion, every byte
// in place, a flush over both rails, a stripe refused half-way, a rail
// that stops completing marked down (its operation fails with timed_out,
// the next go over the other rail), and a peer that stalls both rails
// marking none down.
#include "fake_provider.hpp"

#include <doctest/doctest.h>
#include <fabrix/fabrix.hpp>
#include <fabrix/routed.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

// What a fake domain saw, reachable from the test.
struct fake_state {
  std::string transport;
  fabrix::detail::domain_identity id = fabrix::detail::draw_domain_identity();
  std::deque<fabrix::completion> done;
  std::vector<fabrix::operation> held_flushes;  // completed by release_flushes()
  std::vector<std::uintptr_t> held_remote;      // each one's remote address, read when it was posted
  int posts = 0;
  std::vector<fabrix::opcode> posted;  // every operation posted, in order
  bool hold_flushes = false;
  bool hold_all = false;                              // nothing completes (a rail that died) until release_flushes()
  bool refuse_next = false;                           // the next post returns again
  bool allocates = true;                              // allocate_memory answers, else unsupported
  int allocated = 0, registered = 0;                  // regions made by each
  fabrix::status complete_with = fabrix::status::ok;  // every completion's status (a peer gone: peer_unreachable)

  // The remote address of a write or read (the fake's remote memory is in
  // this process), as a provider reads it at post.
  static std::uintptr_t remote_of(const fabrix::operation& o) {
    if (o.code != fabrix::opcode::write && o.code != fabrix::opcode::read) return 0;
    const fabrix::remote_buffer* rb = o.remote.buffer;
    return (rb ? rb->address : o.remote.key->address) + o.remote.offset;
  }
  // A write or read moves its bytes.
  static void apply(const fabrix::operation& o, std::uintptr_t at) {
    if (o.code != fabrix::opcode::write && o.code != fabrix::opcode::read) return;
    auto* remote = reinterpret_cast<std::byte*>(at);
    if (o.code == fabrix::opcode::write)
      std::memcpy(remote, o.local.address, o.local.length);
    else
      std::memcpy(o.local.address, remote, o.local.length);
  }

  void release_flushes() {
    for (std::size_t i = 0; i < held_flushes.size(); ++i) apply(held_flushes[i], held_remote[i]);
    for (const auto& o : held_flushes)
      done.push_back({.token = o.token, .status = complete_with, .op = o.code, .flags = o.flags});
    held_flushes.clear();
    held_remote.clear();
  }
};
std::vector<fake_state*>& fakes() {
  static std::vector<fake_state*> all;
  return all;
}
fake_state& fake_domain(const std::string& transport, std::size_t nth) {
  std::size_t seen = 0;
  for (auto* f : fakes())
    if (f->transport == transport && seen++ == nth) return *f;
  FAIL("no fake domain " << transport << " #" << nth);
  throw 0;
}

struct fxfake {
  static constexpr std::string_view name = "fxfake";
  static constexpr fabrix::capabilities caps{.rma = true,
                                             .write_with_imm = true,
                                             .atomics = true,
                                             .send_recv = true,
                                             .gpu = fabrix::gpu_path::none,
                                             .max_sge = 4,
                                             .needs_target_progress = false};

  using region_impl = fake::region_impl;

  class endpoint_impl {
   public:
    explicit endpoint_impl(fake_state* s) : s_(s) {}
    fabrix::status post(std::span<const fabrix::operation> ops, std::size_t& posted) {
      posted = 0;
      if (s_->refuse_next) {
        s_->refuse_next = false;
        return fabrix::status::again;
      }
      for (const auto& o : ops) {
        ++s_->posts;
        s_->posted.push_back(o.code);
        if ((o.code == fabrix::opcode::flush && s_->hold_flushes) || s_->hold_all) {
          s_->held_flushes.push_back(o);
          s_->held_remote.push_back(fake_state::remote_of(o));
        } else {
          fake_state::apply(o, fake_state::remote_of(o));
          const bool ok = s_->complete_with == fabrix::status::ok;
          s_->done.push_back({.token = o.token,
                              .bytes = ok ? o.local.length : 0,
                              .status = s_->complete_with,
                              .op = o.code,
                              .flags = o.flags});
        }
        ++posted;
      }
      return fabrix::status::ok;
    }
    void set_default_options(fabrix::op_options) {}
    std::uint64_t finished() const noexcept { return 0; }
    fabrix::result<fabrix::import_ref> import_key(const fabrix::remote_buffer&) { return fabrix::import_ref{0, 1}; }
    fabrix::status release_key(fabrix::import_ref) { return fabrix::status::ok; }

   private:
    fake_state* s_;
  };

  class domain_impl {
   public:
    static fabrix::result<domain_impl> create(const fabrix::domain_options& o) {
      auto s = std::make_unique<fake_state>();
      s->transport = o.device.empty() ? o.transport : o.transport + "@" + o.device;
      fakes().push_back(s.get());
      return domain_impl(std::move(s));
    }
    domain_impl(domain_impl&&) = default;
    domain_impl& operator=(domain_impl&&) = default;
    ~domain_impl() {
      if (s_) std::erase(fakes(), s_.get());
    }
    fabrix::result<region_impl> register_memory(void* addr, std::size_t len, fabrix::memory_location where,
                                                fabrix::access rights) {
      ++s_->registered;
      auto rb = fabrix::detail::describe_region(fabrix::provider_id_of(name), reinterpret_cast<std::uintptr_t>(addr),
                                                len, where, rights, s_->id.nonce, ++epoch_);
      rb.key_size = 4;
      rb.seal = rb.compute_seal(s_->id.secret);
      return region_impl(rb);
    }
    // Zeroed host memory that lives as long as the domain, registered.
    fabrix::result<region_impl> allocate_memory(std::size_t len, fabrix::access rights) {
      if (!s_->allocates)
        return fabrix::unexpected(fabrix::status::unsupported, "this fake does not allocate", "fxfake");
      ++s_->allocated;
      allocations_.emplace_back(new std::byte[len]());
      return register_memory(allocations_.back().get(), len, {}, rights);
    }
    std::size_t poll(std::span<fabrix::completion> out) {
      std::size_t n = 0;
      while (n < out.size() && !s_->done.empty()) {
        out[n++] = s_->done.front();
        s_->done.pop_front();
      }
      return n;
    }
    fabrix::status wait(std::chrono::milliseconds) {
      return s_->done.empty() ? fabrix::status::timed_out : fabrix::status::ok;
    }
    fabrix::result<std::vector<std::byte>> address() const { return std::vector<std::byte>(8, std::byte{1}); }
    fabrix::result<endpoint_impl> connect(std::span<const std::byte>, std::uint32_t) { return endpoint_impl(s_.get()); }
    fabrix::provider_id provider() const noexcept { return fabrix::provider_id_of(name); }
    std::uint64_t owner() const noexcept { return s_->id.nonce; }
    fabrix::capabilities runtime_caps() const noexcept { return caps; }
    std::string describe() const { return "fxfake " + s_->transport; }
    // Rails r0 and r1 sit on PCI functions 0000:10:00.0 and 0000:11:00.0.
    std::optional<std::string> device_pci() const {
      for (const char* r : {"@r0", "@r1"})
        if (s_->transport.ends_with(r)) return std::string("0000:1") + r[2] + ":00.0";
      return std::nullopt;
    }

   private:
    explicit domain_impl(std::unique_ptr<fake_state> s) : s_(std::move(s)) {}
    std::unique_ptr<fake_state> s_;
    std::uint64_t epoch_ = 0;
    std::vector<std::unique_ptr<std::byte[]>> allocations_;
  };
};

const bool fake_registered = fabrix::detail::register_provider<fxfake>(-10);
const fabrix::memory_kind fake_device = fabrix::register_memory_kind("fxdev").value();

using routed_domain = fabrix::domain<fabrix::routed<>>;
// The same over the fake provider held by its type: routed<Ps...>.
using static_routed = fabrix::routed<fxfake>;

template <class R = fabrix::routed<>>
fabrix::domain<R> open_two_routes() {
  fabrix::domain_options o;
  o.transport = "node=fxfake:host gpu=fxfake:dev";
  return fabrix::domain<R>::create(o).value();
}

template <class D>
std::vector<fabrix::completion> drain(D& d) {
  std::vector<fabrix::completion> got;
  fabrix::completion buf[8];
  for (int i = 0; i < 4; ++i) {
    const std::size_t n = d.poll(buf);
    got.insert(got.end(), buf, buf + n);
  }
  return got;
}

}  // namespace

TEST_CASE_TEMPLATE("routed: operations take the route of their remote memory; a flush over two routes is joined", R,
                   fabrix::routed<>, static_routed) {
  REQUIRE(fake_registered);
  auto a = open_two_routes<R>();
  auto b = open_two_routes<R>();
  auto qp = a.connect(b.address().value()).value();
  CHECK(qp.describe() ==
        "host memory: fxfake:host (peer on this node); device memory: fxfake:dev (gpu route to a peer on this node)");
  fake_state& host = fake_domain("host", 0);
  fake_state& dev = fake_domain("dev", 0);

  std::vector<std::byte> src(64, std::byte{7}), dst(64), dsrc(64, std::byte{9}), ddst(64);
  auto ms = a.register_memory(src, fabrix::access::local).value();
  auto md = b.register_memory(dst, fabrix::access::all_remote).value();
  auto mds = a.register_memory(dsrc.data(), 64, {fake_device, 0}, fabrix::access::local).value();
  auto mdd = b.register_memory(ddst.data(), 64, {fake_device, 0}, fabrix::access::all_remote).value();
  // Host memory is in both routes' domains (the device route's takes it),
  // device memory in the device route's only (the host route's provider
  // does not reach device memory).
  fabrix::remote_buffer sub;
  CHECK(fabrix::detail::routed_sub_buffer(md.remote(), 0, sub));
  CHECK(fabrix::detail::routed_sub_buffer(md.remote(), 1, sub));
  CHECK(fabrix::detail::routed_sub_buffer(mdd.remote(), 1, sub));
  CHECK(!fabrix::detail::routed_sub_buffer(mdd.remote(), 0, sub));

  CHECK(qp.write(ms.slice(0, 64), md.remote().whole(), 1) == fabrix::status::ok);
  CHECK(host.posts == 1);
  CHECK(dev.posts == 0);
  CHECK(qp.write(mds.slice(0, 64), mdd.remote().whole(), 2) == fabrix::status::ok);
  CHECK(dev.posts == 1);
  CHECK(dst == src);
  CHECK(ddst == dsrc);
  // Host memory as the source of a write to device memory: the device route.
  CHECK(qp.write(ms.slice(0, 64), mdd.remote().whole(), 3) == fabrix::status::ok);
  CHECK(dev.posts == 2);
  // Device memory as the source of a write to host memory: the host route's
  // provider has no registration of it.
  CHECK(qp.write(mds.slice(0, 64), md.remote().whole(), 4) == fabrix::status::unsupported);
  auto got = drain(a);
  REQUIRE(got.size() == 3);
  CHECK(got[0].token + got[1].token + got[2].token == 6);

  // Both routes used: the flush is one per provider, reported once both finish.
  host.hold_flushes = dev.hold_flushes = true;
  CHECK(qp.flush(10) == fabrix::status::ok);
  CHECK(host.held_flushes.size() == 1);
  CHECK(dev.held_flushes.size() == 1);
  CHECK(drain(a).empty());
  host.release_flushes();
  CHECK(drain(a).empty());
  dev.release_flushes();
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 10);
  CHECK(got[0].op == fabrix::opcode::flush);
  CHECK(got[0].flags == 0);

  // A fence orders one route only: refused once both were used.
  CHECK(qp.write(ms.slice(0, 8), md.remote().slice(0, 8), 11, fabrix::op_options::fence) ==
        fabrix::status::unsupported);

  // The second provider refuses its part: again, and the first part's
  // completion reports nothing.
  dev.refuse_next = true;
  CHECK(qp.flush(12) == fabrix::status::again);
  host.release_flushes();
  CHECK(drain(a).empty());
  // Tried again, it completes.
  CHECK(qp.flush(13) == fabrix::status::ok);
  host.release_flushes();
  dev.release_flushes();
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 13);

  // Key bytes altered after sealing: refused at import and at post.
  fabrix::remote_buffer forged = md.remote();
  forged.key[3] ^= std::byte{1};
  CHECK(!qp.import(forged).has_value());
  CHECK(qp.write(ms.slice(0, 8), forged.slice(0, 8), 14) == fabrix::status::invalid_argument);
  // Imported, a key takes its route too.
  auto key = qp.import(mdd.remote()).value();
  const int before = dev.posts;
  CHECK(qp.write(mds.slice(0, 8), key.slice(0, 8), 15) == fabrix::status::ok);
  CHECK(dev.posts == before + 1);
  CHECK(qp.release(key) == fabrix::status::ok);
}

TEST_CASE("routed: a queue pair that used one route flushes through that provider alone") {
  auto a = open_two_routes();
  auto b = open_two_routes();
  auto qp = a.connect(b.address().value()).value();
  std::vector<std::byte> src(16), dst(16);
  auto ms = a.register_memory(src, fabrix::access::local).value();
  auto md = b.register_memory(dst, fabrix::access::all_remote).value();
  fake_state& dev = fake_domain("dev", 0);
  CHECK(qp.write(ms.slice(0, 16), md.remote().whole(), 1, fabrix::op_options::fence) == fabrix::status::ok);
  CHECK(qp.flush(2) == fabrix::status::ok);
  CHECK(dev.posts == 0);
  auto got = drain(a);
  REQUIRE(got.size() == 2);
  CHECK(got[1].token == 2);
}

TEST_CASE("routed: allocate_memory takes the node route's provider's memory and registers it in the other routes") {
  fabrix::domain_options o;
  o.transport = "node=fxfake:host net=fxfake:net";
  auto a = routed_domain::create(o).value();
  auto b = routed_domain::create(o).value();
  fake_state& host = fake_domain("host", 0);
  fake_state& net = fake_domain("net", 0);
  auto qp = a.connect(b.address().value()).value();  // a node-mate: the node route
  auto src = a.allocate_memory(64, fabrix::access::local).value();
  CHECK(host.allocated == 1);
  CHECK(host.registered == 1);  // the allocation's own
  CHECK(net.allocated == 0);
  CHECK(net.registered == 1);
  const auto at = reinterpret_cast<std::uintptr_t>(src.data());
  fabrix::remote_buffer sub;
  REQUIRE(fabrix::detail::routed_sub_buffer(src.remote(), 0, sub));
  CHECK(sub.address == at);
  REQUIRE(fabrix::detail::routed_sub_buffer(src.remote(), 1, sub));
  CHECK(sub.address == at);
  CHECK(src.remote().address == at);
  std::memset(src.data(), 5, 64);
  std::vector<std::byte> dst(64);
  auto md = b.register_memory(dst, fabrix::access::all_remote).value();
  CHECK(qp.write(src.slice(0, 64), md.remote().whole(), 1) == fabrix::status::ok);
  CHECK(dst == std::vector<std::byte>(64, std::byte{5}));
  CHECK(drain(a).size() == 1);
  // The node route's provider does not allocate: the net route's does.
  host.allocates = false;
  auto more = a.allocate_memory(32, fabrix::access::local).value();
  CHECK(net.allocated == 1);
  CHECK(host.registered == 2);
  // Neither: unsupported, saying what to do instead.
  net.allocates = false;
  auto none = a.allocate_memory(32, fabrix::access::local);
  REQUIRE(!none.has_value());
  CHECK(none.code() == fabrix::status::unsupported);
  CHECK(none.error().message.find("register_memory it") != std::string::npos);
}

namespace {
// The fake under the name the default gpu route opens, as on a GPU node.
struct fxgpu : fxfake {
  static constexpr std::string_view name = "cuda_ipc";
};
}  // namespace

TEST_CASE("routed: open(\"auto\") routes where there are two provider domains, else is the one provider's") {
  ::unsetenv("FABRIX_ROUTE");
  // Neither ucx nor ofi is in this program: no node route; fxfake, the one
  // network provider registered here, is the net route and serves
  // node-mates too. With nothing else, "auto" is that provider's domain.
  CHECK(fabrix::open("auto").value().describe() == "fxfake ");
  CHECK(fabrix::open("routed").value().describe() == "routed: [net=fxfake ]");
  // A second provider domain to route over: the gpu route's.
  static const bool gpu_registered = fabrix::detail::register_provider<fxgpu>(-20);
  REQUIRE(gpu_registered);
  auto a = fabrix::open("auto").value();
  auto b = fabrix::open("auto").value();
  CHECK(a.describe() == "routed: [net=fxfake ] [gpu=fxfake ]");
  auto qp = a.connect(b.address().value()).value();
  CHECK(qp.describe() ==
        "host memory: fxfake (peer on this node, no node route configured); device memory: cuda_ipc "
        "(gpu route to a peer on this node)");
  std::vector<std::byte> src(32, std::byte{3}), dst(32);
  auto ms = a.register_memory(src, fabrix::access::local).value();
  auto md = b.register_memory(dst, fabrix::access::all_remote).value();
  CHECK(md.remote().provider == fabrix::routed<>::id);
  CHECK(qp.write(ms.slice(0, 32), md.remote().whole(), 1) == fabrix::status::ok);
  CHECK(dst == src);
  CHECK(a.allocate_memory(16, fabrix::access::local).has_value());

  ::setenv("FABRIX_ROUTE", "off", 1);
  CHECK(fabrix::open("auto").value().describe() == "fxfake ");
  CHECK(fabrix::open("routed").value().describe().starts_with("routed:"));  // by name: the default routes
  ::setenv("FABRIX_ROUTE", "net=fxfake:r", 1);
  CHECK(fabrix::open("auto").value().describe() == "routed: [net=fxfake r]");  // a route: routed, one domain or not
  ::unsetenv("FABRIX_ROUTE");
  fabrix::domain_options t;
  t.transport = "tcp";
  CHECK(fabrix::open("auto", t).value().describe() == "fxfake tcp");
  fabrix::domain_options d;
  d.device = "eth0";
  CHECK(fabrix::open("auto", d).value().describe() == "fxfake @eth0");
}

TEST_CASE("routed: a routed domain and one provider's domain connect both ways and take each other's buffers") {
  fabrix::domain_options o;
  o.transport = "node=fxfake:host net=fxfake:net";
  auto r = routed_domain::create(o).value();
  fabrix::domain_options po;
  po.transport = "plain";
  auto p = fabrix::open("fxfake", po).value();
  // The plain domain reaches the routed one through its fxfake domain of
  // the node route (a node-mate); the routed one takes the plain blob with
  // the first domain of its host routes that does.
  auto pq = p.connect(r.address().value()).value();
  auto rq = r.connect(p.address().value()).value();
  CHECK(rq.describe().starts_with("host memory: fxfake:host (peer not routed, on its own fxfake domain)"));
  fake_state& plain = fake_domain("plain", 0);
  fake_state& host = fake_domain("host", 0);

  std::vector<std::byte> rsrc(64, std::byte{1}), rdst(64), psrc(64, std::byte{2}), pdst(64);
  auto mrs = r.register_memory(rsrc, fabrix::access::local).value();
  auto mrd = r.register_memory(rdst, fabrix::access::all_remote).value();
  auto mps = p.register_memory(psrc, fabrix::access::local).value();
  auto mpd = p.register_memory(pdst, fabrix::access::all_remote).value();
  REQUIRE(mrd.remote().provider == fabrix::routed<>::id);

  // The plain queue pair on the routed buffer: its entry of the node route.
  CHECK(pq.write(mps.slice(0, 64), mrd.remote().whole(), 1) == fabrix::status::ok);
  CHECK(rdst == psrc);
  CHECK(plain.posts == 1);
  CHECK(pq.write(mps.slice(0, 8), mrd.remote().slice(60, 8), 2) == fabrix::status::out_of_range);
  auto key = pq.import(mrd.remote()).value();
  CHECK(key.provider == fabrix::provider_id_of("fxfake"));
  CHECK(pq.write(mps.slice(0, 8), key.slice(8, 8), 3) == fabrix::status::ok);
  fabrix::remote_buffer forged = mrd.remote();
  forged.key[5] ^= std::byte{1};
  CHECK(pq.write(mps.slice(0, 8), forged.slice(0, 8), 4) == fabrix::status::invalid_argument);
  CHECK(!pq.import(forged).has_value());
  const fabrix::operation batch[] = {fabrix::op::write(mps.slice(0, 8), mrd.remote().slice(16, 8), 5),
                                     fabrix::op::write(mps.slice(8, 8), key.slice(24, 8), 6)};
  const auto posted = pq.post(batch);
  CHECK(posted.status == fabrix::status::ok);
  CHECK(posted.posted == 2);
  CHECK(plain.posts == 4);
  // A routed buffer of another routed domain: not this peer's.
  auto other = routed_domain::create(o).value();
  std::vector<std::byte> odst(8);
  auto mod = other.register_memory(odst, fabrix::access::all_remote).value();
  CHECK(pq.write(mps.slice(0, 8), mod.remote().whole(), 7) == fabrix::status::invalid_argument);

  // The routed queue pair on the plain buffer: adopted, over the node route.
  const int before = host.posts;
  CHECK(rq.write(mrs.slice(0, 64), mpd.remote().whole(), 8) == fabrix::status::ok);
  CHECK(pdst == rsrc);
  CHECK(host.posts == before + 1);
  auto pkey = rq.import(mpd.remote()).value();
  std::fill(pdst.begin(), pdst.end(), std::byte{0});
  CHECK(rq.write(mrs.slice(0, 16), pkey.slice(16, 16), 9) == fabrix::status::ok);
  CHECK(pdst[16] == std::byte{1});
  CHECK(rq.write(mrs.slice(0, 8), mpd.remote().slice(60, 8), 10) == fabrix::status::out_of_range);
  CHECK(rq.write(mrs.slice(0, 8), mod.remote().whole(), 11) == fabrix::status::invalid_argument);
  CHECK(rq.release(pkey) == fabrix::status::ok);
  CHECK(pq.release(key) == fabrix::status::ok);
}

TEST_CASE("routed: registrations whose keys do not fit one remote_buffer are refused") {
  // Each fake key is 4 bytes: three providers fit easily; the bound itself
  // is checked by append_routed_key.
  fabrix::remote_buffer routed, big;
  big.key_size = fabrix::remote_buffer::max_key_size - 30;  // 1 + 37 + 482 > 512
  CHECK(fabrix::detail::append_routed_key(routed, 0, big) == false);
  big.key_size = 100;
  CHECK(fabrix::detail::append_routed_key(routed, 0, big));
  CHECK(fabrix::detail::append_routed_key(routed, 1, big));
  CHECK(fabrix::detail::append_routed_key(routed, 2, big));
  CHECK(fabrix::detail::append_routed_key(routed, 3, big) == false);  // 1 + 4 x 137 > 512
  fabrix::remote_buffer out;
  CHECK(fabrix::detail::routed_sub_buffer(routed, 2, out));
  CHECK(out.key_size == 100);
  // A key whose entry claims more bytes than it has: refused, nothing read past it.
  routed.key_size = 1 + fabrix::detail::routed_key_entry_fixed + 50;
  CHECK(!fabrix::detail::routed_sub_buffer(routed, 0, out));
}

TEST_CASE("routed: address blobs that are short, long or malformed are refused") {
  auto a = open_two_routes();
  auto blob = a.address().value();
  for (std::size_t cut = 0; cut < blob.size(); ++cut)
    CHECK(!fabrix::detail::decode_routed_address(std::span<const std::byte>(blob.data(), cut)).has_value());
  auto longer = blob;
  longer.push_back(std::byte{0});
  CHECK(!fabrix::detail::decode_routed_address(longer).has_value());
  CHECK(fabrix::detail::decode_routed_address(blob).has_value());
  auto bad = blob;
  bad[38] = std::byte{fabrix::detail::routed_max_subs + 1};  // provider entries
  CHECK(!fabrix::detail::decode_routed_address(bad).has_value());
}

namespace {

// Sets an environment variable for one scope.
struct scoped_env {
  std::string name;
  scoped_env(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~scoped_env() { ::unsetenv(name.c_str()); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
};

// A routed domain whose net route is two rails over fake devices r0, r1.
template <class R = fabrix::routed<>>
fabrix::domain<R> open_rails() {
  fabrix::domain_options o;
  o.transport = "net=fxfake:host@r0,r1";
  return fabrix::domain<R>::create(o).value();
}

// Two routed domains over two fake rails each, a queue pair from a to b,
// and an 8 KiB source at a and destination at b.
struct rail_pair {
  routed_domain a = open_rails();
  routed_domain b = open_rails();
  fabrix::queue_pair<fabrix::routed<>> qp = a.connect(b.address().value()).value();
  fake_state& r0 = fake_domain("host@r0", 0);
  fake_state& r1 = fake_domain("host@r1", 0);
  std::vector<std::byte> src = std::vector<std::byte>(8192, std::byte{5});
  std::vector<std::byte> dst = std::vector<std::byte>(8192);
  fabrix::memory_region<fabrix::routed<>> ms = a.register_memory(src, fabrix::access::local).value();
  fabrix::memory_region<fabrix::routed<>> md = b.register_memory(dst, fabrix::access::all_remote).value();
};

std::byte pattern_byte(std::size_t i, unsigned seed) {
  return static_cast<std::byte>((i * 31 + seed * 7 + i / 251) & 0xff);
}

}  // namespace

TEST_CASE("routed: route texts with devices (rails) parse, and malformed device lists are refused") {
  auto c = fabrix::route_config::parse("node=ofi:shm net=ofi:tcp;ofi_rxm@eth0,eth1").value();
  REQUIRE(c[fabrix::route_class::net]);
  CHECK(c[fabrix::route_class::net]->transport == "tcp;ofi_rxm");
  CHECK(c[fabrix::route_class::net]->devices == std::vector<std::string>{"eth0", "eth1"});
  CHECK(c.text() == "node=ofi:shm net=ofi:tcp;ofi_rxm@eth0,eth1");
  CHECK(fabrix::route_config::parse("net=verbs@mlx5_0:1").value()[fabrix::route_class::net]->devices ==
        std::vector<std::string>{"mlx5_0:1"});
  // Rails by PCIe distance: each provider resolves "pci:<bus id>" itself.
  CHECK(fabrix::route_config::parse("net=ucx@pci:0000:3b:00.0,pci:0000:86:00.0")
            .value()[fabrix::route_class::net]
            ->devices == std::vector<std::string>{"pci:0000:3b:00.0", "pci:0000:86:00.0"});
  for (const char* bad : {"net=ofi:tcp@", "net=ofi:tcp@a,", "net=ofi:tcp@a,,b", "net=ofi:tcp@a,a",
                          "net=ofi:tcp@a,b,c,d,e", "node=ofi net=ucx gpu=cuda_ipc@0,1", "net=@a"}) {
    auto r = fabrix::route_config::parse(bad);
    CHECK_MESSAGE(!r.has_value(), bad);
    if (!r) CHECK(r.error().code == fabrix::status::invalid_argument);
  }
}

TEST_CASE_TEMPLATE(
    "routed: rails: large writes and reads are striped into one completion; a rail that stops completing "
    "goes down",
    R, fabrix::routed<>, static_routed) {
  scoped_env timeout("FABRIX_RAIL_TIMEOUT_MS", "100");
  scoped_env stripe("FABRIX_STRIPE_MIN", "1k");
  auto a = open_rails<R>();
  auto b = open_rails<R>();
  // Each rail's provider domain says which PCI function it sits on.
  CHECK_MESSAGE(a.describe().find("fxfake host@r0, PCI 0000:10:00.0 rail 0") != std::string::npos, a.describe());
  CHECK_MESSAGE(a.describe().find("fxfake host@r1, PCI 0000:11:00.0 rail 1") != std::string::npos, a.describe());
  auto qp = a.connect(b.address().value()).value();
  CHECK(qp.describe() ==
        "host memory: fxfake:host@r0,r1 (peer on this node, no node route configured; 2 rails, writes and reads "
        "from 1024 bytes striped); device memory: none: no provider here reaches this peer's device memory");
  fake_state& r0 = fake_domain("host@r0", 0);
  fake_state& r1 = fake_domain("host@r1", 0);

  constexpr std::size_t size = 64 * 1024;
  std::vector<std::byte> src(size), dst(size), back(size);
  for (std::size_t i = 0; i < size; ++i) src[i] = pattern_byte(i, 1);
  auto ms = a.register_memory(src, fabrix::access::local).value();
  auto mb = a.register_memory(back, fabrix::access::local).value();
  auto md = b.register_memory(dst, fabrix::access::all_remote).value();

  // A write of the whole region: one stripe per rail, one completion with all its bytes.
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 1) == fabrix::status::ok);
  CHECK(r0.posts == 1);
  CHECK(r1.posts == 1);
  auto got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 1);
  CHECK(got[0].status == fabrix::status::ok);
  CHECK(got[0].op == fabrix::opcode::write);
  CHECK(got[0].bytes == size);
  CHECK(got[0].flags == 0);
  CHECK(dst == src);

  // An odd length at an odd offset, read back striped: every byte lands where it belongs.
  for (std::size_t i = 0; i < size; ++i) src[i] = pattern_byte(i, 2);
  CHECK(qp.write(ms.slice(100, 10001), md.remote().slice(333, 10001), 2) == fabrix::status::ok);
  CHECK(qp.read(mb.slice(7, 10001), md.remote().slice(333, 10001), 3) == fabrix::status::ok);
  CHECK(r0.posts == 3);
  CHECK(r1.posts == 3);
  got = drain(a);
  REQUIRE(got.size() == 2);
  CHECK(got[0].bytes + got[1].bytes == 20002);
  CHECK(std::memcmp(dst.data() + 333, src.data() + 100, 10001) == 0);
  CHECK(std::memcmp(back.data() + 7, src.data() + 100, 10001) == 0);

  // Below the threshold: whole, on rail 0. Unsignaled: striped, no
  // completion, counted in finished() once both stripes are done. Through
  // an imported key: striped.
  CHECK(qp.write(ms.slice(0, 512), md.remote().slice(0, 512), 4) == fabrix::status::ok);
  CHECK(r0.posts == 4);
  CHECK(r1.posts == 3);
  const std::uint64_t finished = qp.finished();
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 5, fabrix::op_options::unsignaled) == fabrix::status::ok);
  CHECK(r0.posts == 5);
  CHECK(r1.posts == 4);
  auto key = qp.import(md.remote()).value();
  CHECK(qp.write(ms.slice(0, size), key.whole(), 6) == fabrix::status::ok);
  CHECK(r0.posts == 6);
  CHECK(r1.posts == 5);
  got = drain(a);
  REQUIRE(got.size() == 2);  // 4 and 6: 5 is unsignaled
  CHECK(got[0].token + got[1].token == 10);
  CHECK(qp.finished() == finished + 1);
  CHECK(dst == src);

  // A fence after stripes went over both rails: refused (it orders one provider endpoint).
  CHECK(qp.write(ms.slice(0, 8), md.remote().slice(0, 8), 7, fabrix::op_options::fence) == fabrix::status::unsupported);
  // A flush covers both rails, one completion once both finished.
  r0.hold_flushes = r1.hold_flushes = true;
  CHECK(qp.flush(8) == fabrix::status::ok);
  CHECK(r0.held_flushes.size() == 1);
  CHECK(r1.held_flushes.size() == 1);
  r0.release_flushes();
  CHECK(drain(a).empty());
  r1.release_flushes();
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 8);
  CHECK(got[0].op == fabrix::opcode::flush);
  r0.hold_flushes = r1.hold_flushes = false;

  // Rail 1 refuses its stripe: again, rail 0's stripe completes nothing;
  // until it has, the operation posted again is refused too (nothing of
  // the first try may still be in flight once the second completes); then
  // it completes once.
  r1.refuse_next = true;
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 9) == fabrix::status::again);
  const int r0_before = r0.posts;
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 9) == fabrix::status::again);
  CHECK(r0.posts == r0_before);
  CHECK(drain(a).empty());
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 10) == fabrix::status::ok);
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 10);

  // Rail 1 stops completing: the striped write waiting on it fails with
  // timed_out once rail 1 has gone FABRIX_RAIL_TIMEOUT_MS without a
  // completion, and rail 1 is down for this domain's queue pairs.
  r1.hold_all = true;
  for (std::size_t i = 0; i < size; ++i) src[i] = pattern_byte(i, 3);
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 11) == fabrix::status::ok);
  CHECK(drain(a).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 11);
  CHECK(got[0].status == fabrix::status::timed_out);
  CHECK(got[0].bytes == 0);
  CHECK(qp.describe().find("down: r1") != std::string::npos);
  CHECK(a.describe().find("rail 1 (down)") != std::string::npos);
  // The same write again goes whole over rail 0 and completes. The first
  // flush fails (what went over rail 1 is unknown), the next waits on rail
  // 0 only.
  const int r1_posts = r1.posts;
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 12) == fabrix::status::ok);
  CHECK(qp.flush(13) == fabrix::status::ok);
  got = drain(a);
  REQUIRE(got.size() == 2);
  for (const auto& c : got) CHECK(c.status == (c.token == 13 ? fabrix::status::timed_out : fabrix::status::ok));
  CHECK(got[0].token + got[1].token == 25);
  CHECK(qp.flush(14) == fabrix::status::ok);
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 14);
  CHECK(got[0].status == fabrix::status::ok);
  CHECK(r1.posts == r1_posts);
  CHECK(dst == src);
  // Rail 1's late completion of the failed write reports nothing more,
  // and its failing (the link it ran on is gone) is not the peer's: the
  // queue pair goes on over rail 0.
  r1.hold_all = false;
  r1.complete_with = fabrix::status::peer_unreachable;
  r1.release_flushes();
  CHECK(drain(a).empty());
  CHECK(qp.write(ms.slice(0, size), md.remote().whole(), 15) == fabrix::status::ok);
  got = drain(a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == fabrix::status::ok);
  CHECK(qp.release(key) == fabrix::status::ok);
}

TEST_CASE("routed: rails: a peer gone on one rail fails the queue pair, also on the rails that have not seen it") {
  scoped_env stripe("FABRIX_STRIPE_MIN", "1k");
  rail_pair f;
  auto other = f.a.connect(f.b.address().value()).value();
  // Rail 0 completes its stripe ok, rail 1 reports the peer gone: the
  // read fails, and then the queue pair refuses everything, also a small
  // write that would go whole over rail 0 (whose provider saw nothing).
  f.r1.complete_with = fabrix::status::peer_unreachable;
  CHECK(f.qp.read(f.ms.slice(0, 8192), f.md.remote().whole(), 1) == fabrix::status::ok);
  auto got = drain(f.a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 1);
  CHECK(got[0].status == fabrix::status::peer_unreachable);
  CHECK(got[0].bytes == 0);
  const int r0_posts = f.r0.posts;
  CHECK(f.qp.write(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 2) == fabrix::status::peer_unreachable);
  CHECK(f.qp.flush(3) == fabrix::status::peer_unreachable);
  CHECK(f.r0.posts == r0_posts);
  // Another queue pair of the domain is its own: its own failures only.
  f.r1.complete_with = fabrix::status::ok;
  CHECK(other.write(f.ms.slice(0, 8192), f.md.remote().whole(), 4) == fabrix::status::ok);
  got = drain(f.a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == fabrix::status::ok);
  CHECK(f.dst == f.src);
}

TEST_CASE("routed: rails: notifications, messages and flushes wait for the stripes on every rail, in order") {
  scoped_env timeout("FABRIX_RAIL_TIMEOUT_MS", "600000");
  scoped_env stripe("FABRIX_STRIPE_MIN", "1k");
  rail_pair f;
  using fabrix::opcode;

  // Nothing went over another rail: a notification goes at once.
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 1, 1) == fabrix::status::ok);
  CHECK(f.r0.posted == std::vector<opcode>{opcode::write_with_imm});
  CHECK(drain(f.a).size() == 1);

  // A striped write whose rail-1 stripe is slow: the notification, the
  // message and the flush after it are held (post() says ok), a small
  // write is not; rail 1 gets one gate flush.
  f.r1.hold_all = true;
  CHECK(f.qp.write(f.ms.slice(0, 8192), f.md.remote().whole(), 2) == fabrix::status::ok);
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 0), f.md.remote().slice(0, 0), 7, 3) == fabrix::status::ok);
  CHECK(f.qp.send(f.ms.slice(0, 16), 4) == fabrix::status::ok);
  CHECK(f.qp.flush(5) == fabrix::status::ok);
  CHECK(f.qp.write(f.ms.slice(0, 64), f.md.remote().slice(0, 64), 6) == fabrix::status::ok);
  CHECK(f.r0.posted == std::vector<opcode>{opcode::write_with_imm, opcode::write, opcode::write});
  CHECK(f.r1.posted == std::vector<opcode>{opcode::write, opcode::flush});
  auto got = drain(f.a);
  REQUIRE(got.size() == 1);  // the small write only
  CHECK(got[0].token == 6);
  // A bad key is refused at once, also while others are held.
  fabrix::remote_buffer forged = f.md.remote();
  forged.seal ^= 1;
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 8), forged.slice(0, 8), 8, 9) == fabrix::status::invalid_argument);

  // Rail 1 completes: the write, then the held ones go out in order, and
  // complete.
  f.r1.hold_all = false;
  f.r1.release_flushes();
  got = drain(f.a);
  std::vector<std::uint64_t> tokens;
  for (const auto& c : got) {
    CHECK(c.status == fabrix::status::ok);
    tokens.push_back(c.token);
  }
  CHECK(tokens == std::vector<std::uint64_t>{2, 3, 4, 5});
  CHECK(f.r0.posted == std::vector<opcode>{opcode::write_with_imm, opcode::write, opcode::write, opcode::write_with_imm,
                                           opcode::send, opcode::flush});
  CHECK(f.r1.posted ==
        std::vector<opcode>{opcode::write, opcode::flush, opcode::flush});  // the user's flush covers both
  CHECK(f.dst == f.src);

  // The stripes are behind a gate now: the next notification goes at once.
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 1, 10) == fabrix::status::ok);
  CHECK(f.r0.posted.back() == opcode::write_with_imm);
  CHECK(drain(f.a).size() == 1);
  // A striped write, then a flush that completed: the flush covers the
  // stripes, so the notification after it needs no gate.
  CHECK(f.qp.write(f.ms.slice(0, 8192), f.md.remote().whole(), 11) == fabrix::status::ok);
  CHECK(f.qp.flush(12) == fabrix::status::ok);
  CHECK(drain(f.a).size() == 2);
  const std::size_t r1_posts = f.r1.posted.size();
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 1, 13) == fabrix::status::ok);
  CHECK(f.r0.posted.back() == opcode::write_with_imm);
  CHECK(f.r1.posted.size() == r1_posts);
  CHECK(drain(f.a).size() == 1);
  // Posted after the flush, a stripe is not covered by it: gated again.
  CHECK(f.qp.write(f.ms.slice(0, 8192), f.md.remote().whole(), 14) == fabrix::status::ok);
  CHECK(f.qp.flush(15) == fabrix::status::ok);
  CHECK(f.qp.write(f.ms.slice(0, 8192), f.md.remote().whole(), 16) == fabrix::status::ok);
  CHECK(drain(f.a).size() == 3);
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 1, 17) == fabrix::status::ok);
  CHECK(f.r1.posted.back() == opcode::flush);  // the gate
  auto last = drain(f.a);
  REQUIRE(last.size() == 1);
  CHECK(last[0].token == 17);
}

TEST_CASE("routed: rails: a held notification fails with its gate; closing the queue pair cancels what is held") {
  scoped_env timeout("FABRIX_RAIL_TIMEOUT_MS", "100");
  scoped_env stripe("FABRIX_STRIPE_MIN", "1k");
  rail_pair f;

  // The peer is gone on rail 1: the gate fails, and with it the notification.
  f.r1.hold_all = true;
  CHECK(f.qp.write(f.ms.slice(0, 8192), f.md.remote().whole(), 1) == fabrix::status::ok);
  CHECK(f.qp.write_with_imm(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 7, 2) == fabrix::status::ok);
  f.r1.hold_all = false;
  f.r1.complete_with = fabrix::status::peer_unreachable;
  f.r1.release_flushes();
  auto got = drain(f.a);
  REQUIRE(got.size() == 2);
  for (const auto& c : got) CHECK(c.status == fabrix::status::peer_unreachable);
  CHECK(got[0].token + got[1].token == 3);
  CHECK(std::count(f.r0.posted.begin(), f.r0.posted.end(), fabrix::opcode::write_with_imm) == 0);

  // Rail 1 stalls and goes down: the held notification fails timed_out.
  auto qp2 = f.a.connect(f.b.address().value()).value();
  f.r1.complete_with = fabrix::status::ok;
  f.r1.hold_all = true;
  CHECK(qp2.write(f.ms.slice(0, 8192), f.md.remote().whole(), 3) == fabrix::status::ok);
  CHECK(qp2.write_with_imm(f.ms.slice(0, 8), f.md.remote().slice(0, 8), 7, 4) == fabrix::status::ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  got = drain(f.a);
  REQUIRE(got.size() == 2);
  for (const auto& c : got) CHECK(c.status == fabrix::status::timed_out);
  CHECK(got[0].token + got[1].token == 7);

  // A queue pair closed while it holds a notification: it completes
  // canceled, and the gate's late completion reports nothing.
  auto a2 = open_rails();
  fake_state& s0 = fake_domain("host@r0", 2);  // a's, b's, then a2's
  fake_state& s1 = fake_domain("host@r1", 2);
  std::optional<fabrix::queue_pair<fabrix::routed<>>> qp3(a2.connect(f.b.address().value()).value());
  auto ms2 = a2.register_memory(f.src, fabrix::access::local).value();
  s1.hold_all = true;
  CHECK(qp3->write(ms2.slice(0, 8192), f.md.remote().whole(), 5) == fabrix::status::ok);
  CHECK(qp3->write_with_imm(ms2.slice(0, 8), f.md.remote().slice(0, 8), 7, 6) == fabrix::status::ok);
  qp3.reset();
  got = drain(a2);
  REQUIRE(got.size() == 1);
  CHECK(got[0].token == 6);
  CHECK(got[0].status == fabrix::status::canceled);
  s1.hold_all = false;
  s1.release_flushes();
  got = drain(a2);
  REQUIRE(got.size() == 1);  // the write's join: its queue pair is gone, its completion is not
  CHECK(got[0].token == 5);
  CHECK(std::count(s0.posted.begin(), s0.posted.end(), fabrix::opcode::write_with_imm) == 0);
}

TEST_CASE("routed: rails: a peer that stalls every rail alike marks none down") {
  scoped_env timeout("FABRIX_RAIL_TIMEOUT_MS", "50");
  scoped_env stripe("FABRIX_STRIPE_MIN", "1k");
  rail_pair f;
  f.r0.hold_all = f.r1.hold_all = true;
  CHECK(f.qp.write(f.ms.slice(0, 8192), f.md.remote().whole(), 1) == fabrix::status::ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  CHECK(drain(f.a).empty());
  CHECK(f.qp.describe().find("down") == std::string::npos);
  f.r0.hold_all = f.r1.hold_all = false;
  f.r0.release_flushes();
  f.r1.release_flushes();
  auto got = drain(f.a);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == fabrix::status::ok);
  CHECK(got[0].token == 1);
  // Bad values of the variables: the domain is refused, naming them.
  scoped_env bad("FABRIX_STRIPE_MIN", "lots");
  fabrix::domain_options o;
  o.transport = "net=fxfake:host@r0,r1";
  auto refused = routed_domain::create(o);
  REQUIRE(!refused.has_value());
  CHECK(refused.error().message.find("FABRIX_STRIPE_MIN") != std::string::npos);
}
