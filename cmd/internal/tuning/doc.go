// Package tuning holds the settings a process makes for the whole process
// (the collector's pace, a soft memory limit, returning freed heap and the
// program's pages to the system, settling grown stacks) in one place, for
// the mains to call once each.
//
// A service or a command is not to call it: the heap is the process's, so
// what is good for one service may be wrong for the process around it (a
// bed runs thousands of host services in one process). A service that
// should give memory back is handed a function to call
// (service.Config.ReturnHeap).
package tuning
