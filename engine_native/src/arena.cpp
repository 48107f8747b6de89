// Arena allocation: one region on Linux (hugetlb or THP), chunked large-page regions on Windows.
//
// Not here: buffer layout (the engine plans it). Fallbacks are silent but reported by large_pages().
#include "arena.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#ifdef _WIN32
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <sys/mman.h>
#endif

namespace strata {

namespace {
constexpr size_t k_align = 64;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

#ifndef _WIN32
std::string thp_mode() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string s;
    std::getline(in, s);
    if (s.find("[always]") != std::string::npos) return "always";
    if (s.find("[madvise]") != std::string::npos) return "madvise";
    return "never";
}
#endif
}  // namespace

size_t arena::add(size_t n_bytes) {
    if (!ptrs_.empty()) throw std::logic_error("arena: add() after allocate()");
    sizes_.push_back(round_up(n_bytes == 0 ? k_align : n_bytes, k_align));
    return sizes_.size() - 1;
}

std::vector<std::pair<uint8_t*, size_t>> arena::pieces(size_t max_piece) const {
    std::vector<std::pair<uint8_t*, size_t>> out;
    for (const region& r : regions_) {
        uint8_t* base = static_cast<uint8_t*>(r.base);
        for (size_t off = 0; off < r.n_bytes; off += max_piece) out.emplace_back(base + off, std::min(max_piece, r.n_bytes - off));
    }
    return out;
}

void arena::populate(uint8_t* p, size_t n) {
#if defined(MADV_POPULATE_WRITE)
    if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return;   // Linux 5.14+: one call, no write pass
#endif
    // A write per small page faults it in; the memory is zero already, so writing zero keeps it.
    volatile uint8_t* v = p;
    for (size_t off = 0; off < n; off += 4096) v[off] = 0;
}

#ifdef _WIN32

namespace {
bool enable_lock_memory_privilege() {
    HANDLE token;
    if (!OpenProcessToken(GetCurrentProcess(), TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY, &token)) return false;
    TOKEN_PRIVILEGES tp{};
    tp.PrivilegeCount = 1;
    tp.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
    bool ok = LookupPrivilegeValueW(nullptr, L"SeLockMemoryPrivilege", &tp.Privileges[0].Luid) &&
              AdjustTokenPrivileges(token, FALSE, &tp, 0, nullptr, nullptr) && GetLastError() == ERROR_SUCCESS;
    CloseHandle(token);
    return ok;
}
}  // namespace

void arena::allocate() {
    constexpr size_t k_chunk = size_t(1) << 30;   // large-page regions of at most 1 GiB each
    size_t large_page = GetLargePageMinimum();
    bool try_large = large_page > 0 && enable_lock_memory_privilege();
    size_t n_large = 0, n_small = 0;
    // pack buffers into chunks, a buffer never straddling two
    size_t i = 0;
    while (i < sizes_.size()) {
        size_t j = i, chunk = 0;
        while (j < sizes_.size() && (chunk == 0 || chunk + sizes_[j] <= k_chunk)) chunk += sizes_[j++];
        region r;
        if (try_large) {
            size_t n = round_up(chunk, large_page);
            r.base = VirtualAlloc(nullptr, n, MEM_RESERVE | MEM_COMMIT | MEM_LARGE_PAGES, PAGE_READWRITE);
            if (r.base) { r.n_bytes = n; r.large = true; n_large++; }
        }
        if (!r.base) {
            r.base = VirtualAlloc(nullptr, chunk, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
            if (!r.base) throw std::runtime_error("arena: VirtualAlloc of " + std::to_string(chunk) + " bytes failed");
            r.n_bytes = chunk;
            n_small++;
        }
        regions_.push_back(r);
        uint8_t* p = static_cast<uint8_t*>(r.base);
        for (; i < j; i++) { ptrs_.push_back(p); p += sizes_[i]; }
        total_ += chunk;
    }
    large_pages_ = n_large == 0 ? "none" : (n_small == 0 ? "large pages" : "large pages (partial)");
}

arena::~arena() {
    for (auto& r : regions_) VirtualFree(r.base, 0, MEM_RELEASE);
}

#else

void arena::allocate() {
    size_t total = 0;
    for (size_t s : sizes_) total += s;
    constexpr size_t k_huge = size_t(2) << 20;
    region r;
#ifdef MAP_HUGETLB
    {
        size_t n = round_up(total, k_huge);
        void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (p != MAP_FAILED) { r.base = p; r.n_bytes = n; r.large = true; large_pages_ = "hugetlb"; }
    }
#endif
    if (!r.base) {
        size_t n = round_up(total, k_huge);
        void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            throw std::runtime_error("arena: mmap of " + std::to_string(n) + " bytes failed: " + std::strerror(errno));
        }
        r.base = p;
        r.n_bytes = n;
        std::string mode = thp_mode();
#ifdef MADV_HUGEPAGE
        if (mode != "never" && madvise(p, n, MADV_HUGEPAGE) == 0) {
            large_pages_ = "thp (" + mode + ")";
        } else if (mode == "always") {
            large_pages_ = "thp (always)";
        }
#endif
    }
    regions_.push_back(r);
    uint8_t* p = static_cast<uint8_t*>(r.base);
    for (size_t s : sizes_) { ptrs_.push_back(p); p += s; }
    total_ = total;
}

arena::~arena() {
    for (auto& r : regions_) munmap(r.base, r.n_bytes);
}

#endif

}  // namespace strata
