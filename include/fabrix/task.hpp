// fabrix::task<T> — a lazy coroutine for the control flow around operations,
// and fabrix::sync_wait to run one to completion by polling a domain.
//
// A task starts when awaited (or by sync_wait) and resumes its awaiter when
// it finishes (symmetric transfer, no stack growth). Operation awaitables
// resume on the thread calling domain::poll. Works with -fno-exceptions: an
// exception escaping a task terminates.
#pragma once

#include <coroutine>
#include <cstdlib>
#include <exception>
#include <optional>
#include <span>
#include <utility>

#include <fabrix/completion.hpp>

namespace fabrix {

template <class T = void>
class task;

namespace detail {

// Resumes whoever awaited the finished task (symmetric transfer).
struct final_awaiter {
  bool await_ready() noexcept { return false; }
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
    return h.promise().continuation;
  }
  void await_resume() noexcept {}
};

struct task_promise_base {
  std::coroutine_handle<> continuation = std::noop_coroutine();

  std::suspend_always initial_suspend() noexcept { return {}; }
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { std::terminate(); }
};

template <class T>
struct task_promise : task_promise_base {
  std::optional<T> value;
  task<T> get_return_object() noexcept;
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
};

template <>
struct task_promise<void> : task_promise_base {
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
};

}  // namespace detail

template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::task_promise<T>;
  using handle = std::coroutine_handle<promise_type>;

  explicit task(handle h) noexcept : h_(h) {}
  task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() {
    if (h_) h_.destroy();
  }

  bool done() const noexcept { return !h_ || h_.done(); }

  auto operator co_await() && noexcept {
    struct awaiter {
      handle h;
      bool await_ready() noexcept { return h.done(); }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
        h.promise().continuation = caller;
        return h;
      }
      T await_resume() {
        if constexpr (!std::is_void_v<T>) return std::move(*h.promise().value);
      }
    };
    return awaiter{h_};
  }

  // For sync_wait: start (or continue) running the coroutine on this thread.
  void start() {
    if (h_ && !h_.done()) h_.resume();
  }
  T take_result() {
    if constexpr (!std::is_void_v<T>) return std::move(*h_.promise().value);
  }

 private:
  handle h_;
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>(std::coroutine_handle<task_promise<T>>::from_promise(*this));
}
inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>(std::coroutine_handle<task_promise<void>>::from_promise(*this));
}
}  // namespace detail

// Runs `t` to completion, polling `dom` while it is suspended. Completions of
// operations that are not awaited (posted with a token) are discarded here:
// use sync_wait only when the task owns all traffic of the domain. It takes
// one completion per poll, so a task that polls the domain itself (for
// inbound notifications) after being resumed never has one of them taken
// and dropped by this loop.
template <class Domain, class T>
T sync_wait(Domain& dom, task<T> t) {
  t.start();
  completion scratch[1];
  while (!t.done()) dom.poll(std::span<completion>(scratch));
  return t.take_result();
}

}  // namespace fabrix
