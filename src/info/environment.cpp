// The environment: every FABRIX_* variable the library reads (the table in
// <fabrix/detail/env.hpp>), its value here and what it sets, then every
// FABRIX_* variable that is set but read by nothing (a misspelling, or one
// only the tests and benchmarks read).
#include "sections.hpp"

#include <fabrix/detail/env.hpp>

#include <algorithm>
#include <string_view>

extern char** environ;

namespace fabrix::info {

value environment_section() {
  value known = value::make_array();
  for (const detail::env_var& e : detail::env_vars) {
    const std::string name(e.name);
    const char* v = detail::env_text(name.c_str());
    value row = value::make_object();
    row.set("name", e.name).set("value", v ? value(v) : value(nullptr)).set("read_by", e.reader).set("sets", e.meaning);
    known.push(std::move(row));
  }
  value unknown = value::make_array();
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view entry(*p);
    if (entry.rfind("FABRIX_", 0) != 0) continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool read = std::any_of(std::begin(detail::env_vars), std::end(detail::env_vars),
                                  [&](const detail::env_var& e) { return e.name == name; });
    if (!read) unknown.push(name);
  }
  value s = value::make_object();
  s.set("variables", std::move(known)).set("set_but_not_read_by_the_library", std::move(unknown));
  return s;
}

}  // namespace fabrix::info
