// Test-only access below fabrix's checks: posting a write with a raw rkey,
// as a buggy or hostile peer could, to prove that the device refuses it
// (IBV_WC_REM_ACCESS_ERR -> status::access_denied) and the target's memory
// is untouched. Not for applications.
#pragma once

#include <fabrix/verbs/detail/endpoint.hpp>
#include <fabrix/verbs/detail/post.hpp>

namespace fabrix::verbs::testing {

inline status post_write_with_rkey(detail::endpoint_impl& ep, const local_slice& src, std::uint64_t remote_addr,
                                   std::uint32_t rkey, std::uint64_t token) {
  detail::peer_state& p = ep.state();
  if (p.failed) return status::peer_unreachable;
  if (p.ring.room() == 0 || p.dom->credits.available() == 0) return status::again;
  ibv_send_wr& wr = p.wrs[0];
  wr = {};
  ibv_sge* sge = &p.sges[0];
  *sge = {reinterpret_cast<std::uintptr_t>(src.address), static_cast<std::uint32_t>(src.length),
          static_cast<ibv_mr*>(src.descriptor)->lkey};
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  p.ring.staged(0) = {token, src.length, 0, opcode::write, 0};
  std::uint32_t went = 0;
  return detail::post_chain(p, 1, went);
}

}  // namespace fabrix::verbs::testing
