#pragma once
// Run a call in a forked child, for misuse whose failure mode may be undefined behaviour (a wild
// read, an overflowed allocation, std::terminate): the test then observes "crashed" instead of
// dying with the whole test executable (or aborting a sanitizer run).
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

namespace xattn::hardening {

struct outcome {
  enum kind_t { returned, invalid_argument, other_exception, crashed, timed_out } kind = crashed;
  int signal = 0;
  std::string message;  // what() of the exception, if any

  bool threw_invalid_argument() const { return kind == invalid_argument; }
  std::string describe() const {
    switch (kind) {
      case returned:
        return "returned normally";
      case invalid_argument:
        return "threw std::invalid_argument: " + message;
      case other_exception:
        return "threw another exception: " + message;
      case timed_out:
        return "timed out";
      default:
        return "crashed with signal " + std::to_string(signal);
    }
  }
};

/// Exit statuses the child uses; sanitizers exit with 1, which must not read as a verdict.
inline constexpr int exit_base = 70;

/// f() in a child process with a time limit; the child reports through its exit status and a pipe.
template <class F>
outcome isolated(F f, unsigned seconds = 20) {
  int fd[2];
  if (::pipe(fd) != 0) throw std::runtime_error("isolated: pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("isolated: fork failed");
  if (pid == 0) {
    ::close(fd[0]);
    // the parent's handlers (Catch's) would report the child's crash as the parent's test failure
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGALRM}) std::signal(sig, SIG_DFL);
    ::alarm(seconds);
    auto report = [&](int code, const char* msg) {
      const std::string m = msg;
      [[maybe_unused]] auto n = ::write(fd[1], m.data(), m.size());
      ::_exit(code);
    };
    try {
      f();
    } catch (const std::invalid_argument& e) {
      report(exit_base + outcome::invalid_argument, e.what());
    } catch (const std::exception& e) {
      report(exit_base + outcome::other_exception, e.what());
    }
    report(exit_base + outcome::returned, "");
  }
  ::close(fd[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fd[0], buf, sizeof buf)) > 0;) msg.append(buf, std::size_t(n));
  ::close(fd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  outcome o;
  o.message = msg;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) - exit_base : -1;
  if (code >= outcome::returned && code <= outcome::other_exception) {
    o.kind = outcome::kind_t(code);
  } else if (WIFSIGNALED(status)) {
    o.signal = WTERMSIG(status);
    o.kind = o.signal == SIGALRM ? outcome::timed_out : outcome::crashed;
  } else {
    o.kind = outcome::crashed;  // a sanitizer's non-zero exit
    o.signal = WIFEXITED(status) ? -WEXITSTATUS(status) : 0;
  }
  return o;
}

}  // namespace xattn::hardening
