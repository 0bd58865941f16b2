// Zero-copy routes for the ring allreduce and allgather, and for alltoall(v):
// chunks written straight from the caller's registered input and output
// (communicator::register_memory) and, where they carry finished data,
// straight into the receiving rank's registered output, instead of being
// copied into a send slot and out of a receive slot. Each rank decides for
// itself from what it registered; a rank that writes into another's output
// learns where it is from one message per call (the ring: from the right
// neighbour, read while the ring already runs, output_exchange; alltoall:
// from each peer whose piece qualifies, zero_copy_piece): only the chunks
// bound for that output wait for it.
//
// The message (little endian), sent at the start of the call to the rank
// that will write into this rank's output, on their channel, ahead of any
// data this rank sends it:
//   empty: this rank's output is not registered (write into its slots);
//   else:  "FBXO", u32 0, u64 offset of the output in its registration,
//          u64 bytes of the call (alltoall: of the piece), then the
//          registration's encoded remote_buffer (remote_buffer.hpp).
// The receiver checks it like any peer input: a malformed message, a call
// size other than its own, or a range outside the registration fails the
// call (and the communicator) with an error, and writes nothing there.
//
// Used only when both ends can tell it is: host memory, a non-empty call
// (its output) of at least options::zero_copy_min_bytes (alltoall: a piece
// of at least 1/size() of that), and chunks large enough for the message
// (all of which the ranks agree on), so a message comes exactly when its
// receiver waits for one.
#pragma once

#include <fabrix/collectives/communicator.hpp>
#include <fabrix/detail/little_endian.hpp>
#include <fabrix/remote_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace fabrix::coll::detail {

inline constexpr std::size_t output_header_bytes = 24;
inline constexpr std::size_t max_output_message =
    output_header_bytes + remote_buffer::header_size + remote_buffer::max_key_size + remote_buffer::checksum_size;

template <provider P>
bool zero_copy_applies(const communicator<P>& c, std::size_t bytes) noexcept {
  return c.device() == nullptr && bytes > 0 && bytes >= c.opts().zero_copy_min_bytes &&
         c.opts().chunk_bytes >= max_output_message;
}

// Alltoall(v): whether the piece of `piece_bytes` one rank sends another
// goes zero copy: at least zero_copy_min_bytes / size() (a piece of an
// alltoall of zero_copy_min_bytes). Sender and receiver decide it from the
// same count, so both know whether the receiver's output message comes.
template <provider P>
bool zero_copy_piece(const communicator<P>& c, std::size_t piece_bytes) noexcept {
  const auto n = static_cast<std::size_t>(c.size());
  return c.device() == nullptr && piece_bytes > 0 && piece_bytes >= (c.opts().zero_copy_min_bytes + n - 1) / n &&
         c.opts().chunk_bytes >= max_output_message;
}

// One call's registered buffers: this rank's input and output (null when
// not registered) and, for the ring, the right neighbour's output (when it
// said so).
// Element offsets `first` are into the whole vector; `elem` is its element
// size. Lives for the call: the remote slices point into it.
template <provider P>
struct zero_copy_io {
  std::size_t elem = 1;
  const memory_region<P>* in = nullptr;
  std::size_t in_at = 0;  // offset of the input in its registration
  const memory_region<P>* out = nullptr;
  std::size_t out_at = 0;
  // Peers write into `out` (this rank tells them where it is): only where
  // that is as cheap as writing into the slots (communicator::
  // takes_direct_writes); else `out` is still sent from.
  bool out_lands = false;
  peer_output right{};

  local_slice input(std::size_t first, std::size_t last) const noexcept {
    return in->slice(in_at + first * elem, (last - first) * elem);
  }
  local_slice output(std::size_t first, std::size_t last) const noexcept {
    return out->slice(out_at + first * elem, (last - first) * elem);
  }
  std::optional<remote_slice> right_output(std::size_t first, std::size_t last) const noexcept {
    if (!right.registered) return std::nullopt;
    return right.slice(first * elem, (last - first) * elem);
  }
};

// Writes the message for an output `offset` bytes into registration `rb`
// and a call of `call_bytes`; returns its length, 0 when `to` is too small.
inline std::size_t write_output_message(std::span<std::byte> to, std::uint64_t offset, std::uint64_t call_bytes,
                                        const remote_buffer& rb) noexcept {
  if (to.size() < output_header_bytes + rb.encoded_size()) return 0;
  std::memcpy(to.data(), "FBXO", 4);
  fabrix::detail::le_writer w(to.data() + 4);
  w.put<std::uint32_t>(0);
  w.put<std::uint64_t>(offset);
  w.put<std::uint64_t>(call_bytes);
  if (!rb.encode_to(to.subspan(output_header_bytes))) return 0;
  return output_header_bytes + rb.encoded_size();
}

// Reads the output message from `peer`, for a call (or piece) of
// `call_bytes`, into `into`. Errors name the peer and break the call.
template <provider P>
result<void> read_output_message(communicator<P>& c, int peer, std::span<const std::byte> m, std::size_t call_bytes,
                                 peer_output& into) {
  if (m.empty()) return {};
  auto bad = [&](const std::string& why) {
    return c.fail(status::invalid_argument,
                  "rank " + std::to_string(peer) + " sent an unusable output address: " + why);
  };
  if (m.size() < output_header_bytes || std::memcmp(m.data(), "FBXO", 4) != 0) return bad("malformed");
  fabrix::detail::le_reader r(m.data() + 8);
  const auto offset = r.get<std::uint64_t>();
  const auto bytes = r.get<std::uint64_t>();
  if (bytes != call_bytes) return c.size_mismatch(peer, bytes, call_bytes);
  auto rb = remote_buffer::decode(m.subspan(output_header_bytes));
  if (!rb) return bad(rb.error().describe());
  if (offset > rb->length || bytes > rb->length - offset) return bad("the call's range is outside its registration");
  into = peer_output{.registered = true, .region = *rb, .at = offset};
  return {};
}

// Posts to `peer` where this rank's output for the call (or piece) of
// `call_bytes` is: `at` bytes into registration `out`, or, with `out` null,
// that it is not registered. Only after c.can_send(peer).
template <provider P>
result<void> post_output_message(communicator<P>& c, int peer, const memory_region<P>* out, std::size_t at,
                                 std::size_t call_bytes) {
  std::size_t len = 0;
  if (out != nullptr) {
    len = write_output_message(std::span<std::byte>(c.send_slot(peer), c.opts().chunk_bytes), at, call_bytes,
                               out->remote());
    if (len == 0) return c.fail(status::invalid_argument, "the output's registration does not fit one chunk");
  }
  return c.post(peer, len);
}

// The call's exchange, run alongside the ring (run_ring's side hook), so
// that nothing waits for it but the chunks that need the right neighbour's
// output: posts this rank's message to the left neighbour at once (before
// any ring data, which matters with two ranks, where left and right are
// the same channel), then reads the right neighbour's when it lands.
template <provider P, class NeedsRight>
class output_exchange {
 public:
  // `needs_right(m)`: message m is written to the right neighbour's output
  // if it registered one, so it waits for its message.
  output_exchange(communicator<P>& c, zero_copy_io<P>& io, std::size_t call_bytes, NeedsRight needs_right)
      : c_(c), io_(io), call_bytes_(call_bytes), needs_right_(needs_right) {}

  // Posts this rank's message (waiting only for a credit to the left neighbour).
  result<void> start() {
    const int left = (c_.rank() - 1 + c_.size()) % c_.size();
    const auto until = c_.deadline();
    while (!c_.can_send(left))
      if (auto r = c_.advance(false, until); !r) return r;
    return post_output_message(c_, left, io_.out_lands ? io_.out : nullptr, io_.out_at, call_bytes_);
  }
  result<bool> poll() {
    if (heard_) return false;
    const int right = (c_.rank() + 1) % c_.size();
    std::size_t got = 0;
    const std::byte* m = c_.landed(right, got);
    if (m == nullptr) return false;
    if (auto r = read_output_message(c_, right, std::span<const std::byte>(m, got), call_bytes_, io_.right); !r)
      return unexpected(std::move(r).error());
    c_.consume(right);
    heard_ = true;
    return true;
  }
  bool ready(std::size_t m) const { return heard_ || !needs_right_(m); }

 private:
  communicator<P>& c_;
  zero_copy_io<P>& io_;
  std::size_t call_bytes_;
  NeedsRight needs_right_;
  bool heard_ = false;
};

// Fills io for a call on `in` (null: not sent from directly) and `out`
// (elements of `elem` bytes). `out_bytes` is what the neighbours compare:
// the same on every rank.
template <provider P>
void find_registered(communicator<P>& c, zero_copy_io<P>& io, const void* in, std::size_t in_bytes, void* out,
                     std::size_t out_bytes, std::size_t elem) {
  io.elem = elem;
  io.in = in == nullptr ? nullptr : c.registered(in, in_bytes);
  if (io.in != nullptr) io.in_at = static_cast<std::size_t>(static_cast<const std::byte*>(in) - io.in->data());
  io.out = c.registered(out, out_bytes);
  if (io.out != nullptr) io.out_at = static_cast<std::size_t>(static_cast<std::byte*>(out) - io.out->data());
  io.out_lands = io.out != nullptr && c.takes_direct_writes(io.out);
}

}  // namespace fabrix::coll::detail
