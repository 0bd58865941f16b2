// registry.hpp: provider and memory-kind names by wire number — the open
// sets behind provider_id and memory_kind.
#include <doctest/doctest.h>

#include <fabrix/registry.hpp>
#include <fabrix/remote_buffer.hpp>

#include <map>
#include <string>

using fabrix::memory_kind;
using fabrix::provider_id;
using fabrix::status;

namespace {

fabrix::remote_buffer sealed_buffer(provider_id p, memory_kind k) {
  fabrix::remote_buffer rb;
  rb.provider = p;
  rb.rights = fabrix::access::remote_write;
  rb.location = {k, 0};
  rb.address = 0x10000;
  rb.length = 4096;
  rb.owner = 7;
  rb.epoch = 1;
  rb.key_size = 4;
  fabrix::detail::seal_key secret{};
  rb.seal = rb.compute_seal(secret);
  return rb;
}

// Two different names with the same wire number, found by counting up (a
// 16-bit hash: a few hundred names suffice).
template <class Number>
std::pair<std::string, std::string> colliding_names(const char* prefix, Number (*number_of)(std::string_view)) {
  std::map<unsigned, std::string> seen;
  for (int i = 0;; ++i) {
    std::string name = prefix + std::to_string(i);
    const auto n = static_cast<unsigned>(number_of(name));
    auto [it, fresh] = seen.emplace(n, name);
    if (!fresh) return {it->second, name};
  }
}

provider_id provider_number(std::string_view name) { return fabrix::provider_id_of(name); }
memory_kind kind_number(std::string_view name) { return fabrix::memory_kind_of(name); }

}  // namespace

// The wire numbers are part of the encoding: these values must never change.
static_assert(fabrix::provider_id_of("ucx") == provider_id::ucx);
static_assert(fabrix::provider_id_of("verbs") == provider_id::verbs);
static_assert(fabrix::provider_id_of("ofi") == provider_id::ofi);
static_assert(fabrix::provider_id_of("cuda_ipc") == provider_id::cuda_ipc);
static_assert(fabrix::provider_id_of("") == provider_id::none);
static_assert(fabrix::memory_kind_of("host") == memory_kind::host);
static_assert(fabrix::memory_kind_of("cuda_device") == memory_kind::cuda_device);

TEST_CASE("registry: a name's wire number is a fixed hash of the name") {
  // Pinned values: a change here breaks every job that mixes two builds.
  CHECK(static_cast<unsigned>(fabrix::provider_id_of("loop")) == 0x100 + fabrix::detail::fnv1a("loop") % 0xff00);
  CHECK(static_cast<unsigned>(fabrix::provider_id_of("loop")) == 0x12eb);
  CHECK(static_cast<unsigned>(fabrix::memory_kind_of("rocm_device")) ==
        0x10 + fabrix::detail::fnv1a("rocm_device") % 0xf0);
  for (const char* name : {"a", "my-provider", "x_9", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"}) {
    CHECK(static_cast<unsigned>(fabrix::provider_id_of(name)) >= fabrix::first_hashed_provider_id);
    CHECK(static_cast<unsigned>(fabrix::memory_kind_of(name)) >= fabrix::first_hashed_memory_kind);
  }
}

TEST_CASE("registry: built-in names are known without registering") {
  for (auto p : {provider_id::ucx, provider_id::verbs, provider_id::ofi, provider_id::cuda_ipc})
    CHECK(fabrix::is_registered(p));
  CHECK(fabrix::to_string(provider_id::verbs) == "verbs");
  CHECK(fabrix::to_string(provider_id::none) == "none");
  CHECK(fabrix::to_string(static_cast<provider_id>(99)) == "unknown");
  CHECK(fabrix::to_string(memory_kind::cuda_device) == "cuda_device");
  CHECK(fabrix::is_registered(memory_kind::host));
  // Registering a built-in name again is harmless.
  REQUIRE(fabrix::register_provider_name("ofi").has_value());
  CHECK(*fabrix::register_provider_name("ofi") == provider_id::ofi);
}

TEST_CASE("registry: a registered provider's remote_buffers decode, an unregistered one's do not") {
  const auto blob = sealed_buffer(fabrix::provider_id_of("regtest-prov"), memory_kind::host).encode();
  auto before = fabrix::remote_buffer::decode(blob);
  CHECK(before.code() == status::invalid_argument);
  CHECK(before.error().message.find("registered in this process") != std::string::npos);
  CHECK(fabrix::to_string(fabrix::provider_id_of("regtest-prov")) == "unknown");

  auto id = fabrix::register_provider_name("regtest-prov");
  REQUIRE(id.has_value());
  CHECK(*id == fabrix::provider_id_of("regtest-prov"));
  CHECK(fabrix::to_string(*id) == "regtest-prov");
  auto again = fabrix::register_provider_name("regtest-prov");  // idempotent
  REQUIRE(again.has_value());
  CHECK(*again == *id);

  auto after = fabrix::remote_buffer::decode(blob);
  REQUIRE(after.has_value());
  CHECK(after->provider == *id);
}

TEST_CASE("registry: memory kinds by name, on the wire") {
  const memory_kind kind = fabrix::memory_kind_of("regtest_hbm");
  const auto blob = sealed_buffer(provider_id::ucx, kind).encode();
  CHECK(fabrix::remote_buffer::decode(blob).code() == status::invalid_argument);
  REQUIRE(fabrix::register_memory_kind("regtest_hbm").has_value());
  CHECK(fabrix::to_string(kind) == "regtest_hbm");
  auto rb = fabrix::remote_buffer::decode(blob);
  REQUIRE(rb.has_value());
  CHECK(rb->location.kind == kind);
}

TEST_CASE("registry: malformed names and taken numbers are refused") {
  for (const char* bad : {"", "Upper", "has space", "dot.so", "slash/x", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"}) {
    CAPTURE(bad);
    CHECK(fabrix::register_provider_name(bad).code() == status::invalid_argument);
    CHECK(fabrix::register_memory_kind(bad).code() == status::invalid_argument);
  }

  const auto [first, second] = colliding_names("regtest-collide-", &provider_number);
  REQUIRE(first != second);
  REQUIRE(fabrix::register_provider_name(first).has_value());
  auto clash = fabrix::register_provider_name(second);
  CHECK(clash.code() == status::invalid_argument);
  CHECK(clash.error().message.find(first) != std::string::npos);
  CHECK(fabrix::to_string(fabrix::provider_id_of(first)) == first);  // the first keeps its number

  const auto [kind_a, kind_b] = colliding_names("regtest_kind_", &kind_number);
  REQUIRE(fabrix::register_memory_kind(kind_a).has_value());
  CHECK(fabrix::register_memory_kind(kind_b).code() == status::invalid_argument);
  // A built-in's number cannot be taken over by hashing: hashed numbers start above it.
  CHECK(static_cast<unsigned>(fabrix::memory_kind_of(kind_b)) >= fabrix::first_hashed_memory_kind);
}
