// fabrix::routed over a provider made for this test ("fxfake"), in one
// process: two routed domains, each over two fake domains (a host route and
// a device route, the device memory being a memory kind registered here),
// so that one queue pair uses two routes without a GPU. Checks what needs
// two routes to one peer: operations go to the route of their remote
// memory kind, a flush after both is one flush per provider joined into one
// completion (not before both), a fence across routes is refused, a flush
// refused half-way completes nothing later, and forged key bytes are
// refused at import and at post.
#include "fake_provider.hpp"

#include <doctest/doctest.h>
#include <fabrix/fabrix.hpp>
#include <fabrix/routed.hpp>

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace {

// What a fake domain saw, reachable from the test.
struct fake_state {
  std::string transport;
  fabrix::detail::domain_identity id = fabrix::detail::draw_domain_identity();
  std::deque<fabrix::completion> done;
  std::vector<fabrix::operation> held_flushes;  // completed by release_flushes()
  int posts = 0;
  bool hold_flushes = false;
  bool refuse_next = false;  // the next post returns again

  void release_flushes() {
    for (const auto& o : held_flushes) done.push_back({.token = o.token, .op = o.code, .flags = o.flags});
    held_flushes.clear();
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
        if (o.code == fabrix::opcode::flush && s_->hold_flushes) {
          s_->held_flushes.push_back(o);
        } else {
          if (o.code == fabrix::opcode::write) {
            const fabrix::remote_buffer* rb = o.remote.buffer;
            const std::uint64_t base = rb ? rb->address : o.remote.key->address;
            std::memcpy(reinterpret_cast<void*>(base + o.remote.offset), o.local.address, o.local.length);
          }
          s_->done.push_back({.token = o.token, .bytes = o.local.length, .op = o.code, .flags = o.flags});
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
      s->transport = o.transport;
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
      auto rb = fabrix::detail::describe_region(fabrix::provider_id_of(name), reinterpret_cast<std::uintptr_t>(addr),
                                                len, where, rights, s_->id.nonce, ++epoch_);
      rb.key_size = 4;
      rb.seal = rb.compute_seal(s_->id.secret);
      return region_impl(rb);
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

   private:
    explicit domain_impl(std::unique_ptr<fake_state> s) : s_(std::move(s)) {}
    std::unique_ptr<fake_state> s_;
    std::uint64_t epoch_ = 0;
  };
};

const bool fake_registered = fabrix::detail::register_provider<fxfake>(-10);
const fabrix::memory_kind fake_device = fabrix::register_memory_kind("fxdev").value();

using routed_domain = fabrix::domain<fabrix::routed>;

routed_domain open_two_routes() {
  fabrix::domain_options o;
  o.transport = "node=fxfake:host gpu=fxfake:dev";
  return routed_domain::create(o).value();
}

std::vector<fabrix::completion> drain(routed_domain& d) {
  std::vector<fabrix::completion> got;
  fabrix::completion buf[8];
  for (int i = 0; i < 4; ++i) {
    const std::size_t n = d.poll(buf);
    got.insert(got.end(), buf, buf + n);
  }
  return got;
}

}  // namespace

TEST_CASE("routed: operations take the route of their remote memory; a flush over two routes is joined") {
  REQUIRE(fake_registered);
  auto a = open_two_routes();
  auto b = open_two_routes();
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
  bad[38] = std::byte{9};  // provider entries
  CHECK(!fabrix::detail::decode_routed_address(bad).has_value());
}
