// bootstrap::from_pmix: fabrix's collectives on the PMIx server of the job's
// launcher (mpirun, srun --mpi=pmix, prterun). Each fixed-size allgather of
// the callbacks engine (callbacks.cpp) is one PMIx_Put of this rank's bytes
// under a key of this bootstrap, PMIx_Commit, PMIx_Fence_nb collecting the
// data, then one local PMIx_Get per rank; a zero-byte one is a plain fence.
// PMIx does the data movement (its server and daemons); fabrix opens no
// socket or port. The fence's callback runs on PMIx's own progress thread
// and only sets a flag that test() reads.
#include "state.hpp"

#if FABRIX_HAVE_PMIX
#include <pmix.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>

namespace fabrix {

bool bootstrap::has_pmix() noexcept { return FABRIX_HAVE_PMIX != 0; }

#if FABRIX_HAVE_PMIX

namespace detail::boot {
namespace {

unexpected pmix_failure(const std::string& what, pmix_status_t rc) {
  return unexpected(status::peer_unreachable, "bootstrap (PMIx): " + what + ": " + PMIx_Error_string(rc), "bootstrap",
                    rc);
}

// This process's PMIx client; finalized with the last request that needs it.
struct pmix_client {
  pmix_proc_t me{};
  std::uint32_t size = 0;
  std::string key_prefix;
  std::uint64_t started = 0;
  bool initialized = false;
  ~pmix_client() {
    if (initialized) PMIx_Finalize(nullptr, 0);
  }
};

struct fence_request {
  std::shared_ptr<pmix_client> client;
  std::string key;
  std::byte* out = nullptr;
  std::size_t bytes = 0;
  pmix_info_t info[2];        // must stay valid until the fence's callback
  std::atomic<int> state{0};  // 0 running, 1 done, 2 failed
  std::atomic<pmix_status_t> result{PMIX_SUCCESS};
};

void fence_done(pmix_status_t rc, void* arg) {
  auto* r = static_cast<fence_request*>(arg);
  r->result.store(rc, std::memory_order_relaxed);
  r->state.store(rc == PMIX_SUCCESS ? 1 : 2, std::memory_order_release);
}

result<void*> start(const std::shared_ptr<pmix_client>& c, const std::byte* mine, std::byte* out, std::size_t bytes,
                    std::chrono::milliseconds timeout) {
  auto r = std::make_unique<fence_request>();
  r->client = c;
  r->out = out;
  r->bytes = bytes;
  r->key = c->key_prefix + std::to_string(++c->started);
  bool collect = bytes > 0;
  if (collect) {
    pmix_value_t v{};
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = reinterpret_cast<char*>(const_cast<std::byte*>(mine));  // PMIx_Put copies it
    v.data.bo.size = bytes;
    if (pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, r->key.c_str(), &v); rc != PMIX_SUCCESS)
      return pmix_failure("PMIx_Put", rc);
    if (pmix_status_t rc = PMIx_Commit(); rc != PMIX_SUCCESS) return pmix_failure("PMIx_Commit", rc);
  }
  // Whole seconds, at least one: PMIx's own bound, beside fabrix's.
  int seconds = static_cast<int>(std::max<std::int64_t>(1, (timeout.count() + 999) / 1000));
  PMIX_INFO_CONSTRUCT(&r->info[0]);
  PMIX_INFO_CONSTRUCT(&r->info[1]);
  PMIx_Info_load(&r->info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIx_Info_load(&r->info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  pmix_proc_t all{};
  PMIX_LOAD_PROCID(&all, c->me.nspace, PMIX_RANK_WILDCARD);
  if (pmix_status_t rc = PMIx_Fence_nb(&all, 1, r->info, 2, fence_done, r.get()); rc != PMIX_SUCCESS)
    return pmix_failure("PMIx_Fence_nb", rc);
  return static_cast<void*>(r.release());
}

result<bool> test(void* request) {
  auto* r = static_cast<fence_request*>(request);
  const int st = r->state.load(std::memory_order_acquire);
  if (st == 0) return false;
  if (st == 2) return pmix_failure("PMIx_Fence", r->result.load(std::memory_order_relaxed));
  for (std::uint32_t rank = 0; r->bytes > 0 && rank < r->client->size; ++rank) {
    pmix_proc_t p{};
    PMIX_LOAD_PROCID(&p, r->client->me.nspace, rank);
    pmix_value_t* v = nullptr;
    if (pmix_status_t rc = PMIx_Get(&p, r->key.c_str(), nullptr, 0, &v); rc != PMIX_SUCCESS)
      return pmix_failure("PMIx_Get of rank " + std::to_string(rank) + "'s " + r->key, rc);
    const bool fits = v->type == PMIX_BYTE_OBJECT && v->data.bo.size == r->bytes;
    if (fits) std::memcpy(r->out + rank * r->bytes, v->data.bo.bytes, r->bytes);
    PMIX_VALUE_RELEASE(v);
    if (!fits)
      return unexpected(status::provider_error,
                        "bootstrap (PMIx): rank " + std::to_string(rank) + "'s " + r->key + " is not its blob",
                        "bootstrap");
  }
  return true;
}

// A fence given up on may still call fence_done with its request: only a
// finished one is freed.
void release(void* request, bool finished) {
  auto* r = static_cast<fence_request*>(request);
  if (!finished) return;
  PMIX_INFO_DESTRUCT(&r->info[0]);
  PMIX_INFO_DESTRUCT(&r->info[1]);
  delete r;
}

}  // namespace
}  // namespace detail::boot

result<bootstrap> bootstrap::from_pmix(const bootstrap_options& opts) {
  namespace boot = detail::boot;
  auto c = std::make_shared<boot::pmix_client>();
  if (pmix_status_t rc = PMIx_Init(&c->me, nullptr, 0); rc != PMIX_SUCCESS) {
    return unexpected(
        status::unsupported,
        std::string("bootstrap (PMIx): PMIx_Init failed (not started by a PMIx launcher?): ") + PMIx_Error_string(rc),
        "bootstrap", rc);
  }
  c->initialized = true;
  pmix_proc_t job{};
  PMIX_LOAD_PROCID(&job, c->me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* v = nullptr;
  if (pmix_status_t rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &v); rc != PMIX_SUCCESS)
    return boot::pmix_failure("PMIx_Get(PMIX_JOB_SIZE)", rc);
  c->size = v->type == PMIX_UINT32 ? v->data.uint32 : 0;
  PMIX_VALUE_RELEASE(v);
  if (c->size == 0 || c->me.rank >= c->size)
    return boot::fail(status::provider_error, "bootstrap (PMIx): job size " + std::to_string(c->size) + " with rank " +
                                                  std::to_string(c->me.rank));
  // Keys unique to this bootstrap among the process's (the n-th from_pmix
  // of every rank shares its prefix).
  static std::atomic<unsigned> instances{0};
  c->key_prefix = "fabrix.boot" + std::to_string(++instances) + ".";

  bootstrap_callbacks cb;
  cb.rank = static_cast<int>(c->me.rank);
  cb.size = static_cast<int>(c->size);
  cb.name = "PMIx (namespace " + std::string(c->me.nspace) + ")";
  const auto timeout = opts.op_timeout;
  cb.allgather_start = [c, timeout](const std::byte* mine, std::byte* out, std::size_t bytes) {
    return boot::start(c, mine, out, bytes, timeout);
  };
  cb.test = boot::test;
  cb.release = boot::release;
  return from_callbacks(std::move(cb), opts);
}

#else

result<bootstrap> bootstrap::from_pmix(const bootstrap_options&) {
  return detail::boot::fail(status::unsupported, "bootstrap: fabrix was built without PMIx (meson -Dpmix=enabled)");
}

#endif

}  // namespace fabrix
