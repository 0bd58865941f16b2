// Provider kit: a FIFO of T linked through T::next (no allocation). An
// element is in at most one list at a time; push_back/push_front overwrite
// its link, pop_front clears it. Single-threaded.
#pragma once

namespace fabrix::detail {

template <class T>
struct intrusive_fifo {
  T* head = nullptr;
  T* tail = nullptr;

  bool empty() const noexcept { return head == nullptr; }
  void push_back(T* e) noexcept {
    e->next = nullptr;
    if (tail)
      tail->next = e;
    else
      head = e;
    tail = e;
  }
  void push_front(T* e) noexcept {
    e->next = head;
    head = e;
    if (!tail) tail = e;
  }
  T* pop_front() noexcept {
    T* e = head;
    if (e) {
      head = e->next;
      if (!head) tail = nullptr;
      e->next = nullptr;
    }
    return e;
  }
};

}  // namespace fabrix::detail
