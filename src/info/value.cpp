#include "value.hpp"

#include <cstdio>

namespace fabrix::info {

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += esc;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace

void value::json_to(std::string& out) const {
  if (std::holds_alternative<std::nullptr_t>(v_)) {
    out += "null";
  } else if (const bool* b = std::get_if<bool>(&v_)) {
    out += *b ? "true" : "false";
  } else if (const std::int64_t* n = std::get_if<std::int64_t>(&v_)) {
    out += std::to_string(*n);
  } else if (const std::string* s = std::get_if<std::string>(&v_)) {
    json_string(out, *s);
  } else if (const object* o = std::get_if<object>(&v_)) {
    out += '{';
    for (std::size_t i = 0; i < o->size(); ++i) {
      if (i) out += ", ";
      json_string(out, (*o)[i].first);
      out += ": ";
      (*o)[i].second.json_to(out);
    }
    out += '}';
  } else {
    const array& a = std::get<array>(v_);
    out += '[';
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (i) out += ", ";
      a[i].json_to(out);
    }
    out += ']';
  }
}

std::string value::json() const {
  std::string out;
  json_to(out);
  out += '\n';
  return out;
}

// Text: "key: scalar" on one line; objects and arrays open an indented block;
// array elements are "- " items, and an element whose fields are all
// scalars is one line ("- a: 1, b: x").
void value::text_to(std::string& out, int indent) const {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (const object* o = std::get_if<object>(&v_)) {
    for (const auto& [key, v] : *o) {
      out += pad + key + ":";
      if (v.scalar()) {
        out += ' ';
        v.text_to(out, 0);
        out += '\n';
      } else {
        out += '\n';
        v.text_to(out, indent + 2);
      }
    }
  } else if (const array* a = std::get_if<array>(&v_)) {
    if (a->empty()) out += pad + "(none)\n";
    for (const value& v : *a) {
      if (v.scalar()) {
        out += pad + "- ";
        v.text_to(out, 0);
        out += '\n';
      } else if (v.flat_object()) {
        out += pad + "- ";
        const object& o = std::get<object>(v.v_);
        for (std::size_t i = 0; i < o.size(); ++i) {
          out += (i ? ", " : "") + o[i].first + ": ";
          o[i].second.text_to(out, 0);
        }
        out += '\n';
      } else {
        out += pad + "-\n";
        v.text_to(out, indent + 2);
      }
    }
  } else if (std::holds_alternative<std::nullptr_t>(v_)) {
    out += "-";
  } else if (const bool* b = std::get_if<bool>(&v_)) {
    out += *b ? "yes" : "no";
  } else if (const std::int64_t* n = std::get_if<std::int64_t>(&v_)) {
    out += std::to_string(*n);
  } else {
    out += std::get<std::string>(v_);
  }
}

std::string value::text() const {
  std::string out;
  text_to(out, 0);
  return out;
}

}  // namespace fabrix::info
