// The conformance oracle: what cel-go v0.26 with the Kubernetes CEL environment answers for an
// expression, for comparing with our evaluator (benches/cel-conformance.sh).
//
//	celgo -extract FILE_OR_DIR...  prints the expressions of upstream's test tables (the `expr`
//	                               fields of composite literals, cel-go's formatting tables as
//	                               "<format>".format([<args>]), the rules of apiextensions'
//	                               `valid`/`errors` tables), one JSON line each
//	celgo -eval                    reads such lines on standard input and prints each with
//	                               cel-go's answer: {"expr", "source", "out"} or {.., "err"}
//
// "out" is a canonical rendering of the value (renderValue), which the Rust side reproduces.
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/library"
)

// testCase is one expression of an upstream table and where it was found.
type testCase struct {
	Source string `json:"source"`
	Expr   string `json:"expr"`
	Out    string `json:"out,omitempty"`
	Err    string `json:"err,omitempty"`
}

// extract prints the expressions of the Go test files under paths.
func extract(paths []string) {
	seen := map[string]bool{}
	var files []string
	for _, p := range paths {
		matches, err := filepath.Glob(filepath.Join(p, "*_test.go"))
		must(err)
		if strings.HasSuffix(p, ".go") {
			matches = []string{p}
		}
		files = append(files, matches...)
	}
	sort.Strings(files)
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	for _, file := range files {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		must(err)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			fields := map[string]string{}
			var listed []string
			for _, elt := range lit.Elts {
				kv, ok := elt.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, ok := kv.Key.(*ast.Ident)
				if !ok {
					continue
				}
				if s, ok := stringConstant(kv.Value); ok {
					fields[key.Name] = s
				}
				// apiextensions' validation tables: `valid: []string{rule...}` and
				// `errors: map[string]string{rule: message}`.
				if inner, ok := kv.Value.(*ast.CompositeLit); ok && (key.Name == "valid" || key.Name == "errors") {
					for _, e := range inner.Elts {
						if entry, ok := e.(*ast.KeyValueExpr); ok {
							e = entry.Key
						}
						if s, ok := stringConstant(e); ok {
							listed = append(listed, s)
						}
					}
				}
			}
			pos := fset.Position(lit.Pos())
			source := fmt.Sprintf("%s:%d", filepath.Base(file), pos.Line)
			for _, expr := range listed {
				if !seen[expr] {
					seen[expr] = true
					must(out.Encode(testCase{Source: source, Expr: expr}))
				}
			}
			var expr string
			if e, ok := fields["expr"]; ok {
				expr = e
			} else if format, ok := fields["format"]; ok {
				if args, ok := fields["formatArgs"]; ok {
					expr = fmt.Sprintf("%q.format([%s])", format, args)
				}
			} else if l, ok := fields["formatLiteral"]; ok {
				expr = fmt.Sprintf(`"%%s".format([%s])`, l)
			}
			if expr == "" || seen[expr] {
				return true
			}
			seen[expr] = true
			must(out.Encode(testCase{Source: source, Expr: expr}))
			return true
		})
	}
}

// stringConstant is the value of a string literal or a concatenation of them.
func stringConstant(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		l, ok1 := stringConstant(e.X)
		r, ok2 := stringConstant(e.Y)
		return l + r, ok1 && ok2
	case *ast.ParenExpr:
		return stringConstant(e.X)
	}
	return "", false
}

// oracleEnv is the Kubernetes environment of env() plus the encoders and math extensions,
// which our environment offers too.
func oracleEnv() *cel.Env {
	e, err := env().Extend(ext.Encoders(), ext.Math())
	must(err)
	return e
}

// evalCases answers every case read from standard input.
func evalCases() {
	e := oracleEnv()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	for in.Scan() {
		var c testCase
		must(json.Unmarshal(in.Bytes(), &c))
		c.Out, c.Err = evalOne(e, c.Expr)
		must(out.Encode(c))
	}
	must(in.Err())
}

func evalOne(e *cel.Env, expr string) (out string, errText string) {
	defer func() {
		if r := recover(); r != nil {
			out, errText = "", fmt.Sprintf("panic: %v", r)
		}
	}()
	checked, iss := e.Compile(expr)
	if iss.Err() != nil {
		return "", "compile: " + iss.Err().Error()
	}
	p, err := e.Program(checked,
		cel.CostLimit(celconfig.PerCallLimit),
		cel.CostTracking(&library.CostEstimator{}),
		cel.InterruptCheckFrequency(celconfig.CheckFrequency))
	if err != nil {
		return "", "program: " + err.Error()
	}
	v, _, err := p.Eval(cel.NoVars())
	if err != nil {
		return "", "eval: " + err.Error()
	}
	if types.IsError(v) {
		return "", fmt.Sprintf("eval: %v", v)
	}
	return renderValue(v), ""
}

// renderValue is the canonical rendering both sides compare: CEL-literal-like, map entries
// sorted, doubles as Go's shortest 'g' form, timestamps as Unix seconds.nanos, durations as
// nanoseconds, opaque values as TypeName(string form).
func renderValue(v ref.Val) string {
	switch v := v.(type) {
	case types.Bool:
		return strconv.FormatBool(bool(v))
	case types.Int:
		return strconv.FormatInt(int64(v), 10)
	case types.Uint:
		return strconv.FormatUint(uint64(v), 10) + "u"
	case types.Double:
		return renderDouble(float64(v))
	case types.String:
		return jsonString(string(v))
	case types.Bytes:
		return "b'" + hex.EncodeToString([]byte(v)) + "'"
	case types.Null:
		return "null"
	case types.Duration:
		return fmt.Sprintf("duration(%dns)", v.Duration.Nanoseconds())
	case types.Timestamp:
		return fmt.Sprintf("timestamp(%d.%09d)", v.Unix(), v.Nanosecond())
	case *types.Optional:
		if !v.HasValue() {
			return "optional.none()"
		}
		return "optional.of(" + renderValue(v.GetValue()) + ")"
	case *types.Type:
		return "type(" + v.TypeName() + ")"
	case traits.Lister:
		var parts []string
		for it := v.Iterator(); it.HasNext() == types.True; {
			parts = append(parts, renderValue(it.Next()))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case traits.Mapper:
		var parts []string
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			parts = append(parts, renderValue(k)+": "+renderValue(v.Get(k)))
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	if s := v.ConvertToType(types.StringType); !types.IsError(s) {
		return v.Type().TypeName() + "(" + string(s.(types.String)) + ")"
	}
	if st, ok := v.Value().(fmt.Stringer); ok {
		return v.Type().TypeName() + "(" + st.String() + ")"
	}
	return v.Type().TypeName() + "(" + fmt.Sprint(v.Value()) + ")"
}

func renderDouble(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64) + "d"
}

func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	must(enc.Encode(s))
	return strings.TrimSuffix(b.String(), "\n")
}
