// What a hung rank was doing when the supervisor gave up on it: its main
// thread's stack, taken with gdb (tools/deps.sh installs it) before the
// rank is killed, shortened to fit the end of a CI log: one line per
// frame, function names without template arguments or parameters, file
// names without directories. Works in sanitizer builds too (gdb attaches
// from outside). Without gdb, or when attaching fails, says so instead.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

namespace fxt {

namespace detail {

// "ns::f<T, U>::g(int) const" -> "ns::f::g": drops <...> and (...) groups.
inline std::string short_function(const std::string& s) {
  std::string out;
  int angle = 0, paren = 0;
  for (char c : s) {
    if (c == '<') ++angle;
    if (c == '(') ++paren;
    if (angle == 0 && paren == 0) out += c;
    if (c == '>' && angle > 0) --angle;
    if (c == ')' && paren > 0) --paren;
  }
  return out;
}

// One gdb frame line, "#3  0x... in ns::f<..>(...) () at dir/file.cpp:12",
// as "#3 ns::f file.cpp:12".
inline std::string short_frame(const std::string& line) {
  std::string rest = line;
  const auto in = rest.find(" in ");
  const std::string number = rest.substr(0, rest.find(' '));
  if (in != std::string::npos)
    rest = rest.substr(in + 4);
  else
    rest = rest.substr(number.size());
  std::string where;
  if (const auto at = rest.rfind(" at "); at != std::string::npos) {
    where = rest.substr(at + 4);
    rest = rest.substr(0, at);
  } else if (const auto from = rest.rfind(" from "); from != std::string::npos) {
    where = rest.substr(from + 6);
    rest = rest.substr(0, from);
  }
  if (const auto slash = where.rfind('/'); slash != std::string::npos) where = where.substr(slash + 1);
  std::string fn = short_function(rest);
  while (!fn.empty() && fn.front() == ' ') fn.erase(fn.begin());
  while (!fn.empty() && fn.back() == ' ') fn.pop_back();
  if (fn.size() > 90) fn = "..." + fn.substr(fn.size() - 87);
  return number + " " + fn + (where.empty() ? "" : " " + where);
}

}  // namespace detail

// The innermost `frames` frames of the main thread of `pid`.
inline std::string stack_of(pid_t pid, int frames = 12) {
  const std::string cmd = "timeout 30 gdb -q -nx -batch -p " + std::to_string(pid) +
                          " -ex 'set print frame-arguments none' -ex 'bt " + std::to_string(frames) + "' 2>/dev/null";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return "  (no stacks: cannot run gdb)\n";
  std::string out, line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f) != nullptr) {
    line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.rfind("#", 0) == 0) out += "    " + detail::short_frame(line) + "\n";
  }
  const int rc = ::pclose(f);
  if (out.empty()) return "  (no stacks: gdb missing or could not attach, exit " + std::to_string(rc) + ")\n";
  return out;
}

}  // namespace fxt
