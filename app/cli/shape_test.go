//go:build !windows

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// shapeCore is a service with nothing in it yet: empty listings, and
// changes that succeed.
type shapeCore struct{ service.Core }

func (shapeCore) Status(context.Context) (service.Status, error) { return service.Status{}, nil }
func (shapeCore) StartVM(context.Context) error                  { return nil }
func (shapeCore) StopVM(context.Context) error                   { return nil }
func (shapeCore) RestartVM(context.Context) error                { return nil }
func (shapeCore) SetWorkspace(context.Context, string, bool, changes.Mode) error {
	return nil
}
func (shapeCore) SetImage(context.Context, string, bool) error          { return nil }
func (shapeCore) SetMachine(context.Context, int, int) error            { return nil }
func (shapeCore) Tasks(context.Context) ([]tasks.Task, error)           { return nil, nil }
func (shapeCore) EgressLog(context.Context) ([]egress.Decision, error)  { return nil, nil }
func (shapeCore) Secrets(context.Context) ([]service.SecretInfo, error) { return nil, nil }
func (shapeCore) RemoveSecret(context.Context, string) error            { return nil }
func (shapeCore) EgressRule(context.Context, string, string) (settings.Settings, error) {
	return settings.Settings{Allow: []string{"a.test"}}, nil
}
func (shapeCore) Task(_ context.Context, id string) (tasks.Task, error) {
	if id != "t1" {
		return tasks.Task{}, tasks.ErrNotFound
	}
	return tasks.Task{ID: id, State: tasks.Killed}, nil
}
func (c shapeCore) Cancel(ctx context.Context, id string) error {
	_, err := c.Task(ctx, id)
	return err
}
func (shapeCore) Logs(context.Context, string, int64) ([]tasks.Chunk, int64, error) {
	return nil, 0, tasks.ErrNotFound
}

// serveCore serves core on a socket of its own until the test ends.
func serveCore(t *testing.T, core service.Core) (sock string, stop context.CancelFunc) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "a.sock")
	l, err := api.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go api.Serve(ctx, l, api.Handler(core, nil), nil)
	return sock, cancel
}

// cli runs the CLI in this process.
func cli(args ...string) (code int, out, errOut string) {
	var o, e bytes.Buffer
	code = Main(args, Stdio{In: strings.NewReader(""), Out: &o, Err: &e})
	return code, o.String(), e.String()
}

// walk calls f on cmd and every command under it.
func walk(cmd *cobra.Command, f func(*cobra.Command)) {
	f(cmd)
	for _, c := range cmd.Commands() {
		walk(c, f)
	}
}

// TestHelpFlags walks every command's help: each flag renders with its
// own value name (a backquoted word in a usage becomes the value name:
// "--no-boot airlock start"), -v is --verbose on every command, and
// --json is there too.
func TestHelpFlags(t *testing.T) {
	root := newRoot(Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	walk(root, func(cmd *cobra.Command) {
		path := strings.Fields(cmd.CommandPath())[1:]
		t.Run(strings.Join(append([]string{"airlock"}, path...), " "), func(t *testing.T) {
			code, out, errOut := cli(append(path, "--help")...)
			if code != 0 {
				t.Fatalf("--help: exit %d: %s", code, errOut)
			}
			check := func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					name, _ := pflag.UnquoteUsage(f)
					t.Errorf("--%s renders as \"--%s %s\": a usage must not backquote", f.Name, f.Name, name)
				}
				if f.Shorthand == "v" && f.Name != "verbose" {
					t.Errorf("-v is --%s here, --verbose elsewhere", f.Name)
				}
			}
			cmd.Flags().VisitAll(check)
			cmd.InheritedFlags().VisitAll(check)
			for _, want := range []string{"-v, --verbose", "--json"} {
				if !strings.Contains(out, want) {
					t.Errorf("help lacks %q:\n%s", want, out)
				}
			}
		})
	})
}

// TestJSONShapes: a listing's --json is an array, [] when empty; a
// command that changes something prints one object with --json.
func TestJSONShapes(t *testing.T) {
	sock, _ := serveCore(t, shapeCore{})
	ws := t.TempDir()
	for _, tt := range []struct {
		args  []string
		array bool
	}{
		{[]string{"tasks"}, true},
		{[]string{"egress", "log"}, true},
		{[]string{"egress", "log", "--denied"}, true},
		{[]string{"secret", "list"}, true},
		{[]string{"uninstall"}, true},
		{[]string{"status"}, false},
		{[]string{"version"}, false},
		{[]string{"start"}, false},
		{[]string{"stop"}, false},
		{[]string{"restart"}, false},
		{[]string{"cancel", "t1"}, false},
		{[]string{"workspace", "set", ws}, false},
		{[]string{"image", "set", "minimal"}, false},
		{[]string{"egress", "allow", "a.test"}, false},
		{[]string{"secret", "rm", "x"}, false},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := cli(append(tt.args, "--json", "--socket", sock)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("not one JSON value: %v\n%s", err, out)
			}
			switch v.(type) {
			case []any:
				if !tt.array {
					t.Fatalf("an array, want an object:\n%s", out)
				}
			case map[string]any:
				if tt.array {
					t.Fatalf("an object, want an array:\n%s", out)
				}
			default:
				t.Fatalf("%T, want an array or an object:\n%s", v, out)
			}
		})
	}
}

// TestErrorsNameTheCause: errors the CLI prints say what is wrong once,
// and where to look or what to type instead.
func TestErrorsNameTheCause(t *testing.T) {
	sock, _ := serveCore(t, shapeCore{})
	many := strconv.Itoa(runtime.NumCPU() + 1)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "nope", "--socket", sock}, "airlock: no task nope (see airlock tasks)\n"},
		{[]string{"cancel", "nope", "--socket", sock}, "airlock: no task nope (see airlock tasks)\n"},
		{[]string{"run", "--socket", sock}, "airlock: no command given; usage: airlock run [flags] -- CMD [ARG...]\n"},
		{[]string{"logs", "--socket", sock}, "airlock: accepts 1 arg(s), received 0; usage: airlock logs ID [flags]\n"},
		{[]string{"run", "--bogus", "--", "true"}, "airlock: unknown flag: --bogus; usage: airlock run [flags] -- CMD [ARG...]\n"},
		{[]string{"run", "--cpus", many, "--", "true"}, "airlock: --cpus " + many + ": this machine has " + strconv.Itoa(runtime.NumCPU()) + " CPUs; choose between 1 and " + strconv.Itoa(min(runtime.NumCPU(), 64)) + "\n"},
		{[]string{"run", "--allow", "https://pypi.org/simple", "--deny", "a b", "--", "true"},
			"airlock: allow \"https://pypi.org/simple\": use a host name, not a URL (pypi.org); deny \"a b\": invalid character ' '\n"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := cli(tt.args...)
			if code != ExitAirlockError || errOut != tt.want {
				t.Fatalf("exit %d, stderr %q; want 125, %q", code, errOut, tt.want)
			}
		})
	}
}

// lostCore is a service that goes away while its one task runs.
type lostCore struct {
	service.Core
	stop context.CancelFunc
}

func (lostCore) Status(context.Context) (service.Status, error) { return service.Status{}, nil }
func (lostCore) Run(context.Context, service.RunRequest) (tasks.Task, error) {
	return tasks.Task{ID: "t1", State: tasks.Running}, nil
}
func (c lostCore) FollowLogs(context.Context, string, int64) (<-chan tasks.Chunk, error) {
	ch := make(chan tasks.Chunk)
	close(ch)
	return ch, nil
}
func (c lostCore) Wait(ctx context.Context, _ string) (tasks.Task, error) {
	c.stop()
	<-ctx.Done()
	return tasks.Task{}, ctx.Err()
}

// TestServiceLostMidTask: a run whose service stops under it says its
// task is lost, not that no service runs.
func TestServiceLostMidTask(t *testing.T) {
	c := &lostCore{}
	sock, stop := serveCore(t, c)
	c.stop = stop
	code, _, errOut := cli("run", "--socket", sock, "--", "sleep", "60")
	want := "airlock: task t1 is lost: the Airlock service stopped while it ran"
	if code != ExitAirlockError || !strings.HasPrefix(errOut, want) || strings.Contains(errOut, "no Airlock service") {
		t.Fatalf("exit %d, stderr %q; want 125, %q...", code, errOut, want)
	}
}

// jsonShapes is what each command prints with --json: "array" (a
// listing), "object" (a result or a change made), or why it prints no
// JSON. A new command must say which.
var jsonShapes = map[string]string{
	"tasks": "array", "egress log": "array", "secret list": "array", "uninstall": "array (object with --purge)",
	"status": "object", "version": "object", "start": "object", "stop": "object", "restart": "object",
	"cancel": "object", "workspace set": "object", "workspace reset-disk": "object", "image set": "object",
	"egress allow": "object", "egress deny": "object", "egress remove": "object",
	"secret set": "object", "secret rm": "object", "apply": "object", "discard": "object", "undo": "object",
	"changes": "object: the entries with the folder's mode", "checkpoints": "object: the list with the space used",
	"run": "none: the task's own output", "logs": "none: the task's own output", "diff": "none: a unified diff",
	"serve": "none: runs the service", "mcp": "none: speaks MCP on stdio",
	"connect":    "array: the agents, or what connecting each did (--print: the entry itself)",
	"disconnect": "array: what disconnecting each did",
}

// TestEveryCommandHasAJSONShape walks every command: each one that runs
// has its --json shape decided (TestJSONShapes checks them).
func TestEveryCommandHasAJSONShape(t *testing.T) {
	root := newRoot(Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	walk(root, func(cmd *cobra.Command) {
		path := strings.Join(strings.Fields(cmd.CommandPath())[1:], " ")
		if !cmd.Runnable() || path == "help" || strings.HasPrefix(path, "completion") {
			return
		}
		if _, ok := jsonShapes[path]; !ok {
			t.Errorf("airlock %s: no --json shape decided (add it to jsonShapes and, for a listing or a change, to TestJSONShapes)", path)
		}
	})
}
