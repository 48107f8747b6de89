// A fixed pool of worker threads that share out the chunks of one job at a time (fork-join with
// dynamic claiming).
//
// Not here: what the jobs do. The caller works too (as worker 0) and every thread claims chunks
// from one atomic counter, so a worker the OS has descheduled (a busy machine) delays nothing but
// the chunk it holds. Workers spin briefly between jobs (a forward pass dispatches hundreds of
// short jobs back to back), then sleep on a condition variable. An exception thrown by a chunk is
// re-thrown in the caller after all chunks have finished.
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
    // fn(chunk, ith): chunk in [0, n_chunks), ith the running thread's index in [0, size()) (for
    // per-thread scratch).
    using chunk_fn = std::function<void(int64_t, int)>;

    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn on every chunk of [0, n_chunks) exactly once, spread over the threads; returns when
    // all are done. One chunk runs on the caller without waking anyone.
    void parallel_chunks(int64_t n_chunks, const chunk_fn& fn);
    // Splits [0, n) into chunks of a multiple of `align` elements (about 4 per thread, at least
    // min_chunk) and runs fn(begin, end, ith) on each.
    void parallel_range(int64_t n, int64_t align, int64_t min_chunk,
                        const std::function<void(int64_t, int64_t, int)>& fn);

  private:
    void worker_loop(int ith);
    void work(uint32_t gen, int ith);

    int n_threads_;
    std::vector<std::thread> workers_;
    // (generation << 32) | next chunk to claim; a claim is a CAS that checks the generation
    std::atomic<uint64_t> state_{0};
    std::atomic<const chunk_fn*> fn_{nullptr};
    std::atomic<int64_t> n_chunks_{0};
    std::atomic<int64_t> n_done_{0};
    std::atomic<bool> stop_{false};
    std::atomic<int> n_sleeping_{0};
    std::mutex mutex_;
    std::condition_variable wake_;
    std::mutex error_mutex_;
    std::exception_ptr error_;
};

// Physical cores of this machine (logical CPUs / SMT width where known), at least 1.
int physical_core_count();

}  // namespace strata
