// The rdma-core objects behind a fabrix::verbs domain, queue pair and region,
// as domain::native(), queue_pair::native() and memory_region::native()
// hand them out: for verbs calls fabrix does not make (ibv_query_qp,
// ibv_query_port, a memory window, ...).
//
// This header, <fabrix/verbs.hpp> and <fabrix/verbs/cuda.hpp> are the verbs
// provider's stable surface; everything else under fabrix/verbs/ is internal
// and may change in any release.
//
// The objects stay fabrix's: valid while the fabrix object they came from
// lives, never to be destroyed or modified (ibv_modify_qp) by the caller.
// Every queue pair of a domain sends its completions to the domain's one
// completion queue, which fabrix polls in domain::poll(); work requests the
// application posts itself on these queue pairs would complete there and
// confuse fabrix: post none. One thread at a time, as for the domain.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace fabrix::verbs {

struct native_domain {
  ibv_context* context;
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_srq* srq;
  std::uint8_t port;  // the port the domain uses
};

struct native_queue_pair {
  ibv_qp* qp;  // the RC queue pair; null for a queue pair to this domain itself, and once closed
};

struct native_region {
  ibv_mr* mr;
};

}  // namespace fabrix::verbs
