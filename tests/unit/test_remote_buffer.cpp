// remote_buffer encoding: round trip, and every malformed blob refused.
#include <doctest/doctest.h>

#include <fabrix/remote_buffer.hpp>

#include <cstring>
#include <random>

using fabrix::remote_buffer;
using fabrix::status;

namespace {
remote_buffer sample(std::uint16_t key_size = 11) {
  remote_buffer rb;
  rb.provider = fabrix::provider_id::ucx;
  rb.rights = fabrix::access::remote_read | fabrix::access::remote_atomic;
  rb.location = {fabrix::memory_kind::cuda_device, 3};
  rb.address = 0x7f0012345000ull;
  rb.length = 1 << 20;
  rb.owner = 0x1122334455667788ull;
  rb.epoch = 42;
  rb.key_size = key_size;
  for (std::uint16_t i = 0; i < key_size; ++i) rb.key[i] = static_cast<std::byte>(i * 3 + 1);
  fabrix::detail::seal_key secret{};
  secret[0] = 1;
  rb.seal = rb.compute_seal(secret);
  return rb;
}
}  // namespace

TEST_CASE("remote_buffer: encode/decode round trip keeps every field") {
  for (std::uint16_t ks : {0, 1, 11, 300, 512}) {
    const remote_buffer rb = sample(ks);
    const auto blob = rb.encode();
    REQUIRE(blob.size() == remote_buffer::header_size + ks + remote_buffer::checksum_size);
    auto back = remote_buffer::decode(blob);
    REQUIRE(back.has_value());
    CHECK(back->provider == rb.provider);
    CHECK(back->rights == rb.rights);
    CHECK(back->location.kind == rb.location.kind);
    CHECK(back->location.device == 3);
    CHECK(back->address == rb.address);
    CHECK(back->length == rb.length);
    CHECK(back->owner == rb.owner);
    CHECK(back->epoch == rb.epoch);
    CHECK(back->seal == rb.seal);
    CHECK(back->key_size == ks);
    CHECK(std::memcmp(back->key.data(), rb.key.data(), remote_buffer::max_key_size) == 0);
  }
}

TEST_CASE("remote_buffer: every truncation and every extension is refused") {
  const auto blob = sample().encode();
  for (std::size_t n = 0; n < blob.size(); ++n) {
    auto r = remote_buffer::decode(std::span(blob).first(n));
    CHECK(r.code() == status::invalid_argument);
  }
  auto longer = blob;
  longer.push_back(std::byte{0});
  CHECK(remote_buffer::decode(longer).code() == status::invalid_argument);
}

TEST_CASE("remote_buffer: every single flipped bit is refused") {
  const auto blob = sample().encode();
  for (std::size_t i = 0; i < blob.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = blob;
      bad[i] ^= static_cast<std::byte>(1 << bit);
      CHECK_MESSAGE(remote_buffer::decode(bad).code() == status::invalid_argument, "byte " << i << " bit " << bit);
    }
  }
}

TEST_CASE("remote_buffer: garbage and foreign blobs are refused with a reason") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> junk(rng() % 700);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    if (junk.size() >= 4 && i % 2) std::memcpy(junk.data(), "FBXR", 4);  // right magic, junk after it
    CHECK(remote_buffer::decode(junk).code() == status::invalid_argument);
  }
  auto blob = sample().encode();
  std::memcpy(blob.data(), "NOPE", 4);
  auto foreign = remote_buffer::decode(blob);
  CHECK(foreign.error().message.find("magic") != std::string::npos);
}

TEST_CASE("remote_buffer: well-formed but invalid contents are refused") {
  auto check = [](remote_buffer rb, const char* why) {
    const auto r = remote_buffer::decode(rb.encode());
    CHECK_MESSAGE(r.code() == status::invalid_argument, why);
  };
  remote_buffer rb = sample();
  rb.provider = static_cast<fabrix::provider_id>(99);
  check(rb, "unknown provider");
  rb = sample();
  rb.rights = static_cast<fabrix::access>(1u << 20);
  check(rb, "unknown rights");
  rb = sample();
  rb.length = 0;
  check(rb, "empty region");
  rb = sample();
  rb.address = ~std::uint64_t{0} - 10;
  check(rb, "wrapping range");
  rb = sample();
  rb.location.kind = static_cast<fabrix::memory_kind>(7);
  check(rb, "unknown memory kind");
  // A version this build does not know.
  auto blob = sample().encode();
  blob[4] = std::byte{2};
  CHECK(remote_buffer::decode(blob).code() == status::invalid_argument);
  // A key_size field beyond the maximum.
  rb = sample();
  rb.key_size = remote_buffer::max_key_size + 1;
  CHECK(rb.encode().empty());
}

TEST_CASE("remote_buffer: the seal changes with every field and with the secret") {
  const remote_buffer rb = sample();
  fabrix::detail::seal_key secret{};
  secret[0] = 1;
  CHECK(rb.compute_seal(secret) == rb.seal);
  fabrix::detail::seal_key other = secret;
  other[15] = 9;
  CHECK(rb.compute_seal(other) != rb.seal);
  remote_buffer changed = rb;
  changed.length += 1;
  CHECK(changed.compute_seal(secret) != rb.seal);
  changed = rb;
  changed.key[2] ^= std::byte{1};
  CHECK(changed.compute_seal(secret) != rb.seal);
  changed = rb;
  changed.rights = fabrix::access::all_remote;
  CHECK(changed.compute_seal(secret) != rb.seal);
  changed = rb;
  changed.seal = 0;  // the seal does not cover itself
  CHECK(changed.compute_seal(secret) == rb.seal);
}
