package nodelet_test

// The dependency rules of DESIGN.md, made executable. A rule broken here is
// an architecture change: change DESIGN.md and ARCHITECTURE.md first.

import (
	"encoding/json"
	"fmt"
	"os/exec"
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

// kubernetesAllowed are the only k8s.io/kubernetes packages that
// apivalidation imports directly (see its doc comment): the internal core
// types, their v1 defaults and conversions, core validation, and the pod
// validation options.
var kubernetesAllowed = []string{
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
	grpc := is("google.golang.org/grpc")
	return []rule{
		{
			Name: "1: plan imports no gRPC, CRI, os, net or logging",
			From: is(internal("plan")),
			Forbidden: is("google.golang.org/grpc", "k8s.io/cri-api", "k8s.io/cri-client", internal("cri"),
				"os", "net", "log", "log/slog", "k8s.io/klog"),
		},
		{
			Name:      "2: only cri imports google.golang.org/grpc",
			From:      func(p string) bool { return strings.HasPrefix(p, module) && !is(internal("cri"))(p) },
			Forbidden: grpc,
		},
		{
			Name:       "3: podworker does not depend on podruntime, cri or syncloop",
			From:       is(internal("podworker")),
			Forbidden:  is(internal("podruntime"), internal("cri"), internal("syncloop")),
			Transitive: true,
		},
		{
			Name:      "4: nothing imports agent except cmd/nodelet",
			From:      not(is(module+"/cmd/nodelet", internal("agent"), module+"/test")),
			Forbidden: is(internal("agent")),
		},
		{
			Name:      "5: production code never imports testing or httptest",
			From:      func(p string) bool { return strings.HasPrefix(p, module) && !is(internal("testutil"))(p) },
			Forbidden: is("testing", "net/http/httptest", "testing/quick", "testing/fstest", "testing/iotest"),
		},
		{
			Name:      "k8s.io/kubernetes: only apivalidation imports it",
			From:      func(p string) bool { return strings.HasPrefix(p, module) && !is(internal("apivalidation"))(p) },
			Forbidden: is("k8s.io/kubernetes"),
		},
		{
			Name:      "k8s.io/kubernetes: apivalidation imports only core, core/v1, core/validation and api/pod",
			From:      is(internal("apivalidation")),
			Forbidden: kubernetesOutsideAllowed,
		},
		{
			Name:      "testutil: only tests import it",
			From:      func(p string) bool { return strings.HasPrefix(p, module) },
			Forbidden: is(internal("testutil")),
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
		{ImportPath: internal("plan"), Imports: []string{"os"}},
		{ImportPath: internal("podruntime"), Imports: []string{"google.golang.org/grpc/status"}},
		{ImportPath: internal("podworker"), Deps: []string{internal("cri")}},
		{ImportPath: internal("server"), Imports: []string{internal("agent")}},
		{ImportPath: internal("status"), Imports: []string{"testing"}},
		{ImportPath: internal("podsource"), Imports: []string{"k8s.io/kubernetes/pkg/apis/core/validation"}},
		{ImportPath: internal("apivalidation"), Imports: []string{
			"k8s.io/kubernetes/pkg/apis/core", // allowed
			"k8s.io/kubernetes/pkg/apis/core/helper",
		}},
		{ImportPath: internal("logs"), Imports: []string{internal("testutil")}},
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
