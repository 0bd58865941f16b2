// Queue pair creation and state transitions (RESET -> INIT -> RTR -> RTS).
// RC queue pairs carry the data; one UD queue pair per domain carries the
// connection handshake (handshake.hpp).
#pragma once

#include <fabrix/result.hpp>
#include <fabrix/verbs/detail/state.hpp>
#include <fabrix/verbs/detail/status.hpp>

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

namespace fabrix::verbs::detail {

// The send opcodes fabrix posts (post.hpp), as ibv_qp_ex send_ops_flags.
inline constexpr std::uint64_t rc_send_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                             IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
                                             IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

// An RC queue pair on the domain's CQ and SRQ. With `qpx`, it is asked with
// the extended send API for every opcode of rc_send_ops (ibv_create_qp_ex;
// a device that lacks any of them refuses): *qpx is then its ibv_qp_ex, else
// null and the queue pair is a plain one (ibv_post_send).
inline ibv_qp* create_rc_qp(domain_state& d, std::uint32_t inline_bytes, ibv_qp_ex** qpx = nullptr) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = d.cq;
  a.recv_cq = d.cq;
  a.srq = d.srq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 0;
  a.cap.max_send_wr = d.opts.sq_depth;
  a.cap.max_send_sge = d.max_sge;
  a.cap.max_inline_data = inline_bytes;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = d.pd;
  if (qpx != nullptr) {
    *qpx = nullptr;
    ibv_qp_init_attr_ex ex = a;
    ex.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ex.send_ops_flags = rc_send_ops;
    if (ibv_qp* qp = ibv_create_qp_ex(d.ctx, &ex)) {
      *qpx = ibv_qp_to_qp_ex(qp);
      return qp;
    }
  }
  return ibv_create_qp_ex(d.ctx, &a);
}

inline result<void> rc_to_init(domain_state& d, ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = d.dev.port;
  a.qp_access_flags =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return fail(e, "ibv_modify_qp(RC, INIT)");
  return {};
}

inline ibv_ah_attr address_handle_attr(const domain_state& d, const peer_address& peer) {
  ibv_ah_attr ah{};
  ah.port_num = d.dev.port;
  ah.dlid = peer.lid;
  ah.sl = 0;
  if (d.dev.link_layer == IBV_LINK_LAYER_ETHERNET || !is_zero(d.dev.gid.raw)) {
    // RoCE always routes by GID; on IB a GRH is harmless within a subnet.
    ah.is_global = d.dev.link_layer == IBV_LINK_LAYER_ETHERNET ? 1 : 0;
    std::memcpy(ah.grh.dgid.raw, peer.gid.data(), 16);
    ah.grh.sgid_index = static_cast<std::uint8_t>(d.dev.gid.index);
    ah.grh.hop_limit = 64;
  }
  return ah;
}

inline result<void> rc_to_rtr(domain_state& d, ibv_qp* qp, const peer_address& peer, std::uint32_t peer_qpn,
                              std::uint32_t peer_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(d.dev.mtu, peer.mtu));
  a.dest_qp_num = peer_qpn;
  a.rq_psn = peer_psn;
  a.max_dest_rd_atomic = static_cast<std::uint8_t>(d.max_dest_rd_atomic);
  a.min_rnr_timer = d.opts.min_rnr_timer;
  a.ah_attr = address_handle_attr(d, peer);
  if (int e = ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return fail(e, "ibv_modify_qp(RC, RTR)");
  return {};
}

inline result<void> rc_to_rts(domain_state& d, ibv_qp* qp, std::uint32_t my_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = d.opts.timeout;
  a.retry_cnt = d.opts.retry_cnt;
  a.rnr_retry = d.opts.rnr_retry;
  a.sq_psn = my_psn;
  a.max_rd_atomic = static_cast<std::uint8_t>(d.max_rd_atomic);
  if (int e = ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC))
    return fail(e, "ibv_modify_qp(RC, RTS)");
  return {};
}

// Moves a queue pair to the error state: everything still queued on it
// completes with IBV_WC_WR_FLUSH_ERR.
inline void to_error(ibv_qp* qp) noexcept {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

inline result<ibv_qp*> create_ud_qp(domain_state& d) {
  ibv_qp_init_attr a{};
  a.send_cq = d.cq;
  a.recv_cq = d.cq;
  a.qp_type = IBV_QPT_UD;
  a.cap.max_send_wr = ud_slots;
  a.cap.max_recv_wr = ud_slots;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(d.pd, &a);
  if (qp == nullptr) return fail(errno, "ibv_create_qp(UD)");
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_INIT;
  s.pkey_index = 0;
  s.port_num = d.dev.port;
  s.qkey = ud_qkey;
  int e = ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (e == 0) {
    s = {};
    s.qp_state = IBV_QPS_RTR;
    e = ibv_modify_qp(qp, &s, IBV_QP_STATE);
  }
  if (e == 0) {
    s = {};
    s.qp_state = IBV_QPS_RTS;
    s.sq_psn = 0;
    e = ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  if (e != 0) {
    ibv_destroy_qp(qp);
    return fail(e, "ibv_modify_qp(UD)");
  }
  return qp;
}

}  // namespace fabrix::verbs::detail
