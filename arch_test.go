package nodelet_test

// The dependency rules of DESIGN.md (1 to 7) and ARCHITECTURE.md (8 and
// on), made executable; each rule's name starts with its number there. A
// rule broken here is an architecture change: change DESIGN.md and
// ARCHITECTURE.md first.

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nodelet/nodelet"

type goPackage struct {
	ImportPath   string
	Name         string
	Doc          string
	Imports      []string // direct imports of non-test files
	Deps         []string // transitive imports of non-test files
	TestImports  []string
	XTestImports []string
}

// listPackages runs `go list` over the module once.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-json", "-tags", "e2e", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func internal(name string) string { return module + "/internal/" + name }

// rule is one dependency rule: packages matching From must not import
// (directly, or transitively when Transitive) anything matching Forbidden.
type rule struct {
	Name       string
	From       func(pkg string) bool
	Forbidden  func(imp string) bool
	Transitive bool
}

func is(names ...string) func(string) bool {
	return func(p string) bool {
		for _, n := range names {
			if p == n || strings.HasPrefix(p, n+"/") {
				return true
			}
		}
		return false
	}
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

func exactly(names ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(names, p) }
}

func either(fs ...func(string) bool) func(string) bool {
	return func(p string) bool {
		for _, f := range fs {
			if f(p) {
				return true
			}
		}
		return false
	}
}

// The folders below internal/ are roles (ARCHITECTURE.md, "The tree"):
// each may import only the folders listed for it (rule 16), so that the
// pipeline never depends on what runs beside it or reads it. agent and
// nodeconfig, at the top, may import every folder; nothing imports them
// but cmd.
var folders = map[string][]string{
	"pure":     {"pure"},
	"base":     {"base", "pure"},
	"pipeline": {"pipeline", "base", "pure"},
	"node":     {"node", "pipeline", "base", "pure"},
	"cluster":  {"cluster", "node", "pipeline", "base", "pure"},
	"serve":    {"serve", "pipeline", "base", "pure"},
	"managed":  {"managed", "base", "pure"},
}

// folderOrder lists the role folders from the bottom up.
var folderOrder = []string{"pure", "base", "pipeline", "node", "cluster", "serve", "managed"}

// folderOf is the role folder of a package of the module ("" for agent,
// nodeconfig, cmd and test).
func folderOf(p string) string {
	rest, ok := strings.CutPrefix(p, module+"/internal/")
	if !ok {
		return ""
	}
	f, _, nested := strings.Cut(rest, "/")
	if _, known := folders[f]; !known || !nested {
		return ""
	}
	return f
}

// inFolder matches the packages of one role folder.
func inFolder(f string) func(string) bool { return func(p string) bool { return folderOf(p) == f } }

// pure matches the packages of the pure folder, those ARCHITECTURE.md
// marks "(pure)": no I/O, no clock, no randomness, no logging. podconfig
// is not among them: its Merge is pure, the package also runs the fan-in
// loop.
var pure = inFolder("pure")

// impure matches what a pure package may not import: the file system,
// processes and the network (net/netip and net/url are pure parsing and
// allowed), system calls, logging, the clock and randomness, gRPC and the
// CRI client. CRI API types (k8s.io/cri-api) are plain data: podnet and
// securitycontext translate to them.
var impure = either(
	is("os", "syscall", "golang.org/x/sys", "net/http", "net/rpc", "net/smtp", "log", "k8s.io/klog",
		"google.golang.org/grpc", "k8s.io/cri-client", internal("pipeline/cri"), "k8s.io/utils/clock", "crypto/rand", "math/rand"),
	exactly("net"),
)

// stdlibOrAPI matches the standard library, k8s.io/api and
// k8s.io/apimachinery: all that podspec may import.
func stdlibOrAPI(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".") || is("k8s.io/api", "k8s.io/apimachinery")(p)
}

// apiClient matches the packages that talk to the API server (DESIGN rule
// 7): cluster mode's folder, and beside it the API pod source, the secure
// port's webhook authentication and authorization, and agent, which wires
// them.
var apiClient = either(inFolder("cluster"), is(internal("pipeline/podsource"), internal("serve/server"), internal("agent")))

// kubernetesAllowed are the only k8s.io/kubernetes packages that
// apivalidation imports directly (see its doc comment): the internal core
// types, their v1 defaults and conversions, core validation, and the pod
// validation options, and the capabilities that validation reads (privileged
// containers allowed, as the kubelet sets them).
var kubernetesAllowed = []string{
	"k8s.io/kubernetes/pkg/capabilities",
	"k8s.io/kubernetes/pkg/apis/core",
	"k8s.io/kubernetes/pkg/apis/core/v1",
	"k8s.io/kubernetes/pkg/apis/core/validation",
	"k8s.io/kubernetes/pkg/api/pod",
}

// kubernetesOutsideAllowed matches a k8s.io/kubernetes package that is not
// one of kubernetesAllowed (exactly: their subpackages are not allowed).
func kubernetesOutsideAllowed(p string) bool {
	for _, a := range kubernetesAllowed {
		if p == a {
			return false
		}
	}
	return is("k8s.io/kubernetes")(p)
}

func rules() []rule {
	return append(namedRules(), folderRules()...)
}

// folderRules are rule 16, one per role folder: it imports nothing of the
// module outside the folders listed for it (so nothing of agent or
// nodeconfig either). For the pure folder this is also rule 10's "only
// pure packages of nodelet".
func folderRules() []rule {
	var out []rule
	for _, f := range folderOrder {
		allowed := folders[f]
		out = append(out, rule{
			Name: fmt.Sprintf("16: %s/ imports only %s/ of nodelet", f, strings.Join(allowed, "/, ")),
			From: inFolder(f),
			Forbidden: func(imp string) bool {
				return strings.HasPrefix(imp, module+"/") && !slices.Contains(allowed, folderOf(imp))
			},
		})
	}
	return out
}

func namedRules() []rule {
	grpc := is("google.golang.org/grpc")
	return []rule{
		{
			Name: "1: plan and observed import no gRPC, CRI, os, net or logging",
			From: is(internal("pure/plan"), internal("pure/observed")),
			Forbidden: is("google.golang.org/grpc", "k8s.io/cri-api", "k8s.io/cri-client", internal("pipeline/cri"),
				"os", "net", "log", "log/slog", "k8s.io/klog"),
		},
		{
			// The node's gRPC peers: the runtime (CRI), the storage drivers
			// (CSI, and the plugin registration protocol; the test CSI
			// driver serves the latter), the device plugins (v1beta1: the
			// device manager serves their registration and calls them), the
			// DRA drivers and monitoring agents (the pod-resources API).
			// These are the kubelet's own gRPC protocols; no other package
			// talks gRPC. test/fakecri serves CRI to the agents of
			// bench-hollow.
			Name: "2: only cri, csi, devicemanager, dra and podresourcesapi import google.golang.org/grpc",
			From: func(p string) bool {
				return strings.HasPrefix(p, module) && !is(internal("pipeline/cri"), internal("node/csi"), internal("node/devicemanager"),
					internal("node/dra"), internal("node/podresourcesapi"), module+"/test/csihostpath", module+"/test/fakecri")(p)
			},
			Forbidden: grpc,
		},
		{
			Name:       "3: podworker does not depend on podruntime, cri or syncloop",
			From:       is(internal("pipeline/podworker")),
			Forbidden:  is(internal("pipeline/podruntime"), internal("pipeline/cri"), internal("pipeline/syncloop")),
			Transitive: true,
		},
		{
			Name:      "4: nothing imports agent except cmd/nodelet",
			From:      not(is(module+"/cmd/nodelet", internal("agent"), module+"/test")),
			Forbidden: is(internal("agent")),
		},
		{
			Name:      "5: production code never imports testing or httptest",
			From:      func(p string) bool { return strings.HasPrefix(p, module) && !is(internal("base/testutil"))(p) },
			Forbidden: is("testing", "net/http/httptest", "testing/quick", "testing/fstest", "testing/iotest"),
		},
		{
			Name:      "6: only cmd/nodelet reads flags",
			From:      is(module + "/internal"),
			Forbidden: is("flag", "github.com/spf13/pflag", "github.com/spf13/cobra"),
		},
		{
			Name: "7: only the cluster-mode packages talk to the API server",
			// testutil/fakeapi drives client-go's fake clientset, and
			// only tests import it (rule 9).
			From: func(p string) bool {
				return strings.HasPrefix(p, module+"/internal") && !apiClient(p) && !is(internal("base/testutil"))(p)
			},
			Forbidden: either(is("k8s.io/client-go/kubernetes", "k8s.io/client-go/rest", "k8s.io/client-go/informers",
				"k8s.io/client-go/tools/cache", "k8s.io/client-go/dynamic")),
		},
		{
			Name:      "8: only apivalidation imports k8s.io/kubernetes",
			From:      func(p string) bool { return strings.HasPrefix(p, module) && !is(internal("pipeline/apivalidation"))(p) },
			Forbidden: is("k8s.io/kubernetes"),
		},
		{
			Name:      "8: apivalidation imports only core, core/v1, core/validation, api/pod and capabilities of k8s.io/kubernetes",
			From:      is(internal("pipeline/apivalidation")),
			Forbidden: kubernetesOutsideAllowed,
		},
		{
			Name:      "9: only tests import testutil",
			From:      func(p string) bool { return strings.HasPrefix(p, module) },
			Forbidden: is(internal("base/testutil")),
		},
		{
			Name:      "10: pure packages import no I/O, clock, randomness, logging, gRPC or CRI client",
			From:      pure,
			Forbidden: impure,
		},
		{
			Name:      "10: podspec imports only the standard library, k8s.io/api and k8s.io/apimachinery",
			From:      is(internal("pure/podspec")),
			Forbidden: not(stdlibOrAPI),
		},
		{
			Name:       "11: podresources does not depend on status",
			From:       is(internal("node/podresources")),
			Forbidden:  is(internal("pure/status")),
			Transitive: true,
		},
		{
			Name:       "12: podruntime does not depend on pleg",
			From:       is(internal("pipeline/podruntime")),
			Forbidden:  is(internal("pipeline/pleg")),
			Transitive: true,
		},
		{
			Name:       "14: podruntime depends on no per-pod resource manager: hooks hand it what they set up",
			From:       is(internal("pipeline/podruntime")),
			Forbidden:  is(internal("node/podresources"), internal("node/volume"), internal("node/userns"), internal("pipeline/prober")),
			Transitive: true,
		},
		{
			Name:       "15: certstore depends on no client-go, server not on client-go's certificate manager",
			From:       is(internal("base/certstore")),
			Forbidden:  is("k8s.io/client-go"),
			Transitive: true,
		},
		{
			Name:       "15: certstore depends on no client-go, server not on client-go's certificate manager",
			From:       is(internal("serve/server")),
			Forbidden:  is("k8s.io/client-go/util/certificate"),
			Transitive: true,
		},
	}
}

// violations returns the broken rules as readable lines.
func violations(pkgs []goPackage, rules []rule) []string {
	var out []string
	for _, r := range rules {
		for _, p := range pkgs {
			if !r.From(p.ImportPath) {
				continue
			}
			imports := p.Imports
			if r.Transitive {
				imports = p.Deps
			}
			for _, imp := range imports {
				if r.Forbidden(imp) {
					out = append(out, fmt.Sprintf("rule %s: %s imports %s", r.Name, p.ImportPath, imp))
				}
			}
		}
	}
	return out
}

func TestDependencyRules(t *testing.T) {
	for _, v := range violations(listPackages(t), rules()) {
		t.Error(v)
	}
}

// The rules must catch what they forbid: each is tried on a made-up
// package that breaks it.
func TestDependencyRulesCatchViolations(t *testing.T) {
	bad := []goPackage{
		{ImportPath: internal("pure/observed"), Imports: []string{"k8s.io/cri-api/pkg/apis/runtime/v1"}},
		{ImportPath: internal("pipeline/podruntime"), Imports: []string{"google.golang.org/grpc/status"}},
		{ImportPath: internal("pipeline/podworker"), Deps: []string{internal("pipeline/cri")}},
		{ImportPath: internal("nodeconfig"), Imports: []string{internal("agent")}},
		{ImportPath: internal("node/gc"), Imports: []string{"testing"}},
		{ImportPath: internal("serve/server"), Imports: []string{"flag"}},
		{ImportPath: internal("pipeline/podruntime"), Imports: []string{"k8s.io/client-go/kubernetes"}},
		{ImportPath: internal("pipeline/podsource"), Imports: []string{"k8s.io/kubernetes/pkg/apis/core/validation"}},
		{ImportPath: internal("pipeline/apivalidation"), Imports: []string{
			"k8s.io/kubernetes/pkg/apis/core", // allowed
			"k8s.io/kubernetes/pkg/apis/core/helper",
		}},
		{ImportPath: internal("base/logs"), Imports: []string{internal("base/testutil")}},
		{ImportPath: internal("pure/podnet"), Imports: []string{"net/netip", "net/url", "net"}},
		{ImportPath: internal("pure/podspec"), Imports: []string{"k8s.io/api/core/v1", "k8s.io/utils/ptr"}},
		{ImportPath: internal("node/podresources"), Deps: []string{internal("pure/podspec"), internal("pure/status")}},
		{ImportPath: internal("pipeline/podruntime"), Deps: []string{internal("pipeline/cri"), internal("pipeline/pleg")}},
		{ImportPath: internal("pipeline/podruntime"), Deps: []string{internal("pure/podsetup"), internal("node/volume")}},
		{ImportPath: internal("base/certstore"), Deps: []string{internal("base/beneath"), "k8s.io/client-go/util/cert"}},
		{ImportPath: internal("serve/server"), Deps: []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/util/certificate"}},
		// 16, one per folder: a folder importing one it may not.
		{ImportPath: internal("pure/admission"), Imports: []string{internal("pure/podspec"), internal("node/volume")}},
		{ImportPath: internal("base/bounded"), Imports: []string{internal("pure/redact"), internal("pipeline/cri")}},
		{ImportPath: internal("pipeline/syncloop"), Imports: []string{internal("base/atomicfile"), internal("node/eviction")}},
		{ImportPath: internal("node/eviction"), Imports: []string{internal("pipeline/podworker"), internal("serve/stats")}},
		{ImportPath: internal("cluster/nodestatus"), Imports: []string{internal("node/eviction"), internal("nodeconfig")}},
		{ImportPath: internal("serve/server"), Imports: []string{internal("base/logs"), internal("cluster/certs")}},
		{ImportPath: internal("managed/registry"), Imports: []string{internal("base/bounded"), internal("pipeline/cri")}},
	}
	got := violations(bad, rules())
	if len(got) != len(bad) {
		t.Fatalf("caught %d of %d violations: %v", len(got), len(bad), got)
	}
	for i, r := range rules() {
		if !strings.Contains(got[i], r.Name) {
			t.Errorf("violation %d = %q, want rule %q", i, got[i], r.Name)
		}
	}
}

// Every package below internal/ is in a role folder, or is one of the two
// at the top: the composition root and the settings.
func TestEveryPackageInARoleFolder(t *testing.T) {
	top := []string{internal("agent"), internal("nodeconfig")}
	for _, p := range listPackages(t) {
		if strings.HasPrefix(p.ImportPath, module+"/internal/") && folderOf(p.ImportPath) == "" && !slices.Contains(top, p.ImportPath) {
			t.Errorf("package %s is in no role folder of internal/ (%s): put it in the one its role is (ARCHITECTURE.md, \"The tree\")",
				p.ImportPath, strings.Join(folderOrder, ", "))
		}
	}
}

// Every package has a doc comment that starts "Package <name> " and goes on
// to say which pipeline stage it is.
func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.Name == "main" && p.Doc == "" {
			t.Errorf("command %s has no doc comment", p.ImportPath)
			continue
		}
		if p.Name == "main" || p.ImportPath == module { // the module root holds only this test
			continue
		}
		if !strings.HasPrefix(p.Doc, "Package "+p.Name+" ") {
			t.Errorf("package %s: doc comment missing or not starting with %q (got %q)", p.ImportPath, "Package "+p.Name, p.Doc)
		}
	}
}

// machineFiles are the host's files that only cmd/nodelet reads (rule 6).
var machineFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"}

// machineCalls are the os functions that read the machine's identity or
// environment (rule 6).
var machineCalls = []string{"Hostname", "Getenv", "LookupEnv", "Environ", "ExpandEnv"}

// machineReads returns the places in one parsed file that read the
// machine: a call to one of machineCalls of package os, or any call given
// one of machineFiles as a literal argument (os.ReadFile("/etc/hosts")).
// Naming such a path otherwise (the /etc/hosts a container gets mounted)
// is not reading the machine.
func machineReads(fset *token.FileSet, f *ast.File) []string {
	osName := ""
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == "os" {
			osName = "os"
			if imp.Name != nil {
				osName = imp.Name.Name
			}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && osName != "" && x.Name == osName && slices.Contains(machineCalls, sel.Sel.Name) {
				out = append(out, fmt.Sprintf("%s: calls os.%s", fset.Position(call.Pos()), sel.Sel.Name))
			}
		}
		for _, arg := range call.Args {
			lit, ok := arg.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			if v, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(machineFiles, v) {
				out = append(out, fmt.Sprintf("%s: reads %s", fset.Position(lit.Pos()), v))
			}
		}
		return true
	})
	return out
}

// Rule 6: only cmd/nodelet reads the machine. No production file under
// internal/ reads the host's resolv.conf, hosts or hostname files, its
// hostname or its environment; cmd/nodelet reads them into agent.Config.
func TestOnlyCmdReadsTheMachine(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir("internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, v := range machineReads(fset, f) {
			t.Errorf("rule 6: only cmd/nodelet reads the machine: %s", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("scanned only %d files under internal/", files)
	}
}

func TestMachineReadsCaught(t *testing.T) {
	const src = `package p

import (
	sys "os"
	"path/filepath"
)

func f(mountPath string) {
	conf, _ := sys.ReadFile("/etc/resolv.conf")
	_ = filepath.Clean(mountPath) == "/etc/hosts" // a container path: fine
	_ = map[string]string{"ContainerPath": "/etc/hosts"} // fine
	host, _ := sys.Hostname()
	_ = sys.Getenv("HOME")
	_, _, _ = conf, host, readAll("/etc/hostname")
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := machineReads(fset, f)
	want := []string{"reads /etc/resolv.conf", "calls os.Hostname", "calls os.Getenv", "reads /etc/hostname"}
	if len(got) != len(want) {
		t.Fatalf("machineReads = %q, want %d places", got, len(want))
	}
	for i := range want {
		if !strings.HasSuffix(got[i], want[i]) {
			t.Errorf("machineReads[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

// agentBranching returns the places in one parsed file of package agent
// that decide something (rule 13), each as "file:line: why". The
// composition root constructs, connects, starts and stops; it may only
// test an error (err != nil, its body ending in a return or a call: the
// fatal path) or whether an optional part is present (x != nil, x == nil),
// and range over a list of parts. A decision the configuration makes
// (a port of 0, an empty path) is nodeconfig's or the deciding package's.
func agentBranching(fset *token.FileSet, f *ast.File) []string {
	var out []string
	bad := func(n ast.Node, why string) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), why))
	}
	isNil := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return ok && id.Name == "nil"
	}
	isErr := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return ok && (id.Name == "err" || strings.HasSuffix(id.Name, "Err"))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SwitchStmt, *ast.TypeSwitchStmt:
			bad(n, "a switch decides something: move the decision into the package it is about")
		case *ast.SelectStmt:
			bad(n, "a select waits on something: that is a part's loop, not wiring")
		case *ast.BranchStmt:
			if n.Tok == token.GOTO {
				bad(n, "a goto")
			}
		case *ast.ForStmt:
			bad(n, "a for loop other than a range over a list of parts")
		case *ast.BinaryExpr:
			switch n.Op {
			case token.LAND, token.LOR:
				bad(n, "a condition combined with "+n.Op.String()+": decide it where the setting is (nodeconfig, the part)")
			case token.EQL, token.NEQ, token.LSS, token.GTR, token.LEQ, token.GEQ:
				if !isNil(n.X) && !isNil(n.Y) {
					bad(n, "a comparison other than against nil: decide it where the setting is (nodeconfig, the part)")
				}
			}
		case *ast.IfStmt:
			if n.Else != nil {
				bad(n, "an if with an else: only error returns and optional parts are tested here")
			}
			c, ok := n.Cond.(*ast.BinaryExpr)
			if !ok || (c.Op != token.EQL && c.Op != token.NEQ) || (!isNil(c.X) && !isNil(c.Y)) {
				bad(n, "an if that tests neither an error nor whether an optional part is present (x != nil)")
				return true
			}
			if isErr(c.X) || isErr(c.Y) {
				last := n.Body.List[len(n.Body.List)-1:]
				ok := len(last) == 1
				if ok {
					switch s := last[0].(type) {
					case *ast.ReturnStmt:
					case *ast.ExprStmt:
						_, ok = s.X.(*ast.CallExpr)
					default:
						ok = false
					}
				}
				if c.Op != token.NEQ || !ok {
					bad(n, "an error test that does not return or take the fatal path")
				}
			}
		}
		return true
	})
	return out
}

// Rule 13: agent stays a composition root; it holds no logic beyond
// error returns and optional parts (agentBranching).
func TestAgentOnlyWires(t *testing.T) {
	files, err := filepath.Glob("internal/agent/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("agent sources: %v %v", files, err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range agentBranching(fset, f) {
			t.Errorf("13: agent only wires: %s", v)
		}
	}
}

// The agent rule catches each kind of decision, and lets wiring pass.
func TestAgentBranchingCaught(t *testing.T) {
	const src = `package agent

func wire(cfg Config, api *apiServer) (*pipeline, error) {
	p, err := build()
	if err != nil {
		return nil, err
	}
	if api != nil {
		p.cluster = connect(api)
	}
	for _, s := range p.sources {
		start(s)
	}
	if err := run(); err != nil {
		fatal(err)
	}
	if cfg.Port > 0 {
		serve()
	}
	if cfg.Path != "" && api != nil {
		watch()
	}
	if cfg.Bootstrap {
		bootstrap()
	}
	if api == nil {
		standalone()
	} else {
		cluster()
	}
	if err != nil {
		log(err)
		p.broken = true
	}
	switch cfg.Mode {
	}
	for i := 0; i < 3; i++ {
	}
	select {}
	return p, nil
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "wire.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := agentBranching(fset, f)
	want := []string{
		"wire.go:17:2: an if that tests neither",
		"wire.go:17:5: a comparison other than against nil",
		"wire.go:20:2: an if that tests neither",
		"wire.go:20:5: a condition combined with &&",
		"wire.go:20:5: a comparison other than against nil",
		"wire.go:23:2: an if that tests neither",
		"wire.go:26:2: an if with an else",
		"wire.go:31:2: an error test that does not return",
		"wire.go:35:2: a switch",
		"wire.go:37:2: a for loop",
		"wire.go:37:14: a comparison other than against nil",
		"wire.go:39:2: a select",
	}
	if len(got) != len(want) {
		t.Fatalf("agentBranching found %d places, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("agentBranching[%d] = %q, want it to start %q", i, got[i], want[i])
		}
	}
}
