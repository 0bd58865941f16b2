// Connecting RC queue pairs through rdma_cm (options::connect == rdma_cm).
//
// Each domain listens with one rdma_cm id bound to its device's IP address
// (the one its chosen RoCE GID carries; any free port, or options::cm_port)
// and puts that address in its address blob. The domain's PD, CQ, SRQ and
// QPs live on librdmacm's own context for the device (from
// rdma_get_devices()), so ids and queue pairs share one context.
//
// connect() stays symmetric, as with the bootstrap: both sides call it with
// each other's blob. The side with the smaller domain nonce is active
// (resolve address, resolve route, rdma_connect with a 28-byte request
// naming both domains and the connect() count, address.hpp); the other
// waits for that request, accepts it and returns on ESTABLISHED. Requests
// that arrive before their connect() are kept (at most 256, the rest are
// rejected) and claimed in order. A domain connecting to itself gets the
// bootstrap's loopback queue pair (no rdma_cm involved).
//
// Queue pairs are fabrix's own (created on the SRQ and the domain CQ, as on
// the bootstrap path), not rdma_create_qp's: each transition takes its
// attributes from rdma_init_qp_attr (path, PSNs, negotiated read depths),
// and fabrix overrides the access flags, ACK timeout, retry counts and RNR
// timer with its options, so both paths behave the same after connecting.
// The active side completes with rdma_establish on CONNECT_RESPONSE.
//
// No thread: the event channel is non-blocking and is read by connect(),
// by wait() (its fd is polled with the completion channel's) and by every
// 64th poll(). Events after connecting: DISCONNECTED (the peer closed its
// queue pair or its process died) marks the queue pair failed, moves it to
// the error state so every outstanding request completes with
// peer_unreachable, and cancels waiting recv()s the same way.
#pragma once

#include <fabrix/result.hpp>
#include <fabrix/verbs/detail/progress.hpp>
#include <fabrix/verbs/detail/qp.hpp>
#include <fabrix/verbs/detail/state.hpp>
#include <fabrix/verbs/detail/status.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace fabrix::verbs::detail {

inline constexpr std::size_t cm_max_waiting = 256;

inline unexpected cm_fail(const std::string& what) { return fail(errno, what); }

// "10.77.0.1:4791" / "[2001:db8::1]:4791".
inline std::string sockaddr_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
  return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
}

// The socket address of a peer's listener, from its blob.
inline sockaddr_storage cm_peer_sockaddr(const peer_address& a) {
  sockaddr_storage ss{};
  if (a.cm_family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(a.cm_port);
    std::memcpy(&in->sin_addr, a.cm_ip.data(), 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(a.cm_port);
    std::memcpy(&in6->sin6_addr, a.cm_ip.data(), 16);
  }
  return ss;
}

// The IP address the chosen GID carries, as a socket address with `port`.
inline result<sockaddr_storage> cm_local_sockaddr(const device_choice& dev, std::uint16_t port) {
  if (dev.link_layer != IBV_LINK_LAYER_ETHERNET)
    return unexpected(status::unsupported,
                      "rdma_cm on InfiniBand needs an IPoIB address, which fabrix does not look up yet; use "
                      "FABRIX_VERBS_CONNECT=bootstrap",
                      "verbs");
  const auto& g = dev.gid.raw;
  sockaddr_storage ss{};
  const bool v4 =
      std::all_of(g.begin(), g.begin() + 10, [](std::uint8_t b) { return b == 0; }) && g[10] == 0xff && g[11] == 0xff;
  if (v4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, g.data() + 12, 4);
    return ss;
  }
  if (g[0] == 0xfe && (g[1] & 0xc0) == 0x80)
    return unexpected(
        status::unsupported,
        "rdma_cm needs an IPv4 or global IPv6 address on " + dev.name + "'s netdev (its GID is link-local only)",
        "verbs");
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  std::memcpy(&in6->sin6_addr, g.data(), 16);
  return ss;
}

// Switches the domain to librdmacm's context for the chosen device and
// starts listening. Called before any PD/CQ exists; d.ctx is the context
// open_device() opened and is closed here.
inline result<void> cm_open(domain_state& d) {
  auto local = cm_local_sockaddr(d.dev, d.opts.cm_port);
  if (!local) return unexpected(std::move(local).error());
  int n = 0;
  d.cm_devices = rdma_get_devices(&n);
  if (d.cm_devices == nullptr) return cm_fail("rdma_get_devices (is the rdma_ucm module loaded?)");
  ibv_context* mine = nullptr;
  for (int i = 0; i < n; ++i)
    if (d.cm_devices[i] && d.dev.name == ibv_get_device_name(d.cm_devices[i]->device)) mine = d.cm_devices[i];
  ibv_close_device(d.ctx);  // from here on, d.ctx is librdmacm's (state.hpp)
  d.ctx = mine;
  if (mine == nullptr) return unexpected(status::unsupported, "rdma_cm does not list device " + d.dev.name, "verbs");

  if ((d.cm_channel = rdma_create_event_channel()) == nullptr)
    return cm_fail("rdma_create_event_channel (is /dev/infiniband/rdma_cm there?)");
  const int fl = fcntl(d.cm_channel->fd, F_GETFL);
  if (fl < 0 || fcntl(d.cm_channel->fd, F_SETFL, fl | O_NONBLOCK) < 0) return cm_fail("fcntl(rdma_cm, O_NONBLOCK)");
  if (rdma_create_id(d.cm_channel, &d.cm_listener, nullptr, RDMA_PS_TCP) != 0) return cm_fail("rdma_create_id");
  const std::string where = sockaddr_text(reinterpret_cast<const sockaddr*>(&*local));
  if (rdma_bind_addr(d.cm_listener, reinterpret_cast<sockaddr*>(&*local)) != 0)
    return cm_fail("rdma_bind_addr(" + where + ")");
  if (d.cm_listener->verbs != d.ctx)
    return unexpected(status::unsupported,
                      "rdma_cm bound " + where + " to another device than " + d.dev.name + " (" +
                          (d.cm_listener->verbs ? ibv_get_device_name(d.cm_listener->verbs->device) : "none") + ")",
                      "verbs");
  if (rdma_listen(d.cm_listener, 64) != 0) return cm_fail("rdma_listen(" + where + ")");
  d.cm_addr = *local;
  const std::uint16_t port = ntohs(rdma_get_src_port(d.cm_listener));
  if (d.cm_addr.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&d.cm_addr)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&d.cm_addr)->sin6_port = htons(port);
  return {};
}

// The listener's place in this domain's address blob.
inline void cm_fill_address(const domain_state& d, peer_address& a) {
  a.connect = 1;
  if (d.cm_addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&d.cm_addr);
    a.cm_family = 4;
    a.cm_port = ntohs(in->sin_port);
    std::memcpy(a.cm_ip.data(), &in->sin_addr, 4);
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&d.cm_addr);
    a.cm_family = 6;
    a.cm_port = ntohs(in6->sin6_port);
    std::memcpy(a.cm_ip.data(), &in6->sin6_addr, 16);
  }
}

// One transition with rdma_cm's attributes and fabrix's own settings on top.
// init_depth/resp_res: 0 keeps rdma_cm's negotiated value.
inline result<void> cm_modify(domain_state& d, peer_state& p, ibv_qp_state to, std::uint8_t init_depth = 0,
                              std::uint8_t resp_res = 0) {
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = to;
  if (rdma_init_qp_attr(p.cm_id, &a, &mask) != 0)
    return cm_fail(std::string("rdma_init_qp_attr(") +
                   (to == IBV_QPS_INIT  ? "INIT"
                    : to == IBV_QPS_RTR ? "RTR"
                                        : "RTS") +
                   ")");
  if (to == IBV_QPS_INIT) {
    a.qp_access_flags =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    mask |= IBV_QP_ACCESS_FLAGS;
  } else if (to == IBV_QPS_RTR) {
    a.min_rnr_timer = d.opts.min_rnr_timer;
    mask |= IBV_QP_MIN_RNR_TIMER;
    if (resp_res) a.max_dest_rd_atomic = resp_res;
  } else {
    a.timeout = d.opts.timeout;
    a.retry_cnt = d.opts.retry_cnt;
    a.rnr_retry = d.opts.rnr_retry;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    if (init_depth) a.max_rd_atomic = init_depth;
  }
  if (int e = ibv_modify_qp(p.qp, &a, mask)) return fail(e, "ibv_modify_qp(RC via rdma_cm)");
  return {};
}

// The IB CM reject reason of a REJECTED event (rdma-core 44 has no
// rdma_reject_msg); RoCE uses the IB CM too.
inline std::string reject_text(int reason) {
  switch (reason) {
    case 8: return "nothing listens on that port (invalid service ID)";
    case 28: return "refused by the peer";
    case 1:
    case 2:
    case 3: return "the peer has no resources";
    default: return "reject reason " + std::to_string(reason);
  }
}

inline void cm_failed(peer_state& p, status s, std::string why) {
  if (p.phase == peer_state::cm_phase::failed) return;
  p.phase = peer_state::cm_phase::failed;
  p.cm_status = s;
  p.cm_error = std::move(why);
}

// The peer closed the connection or died: fail the queue pair so that
// everything outstanding on it completes with an error.
inline void cm_disconnected(domain_state& d, peer_state& p) {
  p.disconnected = true;
  if (!p.failed) {
    p.failed = true;
    p.failure_code = IBV_WC_WR_FLUSH_ERR;
    p.failure_text = "queue pair failed: the peer disconnected (RDMA_CM_EVENT_DISCONNECTED)";
  }
  if (p.qp) to_error(p.qp);
  fail_waiting_recvs(d, p, status::peer_unreachable);
}

inline std::uint8_t depth(std::uint32_t v) noexcept {
  return static_cast<std::uint8_t>(std::min<std::uint32_t>(v, 255));
}

// An event, copied so that it can be acknowledged before it is acted on
// (an id may only be destroyed once its events are acknowledged).
struct cm_event_copy {
  rdma_cm_event_type type{};
  int status = 0;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  std::byte data[64]{};
  std::size_t data_len = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t responder_resources = 0;
};

inline void cm_on_request(domain_state& d, const cm_event_copy& e) {
  const auto q = parse_cm_request(std::span<const std::byte>(e.data, e.data_len));
  if (!q || q->to != d.nonce || d.cm_requests.size() >= cm_max_waiting) {
    ++d.cm_rejected;
    (void)rdma_reject(e.id, nullptr, 0);
    rdma_destroy_id(e.id);
    return;
  }
  d.cm_requests.push_back({e.id, *q, e.initiator_depth, e.responder_resources});
}

inline void cm_on_peer_event(domain_state& d, peer_state& p, const cm_event_copy& e) {
  using phase = peer_state::cm_phase;
  const std::string peer = sockaddr_text(rdma_get_peer_addr(p.cm_id));
  const auto timeout_ms = static_cast<int>(std::min<long long>(d.opts.connect_timeout.count(), 5000));
  switch (e.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (p.cm_id->verbs != d.ctx) {
        cm_failed(p, status::unsupported, "the route to " + peer + " leaves through another device than " + d.dev.name);
      } else if (rdma_resolve_route(p.cm_id, timeout_ms) != 0) {
        cm_failed(p, status::provider_error, "rdma_resolve_route(" + peer + "): " + std::strerror(errno));
      } else {
        p.phase = phase::resolving_route;
      }
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      if (auto r = cm_modify(d, p, IBV_QPS_INIT); !r) {
        cm_failed(p, r.error().code, r.error().message);
        break;
      }
      std::byte req[cm_request_size];
      encode_cm_request(cm_request{d.nonce, p.remote.nonce, p.seq}, req);
      rdma_conn_param cp{};
      cp.private_data = req;
      cp.private_data_len = cm_request_size;
      cp.responder_resources = depth(d.max_dest_rd_atomic);
      cp.initiator_depth = depth(d.max_rd_atomic);
      cp.retry_count = d.opts.retry_cnt;
      cp.rnr_retry_count = d.opts.rnr_retry;
      cp.srq = 1;
      cp.qp_num = p.qp->qp_num;
      if (rdma_connect(p.cm_id, &cp) != 0)
        cm_failed(p, status::provider_error, "rdma_connect(" + peer + "): " + std::strerror(errno));
      else
        p.phase = phase::connecting;
      break;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE: {
      auto r = cm_modify(d, p, IBV_QPS_RTR);
      if (r) r = cm_modify(d, p, IBV_QPS_RTS);
      if (!r) {
        cm_failed(p, r.error().code, r.error().message);
        (void)rdma_reject(p.cm_id, nullptr, 0);
      } else if (rdma_establish(p.cm_id) != 0) {
        cm_failed(p, status::provider_error, "rdma_establish(" + peer + "): " + std::strerror(errno));
      } else {
        p.phase = phase::up;
      }
      break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      if (p.phase == phase::accepting || p.phase == phase::connecting) p.phase = phase::up;
      break;
    case RDMA_CM_EVENT_REJECTED:
      cm_failed(p, status::peer_unreachable,
                "connection refused by " + peer + " (RDMA_CM_EVENT_REJECTED: " + reject_text(e.status) +
                    "; is the peer's domain alive and connecting with rdma_cm?)");
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      cm_failed(p, status::peer_unreachable,
                "cannot reach " + peer + " (" + rdma_event_str(e.type) + ": " +
                    std::strerror(e.status < 0 ? -e.status : e.status) + ")");
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (p.phase == phase::up)
        cm_disconnected(d, p);
      else
        cm_failed(p, status::peer_unreachable,
                  "the peer went away while connecting (" + std::string(rdma_event_str(e.type)) + ")");
      break;
    default: break;  // TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do
  }
}

// Reads every pending event (non-blocking). Returns how many.
inline std::size_t drive_cm(domain_state& d) {
  if (d.cm_channel == nullptr) return 0;
  std::size_t n = 0;
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(d.cm_channel, &ev) == 0) {
    ++n;
    cm_event_copy e;
    e.type = ev->event;
    e.status = ev->status;
    e.id = ev->id;
    e.listen_id = ev->listen_id;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      e.data_len = std::min<std::size_t>(ev->param.conn.private_data_len, sizeof e.data);
      if (ev->param.conn.private_data && e.data_len) std::memcpy(e.data, ev->param.conn.private_data, e.data_len);
      e.initiator_depth = ev->param.conn.initiator_depth;
      e.responder_resources = ev->param.conn.responder_resources;
    }
    rdma_ack_cm_event(ev);
    if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      cm_on_request(d, e);
    } else if (e.id == d.cm_listener) {
      continue;  // DEVICE_REMOVAL on the listener: connections fail on their own ids
    } else if (auto* p = static_cast<peer_state*>(e.id->context)) {
      cm_on_peer_event(d, *p, e);
    } else {
      // A request no connect() claimed yet, whose active side gave up.
      const auto it =
          std::find_if(d.cm_requests.begin(), d.cm_requests.end(), [&](const cm_waiting& w) { return w.id == e.id; });
      if (it != d.cm_requests.end() && e.type != RDMA_CM_EVENT_TIMEWAIT_EXIT) {
        d.cm_requests.erase(it);
        rdma_destroy_id(e.id);
      }
    }
  }
  return n;
}

// The passive side: accept the request of the peer's matching connect().
inline void cm_accept(domain_state& d, peer_state& p, const cm_waiting& w) {
  p.cm_id = w.id;
  p.cm_id->context = &p;
  if (p.cm_id->verbs != d.ctx) {
    cm_failed(p, status::unsupported, "a connect request came in through another device than " + d.dev.name);
    (void)rdma_reject(p.cm_id, nullptr, 0);
    return;
  }
  const std::uint8_t resp = std::min(w.initiator_depth, depth(d.max_dest_rd_atomic));
  const std::uint8_t init = std::min(w.responder_resources, depth(d.max_rd_atomic));
  auto r = cm_modify(d, p, IBV_QPS_INIT);
  if (r) r = cm_modify(d, p, IBV_QPS_RTR, 0, resp);
  if (r) r = cm_modify(d, p, IBV_QPS_RTS, init, 0);
  if (!r) {
    cm_failed(p, r.error().code, r.error().message);
    (void)rdma_reject(p.cm_id, nullptr, 0);
    return;
  }
  rdma_conn_param cp{};
  cp.responder_resources = resp;
  cp.initiator_depth = init;
  cp.retry_count = d.opts.retry_cnt;
  cp.rnr_retry_count = d.opts.rnr_retry;
  cp.srq = 1;
  cp.qp_num = p.qp->qp_num;
  if (rdma_accept(p.cm_id, &cp) != 0)
    cm_failed(p, status::provider_error, std::string("rdma_accept: ") + std::strerror(errno));
  else
    p.phase = peer_state::cm_phase::accepting;
}

// Connects p.qp (created, in RESET) to the peer of p.remote through rdma_cm,
// up to RTS. The caller destroys the id and the queue pair on failure.
inline result<void> cm_connect_peer(domain_state& d, peer_state& p) {
  using clock = std::chrono::steady_clock;
  using phase = peer_state::cm_phase;
  const auto deadline = clock::now() + d.opts.connect_timeout;
  const bool active = d.nonce < p.remote.nonce;
  const sockaddr_storage dst = cm_peer_sockaddr(p.remote);
  const std::string peer = sockaddr_text(reinterpret_cast<const sockaddr*>(&dst));
  if (active) {
    if (rdma_create_id(d.cm_channel, &p.cm_id, &p, RDMA_PS_TCP) != 0) return cm_fail("rdma_create_id");
    sockaddr_storage src = d.cm_addr;
    if (src.ss_family == AF_INET)
      reinterpret_cast<sockaddr_in*>(&src)->sin_port = 0;
    else
      reinterpret_cast<sockaddr_in6*>(&src)->sin6_port = 0;
    const auto timeout_ms = static_cast<int>(std::min<long long>(d.opts.connect_timeout.count(), 5000));
    if (rdma_resolve_addr(p.cm_id, reinterpret_cast<sockaddr*>(&src),
                          reinterpret_cast<sockaddr*>(const_cast<sockaddr_storage*>(&dst)), timeout_ms) != 0)
      return cm_fail("rdma_resolve_addr(" + peer + ")");
    p.phase = phase::resolving_addr;
  }
  for (;;) {
    if (p.phase == phase::up) return {};
    if (p.phase == phase::failed) return unexpected(p.cm_status, p.cm_error, "verbs");
    if (p.phase == phase::idle) {  // passive: has the peer's request come?
      const auto it = std::find_if(d.cm_requests.begin(), d.cm_requests.end(), [&](const cm_waiting& w) {
        return w.req.from == p.remote.nonce && w.req.seq == p.seq;
      });
      if (it != d.cm_requests.end()) {
        const cm_waiting w = *it;
        d.cm_requests.erase(it);
        cm_accept(d, p, w);
        continue;
      }
    }
    if (clock::now() > deadline)
      return unexpected(status::timed_out,
                        std::string(active ? "rdma_cm connection to " : "no rdma_cm connect request from ") + peer +
                            " within " + std::to_string(d.opts.connect_timeout.count()) +
                            " ms (both sides must connect() to each other)",
                        "verbs");
    pollfd pfd{d.cm_channel->fd, POLLIN, 0};
    (void)::poll(&pfd, 1, 1);
    drive_cm(d);
    drive(d, ~std::size_t{0});  // completions that arrive meanwhile are kept for poll()
  }
}

}  // namespace fabrix::verbs::detail
