// Reads of a memory-mapped file that another process may truncate in place: touching a page past the
// file's new end raises SIGBUS, which would kill the server. A mapped_read_guard arms, for this thread,
// the byte range it reads; the process's SIGBUS handler (installed once, chaining to the previous one:
// Python's faulthandler, or the default) jumps back to the guard's STRATA_MAPPED_READ_FAULTED point when
// the faulting address lies inside the armed range, and leaves every other SIGBUS to the previous
// handler. Only plain loads and stores may run between the two (no lock taken, no allocation, no
// exception): the jump skips them.
// Windows refuses to truncate a mapped file, but a page still fails to come in when the file's disk goes
// away mid-read (a USB disk pulled, a network share dropped): EXCEPTION_IN_PAGE_ERROR, which kills the
// process. Built with MSVC (or clang-cl), mapped_read runs the read under __try, and a filter
// takes that exception only for an address inside the range (any other exception goes on as before); the
// same rule holds for what runs inside: plain loads and stores (no unwinding happens). Other Windows
// compilers have no __try: there the reads are not guarded.
#pragma once

#include <cstddef>

#if defined(_WIN32)

#include <cstring>

#if defined(_MSC_VER)   // MSVC, clang-cl
#include <excpt.h>
#define STRATA_MAPPED_READ_SEH 1
#endif

namespace strata {
// EXCEPTION_EXECUTE_HANDLER for an EXCEPTION_IN_PAGE_ERROR at an address in [p, p + n), else
// EXCEPTION_CONTINUE_SEARCH; `exception_pointers` is GetExceptionInformation()'s EXCEPTION_POINTERS.
int in_page_error_within(void* exception_pointers, const void* p, size_t n);

// Runs read() with [p, p + n) guarded; false when a page of it could not be read in (read() did not complete).
template <class Read>
bool mapped_read(const void* p, size_t n, Read&& read) {
#if defined(STRATA_MAPPED_READ_SEH)
    if (n) {
        __try {
            read();
        } __except (in_page_error_within(GetExceptionInformation(), p, n)) {
            return false;
        }
        return true;
    }
#endif
    read();
    return true;
}

inline void name_fatal_mapping(const void*, size_t, const char*) {}
inline void forget_fatal_mapping(const void*) {}
inline bool mapped_copy(void* dst, const void* src, size_t n) {
    return mapped_read(src, n, [&] { std::memcpy(dst, src, n); });
}
}  // namespace strata

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

#endif
