// Command celgo times the condition rules of crates/conditions/benches/evaluate.rs with cel-go
// and the Kubernetes CEL environment, the way the upstream OCM work agent evaluates them: the
// live object bound as an unstructured map (cel-go's adapter converts fields as they are
// selected), every expression of a rule evaluated with cost tracking, then the rule's
// messageExpression. Programs are compiled once, outside the timing.
//
// It prints one JSON line per rule: {"rule", "cpu_ns", "wall_ns", "iterations"}, where cpu_ns
// is the process CPU time per evaluation (run with GOMAXPROCS=1 so that the garbage collector's
// work is counted too).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
)

// rule is one condition rule: AND-ed expressions and an optional message expression.
type rule struct {
	name        string
	fixture     string
	expressions []string
	message     string
}

// rules are the custom rules of benches/evaluate.rs (custom_rules), in the same order.
var rules = []rule{
	{"deployment_available_condition", "deployment.json", []string{
		"object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')"}, ""},
	{"deployment_replicas_and_message", "deployment.json", []string{
		"object.status.updatedReplicas == object.spec.replicas",
		"object.status.availableReplicas == object.spec.replicas"},
		"result ? 'all ' + string(object.spec.replicas) + ' replicas updated' : 'rolling out'"},
	{"job_upstream_has_conditions", "job.json", []string{
		"hasConditions(object.status) ? object.status.conditions.filter(c, c.type == 'Complete' || c.type == 'Failed').exists(c, c.status == 'True') : false"}, ""},
	{"deployment_map_result", "deployment.json", []string{
		// cel-go's type checker wants map literals of one value type: dyn() says "any".
		"object.status.readyReplicas >= object.spec.replicas ? {'status': dyn(true), 'reason': dyn('CountReached'), 'message': dyn('Count matches expected')} : {'status': dyn(false), 'reason': dyn('CountNotReached'), 'message': dyn('Only ' + string(object.status.readyReplicas))}"}, ""},
	{"deployment_quantity_and_regex", "deployment.json", []string{
		"object.spec.template.spec.containers.all(c, quantity(c.resources.limits.memory).isLessThan(quantity('1Gi')) && c.image.find(':[0-9.]+$') != '')"}, ""},
}

// hasConditions is OCM's function: true iff the map's `conditions` is a non-empty list.
func hasConditions() cel.EnvOption {
	return cel.Function("hasConditions",
		cel.Overload("hasConditions_dyn", []*cel.Type{cel.DynType}, cel.BoolType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				m, ok := v.(traits.Mapper)
				if !ok {
					return types.False
				}
				c, found := m.Find(types.String("conditions"))
				if !found {
					return types.False
				}
				l, ok := c.(traits.Lister)
				if !ok {
					return types.False
				}
				return types.Bool(l.Size().(types.Int) > 0)
			})))
}

func env() *cel.Env {
	base := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	set, err := base.Extend(environment.VersionedOptions{
		IntroducedVersion: environment.DefaultCompatibilityVersion(),
		EnvOptions: []cel.EnvOption{
			cel.Variable("object", cel.DynType),
			cel.Variable("result", cel.BoolType),
			hasConditions(),
		},
	})
	must(err)
	e, err := set.Env(environment.NewExpressions)
	must(err)
	return e
}

type compiled struct {
	expressions []cel.Program
	message     cel.Program
}

func compile(e *cel.Env, r rule) compiled {
	program := func(src string) cel.Program {
		ast, iss := e.Compile(src)
		must(iss.Err())
		p, err := e.Program(ast,
			cel.CostLimit(celconfig.PerCallLimit),
			cel.CostTracking(&library.CostEstimator{}),
			cel.InterruptCheckFrequency(celconfig.CheckFrequency))
		must(err)
		return p
	}
	var c compiled
	for _, src := range r.expressions {
		c.expressions = append(c.expressions, program(src))
	}
	if r.message != "" {
		c.message = program(r.message)
	}
	return c
}

// evaluate is one evaluation of the rule on the object: what the upstream agent runs per
// rule and object version, minus compiling.
func evaluate(c compiled, object map[string]any) (bool, string) {
	vars := map[string]any{"object": object}
	passed := true
	for _, p := range c.expressions {
		out, _, err := p.Eval(vars)
		must(err)
		// A map result (our extension) counts as passing here: only the time matters.
		if b, ok := out.Value().(bool); ok && !b {
			passed = false
			break
		}
	}
	if c.message == nil {
		return passed, ""
	}
	out, _, err := c.message.Eval(map[string]any{"object": object, "result": passed})
	must(err)
	return passed, out.Value().(string)
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	fixtures := flag.String("fixtures", "../fixtures", "directory of the fixture objects")
	benchtime := flag.Duration("benchtime", 2*time.Second, "time per rule")
	extractMode := flag.Bool("extract", false, "print the expressions of the test tables in the Go files or directories given as arguments (cases.go)")
	evalMode := flag.Bool("eval", false, "answer the cases read on standard input with cel-go (cases.go)")
	testing.Init()
	flag.Parse()
	if *extractMode {
		extract(flag.Args())
		return
	}
	if *evalMode {
		evalCases()
		return
	}
	must(flag.Set("test.benchtime", benchtime.String()))
	e := env()
	for _, r := range rules {
		raw, err := os.ReadFile(filepath.Join(*fixtures, r.fixture))
		must(err)
		var object unstructured.Unstructured
		must(object.UnmarshalJSON(raw))
		c := compile(e, r)
		if passed, _ := evaluate(c, object.Object); !passed && r.name != "deployment_map_result" {
			fmt.Fprintf(os.Stderr, "%s: rule does not pass on its fixture\n", r.name)
			os.Exit(1)
		}
		var cpu time.Duration
		result := testing.Benchmark(func(b *testing.B) {
			runtime.GC()
			start := processCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				evaluate(c, object.Object)
			}
			b.StopTimer()
			cpu = processCPU() - start
		})
		line, err := json.Marshal(map[string]any{
			"rule":       r.name,
			"cpu_ns":     float64(cpu.Nanoseconds()) / float64(result.N),
			"wall_ns":    float64(result.T.Nanoseconds()) / float64(result.N),
			"iterations": result.N,
		})
		must(err)
		fmt.Println(string(line))
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
