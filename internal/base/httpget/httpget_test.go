package httpget

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestResolvePort(t *testing.T) {
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	for _, tc := range []struct {
		port intstr.IntOrString
		want int
		ok   bool
	}{
		{intstr.FromInt32(80), 80, true},
		{intstr.FromString("http"), 8080, true},
		{intstr.FromString("9090"), 9090, true},
		{intstr.FromString("metrics"), 0, false},
		{intstr.FromInt32(0), 0, false},
		{intstr.FromInt32(70000), 0, false},
	} {
		got, err := ResolvePort(tc.port, c)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ResolvePort(%s) = %d, %v", tc.port.String(), got, err)
		}
	}
}

func TestNewRequest(t *testing.T) {
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	action := v1.HTTPGetAction{Path: "/healthz?full=1", Port: intstr.FromString("http"), HTTPHeaders: []v1.HTTPHeader{
		{Name: "Host", Value: "example.test"}, {Name: "X-Probe", Value: "yes"}, {Name: "Accept", Value: ""}}}
	req, err := NewRequest(context.Background(), action, c, "10.0.0.7", "kube-probe/1.37")
	if err != nil {
		t.Fatal(err)
	}
	if req.URL.String() != "http://10.0.0.7:8080/healthz?full=1" || req.Host != "example.test" ||
		req.Header.Get("User-Agent") != "kube-probe/1.37" || req.Header.Get("X-Probe") != "yes" {
		t.Errorf("request %s host %q headers %v", req.URL, req.Host, req.Header)
	}
	if _, ok := req.Header["Accept"]; ok {
		t.Errorf("an empty Accept header must remove Accept: %v", req.Header)
	}
	action.Scheme, action.Host, action.HTTPHeaders = v1.URISchemeHTTPS, "svc.local", nil
	req, _ = NewRequest(context.Background(), action, c, "10.0.0.7", "ua")
	if req.URL.String() != "https://svc.local:8080/healthz?full=1" || req.Header.Get("Accept") != "*/*" {
		t.Errorf("request %s headers %v", req.URL, req.Header)
	}
}
