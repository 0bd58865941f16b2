// The bootstrap: which engine bootstrap::from_env() would run here and why,
// and, for the TCP store, the rank, size and root it would use. Nothing is
// started (no socket, no PMIx call).
#include "sections.hpp"

#include <fabrix/bootstrap.hpp>

namespace fabrix::info {

value bootstrap_section() {
  value s = value::make_object();
  s.set("pmix_built_in", bootstrap::has_pmix());
  auto plan = bootstrap::plan_from_env();
  if (!plan) return s.set("engine", "none: " + plan.error().describe());
  s.set("engine", plan->engine).set("why", plan->why);
  if (plan->engine == "pmix" && !plan->tcp_if_pmix_fails) return s;
  // The TCP store's view (also the fallback of an auto-detected PMIx).
  auto config = bootstrap::config_from_env();
  if (!config) return s.set("tcp_store", "cannot start: " + config.error().describe());
  value t = value::make_object();
  t.set("rank", static_cast<std::int64_t>(config->rank))
      .set("size", static_cast<std::int64_t>(config->size))
      .set("root", config->root.empty() ? std::string("none (a job of one)") : config->root)
      .set("read_from", config->source);
  return s.set(plan->engine == "tcp" ? "tcp_store" : "tcp_store_if_pmix_fails", std::move(t));
}

}  // namespace fabrix::info
