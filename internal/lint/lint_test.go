// Package lint runs kvferry's source rules as tests (STYLE.md "Lint runs as
// tests"): gofmt, where import "C" may appear, no os.Getenv, no import from
// internal/ into the layers above it, no raw atomic functions, no printing or
// log.Fatal from library packages, and etcd clients that reconnect promptly
// (internal/etcddial).
package lint

import (
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	assert.NilError(t, err)
	return dir
}

type goFile struct {
	rel  string // path relative to the module root, with '/'
	src  []byte
	file *ast.File
}

func goFiles(t *testing.T) []goFile {
	t.Helper()
	r := root(t)
	var out []goFile
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "build", "b", ".git", "testdata", "python", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r, p)
		out = append(out, goFile{rel: filepath.ToSlash(rel), src: src, file: f})
		return nil
	})
	assert.NilError(t, err)
	return out
}

func TestGofmt(t *testing.T) {
	for _, f := range goFiles(t) {
		if strings.HasSuffix(f.rel, ".pb.go") {
			continue
		}
		want, err := format.Source(f.src)
		assert.NilError(t, err, f.rel)
		if string(want) != string(f.src) {
			t.Errorf("%s is not gofmt-ed", f.rel)
		}
	}
}

// cgoAllowed lists where import "C" may appear (STYLE.md: abi/, plugin/, the
// RDMA shim, the libfabric shim, internal/hostenv, internal/cmem for C
// memcpy, and the CUDA binding's trampolines).
var cgoAllowed = []string{"abi/", "plugin/", "internal/hostenv/", "internal/cmem/", "engine/transport/rdma/", "engine/transport/efa/fabric/", "internal/verbs/", "internal/cuda/"}

func TestImportC(t *testing.T) {
	for _, f := range goFiles(t) {
		for _, imp := range f.file.Imports {
			if imp.Path.Value != `"C"` {
				continue
			}
			ok := false
			for _, p := range cgoAllowed {
				ok = ok || strings.HasPrefix(f.rel, p)
			}
			if !ok {
				t.Errorf("%s imports \"C\"; only %v may", f.rel, cgoAllowed)
			}
		}
	}
}

// upperLayers are the packages internal/ may not import: internal/ holds the
// leaves that engine/, store/, agent/, abi/ and plugin/ build on, so no
// arrow runs back up (DESIGN.md "Layers and who may import whom"). What
// assembles a layer's configuration from the environment lives in that
// layer (stack.ConfigFromEnv, rdma.ConfigFromEnv, ...), over hostenv's
// readers.
var upperLayers = []string{"engine", "store", "agent", "abi", "plugin"}

func TestInternalImportsNoUpperLayer(t *testing.T) {
	const module = "github.com/kvferry/kvferry/"
	n := 0
	for _, f := range goFiles(t) {
		if !strings.HasPrefix(f.rel, "internal/") {
			continue
		}
		n++
		for _, imp := range f.file.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			rest, ok := strings.CutPrefix(path, module)
			if !ok {
				continue
			}
			for _, layer := range upperLayers {
				if rest == layer || strings.HasPrefix(rest, layer+"/") {
					t.Errorf("%s imports %s: internal/ packages are leaves and import none of %v", f.rel, path, upperLayers)
				}
			}
		}
	}
	assert.Assert(t, n > 0, "no Go file found under internal/")
}

func TestNoOSGetenv(t *testing.T) {
	for _, f := range goFiles(t) {
		if strings.HasPrefix(f.rel, "cmd/") || strings.HasPrefix(f.rel, "internal/lint/") || strings.HasSuffix(f.rel, "_test.go") {
			continue
		}
		if strings.Contains(string(f.src), "os.Getenv(") || strings.Contains(string(f.src), "os.LookupEnv(") {
			t.Errorf("%s reads the environment with os.Getenv; use internal/hostenv (C getenv)", f.rel)
		}
	}
}

// TestEtcdClientsReconnect: every etcd client, the tests' included, is made
// with internal/etcddial's options, so none waits out gRPC's default
// reconnect backoff (up to two minutes) after etcd comes back.
func TestEtcdClientsReconnect(t *testing.T) {
	for _, f := range goFiles(t) {
		if strings.HasPrefix(f.rel, "internal/lint/") {
			continue
		}
		src := string(f.src)
		if n := strings.Count(src, "clientv3.New("); n > strings.Count(src, "etcddial.Options(") {
			t.Errorf("%s makes an etcd client without DialOptions: etcddial.Options(...) (%d clientv3.New)", f.rel, n)
		}
	}
}

func TestNoRawAtomics(t *testing.T) {
	for _, f := range goFiles(t) {
		if strings.HasPrefix(f.rel, "internal/lint/") {
			continue
		}
		for _, fn := range []string{"atomic.AddUint", "atomic.AddInt", "atomic.LoadUint", "atomic.LoadInt", "atomic.StoreUint", "atomic.StoreInt", "atomic.CompareAndSwapInt", "atomic.CompareAndSwapUint"} {
			if strings.Contains(string(f.src), fn) {
				t.Errorf("%s uses %s; use the typed atomics", f.rel, fn)
			}
		}
	}
}

// Library packages print nothing and never exit the host process.
func TestLibraryQuiet(t *testing.T) {
	for _, f := range goFiles(t) {
		lib := strings.HasPrefix(f.rel, "engine/") || strings.HasPrefix(f.rel, "store/") || strings.HasPrefix(f.rel, "abi/") ||
			strings.HasPrefix(f.rel, "agent/") ||
			(strings.HasPrefix(f.rel, "internal/") && !strings.HasPrefix(f.rel, "internal/lint/"))
		testOnly := strings.HasPrefix(f.rel, "internal/testutil/") || strings.Contains(f.rel, "/leakcheck/")
		if !lib || testOnly || strings.HasSuffix(f.rel, "_test.go") || strings.Contains(f.rel, "/cmd/") {
			continue
		}
		s := string(f.src)
		for _, bad := range []string{"fmt.Print", "log.Print", "log.Fatal", "os.Exit(", "println("} {
			if strings.Contains(s, bad) {
				t.Errorf("%s calls %s; library code logs through slog and returns errors", f.rel, bad)
			}
		}
	}
}

// Every //export is recovered: the function body defers a recover.
func TestExportsRecover(t *testing.T) {
	for _, f := range goFiles(t) {
		if !strings.HasPrefix(f.rel, "abi/") || strings.HasSuffix(f.rel, "_test.go") {
			continue
		}
		full, err := parser.ParseFile(token.NewFileSet(), f.rel, f.src, parser.ParseComments)
		assert.NilError(t, err)
		for _, decl := range full.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Doc == nil || !hasExport(fd.Doc) {
				continue
			}
			if fd.Body == nil || len(fd.Body.List) == 0 {
				t.Errorf("%s: export %s has no body", f.rel, fd.Name.Name)
				continue
			}
			if _, ok := fd.Body.List[0].(*ast.DeferStmt); !ok {
				t.Errorf("%s: export %s does not start with a deferred recover", f.rel, fd.Name.Name)
			}
		}
	}
}

func hasExport(cg *ast.CommentGroup) bool {
	for _, c := range cg.List {
		if strings.HasPrefix(c.Text, "//export ") {
			return true
		}
	}
	return false
}
