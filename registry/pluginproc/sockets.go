package pluginproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/attnplug/attnplug/localsock"
	"github.com/hashicorp/go-hclog"
)

// socketDir is the private directory of one registry's plugin sockets.
// go-plugin makes each plugin create its Unix socket in
// $PLUGIN_UNIX_SOCKET_DIR, or in the system's temporary directory, where a
// host killed with SIGKILL leaves them for good. Each registry therefore
// makes <base>/<pid>-<random> (base: Config.SocketDir, else
// $XDG_RUNTIME_DIR/attnplug, else <temp dir>/attnplug-<uid>, mode 0700),
// removes it at Close, and, when it makes its own, removes the directories
// of hosts whose process is gone.
type socketDir struct {
	base string
	log  hclog.Logger

	once sync.Once
	path string // "" when it could not be made: go-plugin's default then
	err  error
}

// defaultSocketBase is where the socket directories go by default: the
// user's private socket directory, where attnplug serve's default socket
// lies too (localsock.Dir).
func defaultSocketBase() string { return localsock.Dir() }

// dir returns the directory, making it on first use; "" and the error when
// it cannot be made.
func (s *socketDir) dir() (string, error) {
	s.once.Do(func() {
		if err := privateDir(s.base); err != nil {
			s.err = err
		} else {
			removeDeadHosts(s.base)
			s.path, s.err = os.MkdirTemp(s.base, strconv.Itoa(os.Getpid())+"-")
		}
		if s.err != nil {
			s.log.Warn("plugin sockets go to the system's temporary directory", "error", s.err)
		}
	})
	return s.path, s.err
}

// remove removes the directory and whatever sockets are left in it.
func (s *socketDir) remove() {
	s.once.Do(func() {}) // none is made after this
	if s.path != "" {
		os.RemoveAll(s.path)
	}
}

// privateDir makes dir with mode 0700 when it is absent, and refuses one
// that is not a directory owned by the caller that only the caller can
// use: its sockets would be open to others (localsock.MakePrivateDir).
func privateDir(dir string) error {
	if err := localsock.MakePrivateDir(dir); err != nil {
		return fmt.Errorf("plugin socket directory: %w", err)
	}
	return nil
}

// removeDeadHosts removes the socket directories under base of host
// processes that are gone.
func removeDeadHosts(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		pidText, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || !e.IsDir() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// socketPath matches the path of a plugin's socket in an error of gRPC
// (go-plugin names them plugin<digits>, in the socket directory).
var socketPath = regexp.MustCompile(`(unix:)?/[^\s"']*/plugin[0-9]+`)

// redactSockets returns err with the paths of plugin sockets in its text
// replaced by "[plugin socket]": a failure's text reaches the clients of
// attnplug serve, to whom the host's private paths are none of their
// business. errors.Is and errors.As see err as before.
func redactSockets(err error) error {
	msg := err.Error()
	if !socketPath.MatchString(msg) {
		return err
	}
	return &redacted{msg: socketPath.ReplaceAllString(msg, "[plugin socket]"), err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }
