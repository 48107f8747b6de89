// Fork-join thread pool: spin-then-sleep workers, caller participates as worker 0.
//
// Not here: row splitting policy beyond parallel_range's even split.
#include "thread-pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define STRATA_PAUSE() _mm_pause()
#else
#define STRATA_PAUSE() std::this_thread::yield()
#endif

namespace strata {

namespace {
constexpr int k_spin_iterations = 1 << 16;   // ~0.1-1 ms of pause before sleeping
}

thread_pool::thread_pool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void thread_pool::run_job(int ith) {
    try {
        (*job_)(ith, n_threads_);
    } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
    }
}

void thread_pool::worker_loop(int ith) {
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (generation_.load(std::memory_order_acquire) == seen && spins < k_spin_iterations) {
            STRATA_PAUSE();
            spins++;
        }
        if (generation_.load(std::memory_order_acquire) == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stop_.load()) return;
        run_job(ith);
        n_pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void thread_pool::run(const std::function<void(int, int)>& fn) {
    error_ = nullptr;
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    job_ = &fn;
    n_pending_.store(n_threads_ - 1, std::memory_order_release);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    wake_.notify_all();
    run_job(0);
    int spins = 0;
    while (n_pending_.load(std::memory_order_acquire) != 0) {
        if (++spins < k_spin_iterations) {
            STRATA_PAUSE();
        } else {
            std::this_thread::yield();
        }
    }
    job_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void thread_pool::parallel_range(int64_t n, int64_t align, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    align = std::max<int64_t>(1, align);
    run([&](int ith, int nth) {
        int64_t per = (n + nth - 1) / nth;
        per = (per + align - 1) / align * align;
        int64_t b = std::min<int64_t>(n, per * ith);
        int64_t e = std::min<int64_t>(n, b + per);
        if (b < e) fn(b, e);
    });
}

int physical_core_count() {
    unsigned logical = std::max(1u, std::thread::hardware_concurrency());
#ifdef __linux__
    // count distinct (physical id, core id) pairs
    std::ifstream in("/proc/cpuinfo");
    std::set<std::pair<int, int>> cores;
    std::string line;
    int phys = 0;
    while (std::getline(in, line)) {
        if (line.rfind("physical id", 0) == 0) phys = std::atoi(line.substr(line.find(':') + 1).c_str());
        if (line.rfind("core id", 0) == 0) cores.insert({phys, std::atoi(line.substr(line.find(':') + 1).c_str())});
    }
    if (!cores.empty() && cores.size() <= logical) return int(cores.size());
#endif
    return int(logical);
}

}  // namespace strata
