// The provider plugin loader (fabrix/plugins.hpp): what it refuses and why,
// and a plugin built against version 1 of the table (no allocate_memory).
//
// FX_BAD_PLUGIN_DIR holds the C plugins of bad/ (bad_plugin.c: one defect
// each). The UCX cases take the plugin directory from FABRIX_PROVIDER_PATH as
// meson sets it, and the ABI version it must have from FX_EXPECT_ABI; the
// built-in providers' plugins (ofi/, builtins/) are named by FX_BUILTIN_PLUGINS
// (and must open where FX_BUILTIN_MUST_OPEN is set: tests/vm/sanity.sh).
#include <doctest/doctest.h>

#include <fabrix/fabrix.hpp>
#include <fabrix/plugins.hpp>

#include "../support/scoped_env.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::string bad_path() { return std::string("/nonexistent-fabrix-dir::") + FX_BAD_PLUGIN_DIR; }

// REQUIRE(r.has_value()), printing the error when it fails.
#define REQUIRE_OK(r)                                   \
  do {                                                  \
    if (!(r).has_value()) FAIL((r).error().describe()); \
  } while (0)

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

fabrix::error refusal(const char* name) {
  auto p = fabrix::load_provider_plugin(name);
  REQUIRE_FALSE(p.has_value());
  INFO(p.error().describe());
  return p.error();
}

// A 4 KiB loopback write through `d` into `target` (registered over
// `target_bytes`), every byte checked.
void check_loopback_write(fabrix::any_domain& d, const fabrix::memory_region<fabrix::any_provider>& target,
                          const std::vector<std::byte>& target_bytes) {
  auto addr = d.address();
  REQUIRE(addr.has_value());
  auto qp = d.connect(*addr);
  REQUIRE_OK(qp);
  std::vector<std::byte> src(4096);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 1);
  auto s = d.register_memory(src, fabrix::access::local);
  REQUIRE(s.has_value());
  REQUIRE(qp->write(s->whole(), target.remote().whole(), 7) == fabrix::status::ok);
  fabrix::completion c[4];
  std::size_t n = 0;
  for (int i = 0; i < 100000 && n == 0; ++i) n = d.poll(c);
  REQUIRE(n == 1);
  CHECK(c[0].token == 7);
  CHECK(c[0].status == fabrix::status::ok);
  CHECK(target_bytes == src);
}

}  // namespace

TEST_CASE("plugins: a missing plugin names every directory searched") {
  fxt::scoped_env path("FABRIX_PROVIDER_PATH", bad_path().c_str());
  const auto dirs = fabrix::provider_plugin_path();
  REQUIRE(dirs.size() == 3);  // the empty element is skipped; the default directory comes last
  CHECK(dirs[0] == "/nonexistent-fabrix-dir");
  CHECK(dirs[1] == FX_BAD_PLUGIN_DIR);

  const auto e = refusal("nosuch");
  CHECK(e.code == fabrix::status::unsupported);
  CHECK(contains(e.message, "libfabrix-nosuch.so"));
  for (const auto& d : dirs) CHECK(contains(e.message, d));

  auto d = fabrix::open("nosuch");
  REQUIRE_FALSE(d.has_value());
  CHECK(d.code() == fabrix::status::unsupported);
  CHECK(contains(d.error().message, "not registered"));
  CHECK(contains(d.error().message, FX_BAD_PLUGIN_DIR));
}

TEST_CASE("plugins: names that are not provider names are refused before any file is looked at") {
  for (const char* name : {"", "../bad", "a/b", "UPPER", "x.so", "a-name-that-is-much-longer-than-31"}) {
    auto p = fabrix::load_provider_plugin(name);
    REQUIRE_FALSE(p.has_value());
    CHECK(p.code() == fabrix::status::invalid_argument);
  }
}

TEST_CASE("plugins: broken plugins are refused with a reason") {
  fxt::scoped_env path("FABRIX_PROVIDER_PATH", bad_path().c_str());
  struct expectation {
    const char* name;
    fabrix::status code;
    const char* says;
  };
  const std::string future = "ABI version " + std::to_string(FABRIX_PROVIDER_ABI_VERSION + 1);
  for (const auto& x : {
           expectation{"noentry", fabrix::status::invalid_argument, "does not export fabrix_provider_entry"},
           expectation{"small", fabrix::status::invalid_argument, "smaller than a version-1 table"},
           expectation{"abizero", fabrix::status::unsupported, "ABI version 0"},
           expectation{"abifuture", fabrix::status::unsupported, future.c_str()},
           expectation{"misnamed", fabrix::status::invalid_argument, "names provider 'other'"},
           expectation{"nullfn", fabrix::status::invalid_argument, "has no post"},
           expectation{"refuses", fabrix::status::unsupported, "cannot serve provider ABI version"},
           expectation{"wrongid", fabrix::status::invalid_argument, "wire_id is 7"},
       }) {
    CAPTURE(x.name);
    const auto e = refusal(x.name);
    CHECK(e.code == x.code);
    CHECK(contains(e.message, x.says));
    CHECK(contains(e.message, std::string(FX_BAD_PLUGIN_DIR) + "/libfabrix-" + x.name + ".so"));
    // open() reports the plugin's refusal, not only "not registered".
    auto d = fabrix::open(x.name);
    REQUIRE_FALSE(d.has_value());
    CHECK(d.code() == x.code);
    CHECK(contains(d.error().message, x.says));
  }
}

TEST_CASE("plugins: C's fabrix_provider_id_of is C++'s provider_id_of") {
  for (const char* name : {"ucx", "verbs", "ofi", "cuda_ipc", "good", "loop", "my-provider", "x", "ucx2", "uc"}) {
    CAPTURE(name);
    CHECK(fabrix_provider_id_of(name) == static_cast<std::uint16_t>(fabrix::provider_id_of(name)));
  }
  CHECK(fabrix_provider_id_of("") == 0);
}

TEST_CASE("plugins: a plugin whose name's number another provider holds is refused, and leaves no name behind") {
  fxt::scoped_env path("FABRIX_PROVIDER_PATH", bad_path().c_str());
  REQUIRE(fabrix::register_provider_name("fake_clash_1549").has_value());
  const auto e = refusal("fake_clash_2904");
  CHECK(e.code == fabrix::status::invalid_argument);
  CHECK(contains(e.message, "'fake_clash_1549' already holds"));
  CHECK(fabrix::to_string(fabrix::provider_id_of("fake_clash_2904")) == "fake_clash_1549");
  // A refused plugin registers nothing: "wrongid" stays unknown.
  (void)refusal("wrongid");
  CHECK(fabrix::to_string(fabrix::provider_id_of("wrongid")) == "unknown");
}

TEST_CASE("plugins: a valid version-1 plugin loads; its errors keep status, native code and message") {
  fxt::scoped_env path("FABRIX_PROVIDER_PATH", bad_path().c_str());
  auto p = fabrix::load_provider_plugin("good");
  REQUIRE(p.has_value());
  CHECK((*p)->abi_version == 1);
  CHECK((*p)->version == "test");
  CHECK((*p)->path == std::string(FX_BAD_PLUGIN_DIR) + "/libfabrix-good.so");
  CHECK_FALSE((*p)->has(offsetof(fabrix_provider_table, allocate_memory)));
  CHECK((*p)->has(offsetof(fabrix_provider_table, post)));
  auto again = fabrix::load_provider_plugin("good");  // loaded once per process
  REQUIRE(again.has_value());
  CHECK(*again == *p);

  auto d = fabrix::open("good");
  REQUIRE_FALSE(d.has_value());
  CHECK(d.code() == fabrix::status::unsupported);
  CHECK(d.error().provider == "good");
  CHECK(d.error().native_code == 42);
  CHECK(d.error().message == "stub plugin: no domain here");

  std::vector<std::string> names;
  for (const auto& f : fabrix::find_provider_plugins()) names.push_back(f.name);
  for (const char* n : {"good", "misnamed", "noentry", "small"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
}

TEST_CASE("plugins: the UCX plugin opens, moves bytes, and has allocate_memory only from version 2") {
  const char* expect = std::getenv("FX_EXPECT_ABI");
  if (expect == nullptr) return;  // this run has no UCX plugin on its path
  const std::uint32_t abi = static_cast<std::uint32_t>(std::atoi(expect));
  fabrix::domain_options options;
  options.transport = "tcp";
  auto d = fabrix::open("ucx", options);
  REQUIRE_OK(d);
  CHECK(contains(d->describe(), "[plugin "));
  CHECK(contains(d->describe(), ", ABI v" + std::to_string(abi) + "]"));
  CHECK(d->provider() == fabrix::provider_id::ucx);
  auto loaded = fabrix::loaded_provider_plugins();
  REQUIRE(loaded.size() >= 1);
  CHECK(loaded.back()->abi_version == abi);

  // register_memory goes through (check_host_memory is absent in v1: ok).
  std::vector<std::byte> bytes(4096);
  auto r = d->register_memory(bytes, fabrix::access::remote_write | fabrix::access::remote_read);
  REQUIRE_OK(r);
  CHECK(r->remote().provider == fabrix::provider_id::ucx);

  auto a = d->allocate_memory(4096, fabrix::access::remote_write);
  if (abi == 1) {
    REQUIRE_FALSE(a.has_value());
    CHECK(a.code() == fabrix::status::unsupported);
    CHECK(contains(a.error().message, "does not allocate memory"));
  } else {
    REQUIRE_OK(a);
    CHECK(a->size() == 4096);
  }

  check_loopback_write(*d, *r, bytes);
}

TEST_CASE("plugins: the built-in providers as plugins keep their numbers, and open or say why not") {
  const char* names = std::getenv("FX_BUILTIN_PLUGINS");
  if (names == nullptr) return;  // this run has no built-in plugins on its path
  const std::string list = names;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, end - at);
    at = end + 1;
    CAPTURE(name);
    auto p = fabrix::load_provider_plugin(name);
    REQUIRE_OK(p);
    CHECK((*p)->abi_version == FABRIX_PROVIDER_ABI_VERSION);
    CHECK((*p)->wire_id == fabrix::provider_id_of(name));
    CHECK(static_cast<unsigned>((*p)->wire_id) <= 4);  // a built-in number, not a hashed one

    fabrix::domain_options options;
    if (name == "ofi") options.transport = "tcp;ofi_rxm";
    auto d = fabrix::open(name, options);
    if (std::getenv("FX_BUILTIN_MUST_OPEN") != nullptr) REQUIRE_OK(d);  // the VM's rxe0: verbs must run
    if (!d.has_value()) {
      // No RDMA device or GPU here: the refusal is the provider's, carried
      // through the table with its status and words, not the loader's.
      INFO(d.error().describe());
      CHECK(d.error().provider == name);
      CHECK(d.code() == fabrix::status::unsupported);
      CHECK(contains(d.error().message, name == "verbs" ? "RDMA device" : "CUDA"));
      CHECK(name != "ofi");  // tcp;ofi_rxm runs everywhere
      continue;
    }
    CHECK(contains(d->describe(), "[plugin " + (*p)->path + ", ABI v"));
    CHECK(d->provider() == (*p)->wire_id);
    std::vector<std::byte> bytes(4096);
    auto r = d->register_memory(bytes, fabrix::access::remote_write | fabrix::access::remote_read);
    REQUIRE_OK(r);
    CHECK(r->remote().provider == (*p)->wire_id);
    check_loopback_write(*d, *r, bytes);
  }
}

TEST_CASE("plugins: a renamed export posts a batch naming more remote buffers than one part carries") {
  const char* name = std::getenv("FX_RENAMED_PLUGIN");
  if (name == nullptr) return;  // this run has no renamed plugin on its path
  fabrix::domain_options options;
  options.transport = "tcp";
  auto d = fabrix::open(name, options);
  REQUIRE_OK(d);
  CHECK(d->provider() == fabrix::provider_id_of(name));
  // 20 target regions, one write to each and a second to every other one,
  // all in one post: the exporter hands them to UCX in parts of at most 8
  // distinct remote buffers (plugin_export.hpp, relabel_in).
  constexpr std::size_t regions = 20, len = 512;
  std::vector<std::vector<std::byte>> targets(regions, std::vector<std::byte>(2 * len));
  std::vector<fabrix::memory_region<fabrix::any_provider>> mts;
  for (auto& t : targets) {
    auto m = d->register_memory(t, fabrix::access::remote_write);
    REQUIRE_OK(m);
    mts.push_back(std::move(*m));
  }
  std::vector<std::byte> src(2 * regions * len);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 13 + 5);
  auto ms = d->register_memory(src, fabrix::access::local);
  REQUIRE_OK(ms);
  auto qp = d->connect(d->address().value());
  REQUIRE_OK(qp);
  std::vector<fabrix::operation> ops;
  for (std::size_t i = 0; i < regions; ++i)
    ops.push_back(fabrix::op::write(ms->slice(2 * i * len, len), mts[i].remote().slice(0, len), i));
  for (std::size_t i = 0; i < regions; i += 2)
    ops.push_back(fabrix::op::write(ms->slice((2 * i + 1) * len, len), mts[i].remote().slice(len, len), 100 + i));
  const auto posted = qp->post(ops);
  REQUIRE(posted.status == fabrix::status::ok);
  REQUIRE(posted.posted == ops.size());
  std::size_t ok = 0;
  fabrix::completion c[16];
  for (int spin = 0; spin < 1000000 && ok < ops.size(); ++spin) {
    const std::size_t n = d->poll(c);
    for (std::size_t k = 0; k < n; ++k) ok += c[k].status == fabrix::status::ok ? 1 : 0;
  }
  REQUIRE(ok == ops.size());
  for (std::size_t i = 0; i < regions; ++i) {
    CAPTURE(i);
    CHECK(std::equal(targets[i].begin(), targets[i].begin() + len, src.begin() + 2 * i * len));
    if (i % 2 == 0) CHECK(std::equal(targets[i].begin() + len, targets[i].end(), src.begin() + (2 * i + 1) * len));
  }
}
