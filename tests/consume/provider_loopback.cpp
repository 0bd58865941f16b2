// A consumer of one provider: opens a domain over TCP (UCX's tcp, or
// libfabric's tcp;ofi_rxm), connects it to itself, and moves real bytes
// through the loopback queue pair: a 4 KiB write then a flush (every byte
// checked) and an 8-byte fetch_add (old value returned, target incremented).
// Exits 1 with a message on any failure.
//
// The provider: UCX unless FABRIX_CONSUME_OFI or FABRIX_CONSUME_VERBS is
// defined. verbs needs an RDMA device (none on CI): its build is a link
// check; run without a device it fails at domain::create.
//
// tests/consume builds it with -fno-exceptions (test `no_exceptions`, which
// also defines FABRIX_CONSUME_EXPECT_NO_EXCEPTIONS so a build that silently
// kept exceptions fails to compile) and from an installed prefix via
// pkg-config (fabrix-ucx.pc, fabrix-ofi.pc, fabrix-verbs.pc), CMake
// (fabrix::ucx, fabrix::ofi, fabrix::verbs) and a Meson subproject.
#include <fabrix/fabrix.hpp>
#if defined(FABRIX_CONSUME_OFI)
#include <fabrix/ofi.hpp>
namespace provider = fabrix::ofi;
constexpr const char* transport = "tcp;ofi_rxm";
constexpr const char* me = "ofi_loopback";
#elif defined(FABRIX_CONSUME_VERBS)
#include <fabrix/verbs.hpp>
namespace provider = fabrix::verbs;
constexpr const char* transport = "";
constexpr const char* me = "verbs_loopback";
#else
#include <fabrix/ucx.hpp>
namespace provider = fabrix::ucx;
constexpr const char* transport = "tcp";
constexpr const char* me = "ucx_loopback";
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "%s: FAIL: %s%s%s\n", me, what, detail.empty() ? "" : ": ", detail.c_str());
  return 1;
}

// Polls `dom` until the completion carrying `token` arrives or 10 s pass.
// Any other completion is unexpected here and fails the wait.
bool await_token(provider::domain& dom, std::uint64_t token, fabrix::completion& got) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  fabrix::completion batch[16];
  while (std::chrono::steady_clock::now() < deadline) {
    const std::size_t n = dom.poll(batch);
    for (std::size_t i = 0; i < n; ++i) {
      if (batch[i].token != token) {
        std::fprintf(stderr, "%s: unexpected completion token=%llu op=%s\n", me,
                     static_cast<unsigned long long>(batch[i].token),
                     std::string(fabrix::to_string(batch[i].op)).c_str());
        return false;
      }
      got = batch[i];
      return true;
    }
  }
  std::fprintf(stderr, "%s: no completion for token %llu within 10 s\n", me, static_cast<unsigned long long>(token));
  return false;
}

std::uint64_t load_u64(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

int main() {
#if defined(FABRIX_CONSUME_EXPECT_NO_EXCEPTIONS) && defined(__cpp_exceptions)
#error "this build was meant to have exceptions disabled (-fno-exceptions)"
#endif
  fabrix::domain_options o;
  o.transport = transport;
  auto dom_r = provider::domain::create(o);
  if (!dom_r) return fail("domain::create", dom_r.error().describe());
  provider::domain& dom = *dom_r;
  std::printf("%s: %s\n", me, dom.describe().c_str());

  constexpr std::size_t size = 4096;
  std::vector<std::byte> src(size), dst(size);
  for (std::size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>((i * 31 + 7) & 0xff);

  auto msrc = dom.register_memory(src, fabrix::access::all_remote);
  if (!msrc) return fail("register_memory(src)", msrc.error().describe());
  auto mdst = dom.register_memory(dst, fabrix::access::all_remote);
  if (!mdst) return fail("register_memory(dst)", mdst.error().describe());

  auto addr = dom.address();
  if (!addr) return fail("address()", addr.error().describe());
  auto qp_r = dom.connect(*addr);
  if (!qp_r) return fail("connect(own address)", qp_r.error().describe());
  provider::queue_pair& qp = *qp_r;

  // What a peer would receive: the encoded remote_buffer of dst.
  auto peer_r = fabrix::remote_buffer::decode(mdst->remote().encode());
  if (!peer_r) return fail("decode(remote_buffer)", peer_r.error().describe());
  const fabrix::remote_buffer& peer = *peer_r;

  // 1. write 4 KiB, check every byte.
  constexpr std::uint64_t write_token = 0x1001;
  if (fabrix::status s = qp.write(msrc->slice(0, size), peer.slice(0, size), write_token); s != fabrix::status::ok)
    return fail("post write", std::string(fabrix::to_string(s)));
  fabrix::completion c{};
  if (!await_token(dom, write_token, c)) return fail("write completion");
  if (c.status != fabrix::status::ok || c.op != fabrix::opcode::write)
    return fail("write completed with",
                std::string(fabrix::to_string(c.status)) + " op " + std::string(fabrix::to_string(c.op)));
  // A write's completion only frees its source; flush makes it visible at
  // the target (completion.hpp).
  constexpr std::uint64_t flush_token = 0x1003;
  if (fabrix::status s = qp.flush(flush_token); s != fabrix::status::ok)
    return fail("post flush", std::string(fabrix::to_string(s)));
  if (!await_token(dom, flush_token, c)) return fail("flush completion");
  if (c.status != fabrix::status::ok || c.op != fabrix::opcode::flush)
    return fail("flush completed with",
                std::string(fabrix::to_string(c.status)) + " op " + std::string(fabrix::to_string(c.op)));
  for (std::size_t i = 0; i < size; ++i) {
    if (dst[i] != src[i]) return fail("write: byte mismatch at offset", std::to_string(i));
  }

  // 2. fetch_add on the first 8 bytes of dst; the old value lands in src[8..16).
  const std::uint64_t before = 40;
  std::memcpy(dst.data(), &before, sizeof before);
  constexpr std::uint64_t fadd_token = 0x1002;
  if (fabrix::status s = qp.fetch_add(msrc->slice(8, 8), peer.slice(0, 8), 2, fadd_token); s != fabrix::status::ok)
    return fail("post fetch_add", std::string(fabrix::to_string(s)));
  if (!await_token(dom, fadd_token, c)) return fail("fetch_add completion");
  if (c.status != fabrix::status::ok || c.op != fabrix::opcode::fetch_add)
    return fail("fetch_add completed with",
                std::string(fabrix::to_string(c.status)) + " op " + std::string(fabrix::to_string(c.op)));
  if (load_u64(src.data() + 8) != before)
    return fail("fetch_add: fetched value", std::to_string(load_u64(src.data() + 8)) + " != 40");
  if (load_u64(dst.data()) != before + 2)
    return fail("fetch_add: target value", std::to_string(load_u64(dst.data())) + " != 42");

  std::printf("%s: ok (write of %zu bytes checked, fetch_add 40+2 -> 42)\n", me, size);
  return 0;
}
