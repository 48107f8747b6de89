// The SIGBUS handler behind mapped_read_guard, and Windows' filter for mapped_read's __try
// (mapped-read-guard.h): why and how, see there.
#include "mapped-read-guard.h"

#if defined(_WIN32)

#include <windows.h>

namespace strata {

int in_page_error_within(void* exception_pointers, const void* p, size_t n) {
    const EXCEPTION_RECORD* r = static_cast<EXCEPTION_POINTERS*>(exception_pointers)->ExceptionRecord;
    // EXCEPTION_IN_PAGE_ERROR's parameters: [0] read / write / execute, [1] the address, [2] the NTSTATUS
    if (r->ExceptionCode != EXCEPTION_IN_PAGE_ERROR || r->NumberParameters < 2) return EXCEPTION_CONTINUE_SEARCH;
    const char* addr = reinterpret_cast<const char*>(r->ExceptionInformation[1]);
    const char* lo = static_cast<const char*>(p);
    return addr >= lo && addr < lo + n ? EXCEPTION_EXECUTE_HANDLER : EXCEPTION_CONTINUE_SEARCH;
}

}  // namespace strata

#else

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

namespace strata {

namespace {

thread_local mapped_read_range* t_armed = nullptr;
struct sigaction g_previous;   // the handler ours replaced: every SIGBUS outside a guard goes there
std::mutex g_install_mutex;
volatile sig_atomic_t g_ours = 0;
volatile sig_atomic_t g_handed_over = 0;   // a SIGBUS went to the previous handler: the process is dying

// The named fatal mappings: the handler reads them without a lock (a slot is published by its `lo`
// after the rest is written, and withdrawn by clearing `lo` first).
struct fatal_mapping {
    std::atomic<const char*> lo{nullptr};
    const char* hi = nullptr;
    char message[512] = {};
    size_t message_len = 0;
};
fatal_mapping g_fatal[16];
std::mutex g_fatal_mutex;

void say_fatal_mapping(const char* addr) {
    for (fatal_mapping& f : g_fatal) {
        const char* lo = f.lo.load(std::memory_order_acquire);
        if (lo && addr >= lo && addr < f.hi) {
            ssize_t ignored = write(2, f.message, f.message_len);
            (void)ignored;
            return;
        }
    }
}

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
    const char* addr = info ? static_cast<const char*>(info->si_addr) : nullptr;
    if (info && info->si_code > 0) {   // a fault (not kill / raise): is it a read this thread guards?
        for (mapped_read_range* r = t_armed; r; r = r->outer) {
            if (addr >= r->lo && addr < r->hi) {
                t_armed = r->outer;    // the guard's destructor is skipped by the jump
                siglongjmp(r->env, 1);
            }
        }
    }
    if (info && info->si_code > 0 && !g_handed_over) say_fatal_mapping(addr);
    // Not ours: hand it to the previous handler as if we were not here. Put it back and return: a
    // fault re-executes and reaches it; a sent signal is sent again. Back here a second time (a handler
    // that hands it back, as faulthandler does once it has printed): the default action, death.
    if (g_handed_over) {
        signal(SIGBUS, SIG_DFL);
    } else {
        g_handed_over = 1;
        sigaction(SIGBUS, &g_previous, nullptr);
    }
    g_ours = 0;
    if (!info || info->si_code <= 0) raise(sig);
    (void)uctx;
}

// Installs our handler on top of whatever holds SIGBUS now (again after a later sigaction replaced it,
// e.g. faulthandler.enable(): that one is then our previous handler).
void ensure_installed() {
    struct sigaction now;
    if (g_ours && sigaction(SIGBUS, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
        now.sa_sigaction == on_sigbus) {
        return;
    }
    std::lock_guard<std::mutex> lock(g_install_mutex);
    if (sigaction(SIGBUS, nullptr, &now) != 0) return;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus) {
        g_ours = 1;
        return;
    }
    struct sigaction ours;
    std::memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_sigbus;
    ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    struct sigaction previous;
    if (sigaction(SIGBUS, &ours, &previous) == 0) {
        g_previous = previous;
        g_handed_over = 0;
        g_ours = 1;
    }
}

}  // namespace

mapped_read_guard::mapped_read_guard(const void* p, size_t n) {
    if (n) ensure_installed();
    range.lo = static_cast<const char*>(p);
    range.hi = range.lo + n;
    range.outer = t_armed;
    t_armed = &range;
}

mapped_read_guard::~mapped_read_guard() {
    t_armed = range.outer;
}

void name_fatal_mapping(const void* p, size_t n, const char* message) {
    if (!p || !n) return;
    ensure_installed();
    std::lock_guard<std::mutex> lock(g_fatal_mutex);
    for (fatal_mapping& f : g_fatal) {
        if (f.lo.load(std::memory_order_relaxed)) continue;
        size_t len = std::min(std::strlen(message), sizeof f.message - 2);
        std::memcpy(f.message, message, len);
        f.message[len] = '\n';
        f.message_len = len + 1;
        f.hi = static_cast<const char*>(p) + n;
        f.lo.store(static_cast<const char*>(p), std::memory_order_release);
        return;
    }
}

void forget_fatal_mapping(const void* p) {
    std::lock_guard<std::mutex> lock(g_fatal_mutex);
    for (fatal_mapping& f : g_fatal) {
        if (f.lo.load(std::memory_order_relaxed) == p) f.lo.store(nullptr, std::memory_order_release);
    }
}

bool mapped_copy(void* dst, const void* src, size_t n) {
    mapped_read_guard guard(src, n);
    if (STRATA_MAPPED_READ_FAULTED(guard)) return false;
    std::memcpy(dst, src, n);
    return true;
}

}  // namespace strata

#endif
