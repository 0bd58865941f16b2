// fabrix::error — what went wrong on the control path, in enough detail to
// act on: the fabrix status, which provider said so, the provider's own code
// (ucs_status_t, errno, -FI_E*, ibv_wc_status) and a human-readable message.
#pragma once

#include <fabrix/status.hpp>

#include <string>
#include <string_view>
#include <utility>

namespace fabrix {

struct error {
  fabrix::status code = status::provider_error;
  std::string provider;  // "ucx", "bootstrap", ... ; empty for core checks
  long native_code = 0;  // the provider's own code, 0 when there is none
  std::string message;

  // "provider: message (status, native N)" — for logs and test output.
  std::string describe() const {
    std::string out;
    if (!provider.empty()) {
      out += provider;
      out += ": ";
    }
    out += message;
    out += " (";
    out += to_string(code);
    if (native_code != 0) {
      out += ", native ";
      out += std::to_string(native_code);
    }
    out += ")";
    return out;
  }
};

inline error make_error(status code, std::string message, std::string provider = {}, long native_code = 0) {
  return error{code, std::move(provider), native_code, std::move(message)};
}

}  // namespace fabrix
