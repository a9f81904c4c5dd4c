package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/attnplug/attnplug/jsonl"
)

// TestMaxLineBytesAnyLimitIsSafe: every --max-line-bytes a user can type
// either works or is a usage error; none makes a reader report lines that
// are not there (a limit near 2^63 once printed "line too long" forever).
func TestMaxLineBytesAnyLimitIsSafe(t *testing.T) {
	lines := map[string]string{
		"dispatch": `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4]}`,
		"run":      `{"backend":"fa3","forward_mode":"DECODE","seq_lens":[4],"tensors":{"random":1}}`,
	}
	outOfRange := func(n string) string {
		return fmt.Sprintf("--max-line-bytes: %s is out of range (want 1 to %d)", n, jsonl.MaxLimit)
	}
	for _, cmd := range []string{"dispatch", "run"} {
		for _, tc := range []struct {
			limit   string
			code    int
			stderr  string // wanted in stderr
			answers int
			answer  string // wanted in the first answer
		}{
			{"9223372036854775807", 2, outOfRange("9223372036854775807"), 0, ""},
			{"9223372036854775806", 2, outOfRange("9223372036854775806"), 0, ""},
			{fmt.Sprint(jsonl.MaxLimit + 1), 2, outOfRange(fmt.Sprint(jsonl.MaxLimit + 1)), 0, ""},
			{"0", 2, outOfRange("0"), 0, ""},
			{"-1", 2, outOfRange("-1"), 0, ""},
			{"9223372036854775808", 2, "invalid value", 0, ""},
			{fmt.Sprint(jsonl.MaxLimit), 0, "", 1, `"method":"MLA"`},
			{"10", 1, "", 1, "line 1: line too long: longer than the limit of 10 bytes"},
		} {
			t.Run(cmd+"/"+tc.limit, func(t *testing.T) {
				res := host(t, bins, lines[cmd]+"\n", cmd, "--max-line-bytes", tc.limit)
				if res.code != tc.code || !strings.Contains(res.stderr, tc.stderr) {
					t.Errorf("exit %d, want %d; stderr lacks %q:\n%s", res.code, tc.code, tc.stderr, res.stderr)
				}
				got := strings.Split(strings.TrimSpace(res.stdout), "\n")
				if res.stdout == "" {
					got = nil
				}
				if len(got) != tc.answers {
					t.Fatalf("%d answers, want %d:\n%.2000s", len(got), tc.answers, res.stdout)
				}
				if tc.answers > 0 && !strings.Contains(got[0], tc.answer) {
					t.Errorf("answer %s lacks %q", got[0], tc.answer)
				}
			})
		}
	}
}

// TestMissingPluginDirIsAUsageError: a plugin directory the user names
// that does not exist, or is not a directory, is a usage error naming it,
// in every command that loads plugins, from the flag or the environment.
func TestMissingPluginDirIsAUsageError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const req = `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
	for _, cmd := range []string{"dispatch", "run", "plugins", "lock", "detect", "demo", "serve", "bench"} {
		for _, tc := range []struct {
			name string
			args []string
			env  []string
			want string
		}{
			{"flag", []string{"--plugin-dir", "/nonexistent"}, nil, "--plugin-dir: plugin directory /nonexistent does not exist"},
			{"second_of_list", []string{"--plugin-dir", bins.PluginDir + ":/nonexistent/typo"}, nil, "--plugin-dir: plugin directory /nonexistent/typo does not exist"},
			{"env", nil, []string{"ATTNPLUG_PLUGIN_DIR=/nonexistent"}, "$ATTNPLUG_PLUGIN_DIR: plugin directory /nonexistent does not exist"},
			{"file", []string{"--plugin-dir", file}, nil, "--plugin-dir: " + file + " is not a directory"},
			{"empty_list", []string{"--plugin-dir", ":"}, nil, `--plugin-dir: ":" names no directory`},
		} {
			t.Run(cmd+"/"+tc.name, func(t *testing.T) {
				res := hostEnv(t, bins, tc.env, req, append([]string{cmd}, tc.args...)...)
				if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
					t.Errorf("exit %d, want 2; stderr lacks %q:\n%s", res.code, tc.want, res.stderr)
				}
				if res.stdout != "" {
					t.Errorf("stdout: %.500s, want nothing", res.stdout)
				}
			})
		}
	}
	// A directory that exists, empty or not, is fine.
	res := host(t, bins, req, "dispatch", "--plugin-dir", t.TempDir())
	if res.code != 0 || !strings.Contains(res.stdout, `"plugin":"core"`) {
		t.Errorf("empty plugin directory: exit %d: %s%s", res.code, res.stdout, res.stderr)
	}
}
