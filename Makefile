# Airlock. `make run` sets up and runs a demo; `make test` runs every test.
SHELL := /bin/bash
GO    ?= go
ARCH  ?= $(shell $(GO) env GOARCH)
OTHER_ARCH := $(if $(filter amd64,$(ARCH)),arm64,amd64)
# The release version: the VERSION file, and the commit it was built from
# (0.1.0+3b7d567, 0.1.0+3b7d567-dirty; 0.1.0 alone outside a git checkout).
VERSION ?= $(shell v=$$(cat VERSION 2>/dev/null || echo 0.0.0); c=$$(git describe --always --dirty --exclude '*' 2>/dev/null); echo "$$v$${c:++$$c}")
LDFLAGS := -s -w -X github.com/airlock-sandbox/airlock/app/service.Version=$(VERSION)
IMAGE_DIR := images/out
WORKSPACE ?= $(HOME)/airlock-demo
E2E_TIMEOUT ?= 40m

# gcc ... libssl-dev build the amd64 guest kernel from Debian's linux-source (images/README.md)
APT_PACKAGES := qemu-system-x86 qemu-system-arm busybox-static kmod cpio xz-utils protobuf-compiler debootstrap e2fsprogs qemu-utils qemu-user-static binfmt-support \
	gcc make bc flex bison libelf-dev libssl-dev

.PHONY: all build install uninstall airlock image image-all image-kernel-source image-standard image-standard-all deps run test test-unit test-e2e bench vet proto check-proto clean

all: build

## build: the web UI, the airlock CLI (which embeds it) and the guest image for this machine
build: frontend airlock image

airlock:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/airlock ./app/cmd/airlock

## install: bin/airlock (AIRLOCK_BIN), the desktop app when built (build/bin/airlock-desktop) and
## this architecture's guest images (INSTALL_IMAGES of minimal standard, those built) into PREFIX:
## PREFIX/bin and PREFIX/share/airlock/images, where airlock looks for its images next to its own
## executable (symlinks resolved). PREFIX is /usr/local for root, ~/.local for a user; DESTDIR is
## prepended for staging. Builds nothing: run make build (and make image-standard) first.
PREFIX ?= $(if $(filter 0,$(shell id -u)),/usr/local,$(HOME)/.local)
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share/airlock
AIRLOCK_BIN ?= bin/airlock
DESKTOP_BIN ?= build/bin/airlock-desktop
INSTALL_IMAGES ?= minimal standard
image_subdirs = $(foreach i,$(INSTALL_IMAGES),$(if $(filter minimal,$(i)),$(ARCH) kernel-source/$(ARCH),$(i)/$(ARCH) kernel-source/$(i)/$(ARCH)))
install:
	@test -x "$(AIRLOCK_BIN)" || { echo "$(AIRLOCK_BIN) is not built: run make build first"; exit 1; }
	@dirs=""; for d in $(image_subdirs); do [ -f "$(IMAGE_DIR)/$$d/manifest.json" ] && dirs="$$dirs $$d"; done; 	case " $$dirs " in *" $(ARCH) "*|*" kernel-source/$(ARCH) "*) ;; 		*) echo "no minimal guest image in $(IMAGE_DIR): run make image first"; exit 1;; esac; 	set -e; install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(DATADIR)/images"; 	install -m 755 "$(AIRLOCK_BIN)" "$(DESTDIR)$(BINDIR)/airlock"; echo "installed $(DESTDIR)$(BINDIR)/airlock"; 	if [ -x "$(DESKTOP_BIN)" ]; then install -m 755 "$(DESKTOP_BIN)" "$(DESTDIR)$(BINDIR)/airlock-desktop"; echo "installed $(DESTDIR)$(BINDIR)/airlock-desktop"; fi; 	for d in $$dirs; do rm -rf "$(DESTDIR)$(DATADIR)/images/$$d"; done; 	tar -C "$(IMAGE_DIR)" -cf - $$dirs | tar -C "$(DESTDIR)$(DATADIR)/images" -xf -; 	echo "installed the guest images$$dirs in $(DESTDIR)$(DATADIR)/images"

## uninstall: remove what make install put in PREFIX (same PREFIX and DESTDIR). Your settings, tasks,
## templates and secrets stay: README, Where Airlock keeps data, says how to remove them.
uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/airlock" "$(DESTDIR)$(BINDIR)/airlock-desktop"
	rm -rf "$(DESTDIR)$(DATADIR)"

## image: the minimal guest image for this machine's architecture in $(IMAGE_DIR)/$(ARCH) (Debian's
## kernel, its drivers as modules) and, on amd64, also in $(IMAGE_DIR)/kernel-source/amd64 with a
## kernel built from Debian's linux-source, every driver built in: what QEMU boots on Linux, ready
## in about half the time. The kernel is cached in $(IMAGE_DIR)/cache/kernels; its first build takes
## minutes (images/README.md)
image:
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -out $(IMAGE_DIR)

image-all:
	$(GO) run ./images/cmd/airlock-image -arch all -out $(IMAGE_DIR)

## image-kernel-source: only the amd64 minimal image with a kernel built from Debian's linux-source
## (same version as the packaged kernel; every driver built in, no modules, QEMU only) in
## $(IMAGE_DIR)/kernel-source/amd64 (make image builds it too); the kernel is cached in
## $(IMAGE_DIR)/cache/kernels (cold build: see images/README.md; needs gcc make bc flex bison
## libelf-dev libssl-dev). Niced: it shares the machine.
image-kernel-source:
	nice -n 19 $(GO) run ./images/cmd/airlock-image -arch amd64 -kernel source -out $(IMAGE_DIR)

## image-standard: the standard image (Debian root disk, needs debootstrap and e2fsprogs) for
## this machine's architecture in $(IMAGE_DIR)/standard/$(ARCH), beside the minimal one, and on
## amd64 also in $(IMAGE_DIR)/kernel-source/standard/amd64 (the same root disk, linked)
image-standard:
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -image standard -out $(IMAGE_DIR)

## image-standard-all: the standard image for amd64 and arm64; the other architecture's is built
## under qemu-user-static (make deps sets it up; arm64 on amd64: ~5.5-8.5 min cold here, ~1 s
## when up to date)
image-standard-all:
	$(GO) run ./images/cmd/airlock-image -arch all -image standard -out $(IMAGE_DIR)

## deps: install the Debian/Ubuntu packages Airlock needs (only what is missing), and let this
## host run arm64 programs under qemu-user-static (build/linux/arm64-emulation.sh) for the arm64
## standard image
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then \
		echo "adding the arm64 package architecture (for the arm64 guest image)"; \
		$(SUDO) dpkg --add-architecture arm64; missing="$$missing"; need_update=1; fi; \
	if [ -n "$$missing$$need_update" ]; then \
		$(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; fi; \
	$(SUDO) build/linux/arm64-emulation.sh || echo "warning: no arm64 emulation here: everything but the arm64 standard image builds"
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

## run: set up, build, and run a command in a sandbox that sees $(WORKSPACE)
run: deps airlock image
	@mkdir -p "$(WORKSPACE)"
	@if [ "$$(id -u)" = 0 ]; then chown 1000:1000 "$(WORKSPACE)"; fi
	bin/airlock run --workspace "$(WORKSPACE)" -- sh -c 'echo "hello from $$(uname -sr) as $$(id -un)" | tee /workspace/hello.txt; ls -la /workspace'
	@echo "--> $(WORKSPACE)/hello.txt was written by the sandbox"

## test: everything: vet, darwin type-check, windows cross-build, unit tests, generated-code drift, comment rules,
## e2e in real VMs, the MCP server under the TypeScript SDK client, the web UI in Chromium, the Linux desktop app under Xvfb
test: vet check-darwin check-windows test-unit check-proto check-wailsjs check-tsgen check-comments test-e2e test-security test-user test-robust test-mcp test-browser test-desktop desktop-windows test-windows-wine

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test-unit:
	$(GO) test -count=1 ./...

# The standard images e2e boots: this machine's, and on amd64 also arm64's (what Apple Silicon
# boots; built under emulation, cached after the first run), which the test then requires.
E2E_STANDARD_ARCHES := $(if $(filter amd64,$(ARCH)),all,$(ARCH))
test-e2e: airlock
	$(GO) run ./images/cmd/airlock-image -arch all -out $(IMAGE_DIR)
	$(GO) run ./images/cmd/airlock-image -arch $(E2E_STANDARD_ARCHES) -image standard -out $(IMAGE_DIR) -q
	AIRLOCK_E2E_BIN=$(CURDIR)/bin/airlock AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) AIRLOCK_REQUIRE_ARM64_STANDARD=1 \
		$(GO) test -count=1 -tags e2e -timeout $(E2E_TIMEOUT) -v ./tests/e2e/ ./tests/connect/ ./vm/qemu/ ./app/clock/ ./app/session/ 2>&1 | tee /tmp/airlock-e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; exit $${PIPESTATUS[0]}

## bench: one table of figures, each against a baseline measured in the same run (tests/bench),
## also written as JSON to BENCH_OUT (default tests/bench/out/bench.json) so runs can be compared;
## BENCH_ROUNDS alternating rounds per figure. Figures are reported, never asserted.
BENCH_OUT ?= $(CURDIR)/tests/bench/out/bench.json
BENCH_ROUNDS ?= 3
bench: airlock
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -out $(IMAGE_DIR) -q
	AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) AIRLOCK_BENCH_BIN=$(CURDIR)/bin/airlock AIRLOCK_BENCH_OUT=$(BENCH_OUT) AIRLOCK_BENCH_ROUNDS=$(BENCH_ROUNDS) \
		$(GO) test -count=1 -tags e2e -run '^$$' -bench '^BenchmarkTable$$' -benchtime 1x -timeout 15m ./tests/bench/

.bin/protoc-gen-go-lite: go.mod
	$(GO) build -o .bin/ github.com/aperturerobotics/protobuf-go-lite/cmd/protoc-gen-go-lite

## proto: regenerate the host<->guest messages from agent.proto (needs protoc from protobuf-compiler)
proto: .bin/protoc-gen-go-lite
	cd guest/api/agent/v1 && $(GO) generate

check-proto: proto
	@git diff --exit-code -- guest/api/agent/v1 || { echo "generated code drifted from agent.proto: run make proto and commit"; exit 1; }

clean:
	rm -rf bin .bin $(IMAGE_DIR)

## check-darwin: type-check the whole module for macOS (darwin/arm64 and darwin/amd64, cgo and the
## vz backend included) with go/types from any OS, then check that each darwin binary (the desktop
## app, the CLI) would link: build/linkcheck lists the Objective-C classes, categories and C symbols
## its cgo packages define and fails on one defined twice. A duplicate listed in
## build/linkcheck/known.go is printed as KNOWN with its issue and does not fail (none today: the
## desktop app runs its VM in the airlock helper and links no vz, whose AppDelegate Wails also defines).
## DARWIN_TAGS are the desktop app's build tags
DARWIN_TAGS ?= desktop,production
.PHONY: check-darwin
check-darwin:
	$(GO) run ./build/typecheck -os darwin -arch arm64,amd64 -tags '$(DARWIN_TAGS)' ./...
	$(GO) run ./build/linkcheck -os darwin -arch arm64,amd64 -tags '$(DARWIN_TAGS)' ./...

## check-windows: cross-build and vet the module for windows/amd64 and windows/arm64, and compile
## (without running) every package's tests for both: -exec=true stands in for the missing Windows.
.PHONY: check-windows
WINDOWS_ARCHES := amd64 arm64
check-windows:
	@set -e; for arch in $(WINDOWS_ARCHES); do \
		echo "windows/$$arch: build, vet, test binaries"; \
		GOOS=windows GOARCH=$$arch $(GO) build ./... ; \
		GOOS=windows GOARCH=$$arch $(GO) vet ./... ; \
		out=$$(GOOS=windows GOARCH=$$arch $(GO) test -exec=true -vet=off ./... 2>&1) || { echo "$$out" | grep -v '^ok\|no test files'; exit 1; }; \
	done

## frontend: the web UI (TypeScript + Vite) into frontend/dist, embedded by make airlock and the desktop app
.PHONY: frontend test-browser
frontend:
	cd frontend && npm ci --no-audit --no-fund && AIRLOCK_VERSION=$(VERSION) npm run build

## test-browser: the web UI in Debian's Chromium (apt: chromium) against airlock serve --http and a real VM
# (airlock is rebuilt in a sub-make: within one make run it may already have been built without the UI)
test-browser: frontend
	$(MAKE) airlock
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -out $(IMAGE_DIR) -q
	cd tests/browser && npm ci --no-audit --no-fund && node --test --test-concurrency=1 --test-timeout=600000 --test-reporter=spec

## desktop: the desktop app for this OS in build/bin/ (Linux: build/bin/airlock-desktop, apt
## libgtk-3-dev libwebkit2gtk-4.1-dev; macOS: Airlock.app with the airlock command as its helper
## in Contents/Helpers, where the VM runs, and the guest image, signed by build/darwin/post-build.sh:
## the helper with the virtualization entitlement, the app without). The web UI is built first
## (make frontend).
.PHONY: desktop desktop-windows wailsjs check-wailsjs test-desktop
comma := ,
HOST_OS := $(shell $(GO) env GOOS)
DESKTOP_TAGS := desktop,production$(if $(filter linux,$(HOST_OS)),$(comma)webkit2_41)
# -m: never let wails run go mod tidy; -s: the UI is built by make frontend; bindings: make wailsjs.
WAILS_BUILD := $(GO) tool wails build -m -s -skipbindings -trimpath
desktop: frontend
ifeq ($(HOST_OS),darwin)
	$(MAKE) airlock
	$(WAILS_BUILD) -tags '$(DESKTOP_TAGS)' -ldflags '$(LDFLAGS)'
	AIRLOCK_HELPER_BIN=$(CURDIR)/bin/airlock build/darwin/post-build.sh build/bin/Airlock.app
else
	CGO_ENABLED=1 $(GO) build -tags '$(DESKTOP_TAGS)' -trimpath -ldflags '$(LDFLAGS)' -o build/bin/airlock-desktop .
endif

## desktop-windows: cross-build build/bin/Airlock-<arch>.exe (no cgo) and, when makensis is there
## (apt: nsis), build/bin/Airlock-<arch>-installer.exe with the VM service, the CLI and the guest image
## (staged in build/bin/windows_<arch>/, where build/windows/installer/project.nsi takes them)
DESKTOP_WINDOWS_ARCHES ?= amd64
desktop-windows: frontend
	@set -e; for arch in $(DESKTOP_WINDOWS_ARCHES); do \
		stage=build/bin/windows_$$arch; mkdir -p $$stage; \
		GOOS=windows GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$stage/ ./app/cmd/airlock ./app/cmd/airlock-vmservice; \
		nsis=; \
		if command -v makensis >/dev/null; then \
			$(GO) run ./images/cmd/airlock-image -arch $$arch -out $(IMAGE_DIR) -q; \
			rm -rf $$stage/images; mkdir -p $$stage/images; cp -r $(IMAGE_DIR)/$$arch $$stage/images/$$arch; \
			nsis=-nsis; \
		else echo "makensis not found (apt: nsis): no installer, only Airlock-$$arch.exe"; fi; \
		echo "windows/$$arch: Airlock-$$arch.exe $${nsis:+and its installer}"; \
		$(WAILS_BUILD) -platform windows/$$arch -tags desktop,production -ldflags '$(LDFLAGS)' -o Airlock-$$arch.exe $$nsis; \
	done

## test-windows-wine: the Windows programs under Wine (apt: wine64, nsis, xvfb, xauth, imagemagick) in a
## fresh prefix (build/windows/wine): the amd64 installer silently over an older version and its
## uninstaller, airlock-vmservice under Wine's service manager and its protocol, the CLI against it
## and against `airlock serve`, the desktop app without WebView2 (build/bin/wine-desktop.png)
.PHONY: test-windows-wine
test-windows-wine: desktop-windows
	xvfb-run -a -s "-screen 0 1280x800x24" $(GO) test -count=1 -tags wine -v -timeout 10m ./build/windows/wine/

## wailsjs: regenerate frontend/wailsjs (the JS bindings of app/desktop.Bindings, the Wails runtime)
# (wails generate writes the files 0755, wails build rewrites the runtime 0644: keep 0644)
wailsjs:
	$(GO) tool wails generate module -tags webkit2_41
	@find frontend/wailsjs -type f -exec chmod 644 {} +

## check-wailsjs: frontend/wailsjs matches app/desktop
check-wailsjs: wailsjs
	@git diff --exit-code -- frontend/wailsjs && test -z "$$(git status --porcelain -- frontend/wailsjs)" || { echo "frontend/wailsjs drifted from app/desktop: run make wailsjs and commit"; exit 1; }

## check-comments: Go comments carry no dates (measurements and history go in docs/performance.md
## or the commit message, which a comment may cite), and every package has one package doc
## comment (build/commentcheck)
.PHONY: check-comments
check-comments:
	$(GO) run ./build/commentcheck .

## tsgen: regenerate frontend/src/gen, the TypeScript types of what the control API sends and
## takes, from their Go types (build/tsgen): every type service.Core's methods take or return, and
## app/api's request and answer bodies, and app/agents' answers (/v1/agents)
.PHONY: tsgen check-tsgen
API := github.com/airlock-sandbox/airlock/app/api
TSGEN_ROOTS := github.com/airlock-sandbox/airlock/app/service.Core \
	$(addprefix $(API).,LogPage WorkspaceRequest ImageRequest MachineRequest RuleRequest AnswerRequest ApplyRequest DiscardRequest DiscardResult UndoRequest TerminalControl TerminalInput TerminalResize) \
	github.com/airlock-sandbox/airlock/app/service.TerminalRequest github.com/airlock-sandbox/airlock/app/service.TerminalOutput \
	github.com/airlock-sandbox/airlock/app/agents.Status github.com/airlock-sandbox/airlock/app/agents.Result
tsgen:
	$(GO) run ./build/tsgen -out frontend/src/gen $(TSGEN_ROOTS)

## check-tsgen: frontend/src/gen matches the Go types
check-tsgen: tsgen
	@git diff --exit-code -- frontend/src/gen && test -z "$$(git status --porcelain -- frontend/src/gen)" || { echo "frontend/src/gen drifted from the Go types of the control API: run make tsgen and commit"; exit 1; }

## test-desktop: the Linux desktop build under Xvfb (apt: xvfb x11-utils imagemagick): its window
## is shown and screenshot to build/bin/desktop.png (checked non-blank), its VM boots (a QEMU among
## its descendants), and SIGTERM (sent twice) stops the VM and exits 0. Then its tray
## (build/linux/tray; apt: dbus-daemon xfce4-panel xdotool): in Xfce's panel on a D-Bus session of
## its own, the icon and its open menu screenshot to build/bin/tray-icon.png and tray-menu.png
## (checked non-blank), the menu's items read over D-Bus (the workspace and its VM's state, Open,
## Stop, Quit), and Open, Stop and Quit clicked there; once more as AIRLOCK_TEST_USER when make
## runs as root (about 15 s a run)
TRAY_TEST := build/bin/tray.test
TRAY_ENV := AIRLOCK_DESKTOP_BIN=$(CURDIR)/build/bin/airlock-desktop AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR)
test-desktop: desktop image
	build/linux/xvfb-smoke.sh build/bin/airlock-desktop build/bin/desktop.png
	$(GO) test -c -tags xvfb -o $(TRAY_TEST) ./build/linux/tray/
	cd build/linux/tray && $(TRAY_ENV) $(CURDIR)/$(TRAY_TEST) -test.v -test.count=1 -test.timeout 3m
	@if [ "$$(id -u)" = 0 ] && [ -n "$(AIRLOCK_TEST_USER)" ]; then \
		d=$$(mktemp -d /tmp/airlock-tray-user.XXXXXX) && chown $(AIRLOCK_TEST_USER): $$d && \
		echo "the tray as $(AIRLOCK_TEST_USER), home $$d" && \
		cd build/linux/tray && runuser -u $(AIRLOCK_TEST_USER) -- env -i PATH=/usr/local/bin:/usr/bin:/bin \
			HOME=$$d TMPDIR=$$d LANG=C.UTF-8 $(TRAY_ENV) AIRLOCK_TRAY_SHOTS=$$d \
			$(CURDIR)/$(TRAY_TEST) -test.v -test.count=1 -test.timeout 3m; rc=$$?; rm -rf $$d; exit $$rc; \
	fi

## security-report: run the security suite and rewrite docs/security-report.md (commit it; a unit
## test keeps it in the suite's format). AIRLOCK_SECURITY_REPORT=FILE make test-security writes elsewhere.
.PHONY: security-report
security-report:
	AIRLOCK_SECURITY_REPORT=$(CURDIR)/docs/security-report.md $(MAKE) test-security

## test-security: issue 8's attacks from inside a real guest (network escape, workspace escape, guest
## privilege, host control); prints a table of attacks, blocked and known holes per family
## (AIRLOCK_SECURITY_REPORT=FILE also writes the Markdown report, see security-report)
.PHONY: test-security
SECURITY_TIMEOUT ?= 10m
test-security: airlock
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -out $(IMAGE_DIR) -q
	AIRLOCK_E2E_BIN=$(CURDIR)/bin/airlock AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) \
		$(GO) test -count=1 -tags e2e -parallel 8 -timeout $(SECURITY_TIMEOUT) -v ./tests/security/ 2>&1 | tee /tmp/airlock-security.log | grep -E '^(\s*--- (FAIL|SKIP)|PASS|FAIL|ok|panic|\s+\S+_test.go|security|family|[a-z ]+:\s+[0-9]|  KNOWN HOLE)' ; exit $${PIPESTATUS[0]}

## test-user: when make runs as root, the e2e and security suites once more as the ordinary user
## AIRLOCK_TEST_USER (bash .ci/run creates airlock-ci), with a fresh home and folders of its own
## (build/linux/test-as-user.sh): Airlock takes other paths for a user than for root (the share's
## security model, the task user, virtiofs). As an ordinary user, test-e2e and test-security
## already ran as one.
.PHONY: test-user
AIRLOCK_TEST_USER ?=
test-user: airlock
	@if [ "$$(id -u)" != 0 ]; then echo "test-user: make runs as $$(id -un), an ordinary user: test-e2e and test-security ran as one"; \
	elif [ -z "$(AIRLOCK_TEST_USER)" ]; then echo "test-user: not run: set AIRLOCK_TEST_USER to an ordinary user (bash .ci/run creates airlock-ci)"; \
	else set -o pipefail; AIRLOCK_E2E_BIN=$(CURDIR)/bin/airlock AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) AIRLOCK_REQUIRE_ARM64_STANDARD=1 TIMEOUT=$(E2E_TIMEOUT) \
		build/linux/test-as-user.sh $(AIRLOCK_TEST_USER) ./tests/e2e/ ./tests/security/ 2>&1 | tee /tmp/airlock-user.log | grep -E '^(as |=== RUN|\s*--- (FAIL|SKIP)|PASS|FAIL|ok|panic|\s+\S+_test.go|security|family|  KNOWN HOLE)'; fi

## test-robust: issue 8's hostile guest, faults and load (tests/robust): a guest agent that attacks
## the host, QEMU/agent/service killed, the VM frozen, the log folder full, the workspace deleted,
## 64 large tasks and 200 downloads at once, each with its outcome and a memory bound asserted
.PHONY: test-robust
ROBUST_TIMEOUT ?= 20m
test-robust: airlock
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -out $(IMAGE_DIR) -q
	AIRLOCK_E2E_BIN=$(CURDIR)/bin/airlock AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) \
		$(GO) test -count=1 -tags e2e -timeout $(ROBUST_TIMEOUT) -v ./tests/robust/ 2>&1 | tee /tmp/airlock-robust.log | grep -E '^(=== RUN|\s*--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; exit $${PIPESTATUS[0]}

## test-mcp: `airlock mcp` driven by the official TypeScript MCP SDK client (tests/mcp; the exact
## @modelcontextprotocol/sdk version is pinned in its package-lock.json) over stdio, against
## airlock serve and a real VM: initialize, tools, output, progress, cancel, errors, hostile output
.PHONY: test-mcp
test-mcp: airlock
	$(GO) run ./images/cmd/airlock-image -arch $(ARCH) -out $(IMAGE_DIR) -q
	cd tests/mcp && npm ci --no-audit --no-fund && AIRLOCK_E2E_BIN=$(CURDIR)/bin/airlock AIRLOCK_IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) \
		node --test --test-concurrency=1 --test-timeout=300000 --test-reporter=spec

## fuzz: run every fuzz target for FUZZTIME each (not part of make test; their seed corpora are,
## as ordinary tests)
FUZZTIME ?= 30s
.PHONY: fuzz
fuzz:
	@set -e; for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for f in $$(grep -h '^func Fuzz' $$pkg/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "$$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; done
