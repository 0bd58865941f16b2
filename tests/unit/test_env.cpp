// The provider kit's environment readers (detail/env.hpp): empty is unset,
// numbers in range with optional size suffixes, refusals that name the
// variable and leave the value alone; and the table of every variable.
#include <fabrix/detail/env.hpp>

#include <doctest/doctest.h>

#include "../support/scoped_env.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace {

using fabrix::detail::env_number;
using fabrix::detail::env_text;

constexpr const char* var = "FABRIX_TEST_ENV_KIT";

}  // namespace

TEST_CASE("env kit: unset and empty leave the value alone") {
  ::unsetenv(var);
  long v = 7;
  std::string why;
  CHECK(env_text(var) == nullptr);
  CHECK(env_number(var, v, 0, 100, why));
  CHECK(v == 7);
  const fxt::scoped_env e(var, "");
  CHECK(env_text(var) == nullptr);
  CHECK(env_number(var, v, 0, 100, why));
  CHECK(v == 7);
  CHECK(why.empty());
}

TEST_CASE("env kit: numbers in range are read, with size suffixes where allowed") {
  std::string why;
  {
    const fxt::scoped_env e(var, "42");
    int v = 0;
    CHECK(std::string(env_text(var)) == "42");
    CHECK(env_number(var, v, 0, 100, why));
    CHECK(v == 42);
  }
  {
    const fxt::scoped_env e(var, "-1");
    int v = 0;
    CHECK(env_number(var, v, -1, 10, why));
    CHECK(v == -1);
  }
  for (auto [text, want] : {std::pair{"64k", 64ll << 10}, {"3M", 3ll << 20}, {"2g", 2ll << 30}, {"4096", 4096ll}}) {
    const fxt::scoped_env e(var, text);
    long long v = 0;
    const std::string shown = text;
    CAPTURE(shown);
    CHECK(env_number(var, v, 0, 1ll << 40, why, /*sizes=*/true));
    CHECK(v == want);
  }
}

TEST_CASE("env kit: anything else is refused, naming the variable, and the value stays") {
  for (const char* text : {"abc", "12x", "1.5", " 3", "+3", "101", "-2", "99999999999999999999999", "k", "5kb"}) {
    const fxt::scoped_env e(var, text);
    int v = 9;
    std::string why;
    const std::string shown = text;
    CAPTURE(shown);
    CHECK_FALSE(env_number(var, v, -1, 100, why));
    CHECK(v == 9);
    CHECK(why.find(std::string(var) + "=" + text) == 0);
    CHECK(why.find("[-1, 100]") != std::string::npos);
  }
  // Suffixes only where sizes are allowed, and the range holds after scaling.
  {
    const fxt::scoped_env e(var, "2k");
    long long v = 1;
    std::string why;
    CHECK_FALSE(env_number(var, v, 0, 1 << 20, why));
    CHECK(env_number(var, v, 0, 1 << 20, why, true));
    CHECK(v == 2048);
    CHECK_FALSE(env_number(var, v, 0, 1024, why, true));
    CHECK(v == 2048);
    CHECK(why.find("suffixes") != std::string::npos);
  }
}

TEST_CASE("env kit: the table is sorted, names are FABRIX_*, every entry says what it sets") {
  const auto& t = fabrix::detail::env_vars;
  CHECK(std::is_sorted(std::begin(t), std::end(t), [](const auto& a, const auto& b) { return a.name < b.name; }));
  for (const auto& v : t) {
    CAPTURE(v.name);
    CHECK(v.name.starts_with("FABRIX_"));
    CHECK_FALSE(v.reader.empty());
    CHECK_FALSE(v.meaning.empty());
  }
}
