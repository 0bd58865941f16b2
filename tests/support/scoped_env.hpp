// An environment variable changed for the life of a guard, then restored as
// it was (set to its old value, or unset). For tests: setenv is not
// thread-safe, so only while no other thread of the process runs.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace fxt {

class scoped_env {
 public:
  // Keeps the variable's value to restore; changes nothing yet (the test
  // sets it as it goes).
  explicit scoped_env(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
  }
  // Sets it to `value`; nullptr unsets it.
  scoped_env(const char* name, const char* value) : scoped_env(name) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
  ~scoped_env() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

}  // namespace fxt
