// Interrupts while a checkpoint is being saved.
//
// A Ctrl-C (SIGINT) or SIGTERM that lands while no checkpoint is in flight
// stops the process at once, as it always did: nothing is half-written,
// since checkpoints are built under a hidden name (ft/base/fs.h). One that lands
// while a save is in flight is held: the save is finished (manifest, commit,
// rotation) and then the process stops on that same signal. A second
// interrupt abandons the save (the hidden directory is removed by the next
// run), and so does the grace period running out.
//
// Under the launcher, a terminal's Ctrl-C reaches every worker directly and
// the launcher forwards it too: the forwarded copy (sent by the parent while
// one is already held) is the same interrupt, not a second one.
//
// Signal handlers can only reach process-wide state; these few atomics are
// the one place in the checkpoint area that has any.
#pragma once

namespace ft {

/// Installs the SIGINT/SIGTERM handlers (idempotent); `grace_s`: how long
/// a held interrupt waits for the save in flight before abandoning it.
void hold_interrupts_during_saves(double grace_s);

/// Whether an interrupt is held for the save in flight: a new save must
/// not begin then (the process stops once the one in flight is committed).
bool interrupt_held();

/// One save in flight on this process, for as long as it lives. When the
/// last one ends with an interrupt held, the process stops on that signal.
class SaveInFlight {
 public:
  SaveInFlight();
  ~SaveInFlight();
  SaveInFlight(const SaveInFlight&) = delete;
  SaveInFlight& operator=(const SaveInFlight&) = delete;
};

}  // namespace ft
