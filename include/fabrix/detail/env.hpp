// Provider kit: the FABRIX_* environment variables.
//
// env_vars lists every variable the library reads (not the test and
// benchmark scripts): its name, the part that reads it and what it sets, so
// that a tool can list them; tools/check_env_table.py (the unit test
// env-table) fails when the sources read one the table does not name, or the
// table names one nothing reads.
//
// Readers go through env_text and env_number: an empty value counts as
// unset, and a bad one is refused with a message that names the variable and
// what it accepts. Variables are read when a domain, bootstrap or
// configuration is made, never on the data path. Threading: getenv, which
// POSIX does not make safe against a concurrent setenv.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>

namespace fabrix::detail {

struct env_var {
  std::string_view name;
  std::string_view reader;   // the part of fabrix that reads it
  std::string_view meaning;  // what it sets, its values and default
};

// Sorted by name.
inline constexpr env_var env_vars[] = {
    {"FABRIX_BOOTSTRAP", "bootstrap", "rank 0's host:port for the TCP store (default: derived from the job id)"},
    {"FABRIX_BOOTSTRAP_ENGINE", "bootstrap", "tcp, pmix or auto (default: pmix under a PMIx launcher)"},
    {"FABRIX_BOOTSTRAP_EXCHANGE", "bootstrap", "the TCP store's exchange: star, peer_to_peer or auto"},
    {"FABRIX_JOB_TOKEN", "bootstrap", "the job's shared secret (default: derived from the launcher's job id)"},
    {"FABRIX_NODE_ID", "core", "which processes count as one node (default: host name and network namespace)"},
    {"FABRIX_OFI_CMA", "ofi", "0: shm writes and reads of node-mates' host memory never by fabrix's CMA (default 1)"},
    {"FABRIX_OFI_CMA_MIN_BYTES", "ofi", "smallest shm write or read by CMA, k/m/g suffixes (default 0)"},
    {"FABRIX_OFI_HMEM", "ofi", "ask libfabric for FI_HMEM: 0 never, 1 always (default: where libcuda loads)"},
    {"FABRIX_OFI_NOTIFY_BY_MESSAGE", "ofi", "1: write_with_imm notifies by message even where CQ data would do"},
    {"FABRIX_OFI_OP_TIMEOUT_MS", "ofi", "ms an RMA or atomic may stay in flight, 0 never (default: shm 10000)"},
    {"FABRIX_PROVIDER_PATH", "core", "colon-separated directories searched for libfabrix-<name>.so plugins first"},
    {"FABRIX_RAIL_TIMEOUT_MS", "routed", "ms a rail with stripes in flight may complete none (default 10000)"},
    {"FABRIX_RANK", "bootstrap", "this process's rank (default: the launcher's)"},
    {"FABRIX_ROUTE", "routed",
     "node=<p>[:<t>] net=... gpu=... staged=... (routed/config.hpp); off: open(\"auto\") picks one provider"},
    {"FABRIX_SIZE", "bootstrap", "the job's size (default: the launcher's)"},
    {"FABRIX_STAGING_CHUNK", "staging", "bytes per bounce slot, k/m suffixes (default 512k)"},
    {"FABRIX_STAGING_DEPTH", "staging", "bounce slots per staged operation (default 4)"},
    {"FABRIX_STAGING_DEVICE", "staging", "CUDA ordinal of the copy stream (default 0)"},
    {"FABRIX_STAGING_OPS", "staging", "staged operations in flight per domain (default 4)"},
    {"FABRIX_STRIPE_MIN", "routed", "smallest write or read striped over rails, k/m/g suffixes (default 256k)"},
    {"FABRIX_SYSFS", "core", "the sysfs root device choice by PCI distance reads (default /sys; fake trees in tests)"},
    {"FABRIX_UCX_CMA", "ucx", "0: node-mates' registered host memory by checked requests, not CMA (default 1)"},
    {"FABRIX_UCX_CMA_MIN_BYTES", "ucx", "smallest write or read by CMA, k/m/g suffixes (default 16k)"},
    {"FABRIX_VERBS_CM_PORT", "verbs", "rdma_cm listening port, 0 any (default 0)"},
    {"FABRIX_VERBS_CONNECT", "verbs", "how queue pairs connect: bootstrap or rdma_cm (default bootstrap)"},
    {"FABRIX_VERBS_CONNECT_TIMEOUT_MS", "verbs", "ms to connect one queue pair"},
    {"FABRIX_VERBS_DEVICE", "verbs", "the RDMA device (default: the first active one)"},
    {"FABRIX_VERBS_GID_INDEX", "verbs", "the GID index, -1 to pick one (default -1)"},
    {"FABRIX_VERBS_INLINE", "verbs", "max inline bytes per work request"},
    {"FABRIX_VERBS_MSG_SIZE", "verbs", "bytes per SRQ receive buffer"},
    {"FABRIX_VERBS_PROBE_MS", "verbs", "ms between liveness probes of a silent peer, 0 never"},
    {"FABRIX_VERBS_RETRY_CNT", "verbs", "RC transport retries, 0..7"},
    {"FABRIX_VERBS_RNR_RETRY", "verbs", "RC receiver-not-ready retries, 0..7"},
    {"FABRIX_VERBS_SQ_DEPTH", "verbs", "send queue depth per queue pair"},
    {"FABRIX_VERBS_SRQ_DEPTH", "verbs", "shared receive queue depth"},
    {"FABRIX_VERBS_TIMEOUT", "verbs", "RC ACK timeout exponent: 4.096 us x 2^n per try, 0..31 (default 14)"},
    {"FABRIX_VERBS_WR_API", "verbs", "1: post with ibv_wr_* where the device offers it, 0: ibv_post_send (default 1)"},
};

// The value of `name`, or nullptr when it is unset or empty.
inline const char* env_text(const char* name) noexcept {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Reads integer variable `name` into `out` when it is set: a decimal number
// (with `sizes`, optionally followed by k, m or g: x 1024^n) in [lo, hi].
// False, with `why` naming the variable, when it is anything else; `out` is
// then untouched, as it is when the variable is unset or empty.
template <class T>
bool env_number(const char* name, T& out, long long lo, long long hi, std::string& why, bool sizes = false) {
  const char* v = env_text(name);
  if (v == nullptr) return true;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  long long scale = 1;
  if (sizes && end != v && end[0] != '\0' && end[1] == '\0') {
    const char suffix = static_cast<char>(end[0] | 0x20);  // lower case
    scale = suffix == 'k' ? 1ll << 10 : suffix == 'm' ? 1ll << 20 : suffix == 'g' ? 1ll << 30 : 1;
    if (scale != 1) ++end;
  }
  const bool digits_first = (v[0] >= '0' && v[0] <= '9') || v[0] == '-';  // no blanks or '+' (strtoll takes them)
  const bool number = digits_first && end != v && *end == '\0' && errno == 0 && n >= lo / scale && n <= hi / scale;
  if (!number || n * scale < lo || n * scale > hi) {
    why = std::string(name) + "=" + v + " is not a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" +
          (sizes ? " (k, m and g suffixes allowed)" : "");
    return false;
  }
  out = static_cast<T>(n * scale);
  return true;
}

}  // namespace fabrix::detail
