// The libfabric provider's pure parts: key bytes and address blobs from
// peers (every truncation and corruption refused), and the errno mapping.
#include <doctest/doctest.h>

#include <fabrix/ofi.hpp>

#include <array>
#include <cstring>

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
  REQUIRE(back->name.size() == name.size());
  CHECK(std::memcmp(back->name.data(), name.data(), name.size()) == 0);
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
