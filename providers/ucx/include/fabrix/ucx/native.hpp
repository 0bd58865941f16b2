// The UCX objects behind a fabrix::ucx domain, queue pair and region, as
// domain::native(), queue_pair::native() and memory_region::native() hand
// them out: for UCX calls fabrix does not make (ucp_worker_print_info,
// ucp_ep_query, the application's own tagged messages on the worker, ...).
//
// This header and <fabrix/ucx.hpp> are the UCX provider's stable surface;
// everything else under fabrix/ucx/ is internal and may change in any
// release.
//
// The objects stay fabrix's: valid while the fabrix object they came from
// lives, never to be destroyed or closed by the caller. The worker is
// progressed by domain::poll() and wait(); progressing it elsewhere runs
// fabrix's callbacks there, so do it only from the thread that polls the
// domain (one thread at a time, as for the domain itself).
#pragma once

#include <ucp/api/ucp.h>

namespace fabrix::ucx {

struct native_domain {
  ucp_context_h context;
  ucp_worker_h worker;
};

struct native_queue_pair {
  ucp_ep_h ep;  // null once the queue pair has been closed
};

struct native_region {
  ucp_mem_h memh;
};

}  // namespace fabrix::ucx
