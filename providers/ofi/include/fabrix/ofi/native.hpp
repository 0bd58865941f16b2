// The libfabric objects behind a fabrix::ofi domain, queue pair and region,
// as domain::native(), queue_pair::native() and memory_region::native()
// hand them out: for fi_* calls fabrix does not make (fi_getopt, fi_control,
// fi_mr_desc, the application's own messages on the endpoint, ...).
//
// This header and <fabrix/ofi.hpp> are the libfabric provider's stable
// surface; everything else under fabrix/ofi/ is internal and may change in
// any release.
//
// The objects stay fabrix's: valid while the fabrix object they came from
// lives, never to be closed by the caller. A domain has one FI_EP_RDM
// endpoint and one completion queue that every queue pair shares (a queue
// pair is that endpoint plus the peer's address in the address vector);
// fabrix reads that completion queue in domain::poll(), so anything posted
// on it by the application also completes there, and it is the caller's to
// tell apart. One thread at a time, as for the domain.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

namespace fabrix::ofi {

struct native_domain {
  fid_fabric* fabric;
  fid_domain* domain;
  fid_ep* ep;
  fid_cq* cq;
  fid_av* av;
};

struct native_queue_pair {
  fid_ep* ep;      // the domain's endpoint (null once the queue pair has been closed)
  fi_addr_t peer;  // the peer's entry in the domain's address vector
};

struct native_region {
  fid_mr* mr;  // null where the provider needs no registration of local memory (fabrix then registers none)
};

}  // namespace fabrix::ofi
