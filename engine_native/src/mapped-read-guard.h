// Reads of a memory-mapped file that another process may truncate in place: touching a page past the
// file's new end raises SIGBUS, which would kill the server. A mapped_read_guard arms, for this thread,
// the byte range it reads; the process's SIGBUS handler (installed once, chaining to the previous one:
// Python's faulthandler, or the default) jumps back to the guard's STRATA_MAPPED_READ_FAULTED point when
// the faulting address lies inside the armed range, and leaves every other SIGBUS to the previous
// handler. Only plain loads and stores may run between the two (no lock taken, no allocation, no
// exception): the jump skips them. POSIX only; Windows refuses to truncate a mapped file, so there the
// guard is empty and never reports a fault.
#pragma once

#include <cstddef>

#if defined(_WIN32)

#include <cstring>

namespace strata {
struct mapped_read_guard {
    mapped_read_guard(const void*, size_t) {}
};
inline void name_fatal_mapping(const void*, size_t, const char*) {}
inline void forget_fatal_mapping(const void*) {}
inline bool mapped_copy(void* dst, const void* src, size_t n) {
    std::memcpy(dst, src, n);
    return true;
}
}  // namespace strata
#define STRATA_MAPPED_READ_FAULTED(guard) false

#else

#include <setjmp.h>

namespace strata {

struct mapped_read_range {
    const char* lo = nullptr;
    const char* hi = nullptr;
    sigjmp_buf env;
    mapped_read_range* outer = nullptr;
};

// Arms [p, p + n) for the calling thread until destroyed; nests (the innermost range is checked first).
class mapped_read_guard {
public:
    mapped_read_guard(const void* p, size_t n);
    ~mapped_read_guard();
    mapped_read_guard(const mapped_read_guard&) = delete;
    mapped_read_guard& operator=(const mapped_read_guard&) = delete;
    mapped_read_range range;
};

// memcpy(dst, src, n) with src guarded; false (dst partly written) when a page of src is gone.
bool mapped_copy(void* dst, const void* src, size_t n);

// A mapping whose loss nothing can recover from (a model's weights, read in place by every forward
// pass): a SIGBUS inside [p, p + n) outside any guard writes `message` (and a newline) to stderr, so
// that the process that dies says why, instead of a bare "Bus error". Up to 16 at once; more are not
// named. The message is copied (up to 511 bytes).
void name_fatal_mapping(const void* p, size_t n, const char* message);
void forget_fatal_mapping(const void* p);

}  // namespace strata

// true after a SIGBUS inside the guard's range (then the reads after it did not complete). It must be
// used in the function that owns the guard, right after constructing it. The signal mask is not saved:
// the handler runs with SA_NODEFER, so nothing stays blocked after the jump.
#define STRATA_MAPPED_READ_FAULTED(guard) (sigsetjmp((guard).range.env, 0) != 0)

#endif

namespace strata {

// Runs read() with [p, p + n) guarded; false when a page of it was gone (read() did not complete). Its
// own frame holds nothing that changes after the sigsetjmp, so the caller's locals stay determinate.
template <class Read>
bool mapped_read(const void* p, size_t n, Read&& read) {
    mapped_read_guard guard(p, n);
    if (STRATA_MAPPED_READ_FAULTED(guard)) return false;
    read();
    return true;
}

}  // namespace strata
