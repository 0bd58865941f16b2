// fabrix::result<T> — value-or-error for the control path (factories,
// registration, connection). Modelled on std::expected, usable without
// exceptions: value() on an error prints the error and aborts, so check
// has_value() (or use `if (auto r = ...)`) where failure is expected.
#pragma once

#include <fabrix/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <variant>

namespace fabrix {

// Wraps an error for construction of any result<T>: `return unexpected(e);`
struct unexpected {
  fabrix::error value;
  explicit unexpected(fabrix::error e) : value(std::move(e)) {}
  unexpected(status code, std::string message, std::string provider = {}, long native = 0)
      : value(make_error(code, std::move(message), std::move(provider), native)) {}
};

namespace detail {
[[noreturn]] inline void die_on_error(const error& e) {
  std::fprintf(stderr, "fabrix: value() called on an error result: %s\n", e.describe().c_str());
  std::abort();
}
}  // namespace detail

template <class T>
class [[nodiscard]] result {
 public:
  using value_type = T;

  result(T value) : state_(std::in_place_index<0>, std::move(value)) {}         // NOLINT: implicit by design
  result(unexpected u) : state_(std::in_place_index<1>, std::move(u.value)) {}  // NOLINT

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & {
    if (!has_value()) detail::die_on_error(error());
    return std::get<0>(state_);
  }
  const T& value() const& {
    if (!has_value()) detail::die_on_error(error());
    return std::get<0>(state_);
  }
  T&& value() && {
    if (!has_value()) detail::die_on_error(error());
    return std::get<0>(std::move(state_));
  }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // Precondition: !has_value().
  const fabrix::error& error() const& { return std::get<1>(state_); }
  fabrix::error&& error() && { return std::get<1>(std::move(state_)); }
  // The status: ok when a value is held.
  fabrix::status code() const noexcept { return has_value() ? status::ok : std::get<1>(state_).code; }

 private:
  std::variant<T, fabrix::error> state_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(unexpected u) : error_(std::move(u.value)), failed_(true) {}  // NOLINT

  bool has_value() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return has_value(); }
  void value() const {
    if (failed_) detail::die_on_error(error_);
  }
  const fabrix::error& error() const& { return error_; }
  fabrix::status code() const noexcept { return failed_ ? error_.code : status::ok; }

 private:
  fabrix::error error_{};
  bool failed_ = false;
};

}  // namespace fabrix
