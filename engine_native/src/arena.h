// One memory arena for the KV caches and scratch of an engine, on large pages where the OS grants them.
//
// Not here: what the buffers hold. Usage: add() every buffer's size (a plan), then allocate() once;
// each planned buffer then has a fixed, 64-byte aligned address for the arena's life.
// Linux: MAP_HUGETLB first, else mmap + madvise(MADV_HUGEPAGE). Windows: VirtualAlloc with
// MEM_LARGE_PAGES in chunks (needs SeLockMemoryPrivilege), else plain pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

class arena {
  public:
    arena() = default;
    ~arena();
    arena(const arena&) = delete;
    arena& operator=(const arena&) = delete;

    // Plans a buffer of n_bytes; returns its handle (index) for ptr().
    size_t add(size_t n_bytes);
    // Allocates every planned buffer, zero-filled. Throws std::runtime_error when memory is refused.
    void allocate();
    uint8_t* ptr(size_t handle) const { return ptrs_.at(handle); }
    // The allocated memory as pieces of at most max_piece bytes, for populate() on several threads.
    std::vector<std::pair<uint8_t*, size_t>> pieces(size_t max_piece) const;
    // Backs [p, p + n) of this arena with memory now. The OS hands fresh pages out zeroed on their
    // first write, a 2 MiB large page at a time: ~120 ms for one 4K-token context's KV here, paid by
    // the first request into each context unless it is paid at load.
    static void populate(uint8_t* p, size_t n);
    size_t total_bytes() const { return total_; }
    // What the OS gave: e.g. "hugetlb", "thp (madvise)", "thp (always)", "large pages", "none".
    const std::string& large_pages() const { return large_pages_; }

  private:
    struct region {
        void* base = nullptr;
        size_t n_bytes = 0;
        bool large = false;
    };
    std::vector<size_t> sizes_;
    std::vector<uint8_t*> ptrs_;
    std::vector<region> regions_;
    size_t total_ = 0;
    std::string large_pages_ = "none";
};

}  // namespace strata
