// A consumer of the fabrix core only: <fabrix/fabrix.hpp> and the static
// bootstrap library, no provider header. tests/consume builds it several
// ways (in-tree with fabrix_dep, with and without exceptions, from an
// installed prefix via pkg-config and CMake, as a Meson subproject); every
// build must run and print "core_only: ok".
//
// It checks: a remote_buffer survives encode -> bootstrap allgather (one
// rank, which exercises libfabrix_bootstrap.a) -> decode field for field;
// damaged and truncated blobs are refused with invalid_argument; and with no
// provider header included, fabrix::open() has nothing to open
// (status::unsupported) and no provider is registered.
#include <fabrix/fabrix.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "core_only: FAIL: %s\n", what);
    ++failures;
  }
}

fabrix::remote_buffer sample() {
  fabrix::remote_buffer rb;
  rb.provider = fabrix::provider_id::ucx;
  rb.rights = fabrix::access::remote_read | fabrix::access::remote_write;
  rb.location = fabrix::memory_location{fabrix::memory_kind::host, 0};
  rb.address = 0x00007f0012345000ull;
  rb.length = std::uint64_t{1} << 20;
  rb.owner = 0x0123456789abcdefull;
  rb.epoch = 7;
  rb.seal = 0xfeedfacecafebeefull;
  rb.key_size = 5;
  for (std::size_t i = 0; i < rb.key_size; ++i) rb.key[i] = static_cast<std::byte>(0xa0 + i);
  return rb;
}

bool same(const fabrix::remote_buffer& a, const fabrix::remote_buffer& b) {
  if (a.provider != b.provider || a.rights != b.rights || a.location.kind != b.location.kind ||
      a.location.device != b.location.device || a.address != b.address || a.length != b.length || a.owner != b.owner ||
      a.epoch != b.epoch || a.seal != b.seal || a.key_size != b.key_size)
    return false;
  for (std::size_t i = 0; i < a.key.size(); ++i)
    if (a.key[i] != b.key[i]) return false;
  return true;
}

}  // namespace

int main() {
#if defined(FABRIX_CONSUME_EXPECT_NO_EXCEPTIONS) && defined(__cpp_exceptions)
#error "this build was meant to have exceptions disabled (-fno-exceptions)"
#endif
  const fabrix::remote_buffer rb = sample();
  const std::vector<std::byte> blob = rb.encode();
  check(blob.size() == rb.encoded_size(), "encode() returns encoded_size() bytes");
  check(blob.size() == fabrix::remote_buffer::header_size + 5 + fabrix::remote_buffer::checksum_size,
        "encoded size is header + key + checksum");

  // Carry the blob through the bootstrap library: a job of one rank opens no
  // socket and must hand back exactly what it was given.
  auto boot = fabrix::bootstrap::create(0, 1, "", "consume-test");
  check(boot.has_value(), "bootstrap::create(rank 0 of 1)");
  std::vector<std::byte> carried;
  if (boot) {
    check(boot->rank() == 0 && boot->size() == 1, "bootstrap rank/size");
    auto all = boot->allgather(blob);
    check(all.has_value(), "bootstrap allgather");
    if (all) {
      check(all->size() == 1, "allgather returns one blob per rank");
      if (all->size() == 1) carried = (*all)[0];
    }
    check(boot->barrier().has_value(), "bootstrap barrier");
  }
  check(carried == blob, "allgather returns the blob unchanged");

  auto back = fabrix::remote_buffer::decode(carried);
  check(back.has_value(), "decode(encode(x)) succeeds");
  if (back) check(same(*back, rb), "decode(encode(x)) == x, field for field");

  std::vector<std::byte> damaged = blob;
  damaged[20] ^= std::byte{0x01};  // inside the address field
  auto bad = fabrix::remote_buffer::decode(damaged);
  check(!bad.has_value() && bad.code() == fabrix::status::invalid_argument, "a damaged blob is refused");

  std::vector<std::byte> truncated(blob.begin(), blob.end() - 1);
  auto shortr = fabrix::remote_buffer::decode(truncated);
  check(!shortr.has_value() && shortr.code() == fabrix::status::invalid_argument, "a truncated blob is refused");

  // No provider header is included, so nothing is registered.
  check(fabrix::registered_providers().empty(), "no provider registered without a provider header");
  auto dom = fabrix::open("auto");
  check(!dom.has_value() && dom.code() == fabrix::status::unsupported, "open(\"auto\") is unsupported");
  if (!dom) std::printf("core_only: open(\"auto\") -> %s\n", dom.error().describe().c_str());
  auto ucx = fabrix::open("ucx");
  check(!ucx.has_value() && ucx.code() == fabrix::status::unsupported, "open(\"ucx\") is unsupported");

  if (failures != 0) {
    std::fprintf(stderr, "core_only: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("core_only: ok (remote_buffer of %zu bytes round-tripped through the bootstrap)\n", blob.size());
  return 0;
}
