// The public bootstrap / bootstrap_root objects: argument checks and
// dispatch to rank 0's side (root.cpp) or a peer's side (peer.cpp).
#include "state.hpp"

#include <fabrix/detail/env.hpp>

#include <cstdlib>
#include <string>

namespace fabrix {

namespace boot = detail::boot;

namespace {

result<void> check_job(int rank, int size, std::string_view token) {
  if (size < 1)
    return boot::fail(status::invalid_argument, "bootstrap: job size " + std::to_string(size) + " must be at least 1");
  if (rank < 0 || rank >= size)
    return boot::fail(status::invalid_argument, "bootstrap: rank " + std::to_string(rank) +
                                                    " is out of range for job size " + std::to_string(size));
  if (token.size() > bootstrap::max_token_size)
    return boot::fail(status::invalid_argument, "bootstrap: job token of " + std::to_string(token.size()) +
                                                    " bytes is over the limit of " +
                                                    std::to_string(bootstrap::max_token_size));
  return {};
}

unexpected moved_from() { return boot::fail(status::invalid_argument, "bootstrap object is empty (moved from)"); }

}  // namespace

namespace detail::boot {
std::unique_ptr<bootstrap_state> solo_state(const bootstrap_options& opts) {
  auto st = std::make_unique<bootstrap_state>();
  st->opts = opts;
  return st;
}
}  // namespace detail::boot

// ---- the TCP store as an engine --------------------------------------------

namespace detail {

std::string tcp_store_engine::describe() const {
  const std::string where =
      " (rank " + std::to_string(st_->rank) + " of " + std::to_string(st_->size) +
      (st_->exchange == boot::exchange_peer_to_peer ? ", peer-to-peer exchange)" : ", star exchange)");
  if (st_->size == 1) return "tcp store: a job of one rank, no socket";
  if (st_->rank == 0) return "tcp store hosted here at " + st_->root_address + where;
  return "tcp store, rank 0 at " + st_->root_address + where;
}

std::optional<bootstrap_traffic> tcp_store_engine::traffic() const {
  bootstrap_traffic t = st_->closed_traffic;
  const auto add = [&](const boot::unique_fd& fd) {
    if (!fd) return;
    const auto c = boot::socket_traffic(fd.get());
    t.bytes_sent += c.bytes_sent;
    t.bytes_received += c.bytes_received;
  };
  for (const auto& p : st_->peers) add(p);
  add(st_->root);
  for (const auto& l : st_->links_to) add(l.fd);
  for (const auto& l : st_->links_from) add(l.fd);
  return t;
}

result<std::vector<std::vector<std::byte>>> tcp_store_engine::allgather(std::span<const std::byte> mine,
                                                                        const std::function<void()>* progress) {
  return boot::run_collective(*st_, boot::op::allgather, mine, progress);
}

result<void> tcp_store_engine::barrier(const std::function<void()>* progress) {
  auto r = boot::run_collective(*st_, boot::op::barrier, {}, progress);
  if (!r) return unexpected(r.error());
  return {};
}

}  // namespace detail

// ---- the handle ---------------------------------------------------------------

bootstrap::bootstrap(std::unique_ptr<bootstrap_engine> engine) noexcept
    : engine_(std::move(engine)), rank_(engine_ ? engine_->rank() : 0), size_(engine_ ? engine_->size() : 0) {}
bootstrap::bootstrap(bootstrap&& other) noexcept = default;
bootstrap& bootstrap::operator=(bootstrap&& other) noexcept = default;
bootstrap::~bootstrap() = default;

result<bootstrap> bootstrap::create(int rank, int size, std::string_view root, std::string_view job_token,
                                    const bootstrap_options& opts) {
  if (auto ok = check_job(rank, size, job_token); !ok) return unexpected(ok.error());
  if (size == 1) return detail::bootstrap_access::make(boot::solo_state(opts));
  boot::progress_hook hook = boot::hook_of(opts, &opts.progress);
  if (rank != 0) return boot::join_root(rank, size, root, job_token, opts, &hook);

  auto where = boot::parse_host_port(root, "bootstrap root address");
  if (!where) return unexpected(where.error());
  if (where->port == 0)
    return boot::fail(status::invalid_argument,
                      "rank 0: bootstrap root address " + std::string(root) +
                          " has port 0, which the other ranks cannot know (use bootstrap::listen)");
  // One deadline for the whole assembly, waiting for the port included.
  const auto until = boot::deadline::after(opts.connect_timeout, &hook);
  auto r = boot::listen_root(size, root, job_token, opts, until);
  if (!r) return unexpected(r.error());
  return boot::accept_peers(*detail::bootstrap_access::state(*r), until);
}

result<bootstrap> bootstrap::create(const bootstrap_config& config, const bootstrap_options& opts) {
  return create(config.rank, config.size, config.root, config.job_token, opts);
}

namespace {

bool set(const char* name) { return detail::env_text(name) != nullptr; }

}  // namespace

result<bootstrap_plan> bootstrap::plan_from_env() {
  const char* engine_var = detail::env_text("FABRIX_BOOTSTRAP_ENGINE");
  const std::string engine = engine_var != nullptr ? engine_var : "";
  if (engine == "pmix") return bootstrap_plan{"pmix", false, "FABRIX_BOOTSTRAP_ENGINE=pmix"};
  if (!engine.empty() && engine != "tcp" && engine != "auto")
    return boot::fail(status::invalid_argument,
                      "FABRIX_BOOTSTRAP_ENGINE=" + engine + ": expected tcp, pmix or auto (or unset)");
  if (engine == "tcp") return bootstrap_plan{"tcp", false, "FABRIX_BOOTSTRAP_ENGINE=tcp"};
  const std::string asked = engine.empty() ? "FABRIX_BOOTSTRAP_ENGINE unset" : "FABRIX_BOOTSTRAP_ENGINE=auto";
  if (!set("PMIX_NAMESPACE")) return bootstrap_plan{"tcp", false, asked + ", no PMIx launcher (PMIX_NAMESPACE unset)"};
  if (set("FABRIX_RANK") || set("FABRIX_SIZE") || set("FABRIX_BOOTSTRAP"))
    return bootstrap_plan{"tcp", false, asked + ", a PMIx launcher but FABRIX_RANK/SIZE/BOOTSTRAP set"};
  if (!has_pmix()) return bootstrap_plan{"tcp", false, asked + ", a PMIx launcher but fabrix was built without PMIx"};
  return bootstrap_plan{"pmix", true, asked + ", a PMIx launcher (PMIX_NAMESPACE set)"};
}

result<bootstrap> bootstrap::from_env(const bootstrap_options& opts) {
  auto plan = plan_from_env();
  if (!plan) return unexpected(plan.error());
  if (plan->engine == "pmix") {
    auto b = from_pmix(opts);
    if (b || !plan->tcp_if_pmix_fails) return b;  // else the TCP store, as without PMIx
  }
  auto config = config_from_env();
  if (!config) return unexpected(config.error());
  return create(*config, opts);
}

result<bootstrap_root> bootstrap::listen(int size, std::string_view bind_address, std::string_view job_token,
                                         const bootstrap_options& opts) {
  if (auto ok = check_job(0, size, job_token); !ok) return unexpected(ok.error());
  boot::progress_hook hook = boot::hook_of(opts, &opts.progress);
  return boot::listen_root(size, bind_address, job_token, opts, boot::deadline::after(opts.connect_timeout, &hook));
}

std::string bootstrap::describe() const { return engine_ ? engine_->describe() : "empty (moved from)"; }
std::optional<bootstrap_traffic> bootstrap::traffic() const { return engine_ ? engine_->traffic() : std::nullopt; }

result<std::vector<std::vector<std::byte>>> bootstrap::allgather(std::span<const std::byte> mine) {
  if (!engine_) return moved_from();
  return engine_->allgather(mine, engine_->default_progress());
}

result<std::vector<std::vector<std::byte>>> bootstrap::allgather(std::span<const std::byte> mine,
                                                                 const std::function<void()>& progress) {
  if (!engine_) return moved_from();
  return engine_->allgather(mine, &progress);
}

result<void> bootstrap::barrier() {
  if (!engine_) return moved_from();
  return engine_->barrier(engine_->default_progress());
}

result<void> bootstrap::barrier(const std::function<void()>& progress) {
  if (!engine_) return moved_from();
  return engine_->barrier(&progress);
}

bootstrap_root::bootstrap_root(std::unique_ptr<detail::bootstrap_root_state> state) noexcept
    : state_(std::move(state)) {}
bootstrap_root::bootstrap_root(bootstrap_root&& other) noexcept = default;
bootstrap_root& bootstrap_root::operator=(bootstrap_root&& other) noexcept = default;
bootstrap_root::~bootstrap_root() = default;

std::uint16_t bootstrap_root::port() const noexcept {
  return state_ && state_->listen.fd ? state_->listen.port : std::uint16_t{0};
}

std::string bootstrap_root::address() const { return state_ && state_->listen.fd ? state_->address : std::string(); }

result<bootstrap> bootstrap_root::accept() {
  if (!state_ || !state_->listen.fd)
    return boot::fail(status::invalid_argument, "bootstrap_root::accept() called twice (or on a moved-from root)");
  boot::progress_hook hook = boot::hook_of(state_->opts, &state_->opts.progress);
  result<bootstrap> out = state_->size == 1
                              ? result<bootstrap>(detail::bootstrap_access::make(boot::solo_state(state_->opts)))
                              : boot::accept_peers(*state_, boot::deadline::after(state_->opts.connect_timeout, &hook));
  state_->listen.fd.reset();  // success or not, this root is spent
  return out;
}

}  // namespace fabrix
