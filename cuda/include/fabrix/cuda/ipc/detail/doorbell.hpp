// A domain's doorbell: one 64-bit counter in a sealed memfd page that the
// domain shares with the peers connected to it. A peer that holds it adds
// one after every packet it sends to the domain, so the domain's poll()
// reads its sockets only when the counter moved: no system call while
// nothing arrives. Needs no CUDA headers.
//
// Trust: the fd is given only to peers that passed the hello check. A ring
// from anyone else costs the domain one poll(2) and nothing more. Both ends
// refuse a memfd that could shrink under them (F_SEAL_SHRINK), since a
// mapping past the end of a file faults.
#pragma once

#include <fabrix/cuda/ipc/detail/socket.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace fabrix::cuda::ipc {

class doorbell {
 public:
  static constexpr std::size_t bytes = 4096;
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "a shared counter must not need a lock");

  doorbell() = default;
  doorbell(doorbell&& o) noexcept : word_(std::exchange(o.word_, nullptr)), fd_(std::move(o.fd_)) {}
  doorbell& operator=(doorbell&& o) noexcept {
    if (this != &o) {
      unmap();
      word_ = std::exchange(o.word_, nullptr);
      fd_ = std::move(o.fd_);
    }
    return *this;
  }
  doorbell(const doorbell&) = delete;
  doorbell& operator=(const doorbell&) = delete;
  ~doorbell() { unmap(); }

  // A new bell for this domain, with the fd to give to peers. Empty (no
  // bell: the domain then reads its sockets on every poll) when memfds or
  // seals are unavailable.
  static doorbell create() noexcept {
    unique_fd fd(::memfd_create("fabrix-cuda-ipc-bell", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd || ::ftruncate(fd.get(), bytes) != 0 ||
        ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
      return {};
    doorbell b = map(fd.get());
    if (b) b.fd_ = std::move(fd);
    return b;
  }

  // Maps a peer's bell from the fd it passed. Empty when the fd is not a
  // sealed memfd of at least `bytes`: such a bell is never rung.
  static doorbell map(int fd) noexcept {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    struct stat st {};
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || ::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(bytes))
      return {};
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return {};
    doorbell b;
    b.word_ = static_cast<std::atomic<std::uint64_t>*>(m);
    return b;
  }

  explicit operator bool() const noexcept { return word_ != nullptr; }
  // After the packet is sent: the reader that sees the new count finds it.
  void ring() noexcept {
    if (word_) word_->fetch_add(1, std::memory_order_release);
  }
  std::uint64_t count() const noexcept { return word_ ? word_->load(std::memory_order_acquire) : 0; }
  // The fd peers map (our own bell only; -1 for a mapped peer's).
  int fd() const noexcept { return fd_.get(); }

 private:
  void unmap() noexcept {
    if (word_) ::munmap(static_cast<void*>(word_), bytes);
    word_ = nullptr;
  }

  std::atomic<std::uint64_t>* word_ = nullptr;
  unique_fd fd_;
};

}  // namespace fabrix::cuda::ipc
