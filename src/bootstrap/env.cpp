// bootstrap::config_from_env: rank, size, root address and job token from
// FABRIX_* or the launcher's variables (see include/fabrix/bootstrap.hpp).
#include "state.hpp"

#include <fabrix/detail/fnv1a.hpp>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace fabrix {

namespace boot = detail::boot;

namespace {

// An environment variable; empty counts as unset.
struct var {
  const char* name = nullptr;
  std::string_view value;
  explicit operator bool() const noexcept { return name != nullptr; }
};

var get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return {};
  return {name, v};
}

var first_of(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = get(n)) return v;
  return {};
}

unexpected bad(const var& v, const std::string& why) {
  std::string m(v.name);
  m += "='";
  m += v.value;
  m += "' ";
  m += why;
  return boot::fail(status::invalid_argument, std::move(m));
}

result<int> parse_count(const var& v) {
  if (v.value.empty() || v.value.size() > 9) return bad(v, "is not a non-negative decimal integer");
  int n = 0;
  for (char c : v.value) {
    if (c < '0' || c > '9') return bad(v, "is not a non-negative decimal integer");
    n = n * 10 + (c - '0');
  }
  return n;
}

struct launcher {
  const char* name = "none";
  var rank;
  var size;
};

launcher detect_launcher() {
  if (auto r = get("OMPI_COMM_WORLD_RANK")) return {"OpenMPI", r, get("OMPI_COMM_WORLD_SIZE")};
  if (auto r = get("PMIX_RANK"))
    return {"PMIx", r, first_of({"PMIX_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "PMI_SIZE"})};
  if (auto r = get("PMI_RANK")) return {"PMI", r, get("PMI_SIZE")};
  if (auto r = get("SLURM_PROCID")) return {"Slurm", r, first_of({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"})};
  return {};
}

// The launcher's id for this job (the same string on every rank), if any.
std::optional<std::string> job_id() {
  // append(), not "x:" + std::string(...): gcc 12 at -O3 warns a false
  // -Wrestrict on the latter (GCC bug 105329).
  if (auto v = get("OMPI_MCA_ess_base_jobid")) return std::string("ompi:").append(v.value);
  if (auto v = get("SLURM_JOB_ID")) {
    std::string id = std::string("slurm:").append(v.value);
    if (auto s = get("SLURM_STEP_ID")) id.append(".").append(s.value);
    return id;
  }
  if (auto v = get("PMIX_NAMESPACE")) return std::string("pmix:").append(v.value);
  if (auto v = get("PMI_PORT")) return std::string("pmi:").append(v.value);
  return std::nullopt;
}

// When the launcher says the ranks are spread over several nodes, the
// 127.0.0.1 default cannot work; returns the evidence.
std::optional<std::string> spans_nodes(int size) {
  if (auto v = get("SLURM_STEP_NUM_NODES")) {
    if (auto n = parse_count(v); n && *n > 1) return std::string(v.name) + "=" + std::string(v.value);
  }
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (auto v = get(name)) {
      if (auto n = parse_count(v); n && *n < size)
        return std::string(v.name) + "=" + std::string(v.value) + " < job size " + std::to_string(size);
    }
  }
  return std::nullopt;
}

}  // namespace

result<bootstrap_config> bootstrap::config_from_env() {
  bootstrap_config cfg;
  const launcher l = detect_launcher();
  const var fabrix_rank = get("FABRIX_RANK");
  const var fabrix_size = get("FABRIX_SIZE");
  const var rank_var = fabrix_rank ? fabrix_rank : l.rank;
  const var size_var = fabrix_size ? fabrix_size : l.size;

  if (rank_var || size_var) {
    if (!rank_var) return bad(size_var, "is set but the rank is not: set FABRIX_RANK");
    if (!size_var)
      return bad(rank_var,
                 std::string("is set but the job size is not") +
                     (fabrix_rank ? ": set FABRIX_SIZE" : " (no size variable from the launcher): set FABRIX_SIZE"));
    auto size = parse_count(size_var);
    if (!size) return unexpected(size.error());
    if (*size < 1) return bad(size_var, "is not a valid job size (must be at least 1)");
    auto rank = parse_count(rank_var);
    if (!rank) return unexpected(rank.error());
    if (*rank >= *size)
      return bad(rank_var, "is out of range for job size " + std::to_string(*size) + " (from " + size_var.name + ")");
    cfg.rank = *rank;
    cfg.size = *size;
    cfg.source = (fabrix_rank && fabrix_size) || !l.rank ? "FABRIX" : l.name;
  }

  const auto id = job_id();
  if (const var token = get("FABRIX_JOB_TOKEN")) {
    if (token.value.size() > max_token_size)
      return bad(token, "is longer than " + std::to_string(max_token_size) + " bytes");
    cfg.job_token = std::string(token.value);
  } else if (id) {
    cfg.job_token = "fabrix-job:" + *id;
  }

  if (const var root = get("FABRIX_BOOTSTRAP")) {
    auto hp = boot::parse_host_port(root.value, root.name);
    if (!hp) return unexpected(hp.error());
    if (hp->port == 0 && cfg.size > 1) return bad(root, "has port 0, which the other ranks cannot know");
    cfg.root = std::string(root.value);
  } else if (cfg.size > 1) {
    if (!id)
      return boot::fail(status::invalid_argument,
                        "FABRIX_BOOTSTRAP is not set and no launcher job id was found (OMPI_MCA_ess_base_jobid, "
                        "SLURM_JOB_ID, PMIX_NAMESPACE, PMI_PORT) to derive a port from: set FABRIX_BOOTSTRAP=host:port "
                        "of rank 0");
    if (auto why = spans_nodes(cfg.size))
      return boot::fail(status::invalid_argument,
                        "FABRIX_BOOTSTRAP is not set and the job spans several nodes (" + *why +
                            "): the 127.0.0.1 default only works on one node; set FABRIX_BOOTSTRAP=host:port "
                            "with an address of rank 0's node");
    const auto port = static_cast<std::uint16_t>(20000 + detail::fnv1a(*id) % 10000);
    cfg.root = boot::format_host_port("127.0.0.1", port);
  }
  return cfg;
}

}  // namespace fabrix
