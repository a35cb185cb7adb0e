// Interrupts held while a checkpoint is saved (ft/checkpoint/save_signals.h).
#include "ft/checkpoint/save_signals.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace ft {
namespace {

// Lock-free atomics are async-signal-safe; nothing else is touched here.
std::atomic<int> g_saves{0};          // saves in flight on this process
std::atomic<int> g_held{0};           // the interrupt held, 0: none
std::atomic<unsigned> g_grace_s{120};  // alarm() takes whole seconds
std::atomic<pid_t> g_launcher{0};     // the launcher's pid when we are its worker
std::atomic<bool> g_installed{false};

void say(const char* text) {
  const ssize_t ignored = ::write(2, text, std::strlen(text));
  (void)ignored;
}

// Stops the process on `sig` as if no handler had been installed.
void stop_on(int sig) {
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // inside a handler: delivered as soon as it returns
}

void on_interrupt(int sig, siginfo_t* info, void*) {
  const int held = g_held.load();
  const pid_t launcher = g_launcher.load();
  if (held != 0 && launcher != 0 && info != nullptr && info->si_pid == launcher) return;  // its forward of `held`
  if (held != 0) {
    say("ft: second interrupt: abandoning the checkpoint being saved (the next run removes its hidden directory)\n");
    stop_on(sig);
    return;
  }
  if (g_saves.load() == 0) {
    stop_on(sig);
    return;
  }
  g_held.store(sig);
  // The save may have ended between the two loads: then nobody would stop us.
  if (g_saves.load() == 0) {
    stop_on(sig);
    return;
  }
  say(sig == SIGINT ? "ft: SIGINT while saving a checkpoint: finishing it first (interrupt again to abandon it)\n"
                    : "ft: SIGTERM while saving a checkpoint: finishing it first (interrupt again to abandon it)\n");
  ::alarm(g_grace_s.load());
}

void on_alarm(int) {
  say("ft: the checkpoint being saved did not finish within runtime.save_grace_s of the interrupt; abandoning it\n");
  const int held = g_held.load();
  stop_on(held != 0 ? held : SIGTERM);
}

}  // namespace

void hold_interrupts_during_saves(double grace_s) {
  g_grace_s.store(static_cast<unsigned>(std::max(1.0, std::ceil(grace_s))));
  if (g_installed.exchange(true)) return;
  if (std::getenv("FT_LAUNCHED") != nullptr) g_launcher.store(::getppid());
  struct sigaction sa {};
  sa.sa_sigaction = on_interrupt;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction alarm {};
  alarm.sa_handler = on_alarm;
  sigemptyset(&alarm.sa_mask);
  sigaction(SIGALRM, &alarm, nullptr);
}

bool interrupt_held() { return g_held.load() != 0; }

SaveInFlight::SaveInFlight() { g_saves.fetch_add(1); }

SaveInFlight::~SaveInFlight() {
  if (g_saves.fetch_sub(1) != 1) return;
  const int held = g_held.load();
  if (held == 0) return;
  ::alarm(0);
  say(held == SIGINT ? "ft: checkpoint saved; stopping on SIGINT\n" : "ft: checkpoint saved; stopping on SIGTERM\n");
  stop_on(held);
}

}  // namespace ft
