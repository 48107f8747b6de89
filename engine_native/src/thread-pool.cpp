// Thread pool with dynamic chunk claiming: spin-then-sleep workers, the caller works as worker 0.
//
// Not here: how work is cut into chunks (callers choose; results must not depend on the cut).
#include "thread-pool.h"

#include "op-times.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define STRATA_PAUSE() _mm_pause()
#else
#define STRATA_PAUSE() std::this_thread::yield()
#endif

namespace strata {

namespace {
constexpr int k_spin_pauses = 1 << 14;   // ~0.1-1 ms of pause before yielding
constexpr int k_spin_yields = 64;        // then a few yields before sleeping
// The caller, once its own chunks are done, waits for chunks other threads hold: it yields early
// so that a worker the OS preempted (a busy machine) gets a core back sooner.
constexpr int k_wait_pauses = 256;
inline uint32_t gen_of(uint64_t s) { return uint32_t(s >> 32); }
inline uint32_t idx_of(uint64_t s) { return uint32_t(s); }
constexpr uint32_t k_not_ready = 0xFFFFFFFFu;   // index while a new job's fn / n are being set
}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
        state_.fetch_add(uint64_t(1) << 32);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

// Claims and runs chunks of generation `gen` until none are left (or a newer job began).
void thread_pool::work(uint32_t gen, int ith) {
    for (;;) {
        uint64_t s = state_.load(std::memory_order_acquire);
        if (gen_of(s) != gen) return;
        if (idx_of(s) == k_not_ready) {
            STRATA_PAUSE();
            continue;
        }
        const chunk_fn* fn = fn_.load(std::memory_order_acquire);
        const int64_t n = n_chunks_.load(std::memory_order_acquire);
        if (int64_t(idx_of(s)) >= n) return;
        if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
        // the claim succeeded for `gen`, so fn and n were this job's: the caller does not change
        // them until every claimed chunk is done
        try {
            STRATA_OP_TIME(OP_POOL_BUSY);
            (*fn)(int64_t(idx_of(s)), ith);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
        }
        n_done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void thread_pool::worker_loop(int ith) {
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        while (gen_of(state_.load(std::memory_order_acquire)) == seen) {
            if (spins < k_spin_pauses) {
                STRATA_PAUSE();
            } else if (spins < k_spin_pauses + k_spin_yields) {
                std::this_thread::yield();
            } else {
                std::unique_lock<std::mutex> lock(mutex_);
                n_sleeping_.fetch_add(1);
                wake_.wait(lock, [&] { return gen_of(state_.load(std::memory_order_acquire)) != seen; });
                n_sleeping_.fetch_sub(1);
                break;
            }
            spins++;
        }
        seen = gen_of(state_.load(std::memory_order_acquire));
        if (stop_.load()) return;
        work(seen, ith);
    }
}

void thread_pool::parallel_chunks(int64_t n_chunks, const chunk_fn& fn) {
    if (n_chunks <= 0) return;
    if (n_chunks == 1 || n_threads_ == 1) {
        STRATA_OP_TIME(OP_POOL_BUSY);
        for (int64_t c = 0; c < n_chunks; c++) fn(c, 0);
        return;
    }
    if (n_chunks >= (int64_t(1) << 31)) throw std::length_error("thread_pool: too many chunks");
    error_ = nullptr;
    // close the previous job to late claimers first, then publish this one's fn and size
    const uint32_t gen = gen_of(state_.load()) + 1;
    state_.store((uint64_t(gen) << 32) | k_not_ready, std::memory_order_seq_cst);
    fn_.store(&fn, std::memory_order_release);
    n_chunks_.store(n_chunks, std::memory_order_release);
    n_done_.store(0, std::memory_order_release);
    state_.store(uint64_t(gen) << 32, std::memory_order_seq_cst);
    if (n_sleeping_.load() > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
    }
    work(gen, 0);
    int spins = 0;
    while (n_done_.load(std::memory_order_acquire) != n_chunks) {
        if (++spins < k_wait_pauses) {
            STRATA_PAUSE();
        } else {
            std::this_thread::yield();
        }
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void thread_pool::parallel_range(int64_t n, int64_t align, int64_t min_chunk,
                                 const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    align = std::max<int64_t>(1, align);
    int64_t per = std::max<int64_t>(min_chunk, (n + 4 * n_threads_ - 1) / (4 * n_threads_));
    per = (per + align - 1) / align * align;
    const int64_t n_chunks = (n + per - 1) / per;
    parallel_chunks(n_chunks, [&](int64_t c, int ith) { fn(c * per, std::min(n, (c + 1) * per), ith); });
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
#elif defined(_WIN32)
    DWORD len = 0;
    GetLogicalProcessorInformation(nullptr, &len);
    std::vector<SYSTEM_LOGICAL_PROCESSOR_INFORMATION> info(len / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION) + 1);
    if (GetLogicalProcessorInformation(info.data(), &len)) {
        int n = 0;
        for (size_t i = 0; i < len / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION); i++)
            if (info[i].Relationship == RelationProcessorCore) n++;
        if (n > 0 && unsigned(n) <= logical) return n;
    }
#endif
    return int(logical);
}

}  // namespace strata
