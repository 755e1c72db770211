// Ctrl-C, SIGTERM and SIGHUP end `moekit` cleanly: a dedicated thread waits for them (sigwait;
// they are blocked in every other thread), removes the outputs still being written
// (io::remove_uncommitted_outputs: no partial checkpoint, no empty directory) and exits with
// 128 + the signal number (130 for Ctrl-C), as a shell reports it. SIGPIPE is ignored, so a
// closed pipe (`moekit run | head -1`) is a write error, not a death by signal.
#pragma once

namespace moekit::cli {

// Call first in main(), before any other thread exists (threads inherit the signal mask).
void install_interrupt_handling();

}  // namespace moekit::cli
