// The signal-watching thread (interrupt.hpp).
#include "cli/interrupt.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "moekit/io/staged_output.hpp"

namespace moekit::cli {

void install_interrupt_handling() {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    // Waits for a commit in progress (staged_output.cpp), then removes what is uncommitted.
    io::remove_uncommitted_outputs();
    const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    std::fprintf(stderr, "\nmoekit: interrupted by %s; partial outputs removed\n", name);
    std::fflush(stderr);
    _exit(128 + sig);
  }).detach();
}

}  // namespace moekit::cli
