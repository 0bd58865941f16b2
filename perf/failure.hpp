// How fabrix-perf gives up: a failure carries the exit status (1 run-time,
// 2 usage / disagreement) and a message. Thrown outside the timed loops'
// fast paths only (on an error completion, a data mismatch, a timeout).
#pragma once

#include <stdexcept>
#include <string>

namespace fabrix::perf {

struct failure : std::runtime_error {
  failure(int code, const std::string& what) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};

[[noreturn]] inline void fail(const std::string& what) { throw failure(1, what); }
[[noreturn]] inline void fail_usage(const std::string& what) { throw failure(2, what); }

}  // namespace fabrix::perf
