// fabrix::bootstrap — the out-of-band channel that lets the ranks of a job
// exchange their connection blobs (addresses, remote_buffer encodings) before
// any fabric connection exists.
//
// One handle over several engines (bootstrap_engine.hpp): the built-in TCP
// store below (create, from_env, listen), a user's out-of-band allgather
// (from_callbacks, further down), an MPI communicator (<fabrix/mpi.hpp>), or
// any bootstrap_engine. describe() says which one a handle runs on.
//
// The built-in engine is a TCP store hosted by rank 0: rank 0 listens and
// every other rank opens one connection to it to be admitted. Collectives
// then run one of two ways (bootstrap_options::exchange; rank 0's choice
// holds for the job):
//  - star (jobs of up to 8 ranks by default): the connections stay; rank 0
//    serves each collective from inside its own allgather()/barrier() call,
//    every blob through it;
//  - peer_to_peer (larger jobs): each rank sends rank 0 the address of a
//    listener of its own, and once every rank is in, rank 0 closes its
//    connections and the table of addresses travels down a binomial tree
//    (rank r passes it to r + 2^k for each 2^k > r), so rank 0 admits each
//    rank once and then holds no connection per rank. On the first
//    collective the ranks link up directly (authenticated like the
//    connection to rank 0). An allgather is Bruck's: ceil(log2 N) rounds, in
//    round k rank r sends what it holds to rank r - 2^k and receives from
//    r + 2^k, so every rank sends and receives N - 1 blobs in all, rank 0
//    included; a barrier is a dissemination barrier over the same links.
// No thread is started and nothing blocks forever: every wait is bounded by
// bootstrap_options, and a rank that is missing, dead or calling a different
// collective makes the call fail with an error naming that rank and address
// (with peer_to_peer, on the ranks linked to it first; the others see their
// links close).
//
// Trust model. The job token is a secret shared by the ranks of one job; it
// never travels on the wire. Each connection starts with a mutual
// challenge-response (HMAC-SHA256 keyed with the token, over fresh random
// nonces from both sides, the rank, the job size, the protocol version and
// the direction): a rank answers only a rank 0 that first proved it knows the
// token, and rank 0 admits only a rank that proved it too. So a process that
// binds rank 0's port first (or a man in the middle) learns neither the token
// nor a MAC it could replay, and the rank refuses it with status::access_denied
// naming what failed. Every later frame (the welcome, each contribution, each
// collective result, an abort) carries a MAC under a session key derived from
// the token and both nonces, bound to its direction and position in the
// stream: a forged or altered welcome or allgather blob is refused
// (access_denied) and fails the job. What this does NOT give: secrecy. The
// blobs travel in clear — whoever can read the network between the ranks
// sees every rank's allgather blobs (addresses, remote_buffer encodings with
// the seal secret they carry). Use a private network or a token-protected
// tunnel when that matters. Cost: every byte of every blob is hashed with
// SHA-256 once by its sender and once by each receiver (about 230 MB/s on
// one core here): nothing for address blobs, seconds for allgathers of
// hundreds of MiB. The token's strength is the job's: the derived
// default ("fabrix-job:<launcher id>", else "fabrix") is guessable and only
// keeps apart jobs that do not attack each other; set FABRIX_JOB_TOKEN to a
// random secret (e.g. 32 bytes from /dev/urandom, hex) against an attacker
// on the same hosts or network.
//
// Under a flood of connections that never authenticate, rank 0 bounds its
// work (pending handshakes in total and per source host, each with a time
// limit) and never drops an authenticated rank; a rank whose connection rank
// 0 dropped before the handshake finished connects again, within its
// connect_timeout.
//
// Environment (bootstrap::from_env, bootstrap::config_from_env):
//   FABRIX_BOOTSTRAP_ENGINE    tcp, pmix or auto (unset): see from_env()
//   FABRIX_RANK, FABRIX_SIZE   this rank and the job size; override a launcher's
//   FABRIX_BOOTSTRAP           host:port of rank 0 ([v6addr]:port for IPv6, or a
//                              host name); rank 0 binds it, the others connect
//   FABRIX_JOB_TOKEN           a secret shared by the ranks of one job
//   FABRIX_BOOTSTRAP_EXCHANGE  star, peer_to_peer or auto: read by rank 0 when
//                              bootstrap_options::exchange is automatic
// Without FABRIX_RANK/FABRIX_SIZE the launcher's variables are read, in this
// order: OpenMPI (OMPI_COMM_WORLD_RANK/SIZE), PMIx (PMIX_RANK with PMIX_SIZE,
// SLURM_STEP_NUM_TASKS, SLURM_NTASKS or PMI_SIZE), PMI (PMI_RANK/PMI_SIZE),
// Slurm (SLURM_PROCID with SLURM_STEP_NUM_TASKS, else SLURM_NTASKS). With no
// variable at all the process is rank 0 of a job of size 1 (no socket used).
// Empty variables count as unset.
//
// When FABRIX_BOOTSTRAP is unset, the root is 127.0.0.1:<port>, the port
// derived (20000-29999) from the launcher's job id (OMPI_MCA_ess_base_jobid,
// SLURM_JOB_ID[.SLURM_STEP_ID], PMIX_NAMESPACE, PMI_PORT; the first one set).
// That default only works when all ranks share one node: multi-node jobs must
// set FABRIX_BOOTSTRAP to an address of rank 0's node, and from_env refuses to
// guess when the launcher says the job spans nodes. The job token defaults to
// a value derived from the same job id, else "fabrix".
//
// Progress while waiting: a rank blocked in the bootstrap does not drive its
// fabric domain, and providers that need target progress (UCX over tcp or
// shared memory emulates RMA in software) stall a peer's operations aimed at
// it until the call returns. bootstrap_options::progress (or the per-call
// argument of allgather()/barrier()) is called on the calling thread, from
// inside the bootstrap call, every progress_interval or so whenever the call
// waits on its sockets (for peers, for rank 0, to connect, to send or receive
// the rest of a frame): drive the domain there
// (fabrix::bootstrap_progress in connect.hpp does, keeping the completions).
// It must not call this bootstrap object (that call returns
// invalid_argument), must not throw, and should return quickly.
//
// Threading: a bootstrap (or bootstrap_root) object is used by one thread at a
// time. Collectives are matched by call order: every rank must call the same
// sequence of allgather()/barrier(); a mismatch is detected (each collective
// carries a sequence number and its kind) and fails the job on all ranks.
// After any error the object is unusable and every later call returns that
// error; the other ranks see the failure too (rank 0 tells them, or they see
// their connection close).
#pragma once

#include <fabrix/bootstrap_engine.hpp>
#include <fabrix/result.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fabrix {

namespace detail {
struct bootstrap_state;
struct bootstrap_root_state;
struct bootstrap_access;
}  // namespace detail

// How the built-in store runs its collectives (see the top of this file).
enum class bootstrap_exchange : std::uint8_t {
  automatic,    // FABRIX_BOOTSTRAP_EXCHANGE if set, else star up to 8 ranks, peer_to_peer above
  star,         // every blob through rank 0: rank 0 sends (N - 1) * N blobs per allgather
  peer_to_peer  // Bruck allgather over direct links: N - 1 blobs sent per rank
};

struct bootstrap_options {
  // Rank 0: how long to wait for all peers. Other ranks: how long to keep
  // retrying to reach rank 0, then (counted again from the moment the
  // connection is accepted by the kernel) how long to wait for rank 0 to
  // assemble the whole job.
  std::chrono::milliseconds connect_timeout{30000};
  // Bound on each allgather()/barrier() call, counted from its start on this
  // rank: it must also cover the wait for the last rank to make the call.
  std::chrono::milliseconds op_timeout{60000};
  // Called on this thread while a bootstrap call (create, accept, allgather,
  // barrier) waits, at least every progress_interval; empty: not called. See
  // "Progress while waiting" above.
  std::function<void()> progress{};
  std::chrono::milliseconds progress_interval{2};
  // Read on rank 0 only; the welcome tells every rank what it chose.
  bootstrap_exchange exchange = bootstrap_exchange::automatic;
};

// Where this process sits in its job, as read from the environment.
struct bootstrap_config {
  int rank = 0;
  int size = 1;
  std::string root;  // "host:port" of rank 0; empty when size == 1 and none is set
  std::string job_token = "fabrix";
  std::string source = "none";  // "FABRIX", "OpenMPI", "PMIx", "PMI", "Slurm" or "none"
};

// Which engine bootstrap::from_env() would run, and why, decided from the
// environment alone (no socket, no PMIx call): fabrix-info shows it.
struct bootstrap_plan {
  std::string engine;              // "pmix" or "tcp"
  bool tcp_if_pmix_fails = false;  // auto-detected PMIx: from_env() falls back to the TCP store
  std::string why;
};

class bootstrap_root;

// A user's out-of-band allgather, for bootstrap::from_callbacks (the UCC
// `oob` pattern: start a fixed-size allgather, then test it until done).
// fabrix runs each allgather() as two of these (the blobs' sizes, then the
// blobs padded to the largest) and each barrier() as one; all ranks must
// start the same sequence. The callbacks run on the thread that calls the
// bootstrap, one request at a time.
struct bootstrap_callbacks {
  int rank = 0;
  int size = 1;
  // Starts an allgather of `bytes` bytes from every rank (the same `bytes` on
  // every rank): this rank's at `mine`, rank r's to land at out + r * bytes.
  // Returns a request handle for test() and release(); `mine` and `out` stay
  // valid until release().
  std::function<result<void*>(const std::byte* mine, std::byte* out, std::size_t bytes)> allgather_start;
  // true once the request has finished (out is filled), false while it runs;
  // an error fails the bootstrap.
  std::function<result<bool>(void* request)> test;
  // Called once per started request: after it finished (`finished` true),
  // or when fabrix gave up on it (timeout, error). fabrix keeps the buffers
  // of a request it gave up on allocated until the process exits, so a late
  // completion writes nowhere harmful. Empty: nothing to release.
  std::function<void(void* request, bool finished)> release;
  // For describe(): what the callbacks run on ("key-value store at ...").
  std::string name = "user callbacks";
};

// Move-only handle on one rank's membership in a job; the destructor closes
// its sockets (which the other ranks observe as this rank leaving).
class bootstrap {
 public:
  // Largest blob one rank may contribute to allgather(), and largest job token.
  static constexpr std::size_t max_blob_size = std::size_t{64} << 20;
  static constexpr std::size_t max_token_size = 4096;

  // Reads the environment (see the top of this file) without opening sockets.
  // Bad values (unparsable numbers, rank >= size, size < 1, bad host:port)
  // give status::invalid_argument with a message naming the variable.
  // Not thread-safe against concurrent setenv().
  static result<bootstrap_config> config_from_env();
  // Picks the engine from the environment: FABRIX_BOOTSTRAP_ENGINE=pmix
  // runs from_pmix(), =tcp the TCP store (config_from_env() then create()).
  // Unset (or "auto"): PMIx when the process was started by a PMIx launcher
  // (PMIX_NAMESPACE is set), fabrix has PMIx, and none of FABRIX_RANK,
  // FABRIX_SIZE, FABRIX_BOOTSTRAP is set; the TCP store otherwise, also when
  // PMIx_Init fails. describe() says which one runs.
  static result<bootstrap> from_env(const bootstrap_options& opts = {});
  // from_env()'s choice of engine; invalid_argument for a bad
  // FABRIX_BOOTSTRAP_ENGINE, as from_env() gives.
  static result<bootstrap_plan> plan_from_env();
  // Whether this fabrix was built with PMIx (meson option pmix).
  static bool has_pmix() noexcept;
  // Joins a job: rank 0 listens on `root` and waits for the size-1 peers;
  // other ranks connect to it. Returns once the whole job is assembled.
  // size == 1 opens no socket and ignores `root`.
  static result<bootstrap> create(int rank, int size, std::string_view root, std::string_view job_token,
                                  const bootstrap_options& opts = {});
  static result<bootstrap> create(const bootstrap_config& config, const bootstrap_options& opts = {});
  // Rank 0 in two steps: listen now (port 0 in `bind_address` picks a free
  // port, reported by bootstrap_root::port()), accept the peers later. Peers
  // that connect in between wait in the kernel's backlog.
  static result<bootstrap_root> listen(int size, std::string_view bind_address, std::string_view job_token,
                                       const bootstrap_options& opts = {});
  // Runs on the user's allgather (see bootstrap_callbacks). Waits poll
  // test(), call opts.progress, and end at opts.op_timeout; a rank that
  // calls a different collective (kind or count) is detected, as with the
  // TCP store. Missing callbacks or a bad rank/size: invalid_argument.
  static result<bootstrap> from_callbacks(bootstrap_callbacks callbacks, const bootstrap_options& opts = {});
  // Runs on the PMIx server of the job's launcher (mpirun, srun --mpi=pmix):
  // PMIx_Put/Commit/Fence/Get, no socket of fabrix's own; rank and size are
  // the PMIx namespace's. unsupported when this process was not started by
  // a PMIx launcher, or fabrix was built without PMIx (meson option pmix).
  static result<bootstrap> from_pmix(const bootstrap_options& opts = {});

  // Runs on `engine` (see bootstrap_engine.hpp); null gives an empty
  // handle whose calls return invalid_argument.
  explicit bootstrap(std::unique_ptr<bootstrap_engine> engine) noexcept;

  bootstrap(bootstrap&& other) noexcept;
  bootstrap& operator=(bootstrap&& other) noexcept;
  bootstrap(const bootstrap&) = delete;
  bootstrap& operator=(const bootstrap&) = delete;
  ~bootstrap();

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // Which engine this runs on and where, in one line (for logs and tools).
  std::string describe() const;
  // See bootstrap_engine::traffic(); the TCP store counts every byte its
  // sockets carried (TCP's own counters, read when called).
  std::optional<bootstrap_traffic> traffic() const;

  // Collective: every rank passes its blob (sizes may differ, up to
  // max_blob_size, empty allowed); every rank gets all blobs, indexed by
  // rank. Bounded by op_timeout. Every blob was authenticated on its way
  // (see the trust model above).
  result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine);
  // Collective: returns on every rank once all ranks have entered it.
  result<void> barrier();
  // The same, calling `progress` (instead of bootstrap_options::progress)
  // while this call waits; an empty function calls nothing.
  result<std::vector<std::vector<std::byte>>> allgather(std::span<const std::byte> mine,
                                                        const std::function<void()>& progress);
  result<void> barrier(const std::function<void()>& progress);

 private:
  std::unique_ptr<bootstrap_engine> engine_;
  int rank_ = 0;
  int size_ = 0;
};

// Rank 0 between bootstrap::listen() and accept(): owns the listening socket.
// Move-only; the destructor closes the socket (waiting peers then fail).
class bootstrap_root {
 public:
  bootstrap_root(bootstrap_root&& other) noexcept;
  bootstrap_root& operator=(bootstrap_root&& other) noexcept;
  bootstrap_root(const bootstrap_root&) = delete;
  bootstrap_root& operator=(const bootstrap_root&) = delete;
  ~bootstrap_root();

  // The bound port (the real one when listen() was given port 0); 0 after accept().
  std::uint16_t port() const noexcept;
  // The bound "address:port" ("[addr]:port" for IPv6); empty after accept().
  std::string address() const;
  // Waits up to connect_timeout for all size-1 peers, then closes the
  // listening socket. Connections with a wrong magic or version, that fail
  // the authentication (wrong job token) or do not finish it in time, that
  // claim a rank out of range, a duplicate rank or a size mismatch are
  // refused and the wait goes on. Call once; a second call returns
  // invalid_argument.
  result<bootstrap> accept();

 private:
  friend struct detail::bootstrap_access;
  explicit bootstrap_root(std::unique_ptr<detail::bootstrap_root_state> state) noexcept;

  std::unique_ptr<detail::bootstrap_root_state> state_;
};

}  // namespace fabrix
