package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/regfile"
	"go.yaml.in/yaml/v3"
)

// checkListen checks a listen address (field names the key): host:port, or
// "off" where allowed. A bare port, the common slip (listen: 8080), gets
// the fix spelled out.
func checkListen(field, addr string, offOK bool) error {
	if addr == "" || offOK && addr == "off" {
		return nil
	}
	if _, err := strconv.Atoi(addr); err == nil {
		return fmt.Errorf("%s: %q is a port without a host: write \":%s\" for port %s on every interface, or \"127.0.0.1:%s\" for this machine only (quoted in YAML)", field, addr, addr, addr, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port (such as \":8080\" or \"127.0.0.1:9090\"): %v", field, addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s: %q: the port must be a number from 0 to 65535", field, addr)
	}
	if strings.Contains(host, "://") || strings.Contains(host, "/") {
		return fmt.Errorf("%s: %q: give host:port, not a URL", field, addr)
	}
	return nil
}

// AdminExposed reports whether an admin listen address accepts connections
// from other machines: anything but "off" and a loopback host. The admin
// listener has no authentication.
func AdminExposed(addr string) bool {
	if addr == "" || addr == "off" {
		return false
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// AdminExposedWarning is what serve logs, and config check prints, for an
// admin listener other machines can reach.
func AdminExposedWarning(addr string) string {
	return fmt.Sprintf("WARNING: the admin listener %s (/metrics, /admin/api/*) has no authentication and accepts connections from other machines: keep it on a private network, or bind it to 127.0.0.1", addr)
}

// bareListError explains a tenants file written as a bare YAML list, which
// fails to load because its tenants belong under a tenants: key. It returns
// nil when path is not such a file.
func bareListError(path string) error {
	b, err := regfile.ReadFile(path)
	if err != nil {
		return nil
	}
	var root yaml.Node
	if yaml.Unmarshal(b, &root) != nil || len(root.Content) != 1 || root.Content[0].Kind != yaml.SequenceNode {
		return nil
	}
	return fmt.Errorf("tenants_file %s: line %d: the file is a bare list; put the list under a tenants: key (first line \"tenants:\", then the list indented)", path, root.Content[0].Line)
}

// withLines puts "line N: " before each validation error whose message
// starts with a key path found in the document src ("tenants[0].slo: ..."),
// and lists the errors in the order of the file.
func withLines(src []byte, err error) error {
	var root yaml.Node
	if err == nil || yaml.Unmarshal(src, &root) != nil {
		return err
	}
	leaves := cfgtypes.Flatten(nil, err)
	changed := false
	for i, e := range leaves {
		msg := e.Error()
		if path, _, found := strings.Cut(msg, ": "); found && !strings.HasPrefix(msg, "line ") {
			if line := lineOf(&root, path); line > 0 {
				leaves[i], changed = &lineError{line: line, err: e}, true
			}
		}
	}
	if !changed {
		return err
	}
	// Those without a line go last.
	slices.SortStableFunc(leaves, func(a, b error) int { return lineOfErr(a) - lineOfErr(b) })
	return errors.Join(leaves...)
}

type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

func lineOfErr(err error) int {
	if le, ok := err.(*lineError); ok {
		return le.line
	}
	return 1 << 30
}

// lineOf returns the line of the key path ("tenants[1].keys[0].sha256",
// `tenants[0].models["llama-3.1"].aliases[2]`: a key in brackets is a Go
// quoted string) in the document, or the line of the nearest part found,
// or 0 when none is there.
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	line := 0
	for first := true; path != ""; first = false {
		key, index := "", -1
		switch {
		case strings.HasPrefix(path, `["`):
			q, err := strconv.QuotedPrefix(path[1:])
			if err != nil || !strings.HasPrefix(path[1+len(q):], "]") {
				return line
			}
			key, _ = strconv.Unquote(q)
			path = path[1+len(q)+1:]
		case path[0] == '[':
			j := strings.IndexByte(path, ']')
			i, err := strconv.Atoi(path[1:max(j, 1)])
			if j < 0 || err != nil || i < 0 {
				return line
			}
			index, path = i, path[j+1:]
		default:
			if !first {
				if path[0] != '.' {
					return line
				}
				path = path[1:]
			}
			j := strings.IndexAny(path, ".[")
			if j < 0 {
				j = len(path)
			}
			key, path = path[:j], path[j:]
			if key == "" || strings.ContainsAny(key, "] \t\n") {
				return line
			}
		}
		var next *yaml.Node
		if index >= 0 {
			if n.Kind == yaml.SequenceNode && index < len(n.Content) {
				next = n.Content[index]
				line = next.Line
			}
		} else if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// KeysFileWarnings returns a warning for the file that holds the gateway
// keys (the tenants file, or the configuration when the tenants are in it)
// when any user may write it, or may replace it (its folder, or the folder
// of the file a symbolic link leads to, writable by any user without the
// sticky bit): whoever can add a line to it has a key of their own, and the
// gateway loads a change by itself within two seconds, with no signal.
// Nothing refused it or said so. A file or folder writable by its group
// only is not named: a umask of 002 makes every file so, its group often
// its owner alone (a review found the warning at every start and reload
// there). Serve logs them at start and at each reload; config check
// prints them.
func (c *Config) KeysFileWarnings() []string {
	path, what := c.TenantsFile, "tenants_file"
	if path == "" {
		if len(c.Tenants) == 0 || c.Path == "" {
			return nil
		}
		path, what = c.Path, "the configuration (it holds the tenants)"
	}
	var out []string
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o002 != 0 {
		out = append(out, fmt.Sprintf("WARNING: %s %s is writable by any user (mode %#o): whoever can write it can add a gateway key of their own, and the gateway loads a change by itself; chmod o-w %s", what, path, fi.Mode().Perm(), path))
	}
	dirs := []string{filepath.Dir(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil && filepath.Dir(real) != dirs[0] {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o002 != 0 && fi.Mode()&os.ModeSticky == 0 {
			out = append(out, fmt.Sprintf("WARNING: the folder %s of %s is writable by any user (mode %#o): whoever can write it can put a file of their own in its place; chmod o-w %s", dir, what, fi.Mode().Perm(), dir))
		}
	}
	return out
}
