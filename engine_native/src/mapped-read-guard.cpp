// The SIGBUS handler behind mapped_read_guard (mapped-read-guard.h): why and how, see there.
#include "mapped-read-guard.h"

#if !defined(_WIN32)

#include <signal.h>

#include <cstring>
#include <mutex>

namespace strata {

namespace {

thread_local mapped_read_range* t_armed = nullptr;
struct sigaction g_previous;   // the handler ours replaced: every SIGBUS outside a guard goes there
std::mutex g_install_mutex;
volatile sig_atomic_t g_ours = 0;
volatile sig_atomic_t g_handed_over = 0;   // a SIGBUS went to the previous handler: the process is dying

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

bool mapped_copy(void* dst, const void* src, size_t n) {
    mapped_read_guard guard(src, n);
    if (STRATA_MAPPED_READ_FAULTED(guard)) return false;
    std::memcpy(dst, src, n);
    return true;
}

}  // namespace strata

#endif
