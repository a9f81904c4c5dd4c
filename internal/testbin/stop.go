package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Stop sends SIGSTOP to pid and waits until every thread of it is
// stopped, within limit. The kill only queues the signal: the thread the
// kernel picks has to run to begin the group stop, and until it does the
// process's other threads go on running (on a loaded machine, long enough
// to answer a call). A test that means "the plugin can no longer answer"
// must wait for the stop itself.
func Stop(pid int, limit time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if len(running) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: threads %v not stopped %s after SIGSTOP", pid, running, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads returns the threads of pid that are not stopped, read
// from /proc/pid/task/*/stat; a process that is gone has none.
func runningThreads(pid int) ([]string, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var running []string
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "task", task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		if st := taskState(string(stat)); st != 'T' && st != 't' && st != 'Z' && st != 'X' {
			running = append(running, task.Name()+":"+string(st))
		}
	}
	return running, nil
}

// taskState is the state letter of a /proc stat line: the field after the
// command, which is in parentheses and may itself hold ") ".
func taskState(stat string) byte {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return '?'
	}
	return stat[i+2]
}
