// Runs the built `moekit` tool (MOEKIT_CLI_BINARY, set by tests/CMakeLists.txt) as a child process
// with arguments and extra environment variables, capturing stdout + stderr and the exit status;
// a child can also be signalled once its output shows it reached a given point.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace moekit::clitest {

struct CliResult {
  bool exited = false;  // false: killed by a signal (or timed out)
  int code = -1;        // exit code when exited
  int signal = 0;       // the signal when not exited
  std::string output;   // stdout and stderr, interleaved
  double seconds = 0;
  std::string first_line() const { return output.substr(0, output.find('\n')); }
};

using Env = std::vector<std::pair<std::string, std::string>>;

class CliProcess {
 public:
  CliProcess(const std::vector<std::string>& args, const Env& env = {}) {
    start_ = std::chrono::steady_clock::now();
    // Everything the child needs is built before fork(): after it, in a process with threads,
    // only async-signal-safe calls are allowed (no malloc, no setenv).
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      bool replaced = key == "MOEKIT_BACKEND";  // the test's own must not leak into a case
      for (const auto& [k, v] : env) replaced |= key == k;
      if (!replaced) env_strings.push_back(kv);
    }
    std::vector<char*> envp, argv{const_cast<char*>(MOEKIT_CLI_BINARY)};
    for (auto& kv : env_strings) envp.push_back(kv.data());
    envp.push_back(nullptr);
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe(fds) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execve(MOEKIT_CLI_BINARY, argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~CliProcess() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;

  // Reads output until it contains `needle` (true) or EOF / the timeout (false).
  bool read_until(const std::string& needle, double timeout_s) {
    const auto deadline = start_ + std::chrono::duration<double>(timeout_s);
    while (output_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0 || !read_some(static_cast<int>(left))) return false;
    }
    return true;
  }

  void send(int sig) { ::kill(pid_, sig); }

  // Reads the rest of the output and waits; a child still running after timeout_s is killed.
  CliResult wait(double timeout_s = 120) {
    read_until("\x01never\x02", timeout_s);  // to EOF or the deadline
    const auto deadline = start_ + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      ::usleep(1000);
    }
    waited_ = true;
    CliResult r;
    r.exited = WIFEXITED(status);
    r.code = r.exited ? WEXITSTATUS(status) : -1;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    r.output = output_;
    r.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return r;
  }

 private:
  bool read_some(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool waited_ = false;
  std::string output_;
  std::chrono::steady_clock::time_point start_;
};

inline CliResult run_cli(const std::vector<std::string>& args, const Env& env = {},
                         double timeout_s = 120) {
  CliProcess p(args, env);
  return p.wait(timeout_s);
}

}  // namespace moekit::clitest
