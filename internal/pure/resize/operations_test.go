package resize

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestOperations(t *testing.T) {
	rl := func(kv ...string) v1.ResourceList {
		out := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return out
	}
	from := Allocation{Containers: map[string]v1.ResourceRequirements{
		"a":    {Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("memory", "128Mi")},
		"b":    {Requests: rl("cpu", "1")},
		"gone": {Requests: rl("cpu", "1")},
	}}
	to := Allocation{Containers: map[string]v1.ResourceRequirements{
		"a":   {Requests: rl("cpu", "200m"), Limits: rl("memory", "96Mi", "cpu", "1")},
		"b":   {Requests: rl("cpu", "1000m")}, // the same quantity
		"new": {Requests: rl("cpu", "1")},
	}}
	want := []Operation{
		{"cpu", "requests", "increase"},
		{"cpu", "limits", "add"},
		{"memory", "requests", "remove"},
		{"memory", "limits", "decrease"},
	}
	if got := Operations(from, to); !reflect.DeepEqual(got, want) {
		t.Errorf("Operations = %v, want %v", got, want)
	}
	if got := Operations(to, to); got != nil {
		t.Errorf("no change: %v", got)
	}
}
