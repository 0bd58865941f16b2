// fabrix-info's report: an ordered tree of values (objects keep the order
// their fields were added in), printed as indented text or as JSON.
// Single-threaded; values own their children.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace fabrix::info {

class value {
 public:
  using object = std::vector<std::pair<std::string, value>>;
  using array = std::vector<value>;

  value() : v_(nullptr) {}
  value(std::nullptr_t) : v_(nullptr) {}
  value(bool b) : v_(b) {}
  value(int n) : v_(static_cast<std::int64_t>(n)) {}
  value(std::int64_t n) : v_(n) {}
  value(std::uint64_t n) : v_(static_cast<std::int64_t>(n)) {}
  value(const char* s) : v_(std::string(s)) {}
  value(std::string s) : v_(std::move(s)) {}
  value(std::string_view s) : v_(std::string(s)) {}
  static value make_object() { return value(object{}); }
  static value make_array() { return value(array{}); }

  // Objects: adds a field (no check for a repeated key). Returns *this.
  value& set(std::string key, value v) {
    std::get<object>(v_).emplace_back(std::move(key), std::move(v));
    return *this;
  }
  // Arrays: appends an element.
  value& push(value v) {
    std::get<array>(v_).push_back(std::move(v));
    return *this;
  }

  bool is_int() const noexcept { return std::holds_alternative<std::int64_t>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }

  std::string json() const;
  std::string text() const;

 private:
  explicit value(object o) : v_(std::move(o)) {}
  explicit value(array a) : v_(std::move(a)) {}
  void json_to(std::string& out) const;
  void text_to(std::string& out, int indent) const;
  bool scalar() const noexcept { return !std::holds_alternative<object>(v_) && !std::holds_alternative<array>(v_); }
  bool flat_object() const noexcept {
    const object* o = std::get_if<object>(&v_);
    if (o == nullptr) return false;
    for (const auto& field : *o)
      if (!field.second.scalar()) return false;
    return true;
  }

  std::variant<std::nullptr_t, bool, std::int64_t, std::string, object, array> v_;
};

}  // namespace fabrix::info
