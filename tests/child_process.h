// The one way the tests start a process of their own (a `detaudit serve`, the verdict server, a
// `detaudit run` to interrupt or kill): fork and exec with the child's stdin, stdout and stderr
// set, its environment extended, and PR_SET_PDEATHSIG so that a child never outlives the test
// process however it ends (a failed REQUIRE, a CTest timeout, a crash). The object owns the child:
// its destructor kills (SIGKILL) and reaps one still running.
//
// Non-goals: capturing output in memory (test_util.h's run_cmd does that for a command that runs
// to its end); Windows.
// Thread-safety: one object per thread; construct it from the thread that will wait for it (the
// death signal follows the thread that forked).
#pragma once

#include <csignal>
#include <fcntl.h>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "test_util.h"

namespace detaudit::test {

struct child_spec {
  std::vector<std::string> argv;                             // argv[0]: the program's path
  std::vector<std::pair<std::string, std::string>> env;      // set in the child only
  bool stdout_pipe = false;  // stdout into a pipe the parent reads with first_line()
  std::string stdout_path;   // else into this file ("" : /dev/null)
  std::string stderr_path;   // stderr into this file ("" : /dev/null)
};

// `sh -c "exec CMD"`: for a command line that redirects its own output.
inline child_spec shell_spec(const std::string& cmd) { return {{"/bin/sh", "-c", "exec " + cmd}, {}, false, "", ""}; }

class child_process {
 public:
  // Throws std::runtime_error when the pipe or the fork fails (an exec failure is exit 127).
  explicit child_process(child_spec s) {
    int fds[2] = {-1, -1};
    if (s.stdout_pipe && ::pipe(fds) != 0) throw std::runtime_error("child_process: pipe failed");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("child_process: fork failed");
    if (pid_ == 0) exec_child(s, fds, parent);
    if (s.stdout_pipe) {
      ::close(fds[1]);
      out_fd_ = fds[0];
    }
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    kill9();
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  pid_t pid() const { return pid_; }

  // The first line the child writes to its stdout pipe, within timeout_s ("" when none came).
  std::string first_line(int timeout_s) {
    const std::string full = read_first_line(out_fd_, timeout_s);
    ::close(out_fd_);
    out_fd_ = -1;
    return full.substr(0, full.find('\n'));
  }

  // False once the child has exited (reaped here); exit_code() and status() then say how.
  bool alive() {
    if (pid_ < 0) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) != pid_) return true;
    reap(st);
    return false;
  }
  // Waits for the child to end; its exit code, 128+N when killed by signal N (-1: none).
  int wait(rusage* ru = nullptr) {
    if (pid_ < 0) return exit_code_;
    int st = 0;
    if (::wait4(pid_, &st, 0, ru) == pid_) reap(st);
    return exit_code_;
  }
  // Sends `sig` and waits for the child to end.
  int signal_and_wait(int sig) {
    if (pid_ < 0) return exit_code_;
    ::kill(pid_, sig);
    return wait();
  }
  // SIGTERM, then up to wait_s for the child to end (SIGKILL after: 128 + 9).
  int stop(int wait_s = 600) {
    if (!alive()) return exit_code_;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < wait_s * 50 && alive(); ++i) ::usleep(20000);
    if (pid_ > 0) kill9();
    return exit_code_;
  }
  // SIGKILL and reap: a process that dies mid-run.
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    if (::waitpid(pid_, &st, 0) == pid_) reap(st);
    pid_ = -1;
  }
  int exit_code() const { return exit_code_; }
  bool exited_normally() const { return normal_exit_; }
  // "exited with status N" or "killed by signal N".
  std::string status() const { return status_; }

 private:
  [[noreturn]] static void exec_child(child_spec& s, int fds[2], pid_t parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, however it ends
    if (::getppid() != parent) ::_exit(127);  // the parent is already gone
    const auto redirect = [](const std::string& path, int to) {
      const int fd = ::open(path.empty() ? "/dev/null" : path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, to);
      ::close(fd);
    };
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, 0);
    if (s.stdout_pipe) {
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      ::close(fds[1]);
    } else {
      redirect(s.stdout_path, 1);
    }
    redirect(s.stderr_path, 2);
    for (const auto& [k, v] : s.env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (std::string& a : s.argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }

  void reap(int st) {
    normal_exit_ = WIFEXITED(st);
    exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    status_ = WIFEXITED(st) ? "exited with status " + std::to_string(WEXITSTATUS(st))
                            : "killed by signal " + std::to_string(WTERMSIG(st));
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int exit_code_ = -1;
  bool normal_exit_ = false;
  std::string status_ = "not started";
};

// `BIN serve -m MODEL --host 127.0.0.1 --port 0 EXTRA...` with stderr in err_path and `env` in its
// environment; `port` is read from its first stdout line ("listening on http://127.0.0.1:PORT").
// Throws std::runtime_error naming what it printed when it does not start within timeout_s.
struct serve_process {
  child_process proc;
  int port = 0;

  serve_process(const std::string& bin, const std::string& model, const std::vector<std::string>& extra, const std::string& err_path,
                const std::vector<std::pair<std::string, std::string>>& env = {}, int timeout_s = 120)
      : proc(spec(bin, model, extra, err_path, env)) {
    const std::string line = proc.first_line(timeout_s);
    const std::string prefix = "listening on http://127.0.0.1:";
    if (line.rfind(prefix, 0) != 0)
      throw std::runtime_error("detaudit serve did not start (stdout: '" + line + "', stderr: " + file_text(err_path) + ")");
    port = std::stoi(line.substr(prefix.size()));
  }

 private:
  static child_spec spec(const std::string& bin, const std::string& model, const std::vector<std::string>& extra,
                         const std::string& err_path, const std::vector<std::pair<std::string, std::string>>& env) {
    child_spec s;
    s.argv = {bin, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0"};
    s.argv.insert(s.argv.end(), extra.begin(), extra.end());
    s.env = env;
    s.stdout_pipe = true;
    s.stderr_path = err_path;
    return s;
  }
};

}  // namespace detaudit::test
