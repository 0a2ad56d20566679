// Package fault holds eni-cni's crash points: named steps of ADD, DEL, gc
// and warm where a test build can make the process kill itself with
// SIGKILL, as a node losing power or the OOM killer would, to prove that
// the next call (a repeated ADD or DEL, gc, warm) finds a consistent store
// and host and completes or cleans up what the dead one left.
//
// Production builds have no such code path at all: without the
// `faultinject` build tag, Point is an empty function that the compiler
// inlines away together with its argument (TestPointsAbsentFromProduction
// checks the point names are not in the binary). With the tag, Point kills
// the process when ENI_CNI_FAULT names the point:
//
//	ENI_CNI_FAULT=add:after-veth      the first time ADD reaches the step
//	ENI_CNI_FAULT=save:before-rename@2 the second time any save reaches it
//
// Each call site is one line naming its step ("verb:step"), so adding points
// does not disturb the code around them; integration/fault_test.go finds
// every call site in the source and fails when one has no scenario.
package fault

// Env names the point to crash at: "name" or "name@N" (the Nth time). Only
// the faultinject build reads it.
const Env = "ENI_CNI_FAULT"

// ActionEnv set to "stop" makes the point stop the process (SIGSTOP)
// instead of killing it: a process stalled there, as on a loaded node,
// that the test resumes with SIGCONT to stage a race. Only the faultinject
// build reads it.
const ActionEnv = "ENI_CNI_FAULT_ACTION"
