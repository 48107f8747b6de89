// A fixed pool of worker threads that runs one job on all of them at once (fork-join).
//
// Not here: what the jobs do. The caller is worker 0; workers spin briefly between jobs (a forward
// pass dispatches hundreds of short jobs back to back) and then sleep on a condition variable.
// An exception thrown by any worker is re-thrown in the caller after all have finished.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class thread_pool {
  public:
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(ith, nth) for ith in [0, nth) with nth = size(), the caller as ith 0.
    void run(const std::function<void(int, int)>& fn);
    // Splits [0, n) into size() contiguous ranges (multiples of `align`, except the last) and runs
    // fn(begin, end) on each non-empty one.
    void parallel_range(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& fn);

  private:
    void worker_loop(int ith);
    void run_job(int ith);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> n_pending_{0};
    std::atomic<bool> stop_{false};
    const std::function<void(int, int)>* job_ = nullptr;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

// Physical cores of this machine (logical CPUs / SMT width where known), at least 1.
int physical_core_count();

}  // namespace strata
