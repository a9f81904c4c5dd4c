package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// groupAlive reports whether a process of process group pgid lives (a
// zombie does not count), from /proc.
func groupAlive(pgid int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// TestConformBoundsAPluginThatHangs: conform --start-timeout 2s on a
// script plugin that sleeps 100 s (a child holding its pipes) reports the
// run by hand and the handshake failed, within a bound its flags give
// (it took 1 min 42 s waiting on the pipes), and no process of the groups
// it started is left.
func TestConformBoundsAPluginThatHangs(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := filepath.Join(dir, "attnplug-backend-slow")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho $$ >> "+pids+"\nsleep 100\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r := host(t, bins, "", "conform", "--start-timeout", "2s", script)
	// 2 s for the run by hand, 2 s for the handshake, a few seconds to
	// kill and reap: far below the 100 s of the sleep.
	if took := time.Since(t0); took > 60*time.Second {
		t.Errorf("conform --start-timeout 2s took %s", took)
	}
	for _, want := range []string{"FAIL  run-by-hand", "did not exit within 2s", "FAIL  handshake"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the report does not say %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 1 {
		t.Errorf("exit %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	started := strings.Fields(string(data))
	if len(started) < 2 {
		t.Fatalf("the script started %d times, want 2 (by hand, then the handshake): %q", len(started), data)
	}
	for _, p := range started {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(5 * time.Second); groupAlive(pid) && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if groupAlive(pid) {
			t.Errorf("a process of group %d (a start of the script) outlived conform", pid)
		}
	}
}

// TestConformLeavesNothingInTheTemporaryDirectory: a conform run leaves
// no plugin socket (go-plugin's plugin<digits>) nor anything else in the
// temporary directory it used.
func TestConformLeavesNothingInTheTemporaryDirectory(t *testing.T) {
	tmp, err := os.MkdirTemp("", "ap-") // short: a socket's path has 107 bytes at most
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	r := hostEnv(t, bins, []string{"TMPDIR=" + tmp}, "", "conform", "--probes", "0", "--max-requests", "1", bins.Plugin("fa3"))
	if r.code != 0 {
		t.Fatalf("conform fa3: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("conform left %s in %s", strings.Join(names, ", "), tmp)
	}
}
